"""Counters of coordination events, exposed for the metrics layer and for tests.

CoordinationStats counts one worker's events; ShardProgress (one per shard, reached through
``CoordinationStats.shard``) counts records read, checkpoints and what is still unconfirmed, per page and per
checkpoint. Plain counters: the coordination layer knows nothing of Prometheus (bridge.worker_metrics exports them).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, fields

from cdcbridge.changes import ChangeRecord, Sequence
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.errors import LeaseLostError, LeaseStoreError, LeaseStoreUnavailableError
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.leases.store import LeaseStore


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
    #: Shards halted by their trim policy (on_trimmed: stop) instead of reading past trimmed data.
    halted_shards: int = 0
    processor_failures: int = 0
    forced_syncs: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._shards: dict[str, ShardProgress] = {}

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + amount)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self)}

    def shard(self, shard_id: str) -> ShardProgress:
        """The progress counters of one shard (created at first use; kept when the lease goes, so a shard that
        comes back continues its counts)."""
        with self._lock:
            progress = self._shards.get(shard_id)
            if progress is None:
                progress = self._shards[shard_id] = ShardProgress()
            return progress

    def shards(self) -> dict[str, ShardProgressSnapshot]:
        """shard id → a snapshot of its progress, for every shard this worker ever read."""
        with self._lock:
            progress = dict(self._shards)
        return {shard_id: shard.snapshot() for shard_id, shard in progress.items()}

    @property
    def data_loss_events(self) -> int:
        """Every event in which retained-data guarantees were broken by the stream's retention."""
        with self._lock:
            return self.trimmed_data_events + self.shard_gone_events + self.unread_parent_events


# ----- per-shard progress (for the metrics layer: records in, checkpoints, lag) ------------------------------------

#: Why a checkpoint write failed, as counted by ShardProgress (bounded tokens, never error text).
CHECKPOINT_LEASE_LOST = "lease_lost"
CHECKPOINT_UNAVAILABLE = "unavailable"
CHECKPOINT_STORE_ERROR = "store_error"
CHECKPOINT_ERROR = "error"


@dataclass(frozen=True)
class ShardProgressSnapshot:
    """A consistent copy of one shard's progress counters."""

    records_fetched: int
    checkpoints_written: int
    #: reason (``lease_lost``, ``unavailable``, ``store_error``, ``error``) → failed checkpoint writes
    checkpoint_failures: dict[str, int]
    trimmed_data_events: int
    #: Records handed to the processor and not yet covered by a stored checkpoint (a restart reads them again).
    records_unconfirmed: int
    #: Commit time (ms since the epoch) of the newest record handed to the processor; None before the first one.
    last_commit_ms: int | None
    #: The latest read returned no record: the shard was read up to its newest record then.
    caught_up: bool
    #: Commit time (µs) of the oldest record not confirmed by a checkpoint: the first unconfirmed record handed out,
    #: else the last checkpointed record (the next unread one is newer, so its age is an upper bound); None when
    #: caught up with nothing unconfirmed (nothing is unread) or when nothing was ever read or checkpointed.
    oldest_unread_us: int | None = None
    #: The trim policy halted the shard at its checkpoint (on_trimmed: stop).
    halted: bool = False


