"""Stores the apply job writes to, behind :class:`~cdcbridge.apply.targets.base.ApplyTarget`."""

from cdcbridge.apply.targets.base import ApplyTarget, TargetBatch

__all__ = ["ApplyTarget", "TargetBatch"]
