"""The small interface users implement (the Java client's IRecordProcessor, in Python).

One processor instance serves one shard for one lease acquisition. `process_records` may return before the records
are durable elsewhere: the processor keeps the checkpointer and calls it later, from any thread, once they are
(for example from Kafka delivery callbacks), up to `largest_permitted_checkpoint`, even part-way through a record
with a sub-sequence.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from cdcbridge.changes import ChangeRecord, Sequence
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence


class ShutdownReason(StrEnum):
    """Why a shard's processor is being shut down (behaviour per leases.md §5.3)."""

    #: The worker is stopping: drain within the hand-off timeout and checkpoint; the lease is then released.
    REQUESTED = "REQUESTED"
    #: Another worker asked for this shard: drain within the hand-off timeout and checkpoint; then handed over.
    STOLEN = "STOLEN"
    #: The shard was read to its end: confirm every record; the library then writes SHARD_END.
    SHARD_END = "SHARD_END"
    #: The processor raised (or never confirmed the shard's end): restarted from the stored checkpoint.
    FAILED = "FAILED"
    #: The lease was lost or expired: abort in-flight work and do NOT checkpoint (it would be refused).
    LEASE_LOST = "LEASE_LOST"

    @property
    def rank(self) -> int:
        """A shutdown in progress only ever moves to a higher rank (KCL ShutdownReason)."""
        return _RANKS[self]

    @property
    def checkpoints_allowed(self) -> bool:
        return self is not ShutdownReason.LEASE_LOST


_RANKS = {
    ShutdownReason.REQUESTED: 1,
    ShutdownReason.STOLEN: 1,
    ShutdownReason.SHARD_END: 2,
    ShutdownReason.FAILED: 3,
    ShutdownReason.LEASE_LOST: 4,
}


class RecordProcessorCheckpointer(Protocol):
    """Moves the shard's commit position; never the read position (leases.md §5.4)."""

    def checkpoint(self, target: ChangeRecord | Sequence | None = None, sub_sequence: int | None = None) -> None:
        """Record that everything up to `target` is done.

        - ``checkpoint()``: everything handed out so far (`largest_permitted_checkpoint`).
        - ``checkpoint(record)`` or ``checkpoint(sequence)``: that record and all before it.
        - ``checkpoint(sequence, sub_sequence)``: the records before it plus parts 0..sub_sequence of it.

        Raises CheckpointOutOfRangeError (behind the last checkpoint, or beyond what was handed out),
        LeaseLostError (no longer the owner), CheckpointerClosedError (this shard consumer has ended) or
        LeaseStoreUnavailableError (store unreachable; nothing lost, try again).
        """
        ...

    @property
    def largest_permitted_checkpoint(self) -> ExtendedSequence | None:
        """The last record handed to the processor (None before the first)."""
        ...

    @property
    def last_checkpoint(self) -> ExtendedSequence | None:
        """The position last written (None if the shard was never checkpointed by sequence)."""
        ...

    def hold_open(self, reason: str) -> None:
        """Keep the shard unfinished at its end on purpose (called from ``shutdown(SHARD_END)``): the records after
        the last checkpoint are not this processor's to confirm (e.g. they follow ``bridge.end_time``). No SHARD_END
        is written and no processor restarted; the worker keeps the lease until it stops or the lease moves."""
        ...


@dataclass(frozen=True, slots=True)
class InitializationInput:
    stream_id: str
    shard_id: str
    parent_shard_ids: tuple[str, ...]
    #: The stored Checkpoint value (TRIM_HORIZON or an iterator) the shard resumes from.
    checkpoint: str
    #: The last confirmed record (and part) stored with it; records up to it are not delivered again.
    checkpoint_sequence: ExtendedSequence | None


@dataclass(frozen=True, slots=True)
class ProcessRecordsInput:
    records: list[ChangeRecord]
    checkpointer: RecordProcessorCheckpointer
    #: Set when resuming part-way through a record (a checkpoint with a sub-sequence).
    resume_point: ExtendedSequence | None = None

    def start_sub_sequence(self, record: ChangeRecord) -> int:
        """First part of `record` not yet confirmed: 0, except for the record a sub-sequence checkpoint points into."""
        point = self.resume_point
        if point is not None and point.sub_sequence is not None and record.sequence == point.sequence:
            return point.sub_sequence + 1
        return 0


@dataclass(frozen=True, slots=True)
class ShutdownInput:
    reason: ShutdownReason
    checkpointer: RecordProcessorCheckpointer
    #: How long the library waits for this call (and, for SHARD_END, for the checkpoints it leads to) before it moves
    #: on regardless: hand-over or release for STOLEN / REQUESTED, a restart from the stored checkpoint for SHARD_END.
    #: 0 for LEASE_LOST: return at once. None would mean no bound (not used by this library today).
    timeout_seconds: float | None


class RecordProcessor(ABC):
    """Processes one shard's records in order; created per shard and lease acquisition by a factory."""

    def initialize(self, initialization: InitializationInput) -> None:  # noqa: B027 - optional hook
        """Called once before the first batch."""

    @abstractmethod
    def process_records(self, records: ProcessRecordsInput) -> None:
        """Handle one batch (in shard order). Raising restarts the shard from its stored checkpoint."""

    def on_idle(self) -> None:  # noqa: B027 - optional hook
        """Called after a read that returned no records (the shard is caught up), on the processing thread: a
        processor that waits for time to pass (not for records) can act here. Raising restarts the shard."""

    def shutdown(self, shutdown: ShutdownInput) -> None:  # noqa: B027 - optional hook
        """Last call. Checkpoint here for SHARD_END / STOLEN / REQUESTED; never for LEASE_LOST."""


#: Creates a fresh processor for a shard consumer.
RecordProcessorFactory = Callable[[], RecordProcessor]
