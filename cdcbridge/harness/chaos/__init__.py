"""The chaos suite: a soak run of the whole flow under a seeded fault schedule, checked at the end.

Modules, one concept each: `load` (the writes), `schedule` (which fault when), `injectors` (how each fault is
done and undone), `environment` (the running pieces), `workers` (the bridge processes), `progress` (recovery and
drain, judged from the lease rows), `ledger` (every stream record, trims included), `topic_log` (both topics read
back), `checks` (at least once, per-key order, counters, last image per key), `report`, `apply_runner`, and `run`
(`run_chaos`).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdcbridge.harness.chaos.report import ChaosReport
    from cdcbridge.harness.chaos.run import run_chaos
    from cdcbridge.harness.chaos.schedule import FaultKind

_EXPORTS = {"run_chaos": "run", "ChaosReport": "report", "FaultKind": "schedule"}

__all__ = ["ChaosReport", "FaultKind", "run_chaos"]


def __getattr__(name: str) -> Any:
    """Resolve exports lazily: `cdcbridge.harness.chaos.tcp_proxy` alone must not pull in Spark, Kafka or the SDK."""
    if name in _EXPORTS:
        return getattr(import_module(f"cdcbridge.harness.chaos.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'cdcbridge.harness.chaos' has no attribute {name!r}")
