"""The commit cursor of one shard consumer incarnation (leases.md §5.4).

The fetch cursor (next iterator to read) lives in the consumer and never moves because of a checkpoint; this object
only remembers, per handed-out batch, the iterator it was read from and the iterator after it, so a confirmed
position can be stored as (iterator to resume from, CheckpointSeq to skip up to):

- a whole batch confirmed → (the batch's next iterator, its last record);
- part of a batch confirmed → (the batch's start iterator, the last confirmed record[:part]).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

from cdcbridge.changes import ChangeRecord, Sequence
from cdcbridge.coordination.checkpoint.positions import SHARD_END, ExtendedSequence
from cdcbridge.coordination.clock import Clock
from cdcbridge.coordination.errors import (
    CheckpointerClosedError,
    CheckpointError,
    CheckpointOutOfRangeError,
    LeaseLostError,
)
from cdcbridge.coordination.leases.held import HeldLease
from cdcbridge.coordination.leases.store import LeaseStore
from cdcbridge.coordination.stats import CoordinationStats

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Batch:
    start_iterator: str
    next_iterator: str | None
    sequences: list[Sequence]


class ShardCheckpointer:
    """RecordProcessorCheckpointer of one shard consumer; safe to call from any thread."""

    def __init__(
        self,
        held: HeldLease,
        store: LeaseStore,
        clock: Clock,
        stats: CoordinationStats,
        committed: ExtendedSequence | None,
    ) -> None:
        self._held = held
        self._store = store
        self._clock = clock
        self._stats = stats
        self._lock = threading.RLock()
        self._batches: deque[_Batch] = deque()
        self._committed = committed
        self._largest: ExtendedSequence | None = None
        self._shard_end_handed_out = False
        self._closed: str | None = None
        self._held_open: str | None = None

    # ----- RecordProcessorCheckpointer ----------------------------------------------------------------------

    @property
    def largest_permitted_checkpoint(self) -> ExtendedSequence | None:
        with self._lock:
            return self._largest

    @property
    def last_checkpoint(self) -> ExtendedSequence | None:
        with self._lock:
            return self._committed

    def checkpoint(self, target: ChangeRecord | Sequence | None = None, sub_sequence: int | None = None) -> None:
        with self._lock:
            self._check_open()
            position = self._position_of(target, sub_sequence)
            if position is None or position == self._committed:
                return
            if self._largest is None or position > self._largest:
                raise CheckpointOutOfRangeError(
                    f"shard {self._held.shard_id}: checkpoint {position.to_text()} is beyond the last record handed "
                    f"to the processor ({self._largest.to_text() if self._largest else 'none yet'})"
                )
            if self._committed is not None and position < self._committed:
                raise CheckpointOutOfRangeError(
                    f"shard {self._held.shard_id}: checkpoint {position.to_text()} is behind the last checkpoint "
                    f"{self._committed.to_text()}; checkpoints only move forward"
                )
            batch = self._batch_of(position.sequence)
            if position.is_whole_record and batch.sequences[-1] == position.sequence and batch.next_iterator:
                resume_from = batch.next_iterator
            else:
                resume_from = batch.start_iterator
            self._write(resume_from, position)
            self._committed = position
            while self._batches and position.covers(self._batches[0].sequences[-1]):
                self._batches.popleft()

    def hold_open(self, reason: str) -> None:
        with self._lock:
            self._check_open()
            self._held_open = reason

    # ----- used by the shard consumer -----------------------------------------------------------------------

    @property
    def held_open(self) -> str | None:
        """Why the processor keeps the shard unfinished at its end (None: it does not)."""
        with self._lock:
            return self._held_open

    def hand_out(self, start_iterator: str, next_iterator: str | None, records: list[ChangeRecord]) -> None:
        """Register a batch about to be given to the processor (records already de-duplicated)."""
        with self._lock:
            if next_iterator is None:
                self._shard_end_handed_out = True
            if not records:
                return
            self._batches.append(_Batch(start_iterator, next_iterator, [r.sequence for r in records]))
            self._largest = ExtendedSequence(records[-1].sequence)

    def all_confirmed(self) -> bool:
        """Whether every record handed out is covered by the last checkpoint."""
        with self._lock:
            return self._largest is None or (self._committed is not None and self._committed >= self._largest)

    def write_shard_end(self) -> None:
        """Library-only: the shard was read to its end and every record confirmed (I4) → Checkpoint=SHARD_END."""
        with self._lock:
            self._check_open()
            if not (self._shard_end_handed_out and self.all_confirmed()):
                raise CheckpointError(
                    f"shard {self._held.shard_id}: SHARD_END needs the end of the shard read and every record confirmed"
                )
            self._write(SHARD_END, None)

    def write_resume_iterator(self, iterator: str) -> bool:
        """Library-only, after trimmed data: store the oldest retained iterator if nothing is pending; else False."""
        with self._lock:
            self._check_open()
            if self._batches and not self.all_confirmed():
                return False
            self._write(iterator, None)
            self._batches.clear()
            return True

    def close(self, reason: str) -> None:
        """End this incarnation: later calls raise (LeaseLostError if the lease is gone, else CheckpointerClosed)."""
        with self._lock:
            self._closed = self._closed or reason

    # ----- internals ----------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed is not None:
            ended = self._held.ended
            if ended is not None and ended.startswith("lost"):
                raise LeaseLostError(self._held.shard_id, ended)
            raise CheckpointerClosedError(
                f"shard {self._held.shard_id}: this checkpointer was closed ({self._closed}); checkpoint through the "
                "checkpointer of the current processor"
            )

    def _position_of(self, target: ChangeRecord | Sequence | None, sub: int | None) -> ExtendedSequence | None:
        if target is None:
            if sub is not None:
                raise CheckpointOutOfRangeError("a sub_sequence needs the record or sequence it belongs to")
            return self._largest
        sequence = target.sequence if isinstance(target, ChangeRecord) else target
        return ExtendedSequence(sequence, sub)

    def _batch_of(self, sequence: Sequence) -> _Batch:
        for batch in self._batches:
            if batch.sequences[0] <= sequence <= batch.sequences[-1]:
                if sequence in batch.sequences:
                    return batch
                break
        raise CheckpointOutOfRangeError(
            f"shard {self._held.shard_id}: {sequence.to_text()} is not a record handed out to this processor"
        )

    def _write(self, checkpoint: str, position: ExtendedSequence | None) -> None:
        self._held.write(self._clock, lambda lease: self._store.checkpoint(lease, checkpoint, position))
        self._stats.add("checkpoints_written")
        log.debug("shard %s checkpointed at %s", self._held.shard_id, position.to_text() if position else checkpoint)
