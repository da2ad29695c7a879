"""The worker binds the C encoders of a table's formats to the schema ids registered for its topics."""

from __future__ import annotations

import io
from types import SimpleNamespace

import fastavro

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.config import TableConfig
from cdcbridge.contract import CellOp, MessageFormat
from cdcbridge.formats.mutate_log import build_mutate_log
from cdcbridge.formats.schemas import schema_dict
from cdcbridge.publish.tables import TableRuntime, encoding_path, fast_encoders


def runtime(formats: list[str]) -> TableRuntime:
    table = TableConfig(name="orders", formats=formats)
    return TableRuntime(table=table, stream_id="s", topics=table.topics(prefix="cdc", table="orders"))


def test_a_mutate_log_table_gets_the_encoder_bound_to_its_schema_id() -> None:
    rt = runtime(["MUTATE_LOG"])
    serializers = SimpleNamespace(schema_ids={"cdc.orders.mutation": 4242})
    encoders = fast_encoders(rt, serializers, "inst")  # type: ignore[arg-type]
    assert list(encoders) == [MessageFormat.MUTATE_LOG]
    encode = encoders[MessageFormat.MUTATE_LOG]
    record = ChangeRecord(
        "orders", RecordAction.PUT, [("id", 5)], [Cell("v", CellOp.PUT, "x", 17)], Sequence(1, 2_000, 3), "shard-0"
    )
    (value,) = encode(record, None)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema_dict(MessageFormat.MUTATE_LOG)),
                               build_mutate_log(record, instance="inst")[0].value)  # fmt: skip
    assert value == b"\x00" + (4242).to_bytes(4, "big") + body.getvalue()


def test_a_table_with_images_gets_both_encoders_with_its_tombstone_setting() -> None:
    rt = runtime(["RECORD_IMAGE", "MUTATE_LOG"])
    rt.table = rt.table.model_copy(update={"tombstones": False})
    serializers = SimpleNamespace(schema_ids={"cdc.orders.mutation": 1, "cdc.orders.image": 2})
    encoders = fast_encoders(rt, serializers, "inst")  # type: ignore[arg-type]
    assert set(encoders) == {MessageFormat.RECORD_IMAGE, MessageFormat.MUTATE_LOG}
    deleted = ChangeRecord("orders", RecordAction.DELETE, [("id", 5)], [], Sequence(1, 2_000, 3), "shard-0")
    (image,) = encoders[MessageFormat.RECORD_IMAGE](deleted, None)  # no tombstone after it: tombstones are off
    assert image is not None and image[:5] == b"\x00" + (2).to_bytes(4, "big")


def test_a_topic_without_a_registered_schema_id_keeps_the_builders() -> None:
    rt = runtime(["RECORD_IMAGE", "MUTATE_LOG"])
    serializers = SimpleNamespace(schema_ids={"cdc.orders.mutation": 1})
    assert list(fast_encoders(rt, serializers, "inst")) == [MessageFormat.MUTATE_LOG]  # type: ignore[arg-type]


def test_the_start_up_line_says_which_encoder_runs_and_why_not_the_fast_one() -> None:
    both = (MessageFormat.RECORD_IMAGE, MessageFormat.MUTATE_LOG)
    fast = encoding_path(both, {f: (lambda record, row: None) for f in both})
    assert fast.startswith("values encoded by the C encoder")
    slow = encoding_path(both, {MessageFormat.MUTATE_LOG: lambda record, row: None})
    assert slow.startswith("values encoded by the Avro serializer only, several times slower (RECORD_IMAGE: ")
    assert "MUTATE_LOG" not in slow
