"""The worker binds the C MUTATE_LOG encoder to each MUTATE_LOG-only table's registered schema id."""

from __future__ import annotations

import io
from types import SimpleNamespace

import fastavro

from cdcbridge.bridge.app import TableRuntime, fast_mutate_log_encoder
from cdcbridge.changes import Cell, CellOp, ChangeRecord, RecordAction, Sequence
from cdcbridge.config import TableConfig
from cdcbridge.formats.mutate_log import build_mutate_log
from cdcbridge.formats.schemas import schema_dict
from cdcbridge.formats.table_format import MessageFormat


def runtime(formats: list[str]) -> TableRuntime:
    table = TableConfig(name="orders", formats=formats)
    return TableRuntime(table=table, stream_id="s", topics=table.topics(prefix="cdc", table="orders"))


def test_a_mutate_log_table_gets_the_encoder_bound_to_its_schema_id() -> None:
    rt = runtime(["MUTATE_LOG"])
    serializers = SimpleNamespace(schema_ids={"cdc.orders.mutation": 4242})
    encode = fast_mutate_log_encoder(rt, serializers, "inst")  # type: ignore[arg-type]
    assert encode is not None
    record = ChangeRecord(
        "orders", RecordAction.PUT, [("id", 5)], [Cell("v", CellOp.PUT, "x", 17)], Sequence(1, 2_000, 3), "shard-0"
    )
    (value,) = encode(record)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema_dict(MessageFormat.MUTATE_LOG)),
                               build_mutate_log(record, instance="inst")[0].value)  # fmt: skip
    assert value == b"\x00" + (4242).to_bytes(4, "big") + body.getvalue()


def test_a_table_with_images_keeps_the_builders() -> None:
    rt = runtime(["MUTATE_LOG", "RECORD_IMAGE"])
    serializers = SimpleNamespace(schema_ids={"cdc.orders.mutation": 1, "cdc.orders.image": 2})
    assert fast_mutate_log_encoder(rt, serializers, "inst") is None  # type: ignore[arg-type]
