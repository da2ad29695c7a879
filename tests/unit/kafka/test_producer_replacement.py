"""A message that times out makes the sink replace its producer: librdkafka can stay stuck on a partition after its
leader was briefly unknown (confluentinc/librdkafka#5430), so every message to it would time out for good."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, Message

from cdcbridge.kafka.errors import ProduceFatalError
from cdcbridge.kafka.sink import Delivery, KafkaSink

RawCallback = Callable[[KafkaError | None, Message], None]


class FakeProducer:
    """Queues messages until the test acknowledges or times them out; purge reports them as librdkafka does."""

    def __init__(self, settings: dict[str, object]) -> None:
        self.settings = settings
        self.purges = 0
        self._queued: list[tuple[str, bytes, RawCallback]] = []
        self._reports: list[tuple[RawCallback, KafkaError | None, Message]] = []
        self._lock = threading.Lock()

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: RawCallback, headers: object = None) -> None:
        with self._lock:
            self._queued.append((topic, key, on_delivery))

    def _fail(self, code: int, keys: set[bytes] | None = None) -> None:
        """Report the queued messages of `keys` (None: all) as failed with `code`."""
        with self._lock:
            kept = []
            for topic, key, callback in self._queued:
                if keys is not None and key not in keys:
                    kept.append((topic, key, callback))
                    continue
                message = Message(topic=topic, partition=1, offset=-1, key=key, value=b"v", error=KafkaError(code))
                self._reports.append((callback, KafkaError(code), message))
            self._queued = kept

    def time_out(self, keys: set[bytes] | None = None) -> None:
        self._fail(KafkaError._MSG_TIMED_OUT, keys)

    def acknowledge_all(self) -> None:
        with self._lock:
            for topic, key, callback in self._queued:
                self._reports.append((callback, None, Message(topic=topic, partition=1, offset=5, key=key, value=b"v")))
            self._queued = []

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self.purges += 1
        self._fail(KafkaError._PURGE_QUEUE)

    def poll(self, timeout: float = 0) -> int:
        with self._lock:
            reports, self._reports = self._reports, []
        for callback, error, message in reports:
            callback(error, message)
        if not reports and timeout:
            time.sleep(min(timeout, 0.005))
        return len(reports)

    def flush(self, timeout: float = 0) -> int:
        self.poll(0)
        return len(self)

    def __len__(self) -> int:
        with self._lock:
            return len(self._queued) + len(self._reports)


class Factory:
    def __init__(self) -> None:
        self.made: list[FakeProducer] = []

    def __call__(self, settings: dict[str, object]) -> FakeProducer:
        self.made.append(FakeProducer(settings))
        return self.made[-1]


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_timed_out_message_replaces_the_producer_and_the_old_ones_messages_fail_in_our_words() -> None:
    factory = Factory()
    sink = KafkaSink({"message.timeout.ms": 50}, producer_factory=factory)  # type: ignore[arg-type]
    seen: list[Delivery] = []
    try:
        time.sleep(0.06)  # the producer is older than the message timeout: its timeouts are its own
        for key in (b"k1", b"k2", b"k3"):
            sink.produce("cdc.t.image", key, b"v", seen.append)
        first = factory.made[0]
        first.time_out({b"k1", b"k2"})  # k3 is still waiting when the producer is replaced
        _wait(lambda: sink.replacements == 1 and len(seen) == 3, "the replacement and three reports")
        sink.produce("cdc.t.image", b"k4", b"v", seen.append)
        second = factory.made[1]
        second.acknowledge_all()
        _wait(lambda: len(seen) == 4, "k4's ack")
        assert sink.flush(timeout=1) == 0
    finally:
        sink.close(timeout=1)
    assert len(factory.made) == 2 and first.purges >= 1
    assert second.settings == first.settings
    assert seen[-1] == Delivery("cdc.t.image", 1, 5, None)  # k4 went to the new producer and was acknowledged
    failed = [d.error for d in seen[:3]]
    assert all(isinstance(error, ProduceFatalError) for error in failed), seen
    assert ["_MSG_TIMED_OUT" in str(error) for error in failed] == [True, True, False]
    assert (
        "key 'k3' on topic cdc.t.image was dropped unacknowledged (_PURGE_QUEUE): the Kafka producer was "
        "replaced after a message timed out" in str(failed[2])
    )
    counts = sink.stats.snapshot()
    assert counts.failed == {("cdc.t.image", "_MSG_TIMED_OUT"): 2, ("cdc.t.image", "_PURGE_QUEUE"): 1}
    assert counts.acked == {"cdc.t.image": 1}


def test_a_timeout_reported_while_the_producer_is_younger_than_the_message_timeout_replaces_nothing() -> None:
    """Such a timeout belongs to a replaced producer's message: a second replacement would only purge good ones."""
    factory = Factory()
    sink = KafkaSink({"message.timeout.ms": 60_000}, producer_factory=factory)  # type: ignore[arg-type]
    seen: list[Delivery] = []
    try:
        sink.produce("cdc.t.image", b"k1", b"v", seen.append)
        factory.made[0].time_out()
        _wait(lambda: len(seen) == 1, "the timeout's report")
        time.sleep(0.05)
    finally:
        sink.close(timeout=1)
    assert "_MSG_TIMED_OUT" in str(seen[0].error)
    assert sink.replacements == 0 and len(factory.made) == 1


def test_produce_tracked_failures_go_through_delivery_error_and_replace_the_producer_too() -> None:
    """The bridge's per-message path: the raw report reaches the caller, which words it with delivery_error."""
    factory = Factory()
    sink = KafkaSink({"message.timeout.ms": 20}, producer_factory=factory)  # type: ignore[arg-type]
    errors: list[Exception] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(sink.delivery_error(error, message))

    try:
        time.sleep(0.03)
        sink.produce_tracked("cdc.t.mutation", b"k1", b"v", on_delivery)
        factory.made[0].time_out()
        _wait(lambda: sink.replacements == 1, "the replacement")
        sink.produce_tracked("cdc.t.mutation", b"k2", b"v", on_delivery)
        assert len(factory.made[1]) == 1 and len(factory.made[0]) == 0
    finally:
        sink.close(timeout=1)
    assert [type(e) for e in errors] == [ProduceFatalError]


def test_a_real_producer_whose_messages_time_out_is_replaced_and_every_message_is_reported() -> None:
    """librdkafka itself (no broker listens on port 9): the timeout, the replacement, and a close that leaves no
    message unreported."""
    sink = KafkaSink({"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 300, "log_level": 0})
    seen: list[Delivery] = []
    try:
        time.sleep(0.35)
        sink.produce("cdc.t.image", b"k1", b"v", seen.append)
        _wait(lambda: sink.replacements == 1, "the replacement")
        sink.produce("cdc.t.image", b"k2", b"v", seen.append)
        assert sink.in_flight() >= 1
    finally:
        remaining = sink.close(timeout=30)
    assert "_MSG_TIMED_OUT" in str(seen[0].error)
    assert remaining == 0 and len(seen) == 2, seen  # k2 timed out on the new producer within the close's wait
