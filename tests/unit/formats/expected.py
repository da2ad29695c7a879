"""Literal expected envelope parts for the scripted records (written out, not computed by the code under test)."""

from __future__ import annotations

from typing import Any

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp

INSTANCE = "inst-1"
SEQUENCE = Sequence(epoch=2, timestamp_us=1_700_000_000_123_456, row_index=9)
KEY = b'[7,"user-a",{"b64":"AQI="}]'
PK = [
    {"name": "id", "value": ("long", 7)},
    {"name": "user", "value": ("string", "user-a")},
    {"name": "blob", "value": ("bytes", b"\x01\x02")},
]


def record(action: RecordAction, cells: list[Cell]) -> ChangeRecord:
    return ChangeRecord(
        table="orders",
        action=action,
        primary_key=[("id", 7), ("user", "user-a"), ("blob", b"\x01\x02")],
        cells=cells,
        sequence=SEQUENCE,
        shard_id="shard-0",
    )


def common(record_type: str, op_index: int = 0, row_deleted: bool = False) -> dict[str, Any]:
    return {
        "source": {
            "instance": "inst-1",
            "table": "orders",
            "shard_id": "shard-0",
            "record_type": record_type,
            "bridge_version": "0.1.0",
        },
        "seq": {
            "epoch": 2,
            "timestamp_us": 1_700_000_000_123_456,
            "row_index": 9,
            "op_index": op_index,
            "seq_key": f"0000000002000017000000001234560000000009{op_index:06d}",
        },
        "timestamp": 1_700_000_000_123,
        "pk": PK,
        "row_deleted": row_deleted,
    }


PUT_CELLS = [
    Cell("flag", CellOp.PUT, True, 1000),
    Cell("count", CellOp.PUT, 3, 1000),
    Cell("price", CellOp.PUT, 9.5, 1000),
    Cell("note", CellOp.PUT, "hi", 1000),
    Cell("raw", CellOp.PUT, b"\xff", 1000),
]
