"""MUTATE_LOG builder: exact messages and unit-operation grouping for scripted records."""

from __future__ import annotations

import pytest

from cdcbridge.changes import Cell, RecordAction
from cdcbridge.contract import CellOp, MutationType
from cdcbridge.formats.common import MessageItem
from cdcbridge.formats.errors import InvalidRecordError
from cdcbridge.formats.mutate_log import build_mutate_log, unit_operations

from .expected import INSTANCE, KEY, PK, PUT_CELLS, common, record


def cell(name: str, op: str, value: object = None, version: int | None = None, amount: int | None = None) -> dict:
    return {"name": name, "op": op, "value": value, "version": version, "amount": amount}


def test_put_record_is_one_replace_row_put() -> None:
    items = build_mutate_log(record(RecordAction.PUT, PUT_CELLS), instance=INSTANCE)
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
                "type": "PUT",
                "replace_row": True,
                "cells": [
                    cell("flag", "PUT", ("boolean", True), 1000),
                    cell("count", "PUT", ("long", 3), 1000),
                    cell("price", "PUT", ("double", 9.5), 1000),
                    cell("note", "PUT", ("string", "hi"), 1000),
                    cell("raw", "PUT", ("bytes", b"\xff"), 1000),
                ],
            },
            0,
        )
    ]


def test_delete_record_is_one_row_deleted_delete_without_cells() -> None:
    assert build_mutate_log(record(RecordAction.DELETE, []), instance=INSTANCE) == [
        MessageItem(
            KEY,
            {**common("DELETE", row_deleted=True), "type": "DELETE", "replace_row": False, "cells": []},
            0,
        )
    ]


@pytest.mark.parametrize(
    ("record_cell", "expected_type", "expected_cell"),
    [
        (Cell("a", CellOp.PUT, False, 10), "UPDATE", cell("a", "PUT", ("boolean", False), 10)),
        (Cell("a", CellOp.DELETE_ONE_VERSION, None, 10), "UPDATE", cell("a", "DELETE_ONE_VERSION", None, 10)),
        (Cell("a", CellOp.DELETE_ALL_VERSION), "UPDATE", cell("a", "DELETE_ALL_VERSION")),
        (Cell("a", CellOp.INCREMENT, -5, 10), "INCREMENT", cell("a", "INCREMENT", None, 10, -5)),
    ],
)
def test_update_record_with_one_cell_op(record_cell: Cell, expected_type: str, expected_cell: dict) -> None:
    assert build_mutate_log(record(RecordAction.UPDATE, [record_cell]), instance=INSTANCE) == [
        MessageItem(
            KEY,
            {**common("UPDATE"), "type": expected_type, "replace_row": False, "cells": [expected_cell]},
            0,
        )
    ]


def test_update_record_with_mixed_ops_splits_at_increment_runs_and_keeps_order() -> None:
    cells = [
        Cell("a", CellOp.PUT, "x", 1),
        Cell("b", CellOp.DELETE_ONE_VERSION, None, 2),
        Cell("c", CellOp.INCREMENT, 1),
        Cell("d", CellOp.INCREMENT, 2),
        Cell("e", CellOp.DELETE_ALL_VERSION),
        Cell("f", CellOp.PUT, 1.25, 3),
        Cell("g", CellOp.INCREMENT, 3),
    ]
    assert build_mutate_log(record(RecordAction.UPDATE, cells), instance=INSTANCE) == [
        MessageItem(
            KEY,
            {
                **common("UPDATE", op_index=0),
                "type": "UPDATE",
                "replace_row": False,
                "cells": [cell("a", "PUT", ("string", "x"), 1), cell("b", "DELETE_ONE_VERSION", None, 2)],
            },
            0,
        ),
        MessageItem(
            KEY,
            {
                **common("UPDATE", op_index=1),
                "type": "INCREMENT",
                "replace_row": False,
                "cells": [cell("c", "INCREMENT", amount=1), cell("d", "INCREMENT", amount=2)],
            },
            1,
        ),
        MessageItem(
            KEY,
            {
                **common("UPDATE", op_index=2),
                "type": "UPDATE",
                "replace_row": False,
                "cells": [cell("e", "DELETE_ALL_VERSION"), cell("f", "PUT", ("double", 1.25), 3)],
            },
            2,
        ),
        MessageItem(
            KEY,
            {
                **common("UPDATE", op_index=3),
                "type": "INCREMENT",
                "replace_row": False,
                "cells": [cell("g", "INCREMENT", amount=3)],
            },
            3,
        ),
    ]


def test_update_record_without_cells_still_gives_one_message_to_checkpoint() -> None:
    assert build_mutate_log(record(RecordAction.UPDATE, []), instance=INSTANCE) == [
        MessageItem(KEY, {**common("UPDATE"), "type": "UPDATE", "replace_row": False, "cells": []}, 0)
    ]


def test_unit_operations_group_cells_by_run() -> None:
    a, b, c = Cell("a", CellOp.PUT, 1), Cell("b", CellOp.INCREMENT, 1), Cell("c", CellOp.DELETE_ALL_VERSION)
    assert unit_operations(record(RecordAction.UPDATE, [a, b, c])) == [
        (MutationType.UPDATE, [a]),
        (MutationType.INCREMENT, [b]),
        (MutationType.UPDATE, [c]),
    ]
    assert unit_operations(record(RecordAction.PUT, [a])) == [(MutationType.PUT, [a])]
    assert unit_operations(record(RecordAction.DELETE, [])) == [(MutationType.DELETE, [])]


@pytest.mark.parametrize("delta", [1.5, True, "1", None, 2**63])
def test_increment_needs_an_int64_delta(delta: object) -> None:
    with pytest.raises(InvalidRecordError, match="INCREMENT needs an int64 delta"):
        build_mutate_log(record(RecordAction.UPDATE, [Cell("n", CellOp.INCREMENT, delta)]), instance=INSTANCE)


def test_put_cell_without_value_is_a_decoder_bug() -> None:
    with pytest.raises(InvalidRecordError, match="PUT cell without a value"):
        build_mutate_log(record(RecordAction.UPDATE, [Cell("a", CellOp.PUT, None)]), instance=INSTANCE)


def test_version_delete_without_version_is_a_decoder_bug() -> None:
    with pytest.raises(InvalidRecordError, match="DELETE_ONE_VERSION cell without the version"):
        build_mutate_log(record(RecordAction.UPDATE, [Cell("a", CellOp.DELETE_ONE_VERSION)]), instance=INSTANCE)


def test_value_outside_int64_is_refused() -> None:
    with pytest.raises(InvalidRecordError, match="does not fit a long"):
        build_mutate_log(record(RecordAction.UPDATE, [Cell("a", CellOp.PUT, 2**64)]), instance=INSTANCE)
