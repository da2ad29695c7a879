"""The StatsPump: plain counters of coordination and the Kafka sink become WorkerMetrics series, increases only."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from cdcbridge.bridge.worker_metrics import StatsPump
from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.stats import CoordinationStats
from cdcbridge.kafka.delivery_stats import DeliveryStats
from cdcbridge.observability.metrics import PRODUCE_LATENCY_BUCKETS, WorkerMetrics

COMMIT_US = 1_700_000_000_000_000  # commit time of record 0, µs since the epoch


@dataclass
class FakeWorker:
    stats: CoordinationStats = field(default_factory=CoordinationStats)
    state: str = "RUNNING"
    held: set[str] = field(default_factory=set)

    def held_shard_ids(self) -> set[str]:
        return set(self.held)


class WallClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _record(n: int) -> ChangeRecord:
    return ChangeRecord(
        "orders", RecordAction.PUT, [("pk", n)], [Cell("v", CellOp.PUT, n)], Sequence(1, COMMIT_US + n * 1_000_000, 0)
    )


def _pump(workers: dict[str, FakeWorker], **kwargs: object) -> tuple[WorkerMetrics, StatsPump]:
    metrics = WorkerMetrics(include_process_metrics=False)
    return metrics, StatsPump(metrics, workers, "w1", **kwargs)  # type: ignore[arg-type]


def test_records_checkpoints_and_lag_are_exported_per_table_and_shard() -> None:
    orders = FakeWorker(held={"s0", "s1"})
    clock = WallClock(COMMIT_US / 1e6 + 10.0)  # 10 s after record 0 was committed
    metrics, pump = _pump({"orders": orders}, wall_clock=clock)
    value = metrics.registry.get_sample_value
    s0, s1 = orders.stats.shard("s0"), orders.stats.shard("s1")
    s0.read(3, [_record(0), _record(1), _record(2)])  # record 2 committed 2 s after record 0
    s0.checkpointed(ExtendedSequence(_record(0).sequence))
    s1.read(1, [_record(5)])
    s1.read(0, [])  # s1 read up to its newest record

    pump.pump()
    assert value("cdcbridge_records_fetched_total", {"table": "orders", "shard": "s0"}) == 3
    assert value("cdcbridge_records_fetched_total", {"table": "orders", "shard": "s1"}) == 1
    assert value("cdcbridge_checkpoints_total", {"table": "orders", "shard": "s0"}) == 1
    assert value("cdcbridge_checkpoints_total", {"table": "orders", "shard": "s1"}) == 0  # exists at 0
    assert value("cdcbridge_lag_records", {"table": "orders", "shard": "s0"}) == 2
    assert value("cdcbridge_lag_seconds", {"table": "orders", "shard": "s0"}) == pytest.approx(8.0)
    assert value("cdcbridge_lag_seconds", {"table": "orders", "shard": "s1"}) == 0.0  # caught up
    assert value("cdcbridge_leases_held", {"worker": "w1"}) == 2

    clock.now += 5  # nothing new read from s0: its lag grows with the clock
    s0.read(2, [_record(3), _record(4)])
    s0.checkpointed(ExtendedSequence(_record(4).sequence))
    pump.pump()
    assert value("cdcbridge_records_fetched_total", {"table": "orders", "shard": "s0"}) == 5  # increases only
    assert value("cdcbridge_checkpoints_total", {"table": "orders", "shard": "s0"}) == 2
    assert value("cdcbridge_lag_records", {"table": "orders", "shard": "s0"}) == 0
    assert value("cdcbridge_lag_seconds", {"table": "orders", "shard": "s0"}) == pytest.approx(11.0)


def test_a_shard_without_any_record_read_has_no_age_yet() -> None:
    orders = FakeWorker(held={"s0"})
    metrics, pump = _pump({"orders": orders})
    orders.stats.shard("s0")
    pump.pump()
    assert metrics.registry.get_sample_value("cdcbridge_lag_records", {"table": "orders", "shard": "s0"}) == 0
    assert metrics.registry.get_sample_value("cdcbridge_lag_seconds", {"table": "orders", "shard": "s0"}) is None


def test_trimmed_data_and_failed_checkpoints_carry_the_real_table_and_shard() -> None:
    orders, users = FakeWorker(held={"s0"}), FakeWorker(held={"u7"})
    metrics, pump = _pump({"orders": orders, "users": users})
    value = metrics.registry.get_sample_value
    users.stats.add("trimmed_data_events")
    users.stats.shard("u7").trimmed()
    orders.stats.shard("s0").checkpoint_failed("unavailable")
    orders.stats.shard("s0").checkpoint_failed("unavailable")
    pump.pump()
    pump.pump()  # nothing new: nothing counted twice
    assert value("cdcbridge_trimmed_data_events_total", {"table": "users", "shard": "u7"}) == 1
    assert value("cdcbridge_trimmed_data_events_total", {"table": "orders", "shard": "s0"}) == 0
    labels = {"table": "orders", "shard": "s0", "reason": "unavailable"}
    assert value("cdcbridge_checkpoint_failures_total", labels) == 2
    assert 'shard="-"' not in metrics.render()


def test_series_of_a_shard_no_longer_held_are_dropped() -> None:
    orders = FakeWorker(held={"s0", "s1"})
    metrics, pump = _pump({"orders": orders})
    for shard in ("s0", "s1"):
        orders.stats.shard(shard).read(1, [_record(1)])
    orders.stats.shard("s1").checkpoint_failed("lease_lost")
    pump.pump()
    orders.held = {"s0"}  # s1 was handed over
    orders.stats.shard("s1").read(4, [])  # a late read of the old owner is not exported either
    pump.pump()
    text = metrics.render()
    assert 'shard="s1"' not in text
    assert 'shard="s0"' in text
    assert metrics.registry.get_sample_value("cdcbridge_leases_held", {"worker": "w1"}) == 1


def test_lease_events_finished_shards_and_fencing_are_counted_as_increases() -> None:
    orders = FakeWorker()
    metrics, pump = _pump({"orders": orders})
    value = metrics.registry.get_sample_value
    orders.stats.add("leases_taken", 2)
    orders.stats.add("steal_requests")
    orders.stats.add("leases_transferred")
    orders.stats.add("shards_finished", 3)
    pump.pump()
    orders.stats.add("leases_taken")
    orders.state = "FENCED"
    pump.pump()
    pump.pump()
    assert value("cdcbridge_lease_events_total", {"event": "taken"}) == 3
    assert value("cdcbridge_lease_events_total", {"event": "steal_requested"}) == 1
    assert value("cdcbridge_lease_events_total", {"event": "stolen"}) == 1
    assert value("cdcbridge_shards_finished_total") == 3
    assert value("cdcbridge_worker_fenced_total") == 1  # once per fencing, not once per pump


def test_produced_acked_failed_and_latency_come_from_the_sinks_counts() -> None:
    delivery = DeliveryStats(PRODUCE_LATENCY_BUCKETS)
    topics = {"cdc.orders.mutation": "orders", "cdc.orders.image": "orders"}
    metrics, pump = _pump({}, delivery=delivery, topic_tables=topics)
    value = metrics.registry.get_sample_value
    # Configured topics exist at 0 before any traffic.
    assert value("cdcbridge_messages_produced_total", {"table": "orders", "topic": "cdc.orders.image"}) == 0
    assert value("cdcbridge_messages_acked_total", {"topic": "cdc.orders.image"}) == 0
    for _ in range(5):
        delivery.produced("cdc.orders.mutation")
    for latency in (0.002, 0.004, 0.004, 0.3):
        delivery.acked("cdc.orders.mutation", latency)
    delivery.failed("cdc.orders.mutation", "_MSG_TIMED_OUT")
    delivery.produced("elsewhere")
    pump.pump()
    delivery.produced("cdc.orders.mutation")
    delivery.acked("cdc.orders.mutation", 0.004)
    pump.pump()

    mutation = {"table": "orders", "topic": "cdc.orders.mutation"}
    assert value("cdcbridge_messages_produced_total", mutation) == 6
    assert value("cdcbridge_messages_produced_total", {"table": "unknown", "topic": "elsewhere"}) == 1
    assert value("cdcbridge_messages_acked_total", {"topic": "cdc.orders.mutation"}) == 5
    errors = {"topic": "cdc.orders.mutation", "kind": "_MSG_TIMED_OUT"}
    assert value("cdcbridge_produce_errors_total", errors) == 1
    assert value("cdcbridge_produce_latency_seconds_count") == 5
    assert value("cdcbridge_produce_latency_seconds_sum") == pytest.approx(0.314)
    assert value("cdcbridge_produce_latency_seconds_bucket", {"le": "0.005"}) == 4
    assert value("cdcbridge_produce_latency_seconds_bucket", {"le": "0.25"}) == 4
    assert value("cdcbridge_produce_latency_seconds_bucket", {"le": "0.5"}) == 5


def test_stop_pumps_once_more_even_if_the_thread_never_ran() -> None:
    orders = FakeWorker(held={"s0"})
    metrics, pump = _pump({"orders": orders}, interval=3600)
    orders.stats.shard("s0").read(2, [_record(1), _record(2)])
    pump.stop()
    value = metrics.registry.get_sample_value("cdcbridge_records_fetched_total", {"table": "orders", "shard": "s0"})
    assert value == 2


def test_retention_age_and_share_follow_the_oldest_unconfirmed_record_and_the_checkpoint() -> None:
    orders = FakeWorker(held={"s0", "s1", "s2"})
    clock = WallClock(COMMIT_US / 1e6 + 3600.0)  # an hour after record 0
    metrics, pump = _pump({"orders": orders}, wall_clock=clock, expiration_seconds={"orders": 4 * 3600.0})
    value = metrics.registry.get_sample_value
    s0, s1, s2 = orders.stats.shard("s0"), orders.stats.shard("s1"), orders.stats.shard("s2")
    s0.read(3, [_record(0), _record(1), _record(2)])  # stalled: nothing confirmed
    s1.read(2, [_record(0), _record(1)])
    s1.checkpointed(ExtendedSequence(_record(1).sequence))  # all confirmed, more to read: the checkpoint's age
    s2.read(1, [_record(0)])
    s2.checkpointed(ExtendedSequence(_record(0).sequence))
    s2.read(0, [])  # caught up: nothing unread
    pump.pump()
    assert value("cdcbridge_shard_oldest_unread_age_seconds", {"table": "orders", "shard": "s0"}) == 3600.0
    assert value("cdcbridge_shard_retention_used_ratio", {"table": "orders", "shard": "s0"}) == 0.25
    assert value("cdcbridge_shard_oldest_unread_age_seconds", {"table": "orders", "shard": "s1"}) == 3599.0
    assert value("cdcbridge_shard_retention_used_ratio", {"table": "orders", "shard": "s2"}) == 0.0
    clock.now += 3600.0  # s0 stays stalled: its share rises
    pump.pump()
    assert value("cdcbridge_shard_retention_used_ratio", {"table": "orders", "shard": "s0"}) == 0.5
    assert value("cdcbridge_shard_halted", {"table": "orders", "shard": "s0"}) == 0.0
    s0.set_halted(True)
    pump.pump()
    assert value("cdcbridge_shard_halted", {"table": "orders", "shard": "s0"}) == 1.0


def test_retention_share_is_left_out_without_the_stream_expiration() -> None:
    orders = FakeWorker(held={"s0"})
    metrics, pump = _pump({"orders": orders}, wall_clock=WallClock(COMMIT_US / 1e6 + 10.0))
    orders.stats.shard("s0").read(1, [_record(0)])
    pump.pump()
    value = metrics.registry.get_sample_value
    assert value("cdcbridge_shard_oldest_unread_age_seconds", {"table": "orders", "shard": "s0"}) == 10.0
    assert value("cdcbridge_shard_retention_used_ratio", {"table": "orders", "shard": "s0"}) is None
