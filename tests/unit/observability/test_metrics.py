"""Metrics: helpers move the right series, and the endpoint serves them in the Prometheus text format over HTTP."""

from __future__ import annotations

import re
import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cdcbridge.observability import metrics as metrics_module
from cdcbridge.observability.errors import MetricsServerError
from cdcbridge.observability.metrics import (
    PRODUCE_LATENCY_BUCKETS,
    ApplyMetrics,
    ApplyOutcome,
    BucketedHistogram,
    LeaseEvent,
    WorkerMetrics,
    start_metrics_server,
)

WORKER_METRICS = {
    "cdcbridge_records_fetched_total": ("table", "shard"),
    "cdcbridge_messages_produced_total": ("table", "topic"),
    "cdcbridge_messages_acked_total": ("topic",),
    "cdcbridge_produce_errors_total": ("topic", "kind"),
    "cdcbridge_produce_latency_seconds": (),
    "cdcbridge_checkpoints_total": ("table", "shard"),
    "cdcbridge_checkpoint_failures_total": ("table", "shard", "reason"),
    "cdcbridge_lease_events_total": ("event",),
    "cdcbridge_leases_held": ("worker",),
    "cdcbridge_shards_finished_total": (),
    "cdcbridge_trimmed_data_events_total": ("table", "shard"),
    "cdcbridge_lag_records": ("table", "shard"),
    "cdcbridge_lag_seconds": ("table", "shard"),
    "cdcbridge_shard_oldest_unread_age_seconds": ("table", "shard"),
    "cdcbridge_shard_retention_used_ratio": ("table", "shard"),
    "cdcbridge_shard_halted": ("table", "shard"),
    "cdcbridge_worker_fenced_total": (),
}
APPLY_METRICS = {
    "cdcbridge_apply_batches_total": (),
    "cdcbridge_apply_messages_total": ("outcome",),
    "cdcbridge_apply_batch_seconds": (),
    "cdcbridge_apply_rows_written_total": ("table",),
    "cdcbridge_apply_freshness_seconds": (),
    "cdcbridge_apply_last_batch_timestamp_seconds": (),
    "cdcbridge_apply_batch_failures_total": (),
    "cdcbridge_apply_kafka_lag_messages": (),
}


