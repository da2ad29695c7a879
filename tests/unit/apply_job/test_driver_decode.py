"""The driver's own decode of a small batch (fastavro) gives the envelope dicts the Spark path gives: compared with
the compact JSON Spark renders (compact.py, checked against real Spark in the integration tests) on the bridge's
own messages of both formats, and with hand-written envelopes (increments, bytes, NaN, partial images, deletes)."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

from cdcbridge.apply.driver.framing import UnknownSchemaId
from cdcbridge.apply.driver.kafka_fetch import FetchedMessage
from cdcbridge.apply.driver.kafka_records import KafkaRecord, envelope
from cdcbridge.apply.driver.value_decode import EnvelopeDecoder
from cdcbridge.apply.writer_schemas import WriterSchema
from cdcbridge.contract import TOMBSTONE_SEQ_KEY_HEADER, MessageFormat
from cdcbridge.formats import BridgeTableFormat, schema_text
from cdcbridge.formats.schemas import parsed_schema
from cdcbridge.harness.bench.apply_workload import bridge_messages, generate_records
from tests.unit.apply.envelopes import delete_all, delete_one, image, increment, mutation, put

from .compact import evolved_writer, kafka_records, same

SCHEMA_ID = {MessageFormat.MUTATE_LOG: 11, MessageFormat.RECORD_IMAGE: 12}
SCHEMAS = {sid: WriterSchema(sid, schema_text(fmt), fmt) for fmt, sid in SCHEMA_ID.items()}


def framed(message_format: MessageFormat, value: dict[str, Any], schema_id: int | None = None) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed_schema(message_format), value)
    return b"\x00" + (schema_id or SCHEMA_ID[message_format]).to_bytes(4, "big") + buffer.getvalue()


def format_of(value: dict[str, Any]) -> MessageFormat:
    return MessageFormat.MUTATE_LOG if "cells" in value else MessageFormat.RECORD_IMAGE


def driver_record(message: FetchedMessage, schemas: dict[int, WriterSchema] = SCHEMAS) -> KafkaRecord:
    return EnvelopeDecoder().record(message, schemas)


@pytest.mark.parametrize("fmt", ["MUTATE_LOG", "RECORD_IMAGE"])
def test_the_bridges_messages_decode_on_the_driver_as_on_spark(fmt: str) -> None:
    records = generate_records("users", keys=6, records=120, seed=5)  # strings, doubles, bools, bytes, deletes
    messages, _ = bridge_messages(records, BridgeTableFormat(formats=(fmt,)), topic_prefix="p")
    decoder = EnvelopeDecoder()
    compared = 0
    for message, spark_record in zip(messages, kafka_records(messages), strict=True):
        value = None if message.value is None else framed(format_of(message.value), message.value)
        fetched = FetchedMessage(message.topic, 0, spark_record.offset, message.key, value, message.headers)
        record = decoder.record(fetched, SCHEMAS)
        if message.value is None:
            assert record.tombstone and record.seq_key_header == spark_record.seq_key_header is not None
            assert (record.key, record.offset) == (spark_record.key, spark_record.offset)
            continue
        assert record.message_format is spark_record.message_format and record.body is None
        assert same(envelope(record), envelope(spark_record)), (envelope(record), envelope(spark_record))
        compared += 1
    assert compared > 100


def _hand_written() -> list[dict[str, Any]]:
    return [
        mutation(1, "PUT", [put("name", "a", 1), put("blob", b"\x00\xff", 1), put("score", float("nan"), 1)]),
        mutation(2, "UPDATE", [put("flag", True, 2), delete_one("name", 1), delete_all("blob")], op_index=3),
        mutation(3, "INCREMENT", [increment("count", 5, value=12, version=3), increment("other", -2)]),
        mutation(4, "DELETE", pk=(("region", "eu"), ("id", b"\x01\x02"))),
        mutation(5, "UPDATE", [put("x", float("inf"), None), put("y", -0.0, 9), put("z", 2**62, 9)]),
        image(6, {"name": ("b", 6), "blob": (b"", 6), "score": (float("-inf"), None), "flag": (False, 6)}),
        image(7, {"gone": (None, None), "count": (3, 7)}, partial=True),
        image(8, row_deleted=True, pk=(("id", -7),)),
    ]


@pytest.mark.parametrize("index", range(8))
def test_hand_written_envelopes_come_out_as_the_spark_path_gives_them(index: int) -> None:
    value = _hand_written()[index]
    fmt = format_of(value)
    fetched = FetchedMessage("p.orders.x", 1, 40 + index, b"key", framed(fmt, value))
    record = driver_record(fetched)
    (spark_record,) = kafka_records([_outgoing(value)], partition=1, first_offset=40 + index)
    expected = envelope(spark_record)
    assert same(envelope(record), expected), (envelope(record), expected)
    assert expected["_offset"] == 40 + index and expected["source"] == {"table": "orders"}


def _outgoing(value: dict[str, Any]) -> Any:
    from cdcbridge.harness.bench.apply_workload import OutgoingMessage

    return OutgoingMessage("p.orders.x", b"key", _tagged(value))


def _tagged(value: dict[str, Any]) -> dict[str, Any]:
    """`value` with its union values as (branch, value), the notation compact.py renders Spark's JSON from."""

    def branch(item: Any) -> Any:
        if item is None:
            return None
        name = {bool: "boolean", int: "long", float: "double", str: "string", bytes: "bytes"}[type(item)]
        return (name, item)

    out = json.loads(json.dumps({k: v for k, v in value.items() if k not in ("cells", "columns", "pk")}))
    out["pk"] = [{"name": item["name"], "value": branch(item["value"])} for item in value["pk"]]
    if "cells" in value:
        out["cells"] = [{**cell, "value": branch(cell["value"])} for cell in value["cells"]]
    else:
        out["columns"] = {name: {**cell, "value": branch(cell["value"])} for name, cell in value["columns"].items()}
    return out


