"""Reads a whole MUTATE_LOG topic back, from offset 0 to each partition's end, as :class:`KafkaMessage` items.

Values are decoded with our own envelope schema (the one the bridge registers), so reading needs no registry call;
the Confluent framing is checked.
"""

from __future__ import annotations

import io
import time
import uuid

import fastavro
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from cdcbridge.chaos.checks import KafkaMessage
from cdcbridge.chaos.errors import ChaosError
from cdcbridge.formats.schemas import parsed_schema
from cdcbridge.formats.table_format import MessageFormat

_FRAMING = 5  # magic byte + schema id


def read_mutation_topic(bootstrap: str, topic: str, *, timeout: float = 300.0) -> list[KafkaMessage]:
    """Every message of `topic` up to the end offsets seen when the call starts."""
    schema = parsed_schema(MessageFormat.MUTATE_LOG)
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
        messages: list[KafkaMessage] = []
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise ChaosError(f"reading {topic} took more than {timeout:.0f}s ({len(messages)} messages so far)")
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is not None:
                    raise ChaosError(f"reading {topic}: {msg.error()}")
                partition, offset = msg.partition(), msg.offset()
                if offset >= ends[partition]:
                    remaining.discard(partition)
                    continue
                raw = msg.value()
                if raw is None or raw[:1] != b"\x00":
                    raise ChaosError(f"{topic}[{partition}]@{offset} is not a Confluent-framed Avro value")
                value = fastavro.schemaless_reader(io.BytesIO(raw[_FRAMING:]), schema, return_named_type=False)
                messages.append(KafkaMessage(partition, offset, msg.key(), value["seq"]["seq_key"]))
                if offset + 1 >= ends[partition]:
                    remaining.discard(partition)
        return messages
    finally:
        consumer.close()