def _fetch(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.headers["Content-Type"], response.read().decode("utf-8")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text exposition, keyed by (name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _registered(registry: CollectorRegistry) -> dict[str, tuple[str, ...]]:
    """Metric name (as exported, with _total for counters) → its label names, as the registry's objects know them."""
    declared: dict[str, tuple[str, ...]] = {}
    for collector in list(registry._collector_to_names):  # the metric objects themselves know their label names
        if isinstance(collector, BucketedHistogram):
            declared[collector.name] = ()
            continue
        name = getattr(collector, "_name", None)
        if name is None:
            continue
        suffix = "_total" if getattr(collector, "_type", "") == "counter" else ""
        declared[name + suffix] = tuple(collector._labelnames)
    return declared


@pytest.mark.parametrize(("metrics", "expected"), [(WorkerMetrics, WORKER_METRICS), (ApplyMetrics, APPLY_METRICS)])
def test_metrics_declare_exactly_the_documented_names_and_labels(metrics: type, expected: dict) -> None:
    instance = metrics()
    registered = {name: labels for name, labels in _registered(instance.registry).items() if "cdcbridge" in name}
    assert registered == expected
    assert instance.declared == expected  # the reference the README table and the dashboard check use


def test_no_created_series_double_the_series_count() -> None:
    metrics = WorkerMetrics(include_process_metrics=False)
    metrics.records_fetched("orders", "s1", 3)
    metrics.message_acked("cdc.orders", latency_seconds=0.01)
    assert "_created" not in metrics.render()


def test_each_instance_has_its_own_registry() -> None:
    first, second = WorkerMetrics(), WorkerMetrics()
    first.records_fetched("orders", "s1", 3)
    assert first.registry.get_sample_value("cdcbridge_records_fetched_total", {"table": "orders", "shard": "s1"}) == 3
    assert (
        second.registry.get_sample_value("cdcbridge_records_fetched_total", {"table": "orders", "shard": "s1"}) is None
    )


def test_worker_helpers_move_the_right_series() -> None:
    metrics = WorkerMetrics(include_process_metrics=False)
    value = metrics.registry.get_sample_value
    metrics.records_fetched("orders", "s1", 100)
    metrics.records_fetched("orders", "s1", 5)
    metrics.records_fetched("orders", "s2")
    metrics.message_produced("orders", "cdc.orders", 7)
    metrics.message_acked("cdc.orders", latency_seconds=0.003)
    metrics.message_acked("cdc.orders", latency_seconds=0.2)
    metrics.message_acked("cdc.orders", count=5)
    metrics.produce_error("cdc.orders", "_MSG_TIMED_OUT")
    metrics.checkpoint_written("orders", "s1")
    metrics.checkpoint_failed("orders", "s1", "lease_lost")
    metrics.lease_event(LeaseEvent.TAKEN)
    metrics.lease_event("renewed", count=3)
    metrics.set_leases_held("worker-a", 4)
    metrics.set_leases_held("worker-a", 2)
    metrics.shard_finished()
    metrics.shard_finished(2)
    metrics.trimmed_data("orders", "s2")
    metrics.set_lag("orders", "s1", records=42, seconds=1.5)
    metrics.set_lag("orders", "s1", seconds=-0.2)  # clock skew never shows as negative lag
    metrics.worker_fenced()

    assert value("cdcbridge_records_fetched_total", {"table": "orders", "shard": "s1"}) == 105
    assert value("cdcbridge_records_fetched_total", {"table": "orders", "shard": "s2"}) == 1
    assert value("cdcbridge_messages_produced_total", {"table": "orders", "topic": "cdc.orders"}) == 7
    assert value("cdcbridge_messages_acked_total", {"topic": "cdc.orders"}) == 7
    assert value("cdcbridge_produce_latency_seconds_count") == 2
    assert value("cdcbridge_produce_latency_seconds_sum") == pytest.approx(0.203)
    assert value("cdcbridge_produce_latency_seconds_bucket", {"le": "0.005"}) == 1
    assert value("cdcbridge_produce_errors_total", {"topic": "cdc.orders", "kind": "_MSG_TIMED_OUT"}) == 1
    assert value("cdcbridge_checkpoints_total", {"table": "orders", "shard": "s1"}) == 1
    assert value("cdcbridge_checkpoint_failures_total", {"table": "orders", "shard": "s1", "reason": "lease_lost"}) == 1
    assert value("cdcbridge_lease_events_total", {"event": "taken"}) == 1
    assert value("cdcbridge_lease_events_total", {"event": "renewed"}) == 3
    assert value("cdcbridge_lease_events_total", {"event": "stolen"}) == 0  # created at 0 up front
    assert value("cdcbridge_leases_held", {"worker": "worker-a"}) == 2
    assert value("cdcbridge_shards_finished_total") == 3
    assert value("cdcbridge_trimmed_data_events_total", {"table": "orders", "shard": "s2"}) == 1
    assert value("cdcbridge_lag_records", {"table": "orders", "shard": "s1"}) == 42
    assert value("cdcbridge_lag_seconds", {"table": "orders", "shard": "s1"}) == 0.0
    assert value("cdcbridge_worker_fenced_total") == 1


def test_every_lease_event_and_apply_outcome_exists_at_zero_before_any_event() -> None:
    worker, apply = WorkerMetrics(), ApplyMetrics()
    for event in LeaseEvent:
        assert worker.registry.get_sample_value("cdcbridge_lease_events_total", {"event": event.value}) == 0
    for outcome in ApplyOutcome:
        assert apply.registry.get_sample_value("cdcbridge_apply_messages_total", {"outcome": outcome.value}) == 0


def test_unknown_enumerated_label_values_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown LeaseEvent 'grabbed'.*steal_requested"):
        WorkerMetrics().lease_event("grabbed")
    with pytest.raises(ValueError, match=r"unknown ApplyOutcome 'skipped'"):
        ApplyMetrics().messages("skipped")


def test_forget_shard_drops_only_that_shards_series() -> None:
    metrics = WorkerMetrics()
    for shard in ("s1", "s2"):
        metrics.records_fetched("orders", shard, 10)
        metrics.checkpoint_written("orders", shard)
        metrics.checkpoint_failed("orders", shard, "unavailable")
        metrics.trimmed_data("orders", shard)
        metrics.set_lag("orders", shard, records=3, seconds=2)
    metrics.forget_shard("orders", "s1")
    metrics.forget_shard("orders", "never-seen")  # harmless

    text = metrics.render()
    assert 'shard="s1"' not in text
    assert text.count('shard="s2"') >= 6
    metrics.records_fetched("orders", "s1", 2)  # the shard came back: its counter restarts
    assert metrics.registry.get_sample_value("cdcbridge_records_fetched_total", {"table": "orders", "shard": "s1"}) == 2


def test_apply_batch_applied_reports_a_whole_batch_in_one_call() -> None:
    metrics = ApplyMetrics(include_process_metrics=False)
    value = metrics.registry.get_sample_value
    metrics.batch_applied(
        0.8,
        applied=90,
        duplicates=7,
        stale=2,
        dead_lettered=1,
        rows_written={"orders": 60, "customers": 5},
        freshness_seconds=[0.3, 4.0, 12.0],
    )
    metrics.batch_applied(2.0, applied=10, finished_at=1_700_000_123.5)
    metrics.batch_failed()
    metrics.set_kafka_lag(250)
    metrics.messages(ApplyOutcome.DUPLICATE, 3)
    metrics.rows_written("orders", 1)
    metrics.freshness(0.05)

    assert value("cdcbridge_apply_batches_total") == 2
    assert value("cdcbridge_apply_batch_seconds_count") == 2
    assert value("cdcbridge_apply_batch_seconds_sum") == pytest.approx(2.8)
    assert value("cdcbridge_apply_messages_total", {"outcome": "applied"}) == 100
    assert value("cdcbridge_apply_messages_total", {"outcome": "duplicate"}) == 10
    assert value("cdcbridge_apply_messages_total", {"outcome": "stale"}) == 2
    assert value("cdcbridge_apply_messages_total", {"outcome": "dead_lettered"}) == 1
    assert value("cdcbridge_apply_rows_written_total", {"table": "orders"}) == 61
    assert value("cdcbridge_apply_rows_written_total", {"table": "customers"}) == 5
    assert value("cdcbridge_apply_freshness_seconds_count") == 4
    assert value("cdcbridge_apply_freshness_seconds_bucket", {"le": "0.5"}) == 2
    assert value("cdcbridge_apply_freshness_seconds_bucket", {"le": "10.0"}) == 3
    assert value("cdcbridge_apply_last_batch_timestamp_seconds") == 1_700_000_123.5
    assert value("cdcbridge_apply_batch_failures_total") == 1
    assert value("cdcbridge_apply_kafka_lag_messages") == 250


def test_the_last_batch_time_defaults_to_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module.time, "time", lambda: 1_800_000_000.0)
    metrics = ApplyMetrics(include_process_metrics=False)
    metrics.batch_applied(0.1)
    assert metrics.registry.get_sample_value("cdcbridge_apply_last_batch_timestamp_seconds") == 1_800_000_000.0


def test_bucketed_histogram_takes_pre_bucketed_counts_like_single_observations() -> None:
    """The pump hands over counts sorted into buckets elsewhere; the exposition equals observing them one by one."""
    bounds = (0.01, 0.1, 1.0)
    single, bulk = CollectorRegistry(), CollectorRegistry()
    observed = BucketedHistogram("x_seconds", "doc", bounds, single)
    added = BucketedHistogram("x_seconds", "doc", bounds, bulk)
    for latency in (0.004, 0.01, 0.05, 0.5, 3.0, 7.0):
        observed.observe(latency)
    added.add_counts(bounds, [2, 1, 1, 2], 0.004 + 0.01 + 0.05 + 0.5 + 3.0 + 7.0)
    assert _samples(generate_latest(single).decode()) == _samples(generate_latest(bulk).decode())
    assert single.get_sample_value("x_seconds_bucket", {"le": "0.01"}) == 2  # le is "at or below"
    assert single.get_sample_value("x_seconds_bucket", {"le": "+Inf"}) == 6
    assert single.get_sample_value("x_seconds_count") == 6


def test_bucketed_histogram_refuses_counts_of_other_buckets() -> None:
    histogram = BucketedHistogram("x_seconds", "doc", (0.01, 0.1), CollectorRegistry())
    with pytest.raises(ValueError, match=r"x_seconds.*do not fit buckets \(0\.01, 0\.1\)"):
        histogram.add_counts((0.01, 0.2), [0, 0, 0], 0.0)
    with pytest.raises(ValueError, match="do not fit"):
        histogram.add_counts((0.01, 0.1), [0, 0], 0.0)


def test_produce_latencies_feed_the_produce_latency_histogram() -> None:
    metrics = WorkerMetrics(include_process_metrics=False)
    counts = [0] * (len(PRODUCE_LATENCY_BUCKETS) + 1)
    counts[2] = 10  # ten acks between 2.5 and 5 ms
    metrics.produce_latencies(PRODUCE_LATENCY_BUCKETS, counts, 0.04)
    metrics.message_acked("cdc.orders", latency_seconds=0.5, count=2)
    value = metrics.registry.get_sample_value
    assert value("cdcbridge_produce_latency_seconds_count") == 12
    assert value("cdcbridge_produce_latency_seconds_sum") == pytest.approx(1.04)
    assert value("cdcbridge_produce_latency_seconds_bucket", {"le": "0.005"}) == 10
    assert value("cdcbridge_produce_latency_seconds_bucket", {"le": "0.5"}) == 12


def test_endpoint_serves_the_text_format_over_http_on_a_free_loopback_port() -> None:
    metrics = WorkerMetrics()
    metrics.records_fetched("orders", "s-1", 12)
    metrics.message_acked("cdc.orders", latency_seconds=0.01)
    metrics.lease_event("stolen")
    with start_metrics_server(0, registry=metrics) as server:
        assert server.host == "127.0.0.1"
        assert server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        content_type, body = _fetch(server.url)
        metrics.records_fetched("orders", "s-1", 1)
        _, later = _fetch(server.url)

    assert content_type.startswith("text/plain")
    assert "# TYPE cdcbridge_records_fetched_total counter" in body
    samples = _samples(body)
    assert samples[("cdcbridge_records_fetched_total", (("shard", "s-1"), ("table", "orders")))] == 12
    assert samples[("cdcbridge_lease_events_total", (("event", "stolen"),))] == 1
    assert samples[("cdcbridge_produce_latency_seconds_count", ())] == 1
    assert any(name == "python_info" for name, _ in samples)  # the process collectors ride along
    assert _samples(later)[("cdcbridge_records_fetched_total", (("shard", "s-1"), ("table", "orders")))] == 13


def test_endpoint_accepts_a_bare_registry_and_serves_only_it() -> None:
    apply = ApplyMetrics(include_process_metrics=False)
    apply.batch_applied(0.1, applied=1)
    server = start_metrics_server(0, "127.0.0.1", registry=apply.registry)
    try:
        _, body = _fetch(server.url)
    finally:
        server.stop()
    names = {re.split(r"[{ ]", line)[0] for line in body.splitlines() if line and not line.startswith("#")}
    assert names and all(name.startswith("cdcbridge_apply_") for name in names)
    assert "cdcbridge_records_fetched_total" not in body


def test_stop_frees_the_port_and_is_idempotent() -> None:
    server = start_metrics_server(0, registry=WorkerMetrics())
    port = server.port
    server.stop()
    server.stop()
    with socket.socket() as probe:  # nothing listens any more: the port can be bound again
        probe.bind(("127.0.0.1", port))
    with pytest.raises(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2):
        pass


def test_a_taken_port_gives_an_error_that_names_it_and_the_fix() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(MetricsServerError, match=rf"127\.0\.0\.1:{port}.*metrics_port"):
            start_metrics_server(port, registry=WorkerMetrics())


def test_the_endpoint_binds_loopback_unless_told_otherwise() -> None:
    with start_metrics_server(0, registry=WorkerMetrics()) as server:
        bound_address = server._server.socket.getsockname()[0]
    assert bound_address == "127.0.0.1"
