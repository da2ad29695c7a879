"""Fakes of the snapshot's surroundings: a source table and status table (the coordination tests' FakeOTSClient),
a Kafka sink whose acknowledgements the test controls, and serializers that keep the Avro value readable."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tablestore import INF_MAX, INF_MIN

from cdcbridge.contract import MessageFormat
from cdcbridge.formats.table_format import BridgeTableFormat
from cdcbridge.kafka.errors import ProduceFatalError
from cdcbridge.kafka.sink import Delivery
from cdcbridge.snapshot.export import Publisher
from cdcbridge.snapshot.state import RangeProgress
from tests.unit.coordination.fake_ots import FakeOTSClient

SOURCE = "orders"
STATUS = "status"
STREAM = "stream-1"
FULL_RANGE = RangeProgress(0, [("id", INF_MIN)], [("id", INF_MAX)], [("id", INF_MIN)])


def source_with_rows(rows: int, *, page_size: int = 4) -> FakeOTSClient:
    client = FakeOTSClient(page_size=page_size)
    client.tables[SOURCE] = {(i,): {"v": f"value-{i}", "n": i} for i in range(rows)}
    client.schemas[SOURCE] = [("id", "INTEGER")]
    client.tables[STATUS] = {}
    client.schemas[STATUS] = [("StreamId", "STRING"), ("StatusType", "STRING"), ("StatusValue", "STRING")]
    return client


class _Message:
    """What a delivery report handler reads of librdkafka's Message."""

    def __init__(self, topic: str) -> None:
        self._topic = topic

    def topic(self) -> str:
        return self._topic

    def latency(self) -> float | None:
        return 0.001


class FakeSink:
    """Records every message; `ack_when(message_index)` decides which are acknowledged at once, `fail_when` which
    are refused at once (the rest stay in flight)."""

    def __init__(
        self,
        ack_when: Callable[[int], bool] = lambda index: True,
        on_produce: Callable[[int], None] | None = None,
        fail_when: Callable[[int], bool] = lambda index: False,
    ) -> None:
        self.messages: list[tuple[str, bytes, Any]] = []
        self.callbacks: list[Callable[[Delivery], None]] = []
        self._ack_when = ack_when
        self._fail_when = fail_when
        self._on_produce = on_produce
        self._lock = threading.Lock()

    def produce(self, topic: str, key: bytes, value: Any, on_ack: Callable[[Delivery], None], headers=None) -> None:
        with self._lock:
            index = len(self.messages)
            self.messages.append((topic, key, value))
            self.callbacks.append(on_ack)
        if self._on_produce is not None:
            self._on_produce(index)
        if self._fail_when(index):
            on_ack(Delivery(topic, 0, index, ProduceFatalError(f"message {index} refused by the broker")))
        elif self._ack_when(index):
            on_ack(Delivery(topic, 0, index, None))

    def produce_tracked(self, topic: str, key: bytes, value: Any, on_delivery: Callable, headers=None) -> None:
        """The bridge processor's path: librdkafka-style reports, given here as Delivery like produce's."""
        self.produce(topic, key, value, lambda delivery: on_delivery(delivery.error, _Message(delivery.topic)), headers)

    def delivery_error(self, error: Any, message: Any) -> Any:
        return error  # already our error: produce_tracked hands Delivery.error through

    def count_produced(self, counts: Any) -> None:
        pass

    def count_acked(self, counts: Any, latencies: Any) -> None:
        pass

    def keys(self, topic_suffix: str) -> list[bytes]:
        return [key for topic, key, _ in self.messages if topic.endswith(topic_suffix)]

    def values(self, topic_suffix: str) -> list[Any]:
        return [value for topic, _, value in self.messages if topic.endswith(topic_suffix)]


def publisher(sink: FakeSink) -> Publisher:
    table_format = BridgeTableFormat(formats=(MessageFormat.RECORD_IMAGE, MessageFormat.MUTATE_LOG))
    return Publisher(
        table=SOURCE, instance="inst", table_format=table_format, topic_prefix="cdc",
        topics=table_format.topics(prefix="cdc", table=SOURCE), serialize=lambda topic, value: value, sink=sink,
    )  # fmt: skip
