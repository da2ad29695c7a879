"""A tiny reference model of one Tablestore row (latest version per column, like a max_versions=1 table) and a
stand-in bridge that turns its history into MUTATE_LOG and RECORD_IMAGE messages, written independently of
cdcbridge.apply.core.fold so the two can be compared."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cdcbridge.apply.core import tombstone_message
from cdcbridge.contract import CellOp
from tests.unit.apply.envelopes import PK, TABLE, image, mutation

#: DELETE_ONE_VERSION of whatever version the column holds when the record runs.
HELD_VERSION = -1


@dataclass
class SourceCell:
    name: str
    op: CellOp
    value: Any = None
    version: int | None = None
    amount: int | None = None
    with_result: bool = False  # INCREMENT message also carries the resulting value


@dataclass
class SourceRecord:
    action: str  # PUT, UPDATE, DELETE
    cells: list[SourceCell] = field(default_factory=list)


@dataclass
class SourceRow:
    exists: bool = False
    columns: dict[str, tuple[Any, int]] = field(default_factory=dict)

    def snapshot(self) -> SourceRow:
        return SourceRow(self.exists, dict(self.columns))

    def apply(self, record: SourceRecord, ts: int) -> SourceRecord:
        """Run a record at time `ts`; returns it with held versions and increment results filled in."""
        if record.action == "DELETE":
            self.exists, self.columns = False, {}
            return record
        if record.action == "PUT":
            self.exists, self.columns = True, {}
        elif not self.exists:
            if not any(cell.op in (CellOp.PUT, CellOp.INCREMENT) for cell in record.cells):
                return record
            self.exists, self.columns = True, {}
        resolved = []
        for cell in record.cells:
            held = self.columns.get(cell.name)
            if cell.op is CellOp.PUT:
                if held is None or cell.version >= held[1]:
                    self.columns[cell.name] = (cell.value, cell.version)
            elif cell.op is CellOp.DELETE_ALL_VERSION:
                self.columns.pop(cell.name, None)
            elif cell.op is CellOp.DELETE_ONE_VERSION:
                version = (held[1] if held else 0) if cell.version == HELD_VERSION else cell.version
                cell = SourceCell(cell.name, cell.op, version=version)
                if held is not None and held[1] == version:
                    del self.columns[cell.name]
            else:
                total = (held[0] if held else 0) + cell.amount
                self.columns[cell.name] = (total, ts)
                cell = SourceCell(
                    cell.name, cell.op, value=total, version=ts, amount=cell.amount, with_result=cell.with_result
                )
            resolved.append(cell)
        return SourceRecord(record.action, resolved)


def run_history(records: list[SourceRecord]) -> tuple[list[SourceRecord], list[SourceRow]]:
    """Resolved records and the row state after each record (record i runs at time i + 1)."""
    row = SourceRow()
    resolved, states = [], []
    for index, record in enumerate(records):
        resolved.append(row.apply(record, ts=index + 1))
        states.append(row.snapshot())
    return resolved, states


def mutation_messages(records: list[SourceRecord]) -> list[dict[str, Any]]:
    """MUTATE_LOG messages as the bridge writes them: PUT → one replace_row message, DELETE → one message, UPDATE →
    maximal runs of increment / non-increment cells, one message each (op_index 0..)."""
    messages = []
    for index, record in enumerate(records):
        n = index + 1
        if record.action == "PUT":
            messages.append(mutation(n, "PUT", [_mutation_cell(c) for c in record.cells]))
            continue
        if record.action == "DELETE":
            messages.append(mutation(n, "DELETE"))
            continue
        runs: list[tuple[str, list[SourceCell]]] = []
        for cell in record.cells:
            kind = "INCREMENT" if cell.op is CellOp.INCREMENT else "UPDATE"
            if runs and runs[-1][0] == kind:
                runs[-1][1].append(cell)
            else:
                runs.append((kind, [cell]))
        for op_index, (kind, cells) in enumerate(runs or [("UPDATE", [])]):
            messages.append(mutation(n, kind, [_mutation_cell(c) for c in cells], op_index=op_index))
    return messages


def _mutation_cell(cell: SourceCell) -> dict[str, Any]:
    if cell.op is CellOp.INCREMENT:
        value = cell.value if cell.with_result else None
        return {"name": cell.name, "op": "INCREMENT", "value": value, "version": cell.version, "amount": cell.amount}
    value = cell.value if cell.op is CellOp.PUT else None
    return {"name": cell.name, "op": cell.op.value, "value": value, "version": cell.version, "amount": None}


def image_messages(records: list[SourceRecord], states: list[SourceRow], lookups: list[int]) -> list[dict[str, Any]]:
    """RECORD_IMAGE messages (tombstones without seq after each delete): an UPDATE's image is the row read back
    after record ``lookups[i]`` ≥ i, or the record's own cells as a partial image if the row was gone then."""
    messages: list[dict[str, Any]] = []
    for index, record in enumerate(records):
        n = index + 1
        if record.action == "DELETE":
            messages.append(image(n, row_deleted=True))
            messages.append(tombstone_message(TABLE, PK))
        elif record.action == "PUT":
            messages.append(image(n, states[index].columns))
        else:
            seen = states[lookups[index]]
            if seen.exists:
                messages.append(image(n, seen.columns))
            else:
                messages.append(image(n, _own_cells(record), partial=True))
    return messages


def _own_cells(record: SourceRecord) -> dict[str, tuple[Any, int | None]]:
    own: dict[str, tuple[Any, int | None]] = {}
    for cell in record.cells:
        if cell.op is CellOp.PUT:
            own[cell.name] = (cell.value, cell.version)
        elif cell.op is CellOp.DELETE_ALL_VERSION:
            own[cell.name] = (None, None)
        elif cell.op is CellOp.DELETE_ONE_VERSION:
            own[cell.name] = (None, cell.version)
    return own
