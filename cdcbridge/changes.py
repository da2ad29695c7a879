"""Source-neutral change model: what a change stream hands to the rest of the bridge.

The Tablestore stream client decodes records into these types; coordination, formats and the Kafka sink
only ever see these, so a second source could be added without touching them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from cdcbridge.contract import CellOp, seq_key

#: A Tablestore value: INTEGER→int, DOUBLE→float, BOOLEAN→bool, STRING→str, BINARY→bytes.
Value = int | float | bool | str | bytes


class RecordAction(StrEnum):
    """What the row mutation was (Tablestore ActionType PUT_ROW / UPDATE_ROW / DELETE_ROW)."""

    PUT = "PUT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"


@dataclass(frozen=True, slots=True, order=True)
class Sequence:
    """Position of a record in its shard; ordering by (epoch, timestamp_us, row_index) is commit order."""

    epoch: int
    timestamp_us: int
    row_index: int

    def key(self, op_index: int = 0) -> str:
        """Sortable string key (the messages' seq_key); `op_index` orders the unit operations of one record."""
        return seq_key(self.epoch, self.timestamp_us, self.row_index, op_index)

    def to_text(self) -> str:
        """Compact form stored next to a checkpoint (`CheckpointSeq`): ``epoch:timestamp_us:row_index``."""
        return f"{self.epoch}:{self.timestamp_us}:{self.row_index}"

    @classmethod
    def from_text(cls, text: str) -> Sequence:
        """Inverse of :meth:`to_text`; raises ValueError naming the bad text."""
        parts = text.split(":")
        if len(parts) != 3:
            raise ValueError(f"sequence {text!r} is not of the form epoch:timestamp_us:row_index")
        epoch, ts, row = (int(p) for p in parts)
        return cls(epoch, ts, row)


@dataclass(slots=True)
class Cell:
    """One attribute-column operation. `value` is None for deletes; INCREMENT carries the delta in `value`
    unless the source materialised the result (then the op is PUT). `timestamp_ms` is the cell version."""

    name: str
    op: CellOp
    value: Value | None = None
    timestamp_ms: int | None = None


@dataclass(slots=True)
class ChangeRecord:
    """One committed row mutation read from a shard of a table's change stream."""

    table: str
    action: RecordAction
    primary_key: list[tuple[str, Value]]
    cells: list[Cell]
    sequence: Sequence
    shard_id: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def timestamp_ms(self) -> int:
        """Commit time of the record in milliseconds (the sequence timestamp is in µs)."""
        return self.sequence.timestamp_us // 1000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_us(moment: datetime) -> int:
    """A commit time in the sequences' unit, microseconds since the epoch, exactly (a float could be off by one)."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


def format_time_us(us: int) -> str:
    """A commit time in µs as ISO 8601 UTC with milliseconds, as logs and `cdcbridge status` show it."""
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="milliseconds")
