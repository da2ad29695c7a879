"""An in-memory ApplyTarget with the same guard and marker rules as the real ones, for Spark-free tests."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.model import PrimaryKey, TargetRow
from cdcbridge.apply.core.policy import DeadLetter
from cdcbridge.apply.target import ApplyTarget, TargetBatch


class MemoryTarget(ApplyTarget):
    name = "memory"

    def __init__(self, refuse: Callable[[TargetRow], str | None] | None = None) -> None:
        self.tables: dict[str, dict[PrimaryKey, TargetRow]] = {}
        self.markers: dict[str, int] = {}
        self.dead_letters: list[DeadLetter] = []
        self.writes = 0
        self.refuse = refuse

    def read_marker(self, table: str, app_id: str) -> BatchMarker | None:
        batch_id = self.markers.get(app_id)
        return BatchMarker(app_id, batch_id) if batch_id is not None else None

    def read_rows(self, table: str, keys: Collection[PrimaryKey]) -> dict[PrimaryKey, TargetRow]:
        stored = self.tables.get(table, {})
        return {key: stored[key].copy() for key in keys if key in stored}

    def pk_names(self, table: str) -> tuple[str, ...] | None:
        for row in self.tables.get(table, {}).values():
            return tuple(name for name, _ in row.pk)
        return None

    def refused_rows(self, table: str, rows: Sequence[TargetRow]) -> dict[PrimaryKey, str]:
        if self.refuse is None:
            return {}
        return {row.pk: reason for row in rows if (reason := self.refuse(row)) is not None}

    def write(self, batch: TargetBatch) -> int:
        marker = batch.marker
        if self.markers.get(marker.app_id, -1) >= marker.batch_id:
            return 0
        self.writes += 1
        written = 0
        for table, rows in batch.rows.items():
            stored = self.tables.setdefault(table, {})
            for row in rows:
                held = stored.get(row.pk)
                if held is None or held.seq is None or (row.seq is not None and row.seq > held.seq):
                    stored[row.pk] = row.copy()
                    written += 1
        self.dead_letters.extend(batch.dead_letters)
        self.markers[marker.app_id] = marker.batch_id
        return written

    def live(self, table: str) -> dict[tuple, dict]:
        """Live rows as pk values → {column: value} (the SourceTable.live_values shape)."""
        return {
            tuple(value for _, value in row.pk): {name: cell.value for name, cell in row.columns.items()}
            for row in self.tables.get(table, {}).values()
            if not row.deleted
        }
