"""Every Prometheus metric of cdcbridge, defined in one place, with one-line helpers for the call sites.

A bridge worker process owns one :class:`WorkerMetrics` (coordination + bridge: leases, reads, produce, acks,
checkpoints, lag); the apply job owns one :class:`ApplyMetrics`. Each object has its own ``CollectorRegistry`` so a
process (or a test) serves exactly its own series, never a global registry shared by accident.

Label values stay bounded: tables, topics and shard ids are fine (shards come and go with splits and merges, so
:meth:`WorkerMetrics.forget_shard` drops a shard's series once this worker no longer owns it); row keys never appear.
Enumerated labels (lease events, apply outcomes) are validated against their enum and created at 0 up front.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from cdcbridge.observability.errors import MetricsServerError

__all__ = [
    "ApplyMetrics",
    "ApplyOutcome",
    "LeaseEvent",
    "MetricsServer",
    "WorkerMetrics",
    "start_metrics_server",
]

PREFIX = "cdcbridge"

#: Produce → ack: a healthy local broker acks in milliseconds; a struggling one in seconds.
PRODUCE_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: One Spark micro-batch: read, fold and write a target; sub-second to minutes.
APPLY_BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: Source commit → applied to the target; the trigger interval alone adds seconds.
FRESHNESS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class LeaseEvent(StrEnum):
    """What happened to a lease, as counted by ``cdcbridge_lease_events_total{event}``."""

    TAKEN = "taken"
    RENEWED = "renewed"
    LOST = "lost"
    STOLEN = "stolen"
    RELEASED = "released"
    STEAL_REQUESTED = "steal_requested"
    EXPIRED_TAKEN = "expired_taken"


class ApplyOutcome(StrEnum):
    """What the apply job did with one Kafka message, as counted by ``cdcbridge_apply_messages_total{outcome}``."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"
    STALE = "stale"
    DEAD_LETTERED = "dead_lettered"


def _enum_value(kind: type[StrEnum], value: StrEnum | str) -> str:
    try:
        return kind(value).value
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise ValueError(f"unknown {kind.__name__} {value!r}: use one of {allowed}") from None


