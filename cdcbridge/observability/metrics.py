"""Every Prometheus metric of cdcbridge, defined in one place, with one-line helpers for the call sites.

A bridge worker process owns one :class:`WorkerMetrics` (coordination + bridge: leases, reads, produce, acks,
checkpoints, lag); the apply job owns one :class:`ApplyMetrics`. Each object has its own ``CollectorRegistry`` so a
process (or a test) serves exactly its own series, never a global registry shared by accident.

Label values stay bounded: tables, topics and shard ids are fine (shards come and go with splits and merges, so
:meth:`WorkerMetrics.forget_shard` drops a shard's series once this worker no longer owns it); row keys never appear.
Enumerated labels (lease events, apply outcomes) are validated against their enum and created at 0 up front.

Hot paths never touch these objects per message: the Kafka sink and the coordination layer count in plain Python
(per thread, per page, per checkpoint) and ``bridge.worker_metrics.StatsPump`` adds the increases here every few
seconds. The produce latency histogram therefore takes pre-bucketed counts (:class:`BucketedHistogram`).
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from cdcbridge.observability.errors import MetricsServerError

__all__ = [
    "ApplyMetrics",
    "ApplyOutcome",
    "BucketedHistogram",
    "LeaseEvent",
    "MetricsServer",
    "WorkerMetrics",
    "start_metrics_server",
]

PREFIX = "cdcbridge"

# Without this every counter and histogram series also exports a `_created` gauge: twice the series in Prometheus
# for a start time nothing here reads (process_start_time_seconds tells it per process).
disable_created_metrics()

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


class BucketedHistogram(Collector):
    """A Prometheus histogram fed with counts already sorted into its buckets.

    prometheus_client's Histogram takes one observation per call (microseconds each, under a lock); a hot path
    instead counts into plain bucket lists and hands many observations over in one :meth:`add_counts` call.
    """

    def __init__(self, name: str, documentation: str, buckets: Sequence[float], registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.upper_bounds = tuple(float(bound) for bound in buckets)
        self._lock = threading.Lock()
        self._counts = [0] * (len(self.upper_bounds) + 1)  # per bucket, not cumulative; the last one is +Inf
        self._sum = 0.0
        registry.register(self)

    def observe(self, value: float, count: int = 1) -> None:
        """``count`` observations of ``value``."""
        index = bisect.bisect_left(self.upper_bounds, value)
        with self._lock:
            self._counts[index] += count
            self._sum += value * count

    def add_counts(self, bounds: Sequence[float], counts: Sequence[int], total: float) -> None:
        """Add observations already bucketed: ``counts[i]`` fell at or below ``bounds[i]`` (and above the bound
        before), ``counts[-1]`` above every bound; ``total`` is their sum. ``bounds`` must be this histogram's."""
        if tuple(float(bound) for bound in bounds) != self.upper_bounds or len(counts) != len(self._counts):
            raise ValueError(
                f"{self.name}: counts for buckets {tuple(bounds)} (+Inf) do not fit buckets {self.upper_bounds} "
                "(+Inf); count with the histogram's own bounds"
            )
        with self._lock:
            for index, count in enumerate(counts):
                self._counts[index] += count
            self._sum += total

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, buckets = 0, []
        for bound, count in zip((*self.upper_bounds, float("inf")), counts, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), cumulative))
        yield HistogramMetricFamily(self.name, self.documentation, buckets=buckets, sum_value=total)


