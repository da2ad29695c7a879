"""The target row: what every target (Delta, PostgreSQL, Tablestore) stores for one source row.

A target keeps, like a relational table, only the latest version of each attribute column: name → value plus the
version (ms) of that value, so later version-aware operations (a PUT of an older version, DELETE_ONE_VERSION) can
be judged. Three bookkeeping fields make replays harmless:

- ``seq`` (stored as ``_seq``): seq_key of the last operation applied to the row; an operation applies only if
  its seq_key is greater (see :mod:`cdcbridge.apply.core.guard`).
- ``deleted`` (``_deleted``): soft delete. A deleted row keeps its pk and ``_seq`` and has no columns, so a late
  redelivery of an older operation cannot bring it back; :mod:`cdcbridge.apply.core.purge` removes it later.
- ``source_ts`` (``_source_ts``): commit time in ms of the last applied operation.

A row that was never written is equivalent to a deleted row without ``_seq``: every operation is newer than it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdcbridge.changes import Value

#: A Tablestore primary-key value: INTEGER → int, STRING → str, BINARY → bytes.
PkValue = int | str | bytes
#: Primary-key columns in table-schema order.
PrimaryKey = tuple[tuple[str, PkValue], ...]
#: Identity of a target row: (table, primary key).
RowKey = tuple[str, PrimaryKey]


@dataclass(frozen=True, slots=True)
class ColumnValue:
    """The latest value of an attribute column and its version in ms (None when the source gave none)."""

    value: Value
    version: int | None = None


@dataclass(slots=True)
class TargetRow:
    """State of one target row (see the module docstring for the bookkeeping fields)."""

    table: str
    pk: PrimaryKey
    columns: dict[str, ColumnValue] = field(default_factory=dict)
    seq: str | None = None
    deleted: bool = False
    source_ts: int | None = None

    @property
    def key(self) -> RowKey:
        return (self.table, self.pk)

    def copy(self) -> TargetRow:
        return TargetRow(self.table, self.pk, dict(self.columns), self.seq, self.deleted, self.source_ts)

    def to_record(self) -> dict[str, Any]:
        """Plain-dict form for targets and Arrow/pandas conversion::

        {"table": str, "pk": [{"name", "value"}], "columns": {name: {"value", "version"}},
         "_seq": str | None, "_deleted": bool, "_source_ts": int | None}
        """
        return {
            "table": self.table,
            "pk": [{"name": name, "value": value} for name, value in self.pk],
            "columns": {name: {"value": cell.value, "version": cell.version} for name, cell in self.columns.items()},
            "_seq": self.seq,
            "_deleted": self.deleted,
            "_source_ts": self.source_ts,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TargetRow:
        """Inverse of :meth:`to_record`; ``pk`` may also be a list of (name, value) pairs, ``columns`` a list of
        (name, {"value", "version"}) pairs (how Arrow hands back a map)."""
        pk = tuple(_pk_pair(item) for item in record["pk"])
        raw_columns = record.get("columns") or {}
        items = raw_columns.items() if isinstance(raw_columns, Mapping) else raw_columns
        columns = {name: ColumnValue(cell["value"], cell.get("version")) for name, cell in items}
        return cls(
            table=record["table"],
            pk=pk,
            columns=columns,
            seq=record.get("_seq"),
            deleted=bool(record.get("_deleted", False)),
            source_ts=record.get("_source_ts"),
        )


def _pk_pair(item: Any) -> tuple[str, PkValue]:
    if isinstance(item, Mapping):
        return (item["name"], item["value"])
    name, value = item
    return (name, value)
