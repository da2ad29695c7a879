"""The sink counts every message's fate and its produce → ack latency, per topic, exactly, from any thread."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from cdcbridge.kafka.delivery_stats import LATENCY_BUCKETS_SECONDS, DeliveryStats
from cdcbridge.kafka.errors import MessageTooLargeError, ProduceFatalError
from cdcbridge.kafka.sink import Delivery, KafkaSink, _report
from cdcbridge.observability.metrics import PRODUCE_LATENCY_BUCKETS, BucketedHistogram


class FakeMessage:
    """What librdkafka hands the delivery callback: topic, partition, offset, key, value and its latency."""

    def __init__(self, topic: str, latency: float | None, offset: int = 7) -> None:
        self._topic, self._latency, self._offset = topic, latency, offset

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 1

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k1"

    def value(self) -> bytes:
        return b"v" * 10

    def latency(self) -> float | None:
        return self._latency


def test_the_bridge_counts_latency_in_the_buckets_the_metrics_export() -> None:
    assert LATENCY_BUCKETS_SECONDS == PRODUCE_LATENCY_BUCKETS


def test_an_ack_is_counted_with_its_latency_and_then_reaches_the_message_callback() -> None:
    stats = DeliveryStats((0.001, 0.01, 0.1))
    seen: list[Delivery] = []
    _report(seen.append, stats, None, FakeMessage("cdc.orders.mutation", 0.004))
    _report(seen.append, stats, None, FakeMessage("cdc.orders.mutation", 0.25))
    _report(seen.append, stats, None, FakeMessage("cdc.orders.image", None))  # no latency known: counted, not timed

    assert seen[0] == Delivery("cdc.orders.mutation", 1, 7, None)
    counts = stats.snapshot()
    assert counts.acked == {"cdc.orders.mutation": 2, "cdc.orders.image": 1}
    assert counts.latency_counts == (0, 1, 0, 1)  # 4 ms in (1 ms, 10 ms], 250 ms above every bound
    assert counts.latency_sum_seconds == pytest.approx(0.254)
    assert counts.latency_observations == 2
    assert counts.failed == {}


def test_a_failed_delivery_is_counted_by_its_error_name_and_reported_as_an_error() -> None:
    stats = DeliveryStats()
    seen: list[Delivery] = []
    _report(seen.append, stats, KafkaError(KafkaError._MSG_TIMED_OUT), FakeMessage("cdc.orders.mutation", None))

    assert isinstance(seen[0].error, ProduceFatalError)
    counts = stats.snapshot()
    assert counts.failed == {("cdc.orders.mutation", "_MSG_TIMED_OUT"): 1}
    assert counts.acked == {} and counts.latency_observations == 0


def test_produce_counts_what_was_queued_per_topic_and_a_locally_refused_message_as_a_failure() -> None:
    # No broker: produce only queues. message.max.bytes makes librdkafka refuse a large message before queueing.
    sink = KafkaSink({"bootstrap.servers": "127.0.0.1:9", "message.max.bytes": 2000, "log_level": 0})
    refused: list[Delivery] = []
    try:
        for _ in range(3):
            sink.produce("cdc.orders.mutation", b"k", b"v", refused.append)
        sink.produce("cdc.orders.image", b"k", b"v", refused.append)
        sink.produce("cdc.orders.image", b"k", b"v" * 5000, refused.append)
        counts = sink.stats.snapshot()
    finally:
        sink.close(timeout=0)

    assert counts.produced == {"cdc.orders.mutation": 3, "cdc.orders.image": 1}
    assert counts.failed == {("cdc.orders.image", "MSG_SIZE_TOO_LARGE"): 1}
    assert [d.error is not None for d in refused] == [True]


def test_counts_from_many_threads_add_up_exactly() -> None:
    """Each thread counts into its own tally (no lock on the hot path); the snapshot must still lose nothing."""
    stats = DeliveryStats()
    threads_count, per_thread = 4, 5000
    start = threading.Barrier(threads_count)

    def count() -> None:
        start.wait()
        for i in range(per_thread):
            stats.produced("t1" if i % 2 else "t2")
            stats.acked("t1" if i % 2 else "t2", 0.003)
        stats.failed("t1", "_MSG_TIMED_OUT")

    threads = [threading.Thread(target=count) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    counts = stats.snapshot()
    half = threads_count * per_thread // 2
    assert counts.produced == {"t1": half, "t2": half}
    assert counts.acked == {"t1": half, "t2": half}
    assert counts.failed == {("t1", "_MSG_TIMED_OUT"): threads_count}
    assert counts.latency_observations == threads_count * per_thread
    assert counts.latency_sum_seconds == pytest.approx(0.003 * threads_count * per_thread)


def test_a_snapshot_is_a_copy() -> None:
    stats = DeliveryStats()
    stats.produced("t")
    first = stats.snapshot()
    stats.produced("t")
    assert first.produced == {"t": 1}
    assert stats.snapshot().produced == {"t": 2}


def test_latency_bounds_must_increase() -> None:
    with pytest.raises(ValueError, match="increase strictly"):
        DeliveryStats((0.1, 0.01))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=120.0), max_size=40))
def test_bucketing_in_the_sink_matches_prometheus_histogram_semantics(latencies: list[float]) -> None:
    """Counting in the sink and adding the counts gives the series prometheus_client's own Histogram would."""
    stats = DeliveryStats(PRODUCE_LATENCY_BUCKETS)
    for latency in latencies:
        stats.acked("t", latency)
    counts = stats.snapshot()
    ours, reference = CollectorRegistry(), CollectorRegistry()
    BucketedHistogram("lat", "doc", PRODUCE_LATENCY_BUCKETS, ours).add_counts(
        counts.latency_bounds, counts.latency_counts, counts.latency_sum_seconds
    )
    histogram = Histogram("lat", "doc", buckets=PRODUCE_LATENCY_BUCKETS, registry=reference)
    for latency in latencies:
        histogram.observe(latency)
    for bound in (*PRODUCE_LATENCY_BUCKETS, float("inf")):
        le = "+Inf" if bound == float("inf") else str(bound)
        assert ours.get_sample_value("lat_bucket", {"le": le}) == reference.get_sample_value("lat_bucket", {"le": le})
    assert ours.get_sample_value("lat_sum") == pytest.approx(reference.get_sample_value("lat_sum"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["t1", "t2"]), st.one_of(st.none(), st.floats(0.0, 100.0))), max_size=40))
