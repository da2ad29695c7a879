"""The producing side: an idempotent, acks=all producer that reports each message's fate to a callback.

Checkpoints move only on acknowledgements (at-least-once), so every produce call carries a callback and a
background thread serves librdkafka's delivery reports. Errors reaching a callback are final: with idempotence
librdkafka already retried whatever can be retried.

A message that times out makes the sink replace its librdkafka producer: librdkafka can stay stuck on a partition
whose leader was briefly unknown (confluentinc/librdkafka#5430: after a broker restart it never sends to that
partition again, and every later message times out too). The old producer's messages are purged, so their shards see
the failure and restart from their checkpoints onto the new producer.

The sink also counts what it did (:class:`~cdcbridge.kafka.delivery_stats.DeliveryStats`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import NamedTuple

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from cdcbridge.kafka.delivery_stats import DeliveryStats
from cdcbridge.kafka.errors import KafkaSideError, MessageTooLargeError, ProduceFatalError

#: Producer settings that the bridge's guarantees rest on; user overrides cannot change them.
REQUIRED_PRODUCER_CONFIG = {
    "enable.idempotence": True,
    "acks": "all",
    # Same key → same partition as Java clients (murmur2), so other producers of the topic agree on placement.
    "partitioner": "murmur2_random",
}

DEFAULT_PRODUCER_CONFIG = {
    "linger.ms": 20,
    "batch.num.messages": 10000,
    "batch.size": 1_000_000,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 200_000,
    "queue.buffering.max.kbytes": 512 * 1024,
    # The Java producer's delivery.timeout.ms: how long a stuck partition (see above) holds its shards.
    "message.timeout.ms": 120_000,
}

#: A replaced producer is polled (its messages purged, their failures reported) for at least this long: a thread
#: that picked it up just before the swap may still queue a message on it.
RETIRED_PRODUCER_GRACE_SECONDS = 10.0
#: How the sink's warning begins when it replaces its producer (the chaos checks count these lines).
PRODUCER_REPLACED = "a Kafka message timed out: replaced the producer"


class Delivery(NamedTuple):
    """The fate of one message: error is None when Kafka acknowledged it (a named tuple: one is made per message)."""

    topic: str
    partition: int
    offset: int
    error: KafkaSideError | None


AckCallback = Callable[[Delivery], None]


def producer_config(overrides: Mapping[str, object] | None = None) -> dict[str, object]:
    config: dict[str, object] = {**DEFAULT_PRODUCER_CONFIG, **dict(overrides or {})}
    config.update(REQUIRED_PRODUCER_CONFIG)
    return config


#: librdkafka's own lines of the sink's producer: through Python logging (delivered by the poll thread), so they carry
#: the process's format (text or JSON), pass redaction and never print after the process is done with Kafka.
LIBRDKAFKA_LOGGER = logging.getLogger("cdcbridge.kafka.librdkafka")
log = logging.getLogger(__name__)


def _too_large(topic: str, key: str, size: int) -> MessageTooLargeError:
    return MessageTooLargeError(
        f"message for key {key!r} on topic {topic} is {size} bytes, more than Kafka accepts; raise the topic's "
        "max.message.bytes (and the producer's message.max.bytes, kafka.producer in the config) above it",
        size=size,
    )


#: Errors of messages purged from a replaced producer.
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})


def _classify(error: KafkaError, message: Message) -> KafkaSideError:
    size = len(message.value() or b"") + len(message.key() or b"")
    key = (message.key() or b"").decode("utf-8", "replace")
    if error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return _too_large(message.topic(), key, size)
    if error.code() in _PURGED:
        return ProduceFatalError(
            f"message for key {key!r} on topic {message.topic()} was dropped unacknowledged ({error.name()}): the "
            "Kafka producer was replaced after a message timed out; it is sent again from the last checkpoint"
        )
    return ProduceFatalError(
        f"Kafka refused a message for key {key!r} on topic {message.topic()}: {error.name()} ({error.str()})"
    )


def _report(
    on_ack: AckCallback, stats: DeliveryStats, error: KafkaError | None, message: Message,
    describe: Callable[[KafkaError, Message], KafkaSideError] | None = None,
) -> None:  # fmt: skip
    """librdkafka's delivery callback, bound to the message's own callback with functools.partial; `describe`
    counts and words a failure (the sink's delivery_error), else it is counted here."""
    topic = message.topic()
    if error is None:
        stats.acked(topic, message.latency())
        on_ack(Delivery(topic, message.partition(), message.offset(), None))
        return
    if describe is None:
        stats.failed(topic, error.name())
        failure = _classify(error, message)
    else:
        failure = describe(error, message)
    on_ack(Delivery(topic, message.partition(), message.offset(), failure))


#: librdkafka's own delivery report callback: (KafkaError or None, Message).
RawDeliveryCallback = Callable[[KafkaError | None, Message], None]


class MessageSink:
    """What the bridge processor and the snapshot export need of the Kafka side (KafkaSink satisfies it).

    ``produce`` reports each message's fate as a :class:`Delivery`. The bridge's per-message path uses the leaner
    ``produce_tracked``: librdkafka's report goes straight to the caller's callback, the caller turns a failure into
    our error with ``delivery_error`` and counts produced and acknowledged messages in bulk.
    """

    def produce(
        self, topic: str, key: bytes, value: bytes | None, on_ack: Callable[[Delivery], None],
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None: ...  # fmt: skip

    def produce_tracked(
        self, topic: str, key: bytes, value: bytes | None, on_delivery: RawDeliveryCallback,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None: ...  # fmt: skip

    def delivery_error(self, error: KafkaError, message: Message) -> KafkaSideError: ...

    def count_produced(self, counts: Mapping[str, int]) -> None: ...

    def count_acked(self, counts: Mapping[str, int], latencies: Iterable[float | None]) -> None: ...


class KafkaSink:
    """A confluent-kafka Producer plus a thread that delivers acknowledgements to per-message callbacks.

    ``stats`` counts every message produced, acknowledged or failed (see :class:`DeliveryStats`); ``replacements``
    counts the producers replaced after a message timed out. ``producer_factory`` builds each librdkafka producer
    from its settings (tests pass a fake).
    """

    def __init__(
        self, config: Mapping[str, object], *, stats: DeliveryStats | None = None,
        producer_factory: Callable[[dict[str, object]], Producer] = Producer,
    ) -> None:  # fmt: skip
        self.stats = stats if stats is not None else DeliveryStats()
        self.replacements = 0
        self._settings: dict[str, object] = {**producer_config(config), "logger": LIBRDKAFKA_LOGGER}
        self._message_timeout = float(self._settings["message.timeout.ms"]) / 1000  # type: ignore[arg-type]
        self._factory = producer_factory
        self._producer = producer_factory(self._settings)
        self._producer_since = time.monotonic()
        #: Replaced producers still to drain, with the time they were replaced.
        self._retired: list[tuple[Producer, float]] = []
        self._replace = threading.Event()
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="kafka-delivery", daemon=True)
        self._poller.start()

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.1)
            if self._replace.is_set():
                self._replace_producer()
            if self._retired:
                self._drain_retired()

    def _replace_producer(self) -> None:
        """Swap in a new producer and purge the old one's messages: their callbacks report them failed (their
        shards restart from their checkpoints onto the new producer). Runs on the poll thread."""
        old = self._producer
        self._producer = self._factory(self._settings)
        self._producer_since = time.monotonic()
        self._replace.clear()
        self.replacements += 1
        waiting = len(old)
        old.purge()
        self._retired.append((old, time.monotonic()))
        log.warning(
            "%s (librdkafka can stay stuck on a partition whose leader was briefly unknown); its %d unacknowledged "
            "messages are sent again from their shards' checkpoints",
            PRODUCER_REPLACED, waiting,
        )  # fmt: skip

    def _drain_retired(self) -> None:
        """Serve the replaced producers' reports; drop one once it is empty and its grace period is over."""
        now = time.monotonic()
        kept = []
        for producer, since in self._retired:
            producer.purge()
            producer.poll(0)
            if len(producer) or now - since < RETIRED_PRODUCER_GRACE_SECONDS:
                kept.append((producer, since))
        self._retired = kept

    def produce(
        self, topic: str, key: bytes, value: bytes | None, on_ack: AckCallback,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:  # fmt: skip
        """Queue one message, counted, whose fate reaches `on_ack` as a Delivery (also a refusal before queueing);
        blocks (serving delivery reports) while the local queue is full."""
        try:
            self.produce_tracked(
                topic, key, value, partial(_report, on_ack, self.stats, describe=self.delivery_error), headers
            )
        except MessageTooLargeError as error:
            on_ack(Delivery(topic, -1, -1, error))
            return
        self.stats.produced(topic)

    def produce_tracked(
        self, topic: str, key: bytes, value: bytes | None, on_delivery: RawDeliveryCallback,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:  # fmt: skip
        """Queue one message whose delivery report goes to `on_delivery` unchanged (not counted: see
        count_produced / count_acked). A message librdkafka refuses as too large before queueing it raises
        MessageTooLargeError; blocks (serving delivery reports) while the local queue is full."""
        while True:
            producer = self._producer
            try:
                producer.produce(topic, value, key, on_delivery=on_delivery, headers=headers)
                return
            except BufferError:
                producer.poll(0.05)
            except KafkaException as error:  # librdkafka refuses oversized messages before queueing them
                if error.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                    raise
                self.stats.failed(topic, error.args[0].name())
                raise _too_large(topic, key.decode("utf-8", "replace"), len(value or b"") + len(key)) from None

    def delivery_error(self, error: KafkaError, message: Message) -> KafkaSideError:
        """A failed delivery report in our words (and counted). A timeout asks for a new producer, unless the
        current one is younger than the message timeout (then the message was the replaced producer's)."""
        self.stats.failed(message.topic(), error.name())
        if (
            error.code() == KafkaError._MSG_TIMED_OUT
            and time.monotonic() - self._producer_since >= self._message_timeout
        ):
            self._replace.set()
        return _classify(error, message)

    def count_produced(self, counts: Mapping[str, int]) -> None:
        self.stats.produced_many(counts)

    def count_acked(self, counts: Mapping[str, int], latencies: Iterable[float | None]) -> None:
        self.stats.acked_many(counts, latencies)

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for outstanding messages; return how many are still in flight after `timeout`."""
        deadline = time.monotonic() + timeout
        remaining = self.in_flight()
        while remaining and time.monotonic() < deadline:
            self._producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
            remaining = self.in_flight()
        return remaining

    def in_flight(self) -> int:
        """Messages not yet reported, including a replaced producer's purged ones the poll thread has yet to serve."""
        return len(self._producer) + sum(len(producer) for producer, _ in list(self._retired))

    def close(self, timeout: float = 30.0) -> int:
        remaining = self.flush(timeout)
        self._stop.set()
        self._poller.join(timeout=5)
        return remaining
