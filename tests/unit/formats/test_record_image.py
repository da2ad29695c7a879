"""RECORD_IMAGE builder: exact messages for scripted records."""

from __future__ import annotations

import pytest

from cdcbridge.changes import Cell, RecordAction
from cdcbridge.contract import CellOp
from cdcbridge.formats.common import MessageItem
from cdcbridge.formats.errors import InvalidRecordError
from cdcbridge.formats.record_image import build_record_image, needs_current_row

from .expected import INSTANCE, KEY, PK, PUT_CELLS, common, record


def test_put_record_is_imaged_in_full_without_lookup() -> None:
    items = build_record_image(record(RecordAction.PUT, PUT_CELLS), instance=INSTANCE)
    assert items == [
        MessageItem(
            KEY,
            {
                "source": {
                    "instance": "inst-1",
                    "table": "orders",
                    "shard_id": "shard-0",
                    "record_type": "PUT",
                    "bridge_version": "0.1.0",
                },
                "seq": {
                    "epoch": 2,
                    "timestamp_us": 1_700_000_000_123_456,
                    "row_index": 9,
                    "op_index": 0,
                    "seq_key": "0000000002000017000000001234560000000009000000",
                },
                "timestamp": 1_700_000_000_123,
                "pk": PK,
                "row_deleted": False,
                "columns": {
                    "flag": {"value": ("boolean", True), "version": 1000},
                    "count": {"value": ("long", 3), "version": 1000},
                    "price": {"value": ("double", 9.5), "version": 1000},
                    "note": {"value": ("string", "hi"), "version": 1000},
                    "raw": {"value": ("bytes", b"\xff"), "version": 1000},
                },
                "partial": False,
            },
            0,
        )
    ]


def test_put_record_keeps_the_newest_version_of_a_column_whatever_the_order() -> None:
    cells = [Cell("c", CellOp.PUT, "new", 20), Cell("c", CellOp.PUT, "old", 10), Cell("d", CellOp.PUT, 1, None)]
    (item,) = build_record_image(record(RecordAction.PUT, cells), instance=INSTANCE)
    assert item.value is not None
    assert item.value["columns"] == {
        "c": {"value": ("string", "new"), "version": 20},
        "d": {"value": ("long", 1), "version": None},
    }


def test_put_record_with_an_increment_cell_is_refused() -> None:
    with pytest.raises(InvalidRecordError, match="INCREMENT cell in a PUT record"):
        build_record_image(record(RecordAction.PUT, [Cell("n", CellOp.INCREMENT, 1)]), instance=INSTANCE)


def test_update_record_is_imaged_from_the_row_read_back() -> None:
    update = record(RecordAction.UPDATE, [Cell("count", CellOp.INCREMENT, 2)])
    current_row = {"count": (5, 3000), "flag": (False, 1000), "note": ("x", 2000)}
    assert build_record_image(update, instance=INSTANCE, current_row=current_row) == [
        MessageItem(
            KEY,
            {
                **common("UPDATE"),
                "columns": {
                    "count": {"value": ("long", 5), "version": 3000},
                    "flag": {"value": ("boolean", False), "version": 1000},
                    "note": {"value": ("string", "x"), "version": 2000},
                },
                "partial": False,
            },
            0,
        )
    ]


def test_update_record_of_a_vanished_row_is_a_partial_image_of_its_own_cells() -> None:
    cells = [
        Cell("a", CellOp.PUT, 1, 100),
        Cell("b", CellOp.DELETE_ALL_VERSION),
        Cell("c", CellOp.DELETE_ONE_VERSION, None, 50),
        Cell("n", CellOp.INCREMENT, 4),
        Cell("d", CellOp.PUT, "v2", 200),
        Cell("d", CellOp.DELETE_ONE_VERSION, None, 150),
        Cell("e", CellOp.PUT, "gone", 300),
        Cell("e", CellOp.DELETE_ONE_VERSION, None, 300),
        Cell("f", CellOp.DELETE_ALL_VERSION),
        Cell("f", CellOp.PUT, 2.5, 400),
    ]
    assert build_record_image(record(RecordAction.UPDATE, cells), instance=INSTANCE, current_row=None) == [
        MessageItem(
            KEY,
            {
                **common("UPDATE"),
                "columns": {
                    "a": {"value": ("long", 1), "version": 100},
                    "b": {"value": None, "version": None},
                    "c": {"value": None, "version": 50},
                    "d": {"value": ("string", "v2"), "version": 200},
                    "e": {"value": None, "version": 300},
                    "f": {"value": ("double", 2.5), "version": 400},
                },
                "partial": True,
            },
            0,
        )
    ]


def test_delete_record_is_a_row_deleted_image_then_a_tombstone() -> None:
    items = build_record_image(record(RecordAction.DELETE, []), instance=INSTANCE)
    assert items == [
        MessageItem(KEY, {**common("DELETE", row_deleted=True), "columns": {}, "partial": False}, 0),
        MessageItem(KEY, None, 1),
    ]


def test_delete_record_without_tombstones_is_one_message() -> None:
    items = build_record_image(record(RecordAction.DELETE, []), instance=INSTANCE, tombstones=False)
    assert items == [MessageItem(KEY, {**common("DELETE", row_deleted=True), "columns": {}, "partial": False}, 0)]


def test_current_row_is_ignored_for_put_and_delete() -> None:
    row = {"other": (1, 1)}
    put = record(RecordAction.PUT, PUT_CELLS)
    delete = record(RecordAction.DELETE, [])
    assert build_record_image(put, instance=INSTANCE, current_row=row) == build_record_image(put, instance=INSTANCE)
    assert build_record_image(delete, instance=INSTANCE, current_row=row) == build_record_image(
        delete, instance=INSTANCE
    )


def test_only_update_records_need_the_row_read_back() -> None:
    assert needs_current_row(record(RecordAction.UPDATE, []))
    assert not needs_current_row(record(RecordAction.PUT, []))
    assert not needs_current_row(record(RecordAction.DELETE, []))


def test_put_cell_without_value_is_a_decoder_bug() -> None:
    with pytest.raises(InvalidRecordError, match="PUT cell without a value"):
        build_record_image(record(RecordAction.PUT, [Cell("a", CellOp.PUT, None, 1)]), instance=INSTANCE)


def test_version_delete_without_version_is_a_decoder_bug() -> None:
    update = record(RecordAction.UPDATE, [Cell("a", CellOp.DELETE_ONE_VERSION)])
    with pytest.raises(InvalidRecordError, match="DELETE_ONE_VERSION cell without the version"):
        build_record_image(update, instance=INSTANCE, current_row=None)


def test_unsupported_value_type_names_table_and_column() -> None:
    with pytest.raises(InvalidRecordError, match="table 'orders' column 'a' holds list"):
        build_record_image(record(RecordAction.PUT, [Cell("a", CellOp.PUT, [1], 1)]), instance=INSTANCE)
