"""The producing side: an idempotent, acks=all producer that reports each message's fate to a callback.

Checkpoints move only on acknowledgements (at-least-once), so every produce call carries a callback and a
background thread serves librdkafka's delivery reports. Errors reaching a callback are final: with idempotence
librdkafka already retried whatever can be retried.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import NamedTuple

from confluent_kafka import KafkaError, KafkaException, Message, Producer

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
    "message.timeout.ms": 300_000,
}


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


def _too_large(topic: str, key: str, size: int) -> MessageTooLargeError:
    return MessageTooLargeError(
        f"message for key {key!r} on topic {topic} is {size} bytes, more than Kafka accepts; raise the topic's "
        "max.message.bytes (and the producer's message.max.bytes, kafka.producer in the config) above it",
        size=size,
    )


def _classify(error: KafkaError, message: Message) -> KafkaSideError:
    size = len(message.value() or b"") + len(message.key() or b"")
    key = (message.key() or b"").decode("utf-8", "replace")
    if error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return _too_large(message.topic(), key, size)
    return ProduceFatalError(
        f"Kafka refused a message for key {key!r} on topic {message.topic()}: {error.name()} ({error.str()})"
    )


def _report(on_ack: AckCallback, error: KafkaError | None, message: Message) -> None:
    """librdkafka's delivery callback, bound to the message's own callback with functools.partial."""
    failure = None if error is None else _classify(error, message)
    on_ack(Delivery(message.topic(), message.partition(), message.offset(), failure))


class KafkaSink:
    """A confluent-kafka Producer plus a thread that delivers acknowledgements to per-message callbacks."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self._producer = Producer(producer_config(config))
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="kafka-delivery", daemon=True)
        self._poller.start()

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.1)

    def produce(
        self, topic: str, key: bytes, value: bytes | None, on_ack: AckCallback,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:  # fmt: skip
        """Queue one message; blocks (serving delivery reports) while the local queue is full."""
        report = partial(_report, on_ack)
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=report, headers=headers)
                return
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as error:  # librdkafka refuses oversized messages before queueing them
                if error.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                    raise
                size = len(value or b"") + len(key)
                on_ack(Delivery(topic, -1, -1, _too_large(topic, key.decode("utf-8", "replace"), size)))
                return

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for outstanding messages; return how many are still in flight after `timeout`."""
        deadline = time.monotonic() + timeout
        remaining = len(self._producer)
        while remaining and time.monotonic() < deadline:
            remaining = self._producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
        return remaining

    def in_flight(self) -> int:
        return len(self._producer)

    def close(self, timeout: float = 30.0) -> int:
        remaining = self.flush(timeout)
        self._stop.set()
        self._poller.join(timeout=5)
        return remaining
