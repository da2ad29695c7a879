"""Counters of coordination events, exposed for the metrics layer (wired later) and for tests."""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields


@dataclass
class CoordinationStats:
    """Monotonic event counters of one worker. Increment with `add`; read with `snapshot`."""

    leases_created: int = 0
    leases_taken: int = 0
    leases_renewed: int = 0
    leases_lost: int = 0
    leases_released: int = 0
    leases_transferred: int = 0
    leases_deleted: int = 0
    steal_requests: int = 0
    checkpoints_written: int = 0
    shards_finished: int = 0
    #: Reads that hit trimmed data: records between the checkpoint and the oldest retained one were never read.
    trimmed_data_events: int = 0
    #: Shards that vanished (all data expired) before being read to their end.
    shard_gone_events: int = 0
    #: Children started although a parent was neither finished nor listed any more (its rest was lost or predates us).
    unread_parent_events: int = 0
    processor_failures: int = 0
    forced_syncs: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + amount)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def data_loss_events(self) -> int:
        """Every event in which retained-data guarantees were broken by the stream's retention."""
        with self._lock:
            return self.trimmed_data_events + self.shard_gone_events + self.unread_parent_events