class _MetricSet:
    """A registry plus factories that add the ``cdcbridge_`` prefix, so names are written once, without it."""

    def __init__(self, registry: CollectorRegistry | None, include_process_metrics: bool) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        if include_process_metrics:
            # CPU, memory, open fds, GC and Python version of this process: the first things asked in an incident.
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)

    def _counter(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> Counter:
        return Counter(name, documentation, labels, namespace=PREFIX, registry=self.registry)

    def _gauge(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(name, documentation, labels, namespace=PREFIX, registry=self.registry)

    def _histogram(self, name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, documentation, namespace=PREFIX, registry=self.registry, buckets=buckets)

    def render(self) -> str:
        """The Prometheus text exposition of this registry (what the HTTP endpoint serves)."""
        return generate_latest(self.registry).decode("utf-8")


class WorkerMetrics(_MetricSet):
    """Metrics of one bridge worker: coordination (leases, checkpoints, shards) and the bridge (read, produce, ack).

    Pass ``registry`` to share one with other collectors; by default each instance gets a fresh one.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, include_process_metrics: bool = True) -> None:
        super().__init__(registry, include_process_metrics)
        shard = ("table", "shard")
        self.records_fetched_total = self._counter(
            "records_fetched_total", "Stream records read from Tablestore shards.", shard
        )
        self.messages_produced_total = self._counter(
            "messages_produced_total", "Messages handed to the Kafka producer.", ("table", "topic")
        )
        self.messages_acked_total = self._counter(
            "messages_acked_total", "Messages Kafka acknowledged (durable on the topic).", ("topic",)
        )
        self.produce_errors_total = self._counter(
            "produce_errors_total", "Messages Kafka refused or failed to deliver, by error kind.", ("topic", "kind")
        )
        self.produce_latency_seconds = self._histogram(
            "produce_latency_seconds",
            "Time from handing a message to the producer to its ack.",
            PRODUCE_LATENCY_BUCKETS,
        )
        self.checkpoints_total = self._counter(
            "checkpoints_total", "Checkpoints written to the status table after Kafka acked.", shard
        )
        self.checkpoint_failures_total = self._counter(
            "checkpoint_failures_total", "Checkpoint writes that failed, by reason.", ("table", "reason")
        )
        self.lease_events_total = self._counter(
            "lease_events_total", "Lease transitions seen by this worker.", ("event",)
        )
        self.leases_held = self._gauge("leases_held", "Shard leases this worker holds now.", ("worker",))
        self.shards_finished_total = self._counter(
            "shards_finished_total", "Shards read to their end (closed by a split or merge) and marked finished."
        )
        self.trimmed_data_events_total = self._counter(
            "trimmed_data_events_total",
            "Reads that found the checkpoint older than the stream's retention: records were lost to expiry.",
            shard,
        )
        self.lag_records = self._gauge("lag_records", "Records between this shard's checkpoint and its end.", shard)
        self.lag_seconds = self._gauge(
            "lag_seconds", "Age of the newest record read from this shard behind the current time.", shard
        )
        self.worker_fenced_total = self._counter(
            "worker_fenced_total", "Times this worker found itself fenced (its lease taken while it was paused)."
        )
        for event in LeaseEvent:
            self.lease_events_total.labels(event.value)
        self._lock = threading.Lock()

    # Bridge: read, produce, ack
    def records_fetched(self, table: str, shard: str, count: int = 1) -> None:
        self.records_fetched_total.labels(table, shard).inc(count)

    def message_produced(self, table: str, topic: str, count: int = 1) -> None:
        self.messages_produced_total.labels(table, topic).inc(count)

    def message_acked(self, topic: str, latency_seconds: float | None = None, count: int = 1) -> None:
        """Count an ack; with ``latency_seconds`` (produce → ack of that message) also observe the latency."""
        self.messages_acked_total.labels(topic).inc(count)
        if latency_seconds is not None:
            self.produce_latency_seconds.observe(latency_seconds)

    def produce_error(self, topic: str, kind: str, count: int = 1) -> None:
        """``kind``: a bounded token such as the KafkaError name (``_MSG_TIMED_OUT``), never the error text."""
        self.produce_errors_total.labels(topic, kind).inc(count)

    # Coordination: checkpoints, leases, shards
    def checkpoint_written(self, table: str, shard: str) -> None:
        self.checkpoints_total.labels(table, shard).inc()

    def checkpoint_failed(self, table: str, reason: str) -> None:
        """``reason``: a bounded token (``lease_lost``, ``conflict``, ``unavailable``...), never the error text."""
        self.checkpoint_failures_total.labels(table, reason).inc()

    def lease_event(self, event: LeaseEvent | str, count: int = 1) -> None:
        """Count a lease transition; unknown events raise ValueError (keeps the label set bounded)."""
        self.lease_events_total.labels(_enum_value(LeaseEvent, event)).inc(count)

    def set_leases_held(self, worker: str, count: int) -> None:
        self.leases_held.labels(worker).set(count)

    def shard_finished(self) -> None:
        self.shards_finished_total.inc()

    def trimmed_data(self, table: str, shard: str) -> None:
        self.trimmed_data_events_total.labels(table, shard).inc()

    def set_lag(self, table: str, shard: str, *, records: float | None = None, seconds: float | None = None) -> None:
        """Set the shard's lag; a value left out keeps its last setting."""
        if records is not None:
            self.lag_records.labels(table, shard).set(records)
        if seconds is not None:
            self.lag_seconds.labels(table, shard).set(max(0.0, seconds))

    def worker_fenced(self) -> None:
        self.worker_fenced_total.inc()

    def forget_shard(self, table: str, shard: str) -> None:
        """Drop every per-shard series: call when this worker stops owning the shard (lost, released, finished),
        so shard ids retired by splits and merges do not pile up. Counters restart at 0 if the shard comes back,
        which Prometheus' ``rate()`` treats as an ordinary reset."""
        with self._lock:
            for metric in (
                self.records_fetched_total,
                self.checkpoints_total,
                self.trimmed_data_events_total,
                self.lag_records,
                self.lag_seconds,
            ):
                with contextlib.suppress(KeyError):
                    metric.remove(table, shard)


class ApplyMetrics(_MetricSet):
    """Metrics of the apply job: batches, per-message outcomes, rows written, freshness."""

    def __init__(self, registry: CollectorRegistry | None = None, *, include_process_metrics: bool = True) -> None:
        super().__init__(registry, include_process_metrics)
        self.apply_batches_total = self._counter("apply_batches_total", "Micro-batches applied to the target.")
        self.apply_messages_total = self._counter(
            "apply_messages_total", "Kafka messages the apply job handled, by outcome.", ("outcome",)
        )
        self.apply_batch_seconds = self._histogram(
            "apply_batch_seconds", "Time to apply one micro-batch (decode, fold, write).", APPLY_BATCH_BUCKETS
        )
        self.apply_rows_written_total = self._counter(
            "apply_rows_written_total", "Rows written to the target, by target table.", ("table",)
        )
        self.apply_freshness_seconds = self._histogram(
            "apply_freshness_seconds",
            "Time from the source commit of a change to its write on the target.",
            FRESHNESS_BUCKETS,
        )
        for outcome in ApplyOutcome:
            self.apply_messages_total.labels(outcome.value)

    def messages(self, outcome: ApplyOutcome | str, count: int = 1) -> None:
        """Count messages by outcome; unknown outcomes raise ValueError."""
        self.apply_messages_total.labels(_enum_value(ApplyOutcome, outcome)).inc(count)

    def rows_written(self, table: str, count: int) -> None:
        self.apply_rows_written_total.labels(table).inc(count)

    def freshness(self, *seconds: float) -> None:
        """Observe the commit → applied delay of one or more changes."""
        for value in seconds:
            self.apply_freshness_seconds.observe(max(0.0, value))

    def batch_applied(
        self,
        duration_seconds: float,
        *,
        applied: int = 0,
        duplicates: int = 0,
        stale: int = 0,
        dead_lettered: int = 0,
        rows_written: Mapping[str, int] | None = None,
        freshness_seconds: Iterable[float] = (),
    ) -> None:
        """Everything one finished micro-batch reports, in one call (the counts match ``ApplyStats`` fields)."""
        self.apply_batches_total.inc()
        self.apply_batch_seconds.observe(duration_seconds)
        for outcome, count in (
            (ApplyOutcome.APPLIED, applied),
            (ApplyOutcome.DUPLICATE, duplicates),
            (ApplyOutcome.STALE, stale),
            (ApplyOutcome.DEAD_LETTERED, dead_lettered),
        ):
            if count:
                self.apply_messages_total.labels(outcome.value).inc(count)
        for table, count in (rows_written or {}).items():
            self.rows_written(table, count)
        self.freshness(*freshness_seconds)


@dataclass
class MetricsServer:
    """A running Prometheus endpoint. ``port`` is the bound port (the real one when 0 was asked for)."""

    host: str
    port: int
    _server: ThreadingWSGIServer = field(repr=False)
    _thread: threading.Thread = field(repr=False)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and free the port; safe to call twice."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout)
        self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_metrics_server(
    port: int, host: str = "127.0.0.1", *, registry: CollectorRegistry | _MetricSet
) -> MetricsServer:
    """Serve ``registry`` (or a metrics object's registry) on ``http://host:port/metrics`` from a daemon thread.

    Binds loopback unless ``host`` says otherwise; ``port=0`` picks a free port (read it from the result).
    """
    collector = registry.registry if isinstance(registry, _MetricSet) else registry
    try:
        server, thread = start_http_server(port, addr=host, registry=collector)
    except OSError as exc:
        raise MetricsServerError(
            f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}): "
            "set observability.metrics_port to a free port (0 picks one) or metrics_host to a local address"
        ) from exc
    return MetricsServer(host=host, port=server.server_port, _server=server, _thread=thread)
