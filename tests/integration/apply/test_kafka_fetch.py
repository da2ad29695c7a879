"""The driver's range reader against real Kafka: a range that ends in a transaction marker (an offset that holds
no message) ends at once, aborted messages are read as Spark's default isolation (read_uncommitted) reads them, one
consumer serves batch after batch, and a range Kafka does not hold (yet) raises after the timeout."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer

from cdcbridge.apply.driver.kafka_fetch import KafkaFetchError, KafkaRangeReader, OffsetRange
from cdcbridge.harness.bench.apply_workload import ensure_topics


def _transactions(bootstrap: str, topic: str) -> None:
    """Offsets 0-2 committed (marker at 3), 4-5 aborted (marker at 6), 7 committed (marker at 8)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    for values, commit in (([b"a", b"b", b"c"], True), ([b"x", b"y"], False), ([b"d"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, key=value, value=value, partition=0, headers=[("h", value)])
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def test_the_driver_reads_exact_ranges_past_transaction_markers(stack) -> None:
    topic = f"fetch{uuid.uuid4().hex[:8]}.users.mutation"
    ensure_topics({"bootstrap.servers": stack.kafka_bootstrap}, {topic}, 1)
    _transactions(stack.kafka_bootstrap, topic)
    reader = KafkaRangeReader({"bootstrap.servers": stack.kafka_bootstrap}, timeout_seconds=5.0)
    try:
        started = time.monotonic()
        first = reader.read([OffsetRange(topic, 0, 0, 4)])  # ends in the first commit marker
        assert [(m.offset, m.value, m.headers) for m in first] == [
            (0, b"a", (("h", b"a"),)),
            (1, b"b", (("h", b"b"),)),
            (2, b"c", (("h", b"c"),)),
        ]
        rest = reader.read([OffsetRange(topic, 0, 4, 9)])  # aborted (read uncommitted, as Spark), then the end
        assert [(m.offset, m.value) for m in rest] == [(4, b"x"), (5, b"y"), (7, b"d")]
        middle = reader.read([OffsetRange(topic, 0, 1, 3)])
        assert [m.offset for m in middle] == [1, 2] and middle[0].key == b"b"
        assert time.monotonic() - started < 4.0  # no read waited for its timeout
        with pytest.raises(KafkaFetchError, match=rf"{topic}\[0\] offsets 9-11 \(0 read\)"):
            reader.read([OffsetRange(topic, 0, 9, 12)])  # beyond what Kafka holds
    finally:
        reader.close()
