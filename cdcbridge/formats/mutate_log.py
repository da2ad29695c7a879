"""MUTATE_LOG: each change record becomes its unit operations, one message each, ordered by ``seq.op_index``.

- PUT record    → one ``PUT`` message, ``replace_row=true``, all cells (columns not listed are gone).
- DELETE record → one ``DELETE`` message, ``row_deleted=true``, no cells.
- UPDATE record → its cells split, in source order, into maximal runs: a run of PUT / DELETE_ONE_VERSION /
  DELETE_ALL_VERSION cells is one ``UPDATE`` message (each cell keeps its own op, so splitting puts from
  deletes would add messages without adding information); a run of INCREMENT cells is one ``INCREMENT``
  message, kept apart because replaying it is not idempotent (``amount`` is the delta; ``value`` is null
  because the source record does not carry the result). An UPDATE without cells still gives one empty
  ``UPDATE`` message, so every record yields at least one message to checkpoint.

Conditions of the source write are never recorded. Message i has ``op_index`` i and sub-sequence i.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from cdcbridge.changes import Cell, ChangeRecord, RecordAction
from cdcbridge.contract import CellOp, MutationType
from cdcbridge.formats.common import (
    CELL_OP_NAMES,
    INT64_MAX,
    INT64_MIN,
    MessageItem,
    check_cell,
    common_fields,
    pk_block,
    tagged_value,
)
from cdcbridge.formats.errors import InvalidRecordError
from cdcbridge.formats.keys import record_key

_TYPE_NAMES = {mutation_type: mutation_type.value for mutation_type in MutationType}

#: One unit operation: its type and the cells it carries.
UnitOperation = tuple[MutationType, list[Cell]]


def unit_operations(record: ChangeRecord) -> list[UnitOperation]:
    """Split a record into the unit operations that become its messages (rules in the module docstring)."""
    if record.action is RecordAction.PUT:
        return [(MutationType.PUT, list(record.cells))]
    if record.action is RecordAction.DELETE:
        return [(MutationType.DELETE, [])]
    runs: list[UnitOperation] = [
        (mutation_type, list(cells)) for mutation_type, cells in groupby(record.cells, key=_update_cell_type)
    ]
    return runs or [(MutationType.UPDATE, [])]


def build_mutate_log(record: ChangeRecord, *, instance: str) -> list[MessageItem]:
    """Messages of one record for a MUTATE_LOG topic, op_index and sub-sequence 0..n-1."""
    key = record_key(record)
    pk = pk_block(record)
    items = []
    for op_index, (mutation_type, cells) in enumerate(unit_operations(record)):
        value = common_fields(
            record, instance=instance, op_index=op_index, pk=pk, row_deleted=mutation_type is MutationType.DELETE
        )
        value["type"] = _TYPE_NAMES[mutation_type]
        value["replace_row"] = mutation_type is MutationType.PUT
        value["cells"] = [_mutation_cell(record, cell) for cell in cells]
        items.append(MessageItem(key, value, op_index))
    return items


def _update_cell_type(cell: Cell) -> MutationType:
    return MutationType.INCREMENT if cell.op is CellOp.INCREMENT else MutationType.UPDATE


def _mutation_cell(record: ChangeRecord, cell: Cell) -> dict[str, Any]:
    if cell.op is CellOp.PUT and cell.value is not None:  # the common case, without the general checks
        return {
            "name": cell.name,
            "op": "PUT",
            "value": tagged_value(cell.value, table=record.table, column=cell.name),
            "version": cell.timestamp_ms,
            "amount": None,
        }
    check_cell(record, cell)
    value = None
    amount = None
    if cell.op is CellOp.PUT:
        value = tagged_value(cell.value, table=record.table, column=cell.name)
    elif cell.op is CellOp.INCREMENT:
        amount = _increment_amount(record, cell)
    return {
        "name": cell.name,
        "op": CELL_OP_NAMES[cell.op],
        "value": value,
        "version": cell.timestamp_ms,
        "amount": amount,
    }


def _increment_amount(record: ChangeRecord, cell: Cell) -> int:
    delta = cell.value
    if isinstance(delta, bool) or not isinstance(delta, int) or not INT64_MIN <= delta <= INT64_MAX:
        raise InvalidRecordError(
            f"table {record.table!r} column {cell.name!r}: INCREMENT needs an int64 delta, got {delta!r:.60}"
        )
    return delta
