"""Stream records (GetStreamRecord's PlainBuffer rows) decoded into the shared change model.

This is the bridge's hottest path: every change passes through `decode_stream_record` once. It runs on the C
accelerator when that is built (`_speedups.decode_stream_record` mirrors `decode_stream_record_python` check for
check); the pure-Python version is the reference and the fallback.
"""

from __future__ import annotations

import dataclasses
import inspect
import types

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.tablestore.plainbuffer.accelerator import speedups
from cdcbridge.tablestore.plainbuffer.constants import (
    CELL_DELETE_ALL_VERSION,
    CELL_DELETE_ONE_VERSION,
    CELL_INCREMENT,
)
from cdcbridge.tablestore.plainbuffer.errors import PlainBufferError
from cdcbridge.tablestore.plainbuffer.reader import py_parse_single_row
from cdcbridge.tablestore.plainbuffer.rows import PrimaryKeySentinel

#: GetStreamRecordResponse.StreamRecord.action_type → action.
ACTION_TYPES: dict[int, RecordAction] = {1: RecordAction.PUT, 2: RecordAction.UPDATE, 3: RecordAction.DELETE}

_PUT = CellOp.PUT


def _cell_with_type(name: str, value: object, cell_type: int, timestamp: int | None) -> Cell:
    """A delete or increment cell, checked for the fields its op needs."""
    if cell_type == CELL_DELETE_ONE_VERSION:
        if timestamp is None:
            raise PlainBufferError(f"DELETE_ONE_VERSION cell {name!r} has no timestamp (the version to delete)")
        return Cell(name, CellOp.DELETE_ONE_VERSION, None, timestamp)
    if cell_type == CELL_DELETE_ALL_VERSION:
        return Cell(name, CellOp.DELETE_ALL_VERSION, None, timestamp)
    if cell_type == CELL_INCREMENT:
        if type(value) is not int:
            raise PlainBufferError(f"INCREMENT cell {name!r} must carry an INTEGER delta, found {value!r}")
        return Cell(name, CellOp.INCREMENT, value, timestamp)
    raise PlainBufferError(f"unknown cell type 0x{cell_type:02x} in cell {name!r}")  # the reader rejects these first


def _decode_python(data: bytes, action_type: int, table: str, shard_id: str, check_crc: bool) -> ChangeRecord:
    action = ACTION_TYPES.get(action_type)
    if action is None:
        raise PlainBufferError(f"unknown stream action type {action_type!r}; expected 1 (PUT_ROW), 2 or 3")
    primary_key, raw_cells, _delete_marker, sequence = py_parse_single_row(data, check_crc)
    if sequence is None:
        raise PlainBufferError("stream record has no sequence extension (TAG_EXTENSION/TAG_SEQ_INFO)")
    for name, value in primary_key:
        if type(value) is PrimaryKeySentinel:
            raise PlainBufferError(f"primary-key column {name!r} of a stream record holds {value!r}")
    cells = []
    append = cells.append
    for name, value, cell_type, timestamp in raw_cells:
        if cell_type is None and value is not None:  # the common case: a put
            append(Cell(name, _PUT, value, timestamp))
        elif cell_type is None:
            raise PlainBufferError(f"put cell {name!r} has no value")
        else:
            append(_cell_with_type(name, value, cell_type, timestamp))
    return ChangeRecord(table, action, primary_key, cells, Sequence(*sequence), shard_id)


def decode_stream_record_python(
    data: bytes,
    action_type: int,
    *,
    table: str,
    shard_id: str,
    record_index: int,
    check_crc: bool = True,
) -> ChangeRecord:
    """`decode_stream_record` on the pure-Python reader (the reference the accelerator is tested against)."""
    try:
        return _decode_python(data if type(data) is bytes else bytes(data), action_type, table, shard_id, check_crc)
    except PlainBufferError as exc:
        raise exc.with_context(shard_id=shard_id, record_index=record_index) from None


def decode_stream_record(
    data: bytes,
    action_type: int,
    *,
    table: str,
    shard_id: str,
    record_index: int,
    check_crc: bool = True,
) -> ChangeRecord:
    """One GetStreamRecord record → ChangeRecord.

    `action_type` is the record's ActionType (1 PUT_ROW, 2 UPDATE_ROW, 3 DELETE_ROW); `record_index` its position
    in the GetStreamRecord page. Cells map: no cell type → PUT, 3 → DELETE_ONE_VERSION, 1 → DELETE_ALL_VERSION,
    4 → INCREMENT (value = delta). Raises PlainBufferError with `shard_id` and `record_index` filled in.
    """
    try:
        return _decode(data if type(data) is bytes else bytes(data), action_type, table, shard_id, check_crc)
    except PlainBufferError as exc:
        raise exc.with_context(shard_id=shard_id, record_index=record_index) from None


def slot_layout(cls: type, field_names: tuple[str, ...]) -> tuple[type, tuple | None]:
    """Tell the C accelerator how to build `cls`: (cls, slot descriptors) when cls is a slotted dataclass whose
    __init__ only stores exactly `field_names` (then setting the slots directly is equivalent and skips the
    Python-level __init__, the largest cost of a record), else (cls, None) so the accelerator calls cls."""
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__"):
        return cls, None
    fields = dataclasses.fields(cls)
    if tuple(f.name for f in fields) != field_names or not all(f.init for f in fields):
        return cls, None
    if tuple(inspect.signature(cls.__init__).parameters) != ("self", *field_names):
        return cls, None
    descriptors = tuple(vars(cls).get(name) for name in field_names)
    if not all(type(d) is types.MemberDescriptorType for d in descriptors):
        return cls, None
    return cls, descriptors


def configure_accelerator(*, direct_construction: bool = True) -> None:
    """Hand the change-model classes to the C accelerator (done at import; tests re-run it to cover the
    call-the-class fallback with direct_construction=False)."""
    if speedups is None:
        return
    record_layout = slot_layout(
        ChangeRecord, ("table", "action", "primary_key", "cells", "sequence", "shard_id", "extra")
    )
    if record_layout[1] is not None and dataclasses.fields(ChangeRecord)[-1].default_factory is not dict:
        record_layout = (ChangeRecord, None)
    layouts = [
        slot_layout(Cell, ("name", "op", "value", "timestamp_ms")),
        record_layout,
        slot_layout(Sequence, ("epoch", "timestamp_us", "row_index")),
    ]
    if not direct_construction:
        layouts = [(cls, None) for cls, _ in layouts]
    speedups.configure_records(
        *layouts,
        CellOp.PUT,
        CellOp.DELETE_ONE_VERSION,
        CellOp.DELETE_ALL_VERSION,
        CellOp.INCREMENT,
        RecordAction.PUT,
        RecordAction.UPDATE,
        RecordAction.DELETE,
    )


configure_accelerator()
_decode = speedups.decode_stream_record if speedups is not None else _decode_python

__all__ = ["ACTION_TYPES", "configure_accelerator", "decode_stream_record", "decode_stream_record_python"]
