"""The driver's reader of a small batch's offset ranges, against a scripted consumer: exactly [from, until) per
partition, offsets that hold no message skipped, the end told by the partition's end or the consumer's position,
and a read that does not finish (or a partition error) raising so the batch goes to the Spark job."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from cdcbridge.apply.driver.kafka_fetch import FetchedMessage, KafkaFetchError, KafkaRangeReader, OffsetRange


class FakeMessage:
    def __init__(self, topic: str | None, partition: int, offset: int, value: bytes | None = None,
                 error: KafkaError | None = None, headers: list | None = None) -> None:  # fmt: skip
        self._topic, self._partition, self._offset = topic, partition, offset
        self._value, self._error, self._headers = value, error, headers

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return f"k{self._offset}".encode()

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list | None:
        return self._headers


class FakeConsumer:
    """Delivers each assigned partition's messages from its start offset, then (with `eof`) the partition's end.
    `logs`: (topic, partition) → offsets that hold a message; `ends`: the partition's end offset;
    `stale`: messages delivered first after an assign (left over from an earlier fetch)."""

    def __init__(self, logs: dict, ends: dict, clock: list[float], *, eof: bool = True,
                 positions: dict | None = None, stale: tuple = (), errors: tuple = ()) -> None:  # fmt: skip
        self.logs, self.ends, self.clock, self.eof = logs, ends, clock, eof
        self.forced_positions = positions or {}
        self.stale, self.errors = stale, errors
        self.queue: list[FakeMessage] = []
        self.positions: dict[tuple[str, int], int] = {}
        self.assignments: list[list[tuple[str, int, int]]] = []
        self.unassigned = 0
        self.closed = False

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assignments.append([(tp.topic, tp.partition, tp.offset) for tp in partitions])
        self.queue = [*self.stale, *self.errors]
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self.positions[key] = tp.offset
            for offset in sorted(o for o in self.logs.get(key, ()) if o >= tp.offset):
                self.queue.append(FakeMessage(tp.topic, tp.partition, offset, f"v{offset}".encode(),
                                              headers=[("h", b"x")]))  # fmt: skip
            if self.eof and key in self.ends:
                eof = KafkaError(KafkaError._PARTITION_EOF)
                self.queue.append(FakeMessage(tp.topic, tp.partition, self.ends[key], error=eof))

    def poll(self, timeout: float) -> FakeMessage | None:
        if not self.queue:
            self.clock[0] += timeout
            self.positions.update(self.forced_positions)
            return None
        message = self.queue.pop(0)
        if message.error() is None:
            self.positions[(message.topic(), message.partition())] = message.offset() + 1
        return message

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), -1001))
                for tp in partitions]  # fmt: skip

    def unassign(self) -> None:
        self.unassigned += 1

    def close(self) -> None:
        self.closed = True


def reader_of(consumer: FakeConsumer, clock: list[float], created: list[dict] | None = None) -> KafkaRangeReader:
    def factory(config: dict[str, Any]) -> FakeConsumer:
        if created is not None:
            created.append(config)
        return consumer

    return KafkaRangeReader({"bootstrap.servers": "b:9092", "group.id": "app-driver"}, timeout_seconds=2.0,
                            consumer_factory=factory, clock=lambda: clock[0])  # fmt: skip


def offsets(messages: list[FetchedMessage]) -> list[tuple[str, int, int]]:
    return [(m.topic, m.partition, m.offset) for m in messages]


def test_exactly_the_ranges_are_read_in_range_order_with_one_consumer_for_every_batch() -> None:
    clock = [0.0]
    consumer = FakeConsumer({("a", 0): range(10), ("b", 1): range(5)}, {("a", 0): 10, ("b", 1): 5}, clock)
    created: list[dict] = []
    reader = reader_of(consumer, clock, created)
    first = reader.read([OffsetRange("b", 1, 1, 3), OffsetRange("a", 0, 3, 7), OffsetRange("a", 1, 4, 4)])
    assert offsets(first) == [("b", 1, 1), ("b", 1, 2), ("a", 0, 3), ("a", 0, 4), ("a", 0, 5), ("a", 0, 6)]
    assert first[0] == FetchedMessage("b", 1, 1, b"k1", b"v1", (("h", b"x"),))
    assert consumer.assignments == [[("b", 1, 1), ("a", 0, 3)]]  # an empty range is not assigned
    second = reader.read([OffsetRange("a", 0, 7, 10)])
    assert offsets(second) == [("a", 0, 7), ("a", 0, 8), ("a", 0, 9)]
    assert len(created) == 1 and consumer.unassigned == 2 and clock[0] == 0.0  # no poll waited
    config = created[0]
    assert config["group.id"] == "app-driver" and config["bootstrap.servers"] == "b:9092"
    assert config["enable.auto.commit"] is False and config["auto.offset.reset"] == "error"
    assert config["isolation.level"] == "read_uncommitted"
    assert reader.read([]) == [] and len(consumer.assignments) == 2
    reader.close()
    assert consumer.closed


def test_offsets_without_a_message_are_skipped_and_the_partition_end_closes_a_range() -> None:
    """Offset 5 compacted away, 7 a transaction marker at the range's end: the end of the partition (8) says
    nothing is left."""
    clock = [0.0]
    consumer = FakeConsumer({("a", 0): [3, 4, 6]}, {("a", 0): 8}, clock)
    assert offsets(reader_of(consumer, clock).read([OffsetRange("a", 0, 3, 8)])) == [("a", 0, 3), ("a", 0, 4),
                                                                                       ("a", 0, 6)]  # fmt: skip
    assert clock[0] == 0.0


def test_without_an_end_of_partition_the_consumers_position_closes_a_range() -> None:
    clock = [0.0]
    consumer = FakeConsumer({("a", 0): [3, 4]}, {}, clock, eof=False, positions={("a", 0): 6})
    assert offsets(reader_of(consumer, clock).read([OffsetRange("a", 0, 3, 6)])) == [("a", 0, 3), ("a", 0, 4)]
    assert 0 < clock[0] < 1


def test_a_message_beyond_the_range_closes_it_and_stale_or_repeated_ones_are_ignored() -> None:
    clock = [0.0]
    stale = (FakeMessage("a", 0, 1, b"old"), FakeMessage("c", 0, 9, b"other"))
    consumer = FakeConsumer({("a", 0): [2, 2, 5]}, {}, clock, eof=False, stale=stale)
    read = reader_of(consumer, clock).read([OffsetRange("a", 0, 2, 4)])
    assert offsets(read) == [("a", 0, 2)]


def test_a_range_not_read_in_time_raises_naming_what_is_missing() -> None:
    clock = [0.0]
    consumer = FakeConsumer({("a", 0): [3, 4]}, {("a", 0): 5}, clock)  # the broker holds less than Spark planned
    with pytest.raises(KafkaFetchError, match=r"a\[0\] offsets 3-6 \(2 read\) within 2s"):
        reader_of(consumer, clock).read([OffsetRange("a", 0, 3, 7)])
    assert clock[0] >= 2.0 and consumer.unassigned == 1


def test_a_partition_error_raises_and_an_error_of_no_partition_is_waited_out() -> None:
    clock = [0.0]
    lost = FakeMessage(None, -1, -1001, error=KafkaError(KafkaError._TRANSPORT))
    consumer = FakeConsumer({("a", 0): [0, 1]}, {("a", 0): 2}, clock, errors=(lost,))
    assert offsets(reader_of(consumer, clock).read([OffsetRange("a", 0, 0, 2)])) == [("a", 0, 0), ("a", 0, 1)]
    gone = FakeMessage("a", 0, 0, error=KafkaError(KafkaError._AUTO_OFFSET_RESET))
    consumer = FakeConsumer({("a", 0): [0, 1]}, {("a", 0): 2}, clock, errors=(gone,))
    with pytest.raises(KafkaFetchError, match=r"a\[0\]: .*offset"):
        reader_of(consumer, clock).read([OffsetRange("a", 0, 0, 2)])
