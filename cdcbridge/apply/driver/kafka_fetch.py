"""A small micro-batch read on the driver: exactly its Kafka offset ranges, with one long-lived consumer.

The Spark job that reads a batch of a few messages costs most of the batch's time (a job's fixed cost), while
the driver can read the same offsets itself in milliseconds. The ranges are Spark's own plan of the batch
(:mod:`cdcbridge.apply.batch_size`), so the batch holds the same messages on either path. The consumer is
assigned its partitions at the ranges' starts (no group subscription, nothing committed: Spark's checkpoint keeps
the offsets) and reads each to its end; offsets that hold no message (transaction markers, compacted-away
records) are skipped, and a range ends at its last offset, or where the partition or the consumer's position
shows nothing below the end is left. Whatever does not finish within the timeout raises
:class:`KafkaFetchError`, and the batch is read by the Spark job instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

#: How long a single poll waits, so the deadline and the consumer's position are checked between polls.
_POLL_SECONDS = 0.1
#: Settings of the driver's consumer: nothing is committed (the streaming checkpoint keeps the offsets; librdkafka
#: wants a group id all the same), a missing offset is an error rather than a jump (the Spark job then applies
#: ``apply.fail_on_data_loss``), the end of a partition is reported (a range may end in offsets that hold no
#: message), and the isolation level of Spark's source (the Java client's default) unless configured.
CONSUMER_SETTINGS: dict[str, Any] = {
    "group.id": "cdcbridge-apply-driver",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
    "isolation.level": "read_uncommitted",
    "fetch.wait.max.ms": 100,
    "log.connection.close": False,
}


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one Kafka partition, as Spark planned them for a batch."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int


@dataclass(frozen=True, slots=True)
class FetchedMessage:
    """One Kafka message as the driver read it (headers in their order, a header's value may be null)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def header(self, name: str) -> str | None:
        """The first header `name` as text (malformed UTF-8 replaced, as Spark's cast to string does)."""
        for key, value in self.headers:
            if key == name:
                return value.decode("utf-8", errors="replace") if value is not None else None
        return None


class KafkaFetchError(Exception):
    """The driver could not read a batch's ranges (in time): the batch is read by the Spark job instead."""


class KafkaRangeReader:
    """Reads offset ranges on the driver with one consumer, created at the first read and kept for the job.

    `client_config`: connection and security settings (they may set ``group.id`` and ``isolation.level``)."""

    def __init__(
        self,
        client_config: Mapping[str, Any],
        timeout_seconds: float = 10.0,
        consumer_factory: Callable[[dict[str, Any]], Any] = Consumer,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = {**CONSUMER_SETTINGS, **client_config}
        self._timeout = timeout_seconds
        self._factory = consumer_factory
        self._clock = clock
        self._consumer: Any = None

    def read(self, ranges: Sequence[OffsetRange]) -> list[FetchedMessage]:
        """Every message of `ranges`, range by range in offset order; raises :class:`KafkaFetchError` when the
        ranges are not read within the timeout or the consumer reports an error of a partition."""
        pending = {(item.topic, item.partition): item for item in ranges if item.until_offset > item.from_offset}
        if not pending:
            return []
        if self._consumer is None:
            self._consumer = self._factory(dict(self._config))
        consumer = self._consumer
        read: dict[tuple[str, int], list[FetchedMessage]] = {key: [] for key in pending}
        consumer.assign([TopicPartition(topic, partition, item.from_offset) for (topic, partition), item in
                         pending.items()])  # fmt: skip
        try:
            self._read_until_done(consumer, pending, read)
        finally:
            consumer.unassign()
        return [message for item in ranges for message in read.get((item.topic, item.partition), ())]

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()

    def _read_until_done(
        self,
        consumer: Any,
        pending: dict[tuple[str, int], OffsetRange],
        read: dict[tuple[str, int], list[FetchedMessage]],
    ) -> None:
        deadline = self._clock() + self._timeout
        while pending:
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise KafkaFetchError(f"read no end of {_describe(pending.values(), read)} within {self._timeout:g}s")
            message = consumer.poll(min(remaining, _POLL_SECONDS))
            if message is None:
                _settle_by_position(consumer, pending)
                continue
            key = (message.topic(), message.partition())
            item = pending.get(key)
            error = message.error()
            if error is not None:
                _check(error, message, item)
                at_end = error.code() == KafkaError._PARTITION_EOF and item is not None
                if at_end and message.offset() >= item.until_offset:
                    del pending[key]
                continue
            if item is None:
                continue  # a partition already read to its end (or not this batch's)
            offset = message.offset()
            messages = read[key]
            if item.from_offset <= offset < item.until_offset and (not messages or offset > messages[-1].offset):
                messages.append(_fetched(message))
            if offset >= item.until_offset - 1:
                del pending[key]


def _check(error: KafkaError, message: Any, item: OffsetRange | None) -> None:
    """Raise for an error that stops a range from being read; the end of a partition and errors of no partition
    (a broker connection lost and retried by librdkafka) are waited out until the deadline."""
    if error.code() == KafkaError._PARTITION_EOF:
        return
    if error.fatal() or (item is not None and not error.retriable()):
        where = f"{message.topic()}[{message.partition()}]" if message.topic() else "the consumer"
        raise KafkaFetchError(f"{where}: {error.str()}")


def _settle_by_position(consumer: Any, pending: dict[tuple[str, int], OffsetRange]) -> None:
    """Ends the ranges whose partition the consumer has passed the end of without delivering a message there
    (its last offsets hold transaction markers)."""
    positions = consumer.position([TopicPartition(topic, partition) for topic, partition in pending])
    for position in positions:
        key = (position.topic, position.partition)
        item = pending.get(key)
        if item is not None and position.offset >= item.until_offset:
            del pending[key]


def _fetched(message: Any) -> FetchedMessage:
    return FetchedMessage(
        message.topic(),
        message.partition(),
        message.offset(),
        message.key(),
        message.value(),
        tuple(message.headers() or ()),
    )


def _describe(pending: Any, read: Mapping[tuple[str, int], list[FetchedMessage]]) -> str:
    return ", ".join(
        f"{item.topic}[{item.partition}] offsets {item.from_offset}-{item.until_offset - 1} "
        f"({len(read.get((item.topic, item.partition), ()))} read)"
        for item in pending
    )
