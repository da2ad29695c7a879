"""Shared helpers of the bridge integration tests: source tables in the emulator, configs, reading topics back."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from tablestore import CapacityUnit, OTSClient, ReservedThroughput, TableMeta, TableOptions

from cdcbridge.bridge.app import run_bridge
from cdcbridge.config import BridgeConfig, parse_config
from cdcbridge.harness.recording_worker import FAST_TIMINGS
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.tablestore import StreamClient, build_ots_client

ACCESS_KEY_ID = "emulator-id"
ACCESS_KEY_SECRET = "emulator-secret"
INSTANCE = "cdcbridge"

#: The harness's short lease timings (multi-worker tests converge in seconds; the defaults are 20 s leases), with
#: a quicker idle poll and an earlier no-progress abort for in-process workers.
FAST_COORDINATION = {**FAST_TIMINGS, "no_progress_abort_seconds": 20.0, "idle_fetch_interval_seconds": 0.1}


def ots_client(emulator_url: str) -> OTSClient:
    return build_ots_client(emulator_url, INSTANCE, ACCESS_KEY_ID, ACCESS_KEY_SECRET)


def create_stream_table(ots: OTSClient, name: str, primary_key: list[tuple[str, str]], max_version: int = 1) -> str:
    streams = StreamClient(ots)
    streams.create_table_with_stream(
        TableMeta(name, primary_key), TableOptions(time_to_live=-1, max_version=max_version),
        ReservedThroughput(CapacityUnit(0, 0)), 24,
    )  # fmt: skip
    return streams.describe_table_stream(name).stream_id


def bridge_config(
    stack: StackEndpoints, emulator_url: str, tables: list[dict[str, Any]], *, prefix: str | None = None,
    status_table: str | None = None, coordination: dict[str, Any] | None = None,
) -> BridgeConfig:  # fmt: skip
    suffix = uuid.uuid4().hex[:8]
    return parse_config(
        {
            "source": {"endpoint": emulator_url, "instance": INSTANCE, "tables": tables},
            "coordination": {
                **FAST_COORDINATION,
                "status_table": status_table or f"status_{suffix}",
                **(coordination or {}),
            },
            "kafka": {
                "bootstrap_servers": stack.kafka_bootstrap,
                "topic_prefix": prefix or f"t{suffix}",
                "schema_registry": {"url": stack.registry_url},
            },
        },
        environ={},
    )


@dataclass
class BridgeThread:
    """A bridge worker running in this process (multi-process tests use `cdcbridge run` instead)."""

    config: BridgeConfig
    worker_id: str = "worker-1"
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def start(self) -> BridgeThread:
        def target() -> None:
            try:
                run_bridge(self.config, self.worker_id, self.stop)
            except BaseException as error:
                self.error = error

        self.thread = threading.Thread(target=target, name=f"bridge-{self.worker_id}", daemon=True)
        self.thread.start()
        return self

    def close(self, timeout: float = 60) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout)
            assert not self.thread.is_alive(), "the bridge did not stop within its drain timeout"
        if self.error is not None:
            raise self.error


@dataclass
class ReadMessage:
    topic: str
    partition: int
    offset: int
    key: bytes
    value: dict[str, Any] | None
    headers: dict[str, bytes]


def read_topic(
    stack: StackEndpoints, topic: str, *, until: Callable[[list[ReadMessage]], bool], timeout: float = 60
) -> list[ReadMessage]:
    """Every message of `topic` from the beginning, decoded, once `until(messages)` holds (or fail at timeout)."""
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": stack.registry_url, "timeout": 10}))
    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": f"read-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:  # the bridge creates its topics when it starts: wait until this one exists
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        if metadata.error is None and metadata.partitions:
            break
        assert time.monotonic() < deadline, f"topic {topic} was never created"
        time.sleep(0.2)
    consumer.assign([TopicPartition(topic, p, 0) for p in metadata.partitions])
    messages: list[ReadMessage] = []
    context = SerializationContext(topic, MessageField.VALUE)
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if until(messages):
                    return messages
                continue
            assert msg.error() is None, msg.error()
            value = None if msg.value() is None else deserializer(msg.value(), context)
            messages.append(ReadMessage(msg.topic(), msg.partition(), msg.offset(), msg.key(), value,
                                        dict(msg.headers() or [])))  # fmt: skip
        raise AssertionError(f"timed out reading {topic}: {len(messages)} messages so far")
    finally:
        consumer.close()
