"""Which prefix of a shard's records is fully acknowledged by Kafka (the at-least-once rule).

Records are registered in shard order, each with the number of messages it became. Acknowledgements arrive in any
order (a record's messages may go to several partitions and topics). The confirmed position is the end of the
longest prefix of messages — in (record, sub-sequence) order — that Kafka acknowledged, so a checkpoint never covers
a message that might be lost, and a record that is only partly acknowledged is checkpointed with its sub-sequence.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from cdcbridge.changes import Sequence


@dataclass(slots=True, eq=False)
class PendingRecord:
    """One record in flight: `first_sub` parts were confirmed before (a resume part-way), `total` parts exist."""

    sequence: Sequence
    first_sub: int
    total: int
    acked: bytearray = field(init=False)
    acked_count: int = 0

    def __post_init__(self) -> None:
        self.acked = bytearray(max(self.total - self.first_sub, 0))

    @property
    def complete(self) -> bool:
        return self.acked_count >= len(self.acked)

    def contiguous_sub(self) -> int | None:
        """Highest sub-sequence k such that every part first_sub..k is acknowledged (None if none is)."""
        run = 0
        for flag in self.acked:
            if not flag:
                break
            run += 1
        if run == 0:
            return self.first_sub - 1 if self.first_sub > 0 else None
        return self.first_sub + run - 1


@dataclass(frozen=True, slots=True)
class ConfirmedPosition:
    """`sub_sequence is None`: the whole record at `sequence` (and all before it) is acknowledged."""

    sequence: Sequence
    sub_sequence: int | None


class AckTracker:
    """Thread-safe: `register` from the processing thread, `ack` from Kafka's delivery thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: deque[PendingRecord] = deque()
        self._last_complete: Sequence | None = None
        self._in_flight_messages = 0
        self._all_acked = threading.Condition(self._lock)

    def register(self, sequence: Sequence, total_messages: int, first_sub: int = 0) -> PendingRecord:
        """Add the next record of the shard; its messages sub-sequences first_sub..total-1 will be acknowledged."""
        record = PendingRecord(sequence, first_sub, total_messages)
        with self._lock:
            if record.complete and not self._pending:
                self._last_complete = sequence
            else:
                self._pending.append(record)
                self._in_flight_messages += len(record.acked) - record.acked_count
        return record

    def ack(self, record: PendingRecord, sub_sequence: int) -> None:
        """Kafka acknowledged part `sub_sequence` of `record` (a repeated ack is harmless)."""
        with self._lock:
            index = sub_sequence - record.first_sub
            if 0 <= index < len(record.acked) and not record.acked[index]:
                record.acked[index] = 1
                record.acked_count += 1
                self._in_flight_messages -= 1
                if self._in_flight_messages == 0:
                    self._all_acked.notify_all()

    def confirmed(self) -> ConfirmedPosition | None:
        """The end of the longest acknowledged prefix (None while nothing new is confirmed since the start)."""
        with self._lock:
            while self._pending and self._pending[0].complete:
                self._last_complete = self._pending.popleft().sequence
            if self._pending:
                front = self._pending[0]
                sub = front.contiguous_sub()
                if sub is not None:
                    return ConfirmedPosition(front.sequence, sub)
            if self._last_complete is None:
                return None
            return ConfirmedPosition(self._last_complete, None)

    @property
    def in_flight(self) -> int:
        """Messages produced but not acknowledged yet."""
        with self._lock:
            return self._in_flight_messages

    def wait_all_acked(self, timeout: float | None) -> bool:
        """Block until every registered message is acknowledged (True) or `timeout` passes (False)."""
        with self._all_acked:
            return self._all_acked.wait_for(lambda: self._in_flight_messages == 0, timeout)
