"""RECORD_IMAGE: each change record becomes the row as it stands after the change (a compacted-topic replica).

- PUT    → the record's own cells, which are the whole row (per column the highest version; delete cells in a
           PUT record are ignored because a replaced row holds only what was put).
- UPDATE → the row read back from the source by the caller (update-lookup, as Debezium and MongoDB change
           streams do: it may already show later changes; the last image per key still equals the row).
           If the row was gone at lookup, the record's own cells with ``partial=true``: PUT cells give their
           value, DELETE_ALL_VERSION gives ``value=null``, DELETE_ONE_VERSION gives ``value=null`` with the
           version removed (unless the record's latest PUT of that column has another version), and INCREMENT cells
           are left out because only their delta is known. A DELETE record follows on the stream in that case.
- DELETE → pk only with ``row_deleted=true``, then (tombstones on) a null value for the same key so that
           compaction can drop the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Value
from cdcbridge.contract import CellOp
from cdcbridge.formats.common import MessageItem, check_cell, common_fields, pk_block, tagged_value
from cdcbridge.formats.errors import InvalidRecordError
from cdcbridge.formats.keys import record_key

#: A row read back from the source: attribute column name → (value, version in ms). Primary-key columns excluded.
CurrentRow = Mapping[str, tuple[Value, int | None]]


def needs_current_row(record: ChangeRecord) -> bool:
    """Whether :func:`build_record_image` wants the row read back: only UPDATE records carry part of a row."""
    return record.action is RecordAction.UPDATE


def build_record_image(
    record: ChangeRecord,
    *,
    instance: str,
    current_row: CurrentRow | None = None,
    tombstones: bool = True,
) -> list[MessageItem]:
    """Messages of one record for a RECORD_IMAGE topic (the image at sub-sequence 0, a tombstone at 1).

    `current_row` is used for UPDATE records only: the row as read back, or None when the row is gone.
    """
    key = record_key(record)
    pk = pk_block(record)
    if record.action is RecordAction.DELETE:
        image = _image(record, instance, pk, columns={}, row_deleted=True, partial=False)
        items = [MessageItem(key, image, 0)]
        if tombstones:
            items.append(MessageItem(key, None, 1))
        return items
    if record.action is RecordAction.PUT:
        columns = _own_cells_image(record, include_deletes=False)
        partial = False
    elif current_row is not None:
        columns = _row_image(record, current_row)
        partial = False
    else:
        columns = _own_cells_image(record, include_deletes=True)
        partial = True
    return [MessageItem(key, _image(record, instance, pk, columns=columns, row_deleted=False, partial=partial), 0)]


def _image(
    record: ChangeRecord,
    instance: str,
    pk: list[dict[str, Any]],
    *,
    columns: dict[str, dict[str, Any]],
    row_deleted: bool,
    partial: bool,
) -> dict[str, Any]:
    image = common_fields(record, instance=instance, op_index=0, pk=pk, row_deleted=row_deleted)
    image["columns"] = columns
    image["partial"] = partial
    return image


def _row_image(record: ChangeRecord, row: CurrentRow) -> dict[str, dict[str, Any]]:
    return {
        name: {"value": tagged_value(value, table=record.table, column=name), "version": version}
        for name, (value, version) in row.items()
    }


def _own_cells_image(record: ChangeRecord, *, include_deletes: bool) -> dict[str, dict[str, Any]]:
    """Fold the record's cells in order into what a reader of the latest version would see of them."""
    held: dict[str, Cell] = {}
    for cell in record.cells:
        check_cell(record, cell)
        previous = held.get(cell.name)
        if cell.op is CellOp.PUT:
            if not (previous is not None and previous.op is CellOp.PUT and _older(cell, previous)):
                held[cell.name] = cell
        elif cell.op is CellOp.INCREMENT:
            if record.action is RecordAction.PUT:
                raise InvalidRecordError(
                    f"table {record.table!r} column {cell.name!r}: INCREMENT cell in a PUT record; "
                    "a replaced row cannot hold a delta"
                )
        elif include_deletes and cell.op is CellOp.DELETE_ALL_VERSION:
            held[cell.name] = cell
        elif include_deletes and cell.op is CellOp.DELETE_ONE_VERSION:
            another_version_survives = (
                previous is not None and previous.op is CellOp.PUT and previous.timestamp_ms != cell.timestamp_ms
            )
            if not another_version_survives:
                held[cell.name] = cell
    return {name: _image_cell(record, cell) for name, cell in held.items()}


def _older(cell: Cell, than: Cell) -> bool:
    return cell.timestamp_ms is not None and than.timestamp_ms is not None and cell.timestamp_ms < than.timestamp_ms


def _image_cell(record: ChangeRecord, cell: Cell) -> dict[str, Any]:
    if cell.op is CellOp.PUT:
        return {"value": tagged_value(cell.value, table=record.table, column=cell.name), "version": cell.timestamp_ms}
    if cell.op is CellOp.DELETE_ONE_VERSION:
        return {"value": None, "version": cell.timestamp_ms}
    return {"value": None, "version": None}
