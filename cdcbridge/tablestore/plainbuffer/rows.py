"""Python-side shapes of PlainBuffer rows: primary-key sentinels, cells and rows."""

from __future__ import annotations

from dataclasses import dataclass, field

from cdcbridge.tablestore.plainbuffer.constants import VT_AUTO_INCREMENT, VT_INF_MAX, VT_INF_MIN

#: A decoded attribute value: INTEGER→int, DOUBLE→float, BOOLEAN→bool, STRING→str, BLOB→bytes.
Value = int | float | bool | str | bytes


class PrimaryKeySentinel:
    """A primary-key value that is not data: INF_MIN / INF_MAX bound a range scan, AUTO_INCREMENT asks the
    server to assign the key. Singletons, compared by identity; they survive pickling and copying."""

    __slots__ = ("name", "variant_type")

    def __init__(self, name: str, variant_type: int) -> None:
        self.name = name
        self.variant_type = variant_type

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name


INF_MIN = PrimaryKeySentinel("INF_MIN", VT_INF_MIN)
INF_MAX = PrimaryKeySentinel("INF_MAX", VT_INF_MAX)
AUTO_INCREMENT = PrimaryKeySentinel("AUTO_INCREMENT", VT_AUTO_INCREMENT)

#: Sentinel by variant type byte, for the reader.
SENTINELS_BY_TYPE = {s.variant_type: s for s in (INF_MIN, INF_MAX, AUTO_INCREMENT)}

#: A primary-key column value: a data value or one of the sentinels.
PrimaryKeyValue = Value | PrimaryKeySentinel


@dataclass(slots=True)
class PlainCell:
    """One attribute cell. `cell_type` is None for a put, else CELL_DELETE_ALL_VERSION / CELL_DELETE_ONE_VERSION /
    CELL_INCREMENT (an increment carries the delta in `value`). `timestamp` is the version in ms."""

    name: str
    value: Value | None = None
    cell_type: int | None = None
    timestamp: int | None = None


@dataclass(slots=True)
class PlainRow:
    """One row of a PlainBuffer block. `sequence` is (epoch, timestamp_us, row_index) from the row's extension,
    present in stream records only."""

    primary_key: list[tuple[str, PrimaryKeyValue]]
    cells: list[PlainCell] = field(default_factory=list)
    delete_marker: bool = False
    sequence: tuple[int, int, int] | None = None