def test_counting_a_page_at_once_equals_counting_each_message(acks: list[tuple[str, float | None]]) -> None:
    one_by_one, in_bulk = DeliveryStats(), DeliveryStats()
    for topic, latency in acks:
        one_by_one.produced(topic)
        one_by_one.acked(topic, latency)
    counts: dict[str, int] = {}
    for topic, _ in acks:
        counts[topic] = counts.get(topic, 0) + 1
    in_bulk.produced_many(counts)
    in_bulk.acked_many(counts, [latency for _, latency in acks])
    a, b = one_by_one.snapshot(), in_bulk.snapshot()
    assert (a.produced, a.acked, a.latency_counts) == (b.produced, b.acked, b.latency_counts)
    assert a.latency_sum_seconds == pytest.approx(b.latency_sum_seconds)


def test_produce_tracked_hands_refusals_over_in_our_words() -> None:
    """produce_tracked queues without counting (pages are counted in bulk); a message librdkafka refuses before
    queueing raises MessageTooLargeError naming key, topic and size, and is counted as failed; delivery_error words
    a broker's refusal and counts it."""
    sink = KafkaSink({"bootstrap.servers": "127.0.0.1:9", "message.max.bytes": 2000, "log_level": 0})
    try:
        sink.produce_tracked("cdc.orders.mutation", b"k", b"v", lambda error, message: None)
        with pytest.raises(MessageTooLargeError, match=r"key 'big' on topic cdc.orders.image is 5003 bytes") as raised:
            sink.produce_tracked("cdc.orders.image", b"big", b"v" * 5000, lambda error, message: None)
        assert raised.value.size == 5003
        error = sink.delivery_error(KafkaError(KafkaError._MSG_TIMED_OUT), FakeMessage("cdc.orders.mutation", None))
        counts = sink.stats.snapshot()
    finally:
        sink.close(timeout=0)
    assert isinstance(error, ProduceFatalError) and "_MSG_TIMED_OUT" in str(error)
    assert counts.produced == {}
    assert counts.failed == {
        ("cdc.orders.image", "MSG_SIZE_TOO_LARGE"): 1,
        ("cdc.orders.mutation", "_MSG_TIMED_OUT"): 1,
    }
