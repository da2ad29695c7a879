"""The stores the apply job writes to (Delta Lake, PostgreSQL, Tablestore), each an :class:`ApplyTarget`."""

from cdcbridge.apply.target import ApplyTarget, TargetBatch

__all__ = ["ApplyTarget", "TargetBatch"]
