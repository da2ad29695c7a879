"""What a shard consumer does when its read position was trimmed by the stream's retention.

Coordination only detects the trim and obeys a decision; what to decide is the application's (the bridge decides
per table from `source.tables[].on_trimmed`). There are three answers: CONTINUE (resume from the oldest retained
record, the loss counted and logged as DATA LOSS), CONTINUE_REPAIRED (the same resume, but the application has
arranged the repair, e.g. requested the snapshot that re-reads the rows, and logs it itself: the trim is counted,
not called a loss) and STOP (the shard halts at its checkpoint, reads nothing and writes nothing, so no record after
the gap is produced as if nothing were missing).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from cdcbridge.coordination.checkpoint.positions import ExtendedSequence


class TrimDecision(StrEnum):
    CONTINUE = "continue"
    CONTINUE_REPAIRED = "continue_repaired"
    STOP = "stop"


@dataclass(frozen=True)
class TrimmedRead:
    """One read that found its position trimmed: the records after `checkpoint_seq` up to the oldest retained one
    are lost (checkpoint_seq None: the shard was never checkpointed, the lost range starts at the shard's start)."""

    stream_id: str
    shard_id: str
    checkpoint_seq: ExtendedSequence | None

    def lost_range(self) -> str:
        """The lost range as far as it is known, for error messages."""
        start = self.checkpoint_seq.sequence.to_text() if self.checkpoint_seq is not None else "the shard's start"
        return f"records after {start} up to the oldest retained record"


class TrimPolicy(Protocol):
    def decide(self, trimmed: TrimmedRead) -> TrimDecision:
        """Called on the shard's task thread each time a read hits trimmed data (again on every retry of a halted
        shard, so a policy may let it go once the loss is covered, e.g. by a newer snapshot)."""
        ...


class ContinueAfterTrim:
    """The default of a bare coordination Worker: resume from the oldest retained record (counted as data loss)."""

    def decide(self, trimmed: TrimmedRead) -> TrimDecision:
        return TrimDecision.CONTINUE
