"""Micro-batches as Spark hands them to the apply job (the Kafka source's columns), built from envelope dicts:
values Avro-encoded in the Confluent framing with fixed schema ids, tombstones with their seq header."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import fastavro

from cdcbridge.apply.routing import TopicRouting
from cdcbridge.apply.writer_schemas import WriterSchema
from cdcbridge.config import parse_config
from cdcbridge.contract import TOMBSTONE_SEQ_KEY_HEADER, MessageFormat
from cdcbridge.formats import schema_text
from cdcbridge.formats.keys import encode_key
from tests.unit.apply.envelopes import TABLE

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)
SCHEMAS = {
    1: WriterSchema(1, schema_text(MessageFormat.MUTATE_LOG), MessageFormat.MUTATE_LOG),
    2: WriterSchema(2, schema_text(MessageFormat.RECORD_IMAGE), MessageFormat.RECORD_IMAGE),
}
SCHEMA_ID = {MessageFormat.MUTATE_LOG: 1, MessageFormat.RECORD_IMAGE: 2}
TOPIC = {MessageFormat.MUTATE_LOG: "t.orders.mutation", MessageFormat.RECORD_IMAGE: "t.orders.image"}
_PARSED = {fmt: fastavro.parse_schema(json.loads(SCHEMAS[sid].text)) for fmt, sid in SCHEMA_ID.items()}


def routing(message_format: MessageFormat) -> TopicRouting:
    config = parse_config(
        {"source": {"tables": [{"name": TABLE, "formats": [message_format.value]}]}, "kafka": {"topic_prefix": "t"}},
        environ={},
    )
    return TopicRouting.from_config(config)


def framed(message_format: MessageFormat, message: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, _PARSED[message_format], message)
    return b"\x00" + SCHEMA_ID[message_format].to_bytes(4, "big") + buffer.getvalue()


def kafka_row(message_format: MessageFormat, message: dict[str, Any], partition: int, offset: int) -> tuple:
    key = encode_key([item["value"] for item in message["pk"]])
    headers: list[tuple[str, bytearray]] = []
    if message.get("_tombstone"):
        value = None
        if message.get("seq"):
            headers.append((TOMBSTONE_SEQ_KEY_HEADER, bytearray(message["seq"]["seq_key"].encode())))
    else:
        value = bytearray(framed(message_format, message))
    when = datetime(2026, 1, 1, tzinfo=UTC)
    return (bytearray(key), value, TOPIC[message_format], partition, offset, when, 0, headers)


def with_pk(message: dict[str, Any], pk: tuple) -> dict[str, Any]:
    return {**message, "pk": [{"name": name, "value": value} for name, value in pk]}


def batch_frame(spark: Any, message_format: MessageFormat, deliveries: list[tuple[int, dict[str, Any]]]) -> Any:
    offsets = [0, 0]
    data = []
    for row_index, message in deliveries:
        partition = row_index % 2
        data.append(kafka_row(message_format, message, partition, offsets[partition]))
        offsets[partition] += 1
    return spark.createDataFrame(data, KAFKA_SCHEMA)
