"""Checkpoint values as stored in the status table.

`Checkpoint` holds TRIM_HORIZON, SHARD_END or an opaque shard iterator (the Java client's format, so its rows can be
adopted). `CheckpointSeq` holds the last confirmed record as ``epoch:timestamp_us:row_index[:sub_sequence]``: on
resume the records at or before it are skipped (the KCL sub-sequence rule, leases.md §3.5).
"""

from __future__ import annotations

from dataclasses import dataclass

from cdcbridge.changes import Sequence

#: Read the shard from its oldest retained record.
TRIM_HORIZON = "TRIM_HORIZON"
#: The shard was read and confirmed to its end; its children may start.
SHARD_END = "SHARD_END"

_WHOLE_RECORD = 1 << 62


@dataclass(frozen=True, slots=True)
class ExtendedSequence:
    """A record's sequence plus, optionally, how many of its parts (messages) are confirmed.

    `sub_sequence=None` means the whole record; `sub_sequence=k` means parts 0..k only, so it sorts before the whole
    record. Used to compare checkpoints and to skip already confirmed records and parts after a restart.
    """

    sequence: Sequence
    sub_sequence: int | None = None

    def __post_init__(self) -> None:
        if self.sub_sequence is not None and self.sub_sequence < 0:
            raise ValueError(f"sub_sequence must be >= 0 or None (whole record), not {self.sub_sequence}")

    def _key(self) -> tuple[int, int, int, int]:
        sub = _WHOLE_RECORD if self.sub_sequence is None else self.sub_sequence
        return (self.sequence.epoch, self.sequence.timestamp_us, self.sequence.row_index, sub)

    def __lt__(self, other: ExtendedSequence) -> bool:
        return self._key() < other._key()

    def __le__(self, other: ExtendedSequence) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: ExtendedSequence) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: ExtendedSequence) -> bool:
        return self._key() >= other._key()

    @property
    def is_whole_record(self) -> bool:
        return self.sub_sequence is None

    def covers(self, sequence: Sequence) -> bool:
        """Whether the whole record at `sequence` is confirmed by this position."""
        return sequence < self.sequence or (sequence == self.sequence and self.sub_sequence is None)

    def to_text(self) -> str:
        """``epoch:timestamp_us:row_index`` or ``epoch:timestamp_us:row_index:sub_sequence`` (column CheckpointSeq)."""
        base = self.sequence.to_text()
        return base if self.sub_sequence is None else f"{base}:{self.sub_sequence}"

    @classmethod
    def from_text(cls, text: str) -> ExtendedSequence:
        """Inverse of :meth:`to_text`; raises ValueError naming the bad text."""
        parts = text.split(":")
        if len(parts) not in (3, 4):
            raise ValueError(f"CheckpointSeq {text!r} is not epoch:timestamp_us:row_index[:sub_sequence]")
        try:
            numbers = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"CheckpointSeq {text!r} has a part that is not an integer") from None
        sub = numbers[3] if len(numbers) == 4 else None
        return cls(Sequence(numbers[0], numbers[1], numbers[2]), sub)


def is_iterator(checkpoint: str) -> bool:
    """Whether a stored checkpoint is a shard iterator (rather than a sentinel)."""
    return checkpoint not in (TRIM_HORIZON, SHARD_END) and checkpoint != ""