class _MetricSet:
    """A registry plus factories that add the ``cdcbridge_`` prefix, so names are written once, without it.

    ``declared`` maps every exported metric family name (counters with their ``_total``) to its label names: the
    reference for the README table and for the dashboard check.
    """

    def __init__(self, registry: CollectorRegistry | None, include_process_metrics: bool) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.declared: dict[str, tuple[str, ...]] = {}
        if include_process_metrics:
            # CPU, memory, open fds, GC and Python version of this process: the first things asked in an incident.
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)

    def _declare(self, name: str, labels: tuple[str, ...]) -> None:
        self.declared[f"{PREFIX}_{name}"] = labels

    def _counter(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> Counter:
        self._declare(name, labels)  # counter names are written with their _total here
        return Counter(name, documentation, labels, namespace=PREFIX, registry=self.registry)

    def _gauge(self, name: str, documentation: str, labels: tuple[str, ...] = ()) -> Gauge:
        self._declare(name, labels)
        return Gauge(name, documentation, labels, namespace=PREFIX, registry=self.registry)

    def _histogram(self, name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
        self._declare(name, ())
        return Histogram(name, documentation, namespace=PREFIX, registry=self.registry, buckets=buckets)

    def _bucketed_histogram(self, name: str, documentation: str, buckets: tuple[float, ...]) -> BucketedHistogram:
        self._declare(name, ())
        return BucketedHistogram(f"{PREFIX}_{name}", documentation, buckets, self.registry)

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
        self.produce_latency_seconds = self._bucketed_histogram(
            "produce_latency_seconds",
            "Time from handing a message to the producer to its ack, as measured by librdkafka.",
            PRODUCE_LATENCY_BUCKETS,
        )
        self.checkpoints_total = self._counter(
            "checkpoints_total", "Checkpoints written to the status table after Kafka acked.", shard
        )
        self.checkpoint_failures_total = self._counter(
            "checkpoint_failures_total",
            "Checkpoint writes that failed, by reason (lease_lost, unavailable, store_error, error).",
            ("table", "shard", "reason"),
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
        self.lag_records = self._gauge(
            "lag_records",
            "Records read from this shard and not yet covered by a checkpoint (a restart reads them again); "
            "records not read yet are not counted (cdcbridge status counts those).",
            shard,
        )
        self.lag_seconds = self._gauge(
            "lag_seconds",
            "Now minus the commit time of the newest record handed to the processor; 0 once a read found nothing "
            "newer.",
            shard,
        )
        self.oldest_unread_age_seconds = self._gauge(
            "shard_oldest_unread_age_seconds",
            "Age of the shard's oldest record not yet confirmed by a checkpoint (0 when nothing is unread): once it "
            "reaches the stream's expiration, records are trimmed before they are read.",
            shard,
        )
        self.retention_used_ratio = self._gauge(
            "shard_retention_used_ratio",
            "shard_oldest_unread_age_seconds / the stream's expiration: at 1 unread records are lost to retention.",
            shard,
        )
        self.shard_halted = self._gauge(
            "shard_halted",
            "1 while the shard is halted at its checkpoint because records after it were trimmed (on_trimmed: stop).",
            shard,
        )
        self.worker_fenced_total = self._counter(
            "worker_fenced_total",
            "Times this worker fenced itself: no lease renewal or take reached the status table for "
            "coordination.no_progress_abort_seconds, so it stopped every shard without checkpointing.",
        )
        for event in LeaseEvent:
            self.lease_events_total.labels(event.value)
        self._lock = threading.Lock()
        self._checkpoint_failure_reasons: set[str] = set()

    # Bridge: read, produce, ack
    def records_fetched(self, table: str, shard: str, count: int = 1) -> None:
        self.records_fetched_total.labels(table, shard).inc(count)

    def message_produced(self, table: str, topic: str, count: int = 1) -> None:
        self.messages_produced_total.labels(table, topic).inc(count)

    def message_acked(self, topic: str, latency_seconds: float | None = None, count: int = 1) -> None:
        """Count acks; with ``latency_seconds`` (produce → ack of those messages) also observe the latency."""
        self.messages_acked_total.labels(topic).inc(count)
        if latency_seconds is not None:
            self.produce_latency_seconds.observe(latency_seconds, count)

    def produce_latencies(self, bounds: Sequence[float], counts: Sequence[int], total_seconds: float) -> None:
        """Add produce → ack latencies counted elsewhere into buckets (``counts[-1]``: above every bound)."""
        self.produce_latency_seconds.add_counts(bounds, counts, total_seconds)

    def produce_error(self, topic: str, kind: str, count: int = 1) -> None:
        """``kind``: a bounded token such as the KafkaError name (``_MSG_TIMED_OUT``), never the error text."""
        self.produce_errors_total.labels(topic, kind).inc(count)

    # Coordination: checkpoints, leases, shards
    def checkpoint_written(self, table: str, shard: str, count: int = 1) -> None:
        self.checkpoints_total.labels(table, shard).inc(count)

    def checkpoint_failed(self, table: str, shard: str, reason: str, count: int = 1) -> None:
        """``reason``: a bounded token (``lease_lost``, ``unavailable``, ``store_error``...), never the error text."""
        with self._lock:
            self._checkpoint_failure_reasons.add(reason)
        self.checkpoint_failures_total.labels(table, shard, reason).inc(count)

    def lease_event(self, event: LeaseEvent | str, count: int = 1) -> None:
        """Count a lease transition; unknown events raise ValueError (keeps the label set bounded)."""
        self.lease_events_total.labels(_enum_value(LeaseEvent, event)).inc(count)

    def set_leases_held(self, worker: str, count: int) -> None:
        self.leases_held.labels(worker).set(count)

    def shard_finished(self, count: int = 1) -> None:
        self.shards_finished_total.inc(count)

    def trimmed_data(self, table: str, shard: str, count: int = 1) -> None:
        self.trimmed_data_events_total.labels(table, shard).inc(count)

    def set_lag(self, table: str, shard: str, *, records: float | None = None, seconds: float | None = None) -> None:
        """Set the shard's lag; a value left out keeps its last setting."""
        if records is not None:
            self.lag_records.labels(table, shard).set(records)
        if seconds is not None:
            self.lag_seconds.labels(table, shard).set(max(0.0, seconds))

    def set_retention(self, table: str, shard: str, *, age_seconds: float, used_ratio: float | None) -> None:
        """Set the age of the shard's oldest unread record and, when the expiration is known, its share of it."""
        self.oldest_unread_age_seconds.labels(table, shard).set(max(0.0, age_seconds))
        if used_ratio is not None:
            self.retention_used_ratio.labels(table, shard).set(max(0.0, used_ratio))

    def set_halted(self, table: str, shard: str, halted: bool) -> None:
        self.shard_halted.labels(table, shard).set(1 if halted else 0)

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
                self.oldest_unread_age_seconds,
                self.retention_used_ratio,
                self.shard_halted,
            ):
                with contextlib.suppress(KeyError):
                    metric.remove(table, shard)
            for reason in self._checkpoint_failure_reasons:
                with contextlib.suppress(KeyError):
                    self.checkpoint_failures_total.remove(table, shard, reason)


class ApplyMetrics(_MetricSet):
    """Metrics of the apply job: batches (count, duration, failures, time of the last one), per-message outcomes,
    rows written per target table, freshness (source commit → written), and how far the job is behind Kafka."""

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
        self.apply_last_batch_timestamp_seconds = self._gauge(
            "apply_last_batch_timestamp_seconds",
            "Unix time at which the last micro-batch finished (time() minus it: how long nothing was applied).",
        )
        self.apply_batch_failures_total = self._counter(
            "apply_batch_failures_total", "Micro-batches that failed (the job stops or retries them)."
        )
        self.apply_kafka_lag_messages = self._gauge(
            "apply_kafka_lag_messages",
            "Messages on the topics not read by the apply job yet (the Kafka source's maxOffsetsBehindLatest).",
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
        finished_at: float | None = None,
    ) -> None:
        """Everything one finished micro-batch reports, in one call (the counts match ``ApplyStats`` fields).
        ``finished_at``: Unix time the batch ended (default: now)."""
        self.apply_batches_total.inc()
        self.apply_batch_seconds.observe(duration_seconds)
        self.apply_last_batch_timestamp_seconds.set(time.time() if finished_at is None else finished_at)
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

    def batch_failed(self) -> None:
        self.apply_batch_failures_total.inc()

    def set_kafka_lag(self, messages: float) -> None:
        """Messages behind the end of the topics (Spark's Kafka source progress: ``maxOffsetsBehindLatest``)."""
        self.apply_kafka_lag_messages.set(max(0.0, messages))


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
