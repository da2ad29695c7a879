"""What the tests observe of bridge worker processes (started with `cdcbridge.harness.processes.BridgeWorkerProcess`):
their configuration, the lease rows they write, the messages and Kafka offsets they leave behind."""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import fastavro
import yaml
from confluent_kafka import Consumer, TopicPartition
from tablestore import OTSClient

from cdcbridge.contract import MessageFormat
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore
from cdcbridge.formats.schemas import parsed_schema
from cdcbridge.harness.stack.stack import StackEndpoints
from tests.integration.bridge_helpers import (
    ACCESS_KEY_ID,
    ACCESS_KEY_SECRET,
    FAST_COORDINATION,
    INSTANCE,
    ReadMessage,
)

T = TypeVar("T")
CHECKOUT = Path(__file__).resolve().parents[3]


def write_config(
    path: Path, stack: StackEndpoints, emulator_url: str, tables: list[dict[str, Any]], *,
    registry_url: str | None = None, coordination: dict[str, Any] | None = None,
    producer: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Write a `cdcbridge run` YAML config with fresh topic prefix and status table; returns the data written."""
    suffix = uuid.uuid4().hex[:8]
    data = {
        "source": {
            "endpoint": emulator_url, "instance": INSTANCE, "access_key_id": ACCESS_KEY_ID,
            "access_key_secret": ACCESS_KEY_SECRET, "tables": tables,
        },
        "coordination": {**FAST_COORDINATION, "status_table": f"status_{suffix}", **(coordination or {})},
        "kafka": {
            "bootstrap_servers": stack.kafka_bootstrap, "topic_prefix": f"p{suffix}",
            "schema_registry": {"url": registry_url or stack.registry_url}, "producer": producer or {},
        },
        "observability": {"log_level": "INFO"},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(data))
    return data


def wait_until(probe: Callable[[], T | None], timeout: float, what: str, context: Callable[[], str] | None = None) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` (and `context()`) after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            detail = f"\n{context()[-4000:]}" if context is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(0.2)


def leases(ots: OTSClient, status_table: str, stream_id: str) -> list[Lease]:
    """The lease rows of a stream as the workers left them (empty if the status table does not exist yet)."""
    if status_table not in ots.list_table():
        return []
    return TablestoreLeaseStore(ots, status_table).list_leases(stream_id)


def read_messages(
    stack: StackEndpoints, topic: str, *, until: Callable[[list[ReadMessage]], bool], timeout: float = 120
) -> list[ReadMessage]:
    """Every message of `topic` from the beginning once `until(messages)` holds (or fail at timeout).

    Values are decoded with our own schema (the registered one): reading needs no registry call, so a slow or
    stuck registry cannot hang the test. Tombstones stay None; the Confluent framing is checked.
    """
    schema = parsed_schema(MessageFormat.RECORD_IMAGE if topic.endswith(".image") else MessageFormat.MUTATE_LOG)
    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": f"read-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        messages: list[ReadMessage] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if until(messages):
                    return messages
                continue
            assert msg.error() is None, msg.error()
            raw = msg.value()
            value = None
            if raw is not None:
                assert raw[:1] == b"\x00", f"not Confluent-framed: {raw[:8]!r}"
                value = fastavro.schemaless_reader(io.BytesIO(raw[5:]), schema, return_named_type=False)
            messages.append(ReadMessage(msg.topic(), msg.partition(), msg.offset(), msg.key(), value,
                                        dict(msg.headers() or [])))  # fmt: skip
        raise AssertionError(f"timed out reading {topic}: {len(messages)} messages so far")
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition → next offset (high watermark) of `topic`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"offsets-{uuid.uuid4().hex}"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in metadata.partitions
        }
    finally:
        consumer.close()