def test_an_evolved_writer_schema_reads_into_the_reader_schema() -> None:
    """Defaults fill in, the extra field is dropped, an unknown enum symbol becomes the enum's default, and a
    bytes value stays bytes (fastavro's own resolution would read it into the union's string branch)."""
    writer = evolved_writer()
    value = mutation(9, "UPDATE", [put("name", "z", 9), put("blob", b"\xe1\x00", 9)], pk=(("id", b"\xe1"),))
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(writer), {**value, "note": "extra"})
    schemas = {**SCHEMAS, 30: WriterSchema(30, json.dumps(writer), MessageFormat.MUTATE_LOG)}
    framed_value = b"\x00" + (30).to_bytes(4, "big") + buffer.getvalue()
    decoded = envelope(driver_record(FetchedMessage("t", 0, 1, b"k", framed_value), schemas))
    assert decoded["seq"]["op_index"] == 0 and decoded["cells"][0]["amount"] is None and "note" not in decoded
    assert [cell["value"] for cell in decoded["cells"]] == ["z", b"\xe1\x00"] and decoded["timestamp"] == 9
    assert decoded["pk"] == [{"name": "id", "value": b"\xe1"}] and decoded["type"] == "UPDATE"
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(writer), {**value, "type": "UPSERT"})
    upsert = b"\x00" + (30).to_bytes(4, "big") + buffer.getvalue()
    assert envelope(driver_record(FetchedMessage("t", 0, 2, b"k", upsert), schemas))["type"] == "UNKNOWN"


def test_tombstones_and_values_that_do_not_decode_are_told_as_on_spark() -> None:
    good = framed(MessageFormat.MUTATE_LOG, mutation(1, "PUT", [put("a", 1)]))
    foreign = WriterSchema(40, None, None, "schema id 40 is unknown to the registry")
    schemas = {**SCHEMAS, 40: foreign}
    tomb = driver_record(FetchedMessage("t", 0, 1, b"k", None, (("x", b"1"), (TOMBSTONE_SEQ_KEY_HEADER, b"0042"))))
    assert tomb.tombstone and tomb.seq_key_header == "0042" and tomb.key == b"k"
    assert driver_record(FetchedMessage("t", 0, 1, b"k", None)).seq_key_header is None
    cases = {
        b"\x00\x01": "value of 2 bytes is shorter than the Confluent wire-format header",
        b"\x01" + good[1:]: "magic byte 1 is not 0",
        good[:5] + b"\xff\xff\xff": "does not decode as Avro with writer schema id 11",
        b"\x00" + (40).to_bytes(4, "big") + good[5:]: "schema id 40 is unknown to the registry",
        good[:-3]: "does not decode as Avro",
    }
    for value, problem in cases.items():
        record = driver_record(FetchedMessage("t", 2, 5, b"k", value), schemas)
        assert record.problem is not None and problem in record.problem and record.raw == value
        assert not record.has_envelope and record.raw_message()["_partition"] == 2
    with pytest.raises(UnknownSchemaId) as unknown:
        driver_record(FetchedMessage("t", 0, 1, b"k", b"\x00" + (77).to_bytes(4, "big") + good[5:]))
    assert unknown.value.schema_id == 77