class ShardProgress:
    """What one shard's consumer did, counted per page and per checkpoint (never per record) so the read loop pays
    nothing measurable. Thread-safe: the shard task reads, the processor's threads checkpoint."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records_fetched = 0
        self._checkpoints_written = 0
        self._checkpoint_failures: dict[str, int] = {}
        self._trimmed_data_events = 0
        self._last_commit_ms: int | None = None
        self._caught_up = False
        #: Sequences of the handed-out pages not yet covered by a checkpoint, oldest first.
        self._unconfirmed: deque[list[Sequence]] = deque()
        self._unconfirmed_count = 0
        self._checkpoint_us: int | None = None
        self._halted = False

    def read(self, fetched: int, handed_out: list[ChangeRecord]) -> None:
        """One GetStreamRecord page: `fetched` records came back, `handed_out` went to the processor."""
        with self._lock:
            self._records_fetched += fetched
            self._caught_up = fetched == 0
            if handed_out:
                self._last_commit_ms = handed_out[-1].timestamp_ms
                self._unconfirmed.append([record.sequence for record in handed_out])
                self._unconfirmed_count += len(handed_out)

    def restarted(self, checkpoint: ExtendedSequence | None = None) -> None:
        """A new processor incarnation resumes at the stored checkpoint: what was unconfirmed is read again."""
        with self._lock:
            self._unconfirmed.clear()
            self._unconfirmed_count = 0
            self._caught_up = False
            if checkpoint is not None:
                self._checkpoint_us = checkpoint.sequence.timestamp_us

    def checkpointed(self, position: ExtendedSequence | None) -> None:
        """A checkpoint was stored; None (shard end, or the resume point after trimmed data) confirms everything."""
        with self._lock:
            self._checkpoints_written += 1
            if position is not None:
                self._checkpoint_us = position.sequence.timestamp_us
            if position is None:
                self._unconfirmed.clear()
                self._unconfirmed_count = 0
                return
            while self._unconfirmed:
                page = self._unconfirmed[0]
                if position.covers(page[-1]):
                    self._unconfirmed.popleft()
                    self._unconfirmed_count -= len(page)
                    continue
                covered = next((i for i, sequence in enumerate(page) if not position.covers(sequence)), len(page))
                if covered:
                    del page[:covered]
                    self._unconfirmed_count -= covered
                break

    def checkpoint_failed(self, reason: str) -> None:
        with self._lock:
            self._checkpoint_failures[reason] = self._checkpoint_failures.get(reason, 0) + 1

    def trimmed(self) -> None:
        """A read found the position older than the stream's retention (records were lost to expiry)."""
        with self._lock:
            self._trimmed_data_events += 1

    def set_halted(self, halted: bool) -> None:
        with self._lock:
            self._halted = halted

    def _oldest_unread_us(self) -> int | None:
        if self._unconfirmed:
            return self._unconfirmed[0][0].timestamp_us
        if self._caught_up:
            return None
        return self._checkpoint_us

    def snapshot(self) -> ShardProgressSnapshot:
        with self._lock:
            return ShardProgressSnapshot(
                records_fetched=self._records_fetched,
                checkpoints_written=self._checkpoints_written,
                checkpoint_failures=dict(self._checkpoint_failures),
                trimmed_data_events=self._trimmed_data_events,
                records_unconfirmed=self._unconfirmed_count,
                last_commit_ms=self._last_commit_ms,
                caught_up=self._caught_up,
                oldest_unread_us=self._oldest_unread_us(),
                halted=self._halted,
            )


class CheckpointCountingStore(LeaseStore):
    """The lease store as one shard's checkpointer sees it: every checkpoint write is counted (and its position
    noted) in that shard's progress, successes and failures alike; every other call passes straight through."""

    def __init__(self, store: LeaseStore, progress: ShardProgress) -> None:
        self._store = store
        self._progress = progress

    def checkpoint(self, lease: Lease, checkpoint: str, checkpoint_seq: ExtendedSequence | None) -> Lease:
        try:
            written = self._store.checkpoint(lease, checkpoint, checkpoint_seq)
        except LeaseLostError:
            self._progress.checkpoint_failed(CHECKPOINT_LEASE_LOST)
            raise
        except LeaseStoreUnavailableError:
            self._progress.checkpoint_failed(CHECKPOINT_UNAVAILABLE)
            raise
        except LeaseStoreError:
            self._progress.checkpoint_failed(CHECKPOINT_STORE_ERROR)
            raise
        except Exception:
            self._progress.checkpoint_failed(CHECKPOINT_ERROR)
            raise
        self._progress.checkpointed(checkpoint_seq)
        return written

    def ensure_table(self) -> None:
        self._store.ensure_table()

    def list_leases(self, stream_id: str) -> list[Lease]:
        return self._store.list_leases(stream_id)

    def get_lease(self, stream_id: str, shard_id: str) -> Lease | None:
        return self._store.get_lease(stream_id, shard_id)

    def create_lease_if_absent(self, lease: Lease) -> bool:
        return self._store.create_lease_if_absent(lease)

    def renew(self, lease: Lease) -> Lease:
        return self._store.renew(lease)

    def take(self, lease: Lease, new_owner: str) -> Lease:
        return self._store.take(lease, new_owner)

    def request_steal(self, lease: Lease, stealer: str) -> Lease:
        return self._store.request_steal(lease, stealer)

    def transfer(self, lease: Lease, new_owner: str) -> Lease:
        return self._store.transfer(lease, new_owner)

    def release(self, lease: Lease) -> Lease:
        return self._store.release(lease)

    def delete(self, lease: Lease) -> bool:
        return self._store.delete(lease)
