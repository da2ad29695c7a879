"""Reads a whole topic of the bridge back, from offset 0 to each partition's end: the MUTATE_LOG topic as
:class:`KafkaMessage` items, the RECORD_IMAGE topic as :class:`ImageMessage` items (tombstones included).

Values are decoded with our own envelope schemas (the ones the bridge registers), so reading needs no registry
call; the Confluent framing is checked.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import fastavro
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from cdcbridge.apply.driver.framing import HEADER_BYTES
from cdcbridge.contract import TOMBSTONE_SEQ_KEY_HEADER, MessageFormat
from cdcbridge.formats.schemas import parsed_schema
from cdcbridge.harness.chaos.checks import ImageMessage, KafkaMessage
from cdcbridge.harness.chaos.errors import ChaosError
from cdcbridge.snapshot.export import SNAPSHOT_SHARD_ID as SNAPSHOT_SHARD

Item = TypeVar("Item")


def read_mutation_topic(bootstrap: str, topic: str, *, timeout: float = 300.0) -> list[KafkaMessage]:
    """Every message of the MUTATE_LOG `topic` up to the end offsets seen when the call starts."""
    schema = parsed_schema(MessageFormat.MUTATE_LOG)

    def item(msg: Message) -> KafkaMessage:
        value = _decoded(msg, schema, topic)
        return KafkaMessage(msg.partition(), msg.offset(), msg.key(), value["seq"]["seq_key"],
                            value["source"]["shard_id"] == SNAPSHOT_SHARD)  # fmt: skip

    return _read_topic(bootstrap, topic, item, timeout)


def read_image_topic(bootstrap: str, topic: str, *, timeout: float = 300.0) -> list[ImageMessage]:
    """Every message of the RECORD_IMAGE `topic` up to the end offsets seen when the call starts; a null value is
    a tombstone, placed by its seq-key header (TOMBSTONE_SEQ_KEY_HEADER)."""
    schema = parsed_schema(MessageFormat.RECORD_IMAGE)

    def item(msg: Message) -> ImageMessage:
        if msg.value() is None:
            headers = dict(msg.headers() or [])
            seq_key = headers.get(TOMBSTONE_SEQ_KEY_HEADER)
            text = seq_key.decode(errors="replace") if seq_key is not None else ""
            return ImageMessage(msg.partition(), msg.offset(), msg.key(), text, tombstone=True)
        value = _decoded(msg, schema, topic)
        return ImageMessage(
            msg.partition(), msg.offset(), msg.key(), value["seq"]["seq_key"], row_deleted=value["row_deleted"],
            partial=value["partial"], columns={name: cell["value"] for name, cell in value["columns"].items()},
            snapshot=value["source"]["shard_id"] == SNAPSHOT_SHARD,
        )  # fmt: skip

    return _read_topic(bootstrap, topic, item, timeout)


def _decoded(msg: Message, schema: Any, topic: str) -> dict[str, Any]:
    raw = msg.value()
    if raw is None or raw[:1] != b"\x00":
        raise ChaosError(f"{topic}[{msg.partition()}]@{msg.offset()} is not a Confluent-framed Avro value")
    return fastavro.schemaless_reader(io.BytesIO(raw[HEADER_BYTES:]), schema, return_named_type=False)


def _read_topic(bootstrap: str, topic: str, item: Callable[[Message], Item], timeout: float) -> list[Item]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"chaos-read-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "fetch.max.bytes": 50 * 1024 * 1024,
    })  # fmt: skip
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        if metadata.error is not None:
            raise ChaosError(f"cannot read topic {topic}: {metadata.error}")
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in metadata.partitions
        }
        remaining = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in remaining])
        items: list[Item] = []
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise ChaosError(f"reading {topic} took more than {timeout:.0f}s ({len(items)} messages so far)")
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is not None:
                    raise ChaosError(f"reading {topic}: {msg.error()}")
                partition, offset = msg.partition(), msg.offset()
                if offset >= ends[partition]:
                    remaining.discard(partition)
                    continue
                items.append(item(msg))
                if offset + 1 >= ends[partition]:
                    remaining.discard(partition)
        return items
    finally:
        consumer.close()
