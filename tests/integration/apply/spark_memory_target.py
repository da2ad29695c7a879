"""An in-memory target for both apply paths: the reference path's MemoryTarget, plus the Spark path's frames
(current rows out as a Spark frame, folded rows collected back), so the two paths can be compared row for row."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.model import ColumnValue, TargetRow
from cdcbridge.apply.spark.fold import STATE_TYPE
from cdcbridge.apply.spark.operations import PK_TYPE
from cdcbridge.apply.target import FoldedTable, SparkFoldTarget
from cdcbridge.changes import Value
from tests.unit.apply_job.memory_target import MemoryTarget

_CURRENT_SCHEMA = f"table string, pk {PK_TYPE}, cur {STATE_TYPE}"


def value_union(value: Value) -> tuple[Any, ...]:
    """A value as the fold's (z, l, d, s, b) union."""
    slots: list[Any] = [None] * 5
    if isinstance(value, bool):
        slots[0] = value
    elif isinstance(value, int):
        slots[1] = value
    elif isinstance(value, float):
        slots[2] = value
    elif isinstance(value, str):
        slots[3] = value
    else:
        slots[4] = bytearray(value)
    return tuple(slots)


def union_value(union: Any) -> Value:
    for slot in union:
        if slot is not None:
            return bytes(slot) if isinstance(slot, bytearray) else slot
    raise AssertionError(f"empty union {union!r}")


class MemorySparkTarget(MemoryTarget, SparkFoldTarget):
    name = "memory-spark"

    def __init__(self, spark: SparkSession) -> None:
        super().__init__()
        self.spark = spark

    def seed(self, rows: Collection[TargetRow]) -> None:
        for row in rows:
            self.tables.setdefault(row.table, {})[row.pk] = row.copy()

    def current_rows(
        self, tables: Collection[str], grouped: DataFrame, keys_at_most: int | None = None
    ) -> DataFrame | None:
        rows = [row for table in tables for row in self.tables.get(table, {}).values()]
        if not rows:
            return None
        data = [
            (
                row.table,
                [(name, _pk_union(value)) for name, value in row.pk],
                (
                    {name: (value_union(cell.value), cell.version) for name, cell in row.columns.items()},
                    row.deleted,
                    row.seq,
                    row.source_ts,
                ),
            )
            for row in rows
        ]
        return self.spark.createDataFrame(data, _CURRENT_SCHEMA)

    def refusal(self, folded: FoldedTable) -> str | None:
        return None

    def write_folded(self, marker: BatchMarker, tables: Mapping[str, FoldedTable]) -> dict[str, int]:
        """Guarded like MemoryTarget.write, counted per table."""
        written = {table: 0 for table in tables}
        if self.markers.get(marker.app_id, -1) >= marker.batch_id:
            return written
        self.writes += 1
        for table, folded in tables.items():
            stored = self.tables.setdefault(table, {})
            for row in (_target_row(table, record) for record in folded.rows.collect()):
                held = stored.get(row.pk)
                if held is None or held.seq is None or (row.seq is not None and row.seq > held.seq):
                    stored[row.pk] = row
                    written[table] += 1
        self.markers[marker.app_id] = marker.batch_id
        return written


def _pk_union(value: Any) -> tuple[Any, Any, Any]:
    if isinstance(value, int):
        return (value, None, None)
    if isinstance(value, str):
        return (None, value, None)
    return (None, None, bytearray(value))


def _target_row(table: str, record: Any) -> TargetRow:
    pk = tuple((item["n"], union_value(item["v"])) for item in record["pk"])
    state = record["row"]
    columns = {name: ColumnValue(union_value(cell["v"]), cell["e"]) for name, cell in (state["cols"] or {}).items()}
    return TargetRow(table, pk, columns, state["seq"], bool(state["del"]), state["ts"])
