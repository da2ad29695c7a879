"""`cdcbridge apply`: the Structured Streaming job that reads the bridge's topics and applies them to a target.

Shape: Kafka source (the configured tables' topics or a pattern, headers included) → ``foreachBatch``: for a target that
takes Spark frames (Delta, PostgreSQL) the batch is decoded, validated, deduplicated and folded in the JVM and written
in one guarded write with the batch marker (:mod:`.spark.batch`); the driver only reads counts. A batch holding anything
that must be judged message by message (bad input, a row the target would refuse, ...) and every batch for the
Tablestore target take the reference path instead: decode on Spark (:mod:`.spark.decode`), stream the batch (bounded by
``maxOffsetsPerTrigger``) to the driver and fold it there in Python (:mod:`.driver.micro_batch`). So does a small batch
(at most ``apply.small_batch_max_messages``, known from its Kafka offset ranges, :mod:`.batch_size`): its few rows cost
less on the driver than the Spark path's jobs, whose fixed cost does not shrink with the batch. The driver reads and
decodes those ranges itself, with no Spark job at all (:mod:`.driver.kafka_fetch`, :mod:`.driver.value_decode`); where
it cannot (``apply.kafka_options`` needs the Java client, or the read fails or times out) the batch is collected in one
Spark job. The checkpoint location keeps the offsets, so a restart resumes at the first batch not committed to the
checkpoint; Spark re-runs an interrupted batch with the same id and offsets, and the target's marker makes that a no-op.

Metrics (``observability.metrics_port``): one update per batch, never per message (:class:`ApplyMetrics`).

Batch markers use the app id ``<apply.app_id>-<query id>``: Spark keeps the query id in the checkpoint, so a
restart continues the same markers, while a new checkpoint location (batch ids restart at 0) gets fresh ones
instead of having its first batches skipped as "already applied".
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from cdcbridge.apply.batch_report import BatchReport
from cdcbridge.apply.batch_size import batch_messages, kafka_offset_ranges
from cdcbridge.apply.core.policy import BadInputPolicy
from cdcbridge.apply.core.purge import purge_horizon_ms
from cdcbridge.apply.driver.kafka_fetch import FetchedMessage, KafkaFetchError, KafkaRangeReader, OffsetRange
from cdcbridge.apply.driver.kafka_records import KafkaRecord
from cdcbridge.apply.driver.micro_batch import MicroBatchApplier
from cdcbridge.apply.driver.value_decode import EnvelopeDecoder
from cdcbridge.apply.errors import ApplyError, ApplyJobError
from cdcbridge.apply.kafka_source import driver_consumer_config, kafka_source_options
from cdcbridge.apply.routing import TopicRouting
from cdcbridge.apply.spark.batch import ReferencePathNeeded, SchemaIdsNeeded, SparkBatchApplier
from cdcbridge.apply.spark.decode import UnknownSchemaId, decoded_records
from cdcbridge.apply.target import ApplyTarget, SparkFoldTarget
from cdcbridge.apply.targets.factory import build_target
from cdcbridge.apply.topic_wait import wait_for_topics
from cdcbridge.apply.writer_schemas import WriterSchema, WriterSchemas
from cdcbridge.config import BridgeConfig
from cdcbridge.kafka.topics import TopicAdmin
from cdcbridge.observability.metrics import ApplyMetrics, start_metrics_server

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.5
_STOP_WAIT_SECONDS = 300.0  # a requested stop waits this long for the running batch to finish
_MAX_NEW_SCHEMA_IDS = 20
_MS_PER_HOUR = 3_600_000
#: After this many small batches in a row the driver could not read, it stops trying for the job's life (each try
#: may cost the read timeout).
_MAX_DRIVER_FETCH_FAILURES = 3


@dataclass
class ApplySummary:
    """What a run of the job did."""

    app_id: str = ""
    target: str = ""
    seconds: float = 0.0
    report: BatchReport = field(default_factory=BatchReport)
    purged_rows: int = 0
    #: (batch id, messages, seconds) of every micro-batch, in order.
    batch_times: list[tuple[int, int, float]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "app_id": self.app_id,
            "target": self.target,
            "seconds": round(self.seconds, 3),
            "purged_rows": self.purged_rows,
            **self.report.as_dict(),
        }

    def lines(self) -> list[str]:
        figures = self.report.as_dict()
        return [
            f"apply job {self.app_id} → {self.target}: {figures['batches']} batches ({figures['spark_batches']} on "
            f"Spark, {figures['batches_skipped']} already applied) in {self.seconds:.1f}s",
            f"messages {figures['messages']}: applied {figures['applied']}, duplicates {figures['duplicates']}, "
            f"stale {figures['stale']}, dead-lettered {figures['dead_lettered']}",
            f"rows written {figures['rows_written']}, purged {self.purged_rows}",
        ]


class _BatchHandler:
    """The foreachBatch function: apply (on Spark, or the reference path), count, purge now and then; keeps the
    first error for the caller."""

    def __init__(
        self,
        config: BridgeConfig,
        target: ApplyTarget,
        routing: TopicRouting,
        summary: ApplySummary,
        clock: Callable[[], float] = time.monotonic,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        metrics: ApplyMetrics | None = None,
    ) -> None:
        self.config = config
        self.target = target
        self.routing = routing
        self.summary = summary
        self.schemas = WriterSchemas(config.kafka.schema_registry.client_config())
        self.policy = BadInputPolicy(config.apply.on_bad_record.value)
        self.app_id_ready = threading.Event()
        self.applier: MicroBatchApplier | None = None
        self.spark_applier: SparkBatchApplier | None = None
        self.error: BaseException | None = None
        self.clock = clock
        self.wall_clock_ms = wall_clock_ms
        self.metrics = metrics
        self.next_purge = clock()
        consumer_config = driver_consumer_config(config)
        self.driver_fetch = KafkaRangeReader(consumer_config) if consumer_config is not None else None
        self.decoder = EnvelopeDecoder()
        self.driver_fetch_failures = 0

    def start(self, app_id: str) -> None:
        self.applier = MicroBatchApplier(self.target, self.routing, app_id, self.policy)
        if isinstance(self.target, SparkFoldTarget):
            self.spark_applier = SparkBatchApplier(self.target, self.routing, app_id)
        self.summary.app_id = app_id
        self.app_id_ready.set()

    def close(self) -> None:
        if self.driver_fetch is not None:
            self.driver_fetch.close()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        try:
            if not self.app_id_ready.wait(60):
                raise ApplyJobError("the streaming query did not report its id within 60 s")
            assert self.applier is not None
            started = time.monotonic()
            report = self._apply(batch, batch_id)
            seconds = time.monotonic() - started
            self.summary.report += report
            self.summary.batch_times.append((batch_id, report.stats.messages, seconds))
            self._count(report, seconds)
            log.info(
                "batch %d (%s): %d messages, %d applied, %d duplicates, %d stale, %d dead letters, %d rows written "
                "in %.2fs (decode %.2f, read %.2f, fold %.2f, write %.2f)%s",
                batch_id,
                _path(report),
                report.stats.messages,
                report.stats.applied,
                report.stats.duplicates,
                report.stats.stale,
                report.stats.dead_lettered,
                report.rows_written,
                time.monotonic() - started,
                report.seconds_decode,
                report.seconds_read,
                report.seconds_fold,
                report.seconds_write,
                " (already applied)" if report.batches_skipped else "",
            )
            self._maybe_purge()
        except BaseException as error:
            if self.error is None:
                self.error = error
            if self.metrics is not None:
                self.metrics.batch_failed()
            raise

    def _count(self, report: BatchReport, seconds: float) -> None:
        """One metrics update per batch."""
        if self.metrics is None:
            return
        now_ms = self.wall_clock_ms()
        self.metrics.batch_applied(
            seconds,
            applied=report.stats.applied,
            duplicates=report.stats.duplicates,
            stale=report.stats.stale,
            dead_lettered=report.stats.dead_lettered,
            rows_written=report.rows_by_table,
            freshness_seconds=[(now_ms - ts) / 1000 for ts in report.source_ts_sample],
        )

    def _apply(self, batch: DataFrame, batch_id: int) -> BatchReport:
        """Apply on Spark where the target allows it, else (or when the batch needs it, or is small) on the
        reference path; a schema id met for the first time is fetched and the batch decoded again (neither path
        writes before it has read the whole batch)."""
        if self.spark_applier is not None:
            ranges = kafka_offset_ranges(batch)
            messages = None if ranges is None else batch_messages(ranges)
            if ranges is not None and self._is_small(messages):
                report = self._apply_small(batch, batch_id, ranges)
                report.small_batches = 1
                return report
            for _ in range(_MAX_NEW_SCHEMA_IDS):
                try:
                    return self.spark_applier.apply(batch_id, batch, self.schemas.known(), messages)
                except SchemaIdsNeeded as needed:
                    self.schemas.resolve(needed.schema_ids)
                except ReferencePathNeeded as reason:
                    log.info("batch %d takes the reference path: %s", batch_id, reason)
                    break
        return self._apply_reference(batch, batch_id)

    def _is_small(self, messages: int | None) -> bool:
        """Whether a batch of `messages` (from its Kafka offset ranges, read from its plan without a job) holds at
        most ``apply.small_batch_max_messages``: then the reference path is the cheaper one, a read of the
        batch on the driver, a read of only its stored rows, a fold on the driver and one write, where the Spark
        path runs several jobs whose fixed cost does not shrink with the batch (benchmarks/history.md,
        2026-11-25 trickle)."""
        return messages is not None and messages <= self.config.apply.small_batch_max_messages

    def _apply_small(self, batch: DataFrame, batch_id: int, ranges: list[OffsetRange]) -> BatchReport:
        """A small batch read and decoded on the driver, or collected in one Spark job where the driver cannot
        read it."""
        started = time.perf_counter()
        messages = self._read_on_driver(batch_id, ranges)
        if messages is None:
            return self._apply_reference(batch, batch_id, at_once=True)
        seconds = time.perf_counter() - started
        report = self._apply_records(batch_id, lambda schemas: self.decoder.records(messages, schemas))
        report.driver_fetches = 1
        report.seconds_decode += seconds
        return report

    def _read_on_driver(self, batch_id: int, ranges: list[OffsetRange]) -> list[FetchedMessage] | None:
        """The batch's messages read by the driver's consumer, or None (the Spark job reads them)."""
        if self.driver_fetch is None:
            return None
        try:
            messages = self.driver_fetch.read(ranges)
        except KafkaFetchError as error:
            self.driver_fetch_failures += 1
            if self.driver_fetch_failures >= _MAX_DRIVER_FETCH_FAILURES:
                log.warning(
                    "batch %d: the driver could not read %d small batches in a row (%s); small batches are read "
                    "by a Spark job from now on",
                    batch_id,
                    self.driver_fetch_failures,
                    error,
                )
                self.driver_fetch.close()
                self.driver_fetch = None
            else:
                level = logging.WARNING if self.driver_fetch_failures == 1 else logging.INFO
                log.log(level, "batch %d: the driver could not read it (%s); a Spark job reads it", batch_id, error)
            return None
        self.driver_fetch_failures = 0
        return messages

    def _apply_reference(self, batch: DataFrame, batch_id: int, at_once: bool = False) -> BatchReport:
        return self._apply_records(batch_id, lambda schemas: decoded_records(batch, schemas, at_once=at_once))

    def _apply_records(
        self, batch_id: int, records: Callable[[Mapping[int, WriterSchema]], Iterator[KafkaRecord]]
    ) -> BatchReport:
        """Apply the batch's records (decoded with the schemas known so far) on the driver; a schema id met for
        the first time is fetched and the batch decoded again."""
        assert self.applier is not None
        for _ in range(_MAX_NEW_SCHEMA_IDS):
            try:
                return self.applier.apply(batch_id, records(self.schemas.known()))
            except UnknownSchemaId as unknown:
                self.schemas.resolve([unknown.schema_id])
        raise ApplyJobError(f"batch {batch_id} holds more than {_MAX_NEW_SCHEMA_IDS} schema ids never seen before")

    def _maybe_purge(self) -> None:
        hours = self.config.apply.purge_deleted_after_hours
        if hours is None or self.clock() < self.next_purge:
            return
        horizon = purge_horizon_ms(self.wall_clock_ms(), int(hours * _MS_PER_HOUR))
        for table in self.routing.applied_formats:
            self.summary.purged_rows += self.target.purge_deleted(table, horizon)
        self.next_purge = self.clock() + self.config.apply.purge_interval_seconds


def run_apply(
    config: BridgeConfig,
    *,
    once: bool = False,
    stop_event: threading.Event | None = None,
    spark: SparkSession | None = None,
    target: ApplyTarget | None = None,
) -> ApplySummary:
    """Run the apply job: with `once`, until the topics' current end (availableNow), else until `stop_event` is
    set or SIGTERM/SIGINT arrives. Raises the first bad-input error (naming topic/partition/offset) under the
    stop policy, or :class:`ApplyJobError` if the query fails otherwise. With ``apply.wait_for_topics`` it first
    waits for its topics to exist (an empty summary if stopped meanwhile). `spark` and `target` are for tests and
    embedding; by default the job builds its session from ``apply.spark`` (or joins the Spark that launched the
    process) and the configured target."""
    if config.apply.wait_for_topics and not _topics_ready(config, stop_event):
        return ApplySummary(target=config.apply.target.value)
    own_session = spark is None
    if spark is None:
        from cdcbridge.apply.spark.session import build_spark_session

        spark = build_spark_session("cdcbridge-apply", config.apply.spark)
    routing = TopicRouting.from_config(config)
    target = target or build_target(config, spark)
    summary = ApplySummary(target=target.name)
    handler = _BatchHandler(config, target, routing, summary)
    stop = stop_event or threading.Event()
    restore = _install_signal_handlers(stop) if stop_event is None else None
    started = time.monotonic()
    server = None
    try:
        handler.metrics, server = _metrics(config)
        target.prepare(list(routing.applied_formats))
        handler.schemas.preload(f"{topic}-value" for topic in routing.subscribed_topics())
        query = start_query(spark, config, routing, handler, once)
        handler.start(f"{config.apply.app_id}-{query.id}")
        log.info("apply job %s reading %s", summary.app_id, kafka_source_options(config, routing).get("subscribe"))
        _await(query, stop, on_progress=partial(_report_lag, handler.metrics))
        _raise_failure(query, handler, stopping=stop.is_set())
    finally:
        summary.seconds = time.monotonic() - started
        if restore is not None:
            restore()
        handler.close()
        target.close()
        if server is not None:
            server.stop()
        if own_session:
            spark.stop()
    return summary


def _path(report: BatchReport) -> str:
    """Which way a batch went, for its log line."""
    if report.spark_batches:
        return "spark, new keys" if report.new_key_batches else "spark"
    if report.small_batches:
        return "small batch, read by the driver" if report.driver_fetches else "small batch"
    return "reference path"


def _topics_ready(config: BridgeConfig, stop_event: threading.Event | None) -> bool:
    """Wait for the job's topics (apply.wait_for_topics); False when stopped first (SIGTERM when no event is given)."""
    admin = TopicAdmin(config.kafka.client_config(), timeout=10.0, quiet=True)
    stop = stop_event or threading.Event()
    restore = _install_signal_handlers(stop) if stop_event is None else None
    try:
        return wait_for_topics(TopicRouting.from_config(config), admin.partition_counts, stop)
    finally:
        if restore is not None:
            restore()


def _metrics(config: BridgeConfig) -> tuple[ApplyMetrics | None, Any]:
    """The job's metrics and their endpoint when ``observability.metrics_port`` is set (else none)."""
    observability = config.observability
    if observability.metrics_port is None:
        return None, None
    metrics = ApplyMetrics()
    server = start_metrics_server(observability.metrics_port, observability.metrics_host, registry=metrics)
    log.info("apply job metrics at %s", server.url)
    return metrics, server


def start_query(
    spark: SparkSession,
    config: BridgeConfig,
    routing: TopicRouting,
    handler: Callable[[DataFrame, int], None],
    once: bool,
) -> Any:
    """Start the job's streaming query: the configured Kafka source, `handler` per micro-batch, the configured
    checkpoint; with `once` up to the topics' current end (availableNow), else every ``trigger_seconds``."""
    reader = spark.readStream.format("kafka")
    for name, value in kafka_source_options(config, routing).items():
        reader = reader.option(name, value)
    writer = (
        reader.load()
        .writeStream.foreachBatch(handler)
        .option("checkpointLocation", config.apply.checkpoint_location)
        .queryName(f"cdcbridge_apply_{config.apply.app_id}".replace("-", "_"))
    )
    writer = (
        writer.trigger(availableNow=True)
        if once
        else writer.trigger(processingTime=f"{config.apply.trigger_seconds} seconds")
    )
    return writer.start()


def _await(query: Any, stop: threading.Event, on_progress: Callable[[Any], None] = lambda _: None) -> None:
    while query.isActive:
        if stop.is_set():
            _stop_between_batches(query)
            break
        try:
            query.awaitTermination(_POLL_SECONDS)
        except Exception:  # the query failed: _raise_failure reports it
            break
        on_progress(query.lastProgress)


def kafka_lag(progress: Mapping[str, Any] | None) -> float | None:
    """The most messages any subscribed partition is behind its end, from a query progress (Spark's Kafka source
    reports ``maxOffsetsBehindLatest`` per source); None before the first progress."""
    if not progress:
        return None
    behind = [
        float(source["metrics"]["maxOffsetsBehindLatest"])
        for source in progress.get("sources") or ()
        if (source.get("metrics") or {}).get("maxOffsetsBehindLatest") not in (None, "")
    ]
    return max(behind) if behind else None


def _report_lag(metrics: ApplyMetrics | None, progress: Mapping[str, Any] | None) -> None:
    lag = kafka_lag(progress)
    if metrics is not None and lag is not None:
        metrics.set_kafka_lag(lag)


def _stop_between_batches(query: Any, clock: Callable[[], float] = time.monotonic) -> None:
    """Stop when no trigger runs, so a requested stop does not cut a batch short; after `_STOP_WAIT_SECONDS` of
    one long batch it stops anyway (the interrupted batch is re-run idempotently on restart)."""
    deadline = clock() + _STOP_WAIT_SECONDS
    while query.isActive and clock() < deadline:
        try:
            if not query.status.get("isTriggerActive", False):
                break
        except Exception:  # the query ended meanwhile
            break
        time.sleep(_POLL_SECONDS / 4)
    query.stop()


def _raise_failure(query: Any, handler: _BatchHandler, stopping: bool = False) -> None:
    failure = query.exception()
    if failure is None and handler.error is None:
        return
    if stopping and failure is None and _is_interruption(handler.error):
        log.warning("stopped during batch; it is applied again (idempotently) when the job restarts")
        return
    if isinstance(handler.error, ApplyError):
        raise handler.error
    if handler.error is not None:
        raise ApplyJobError(f"micro-batch failed: {type(handler.error).__name__}: {handler.error}") from handler.error
    text = str(failure).strip().splitlines()[0] if str(failure).strip() else repr(failure)
    raise ApplyJobError(f"the streaming query failed: {text}")


def _is_interruption(error: BaseException | None) -> bool:
    """A batch cut short by our own query.stop() (Spark interrupts or cancels its jobs), not a real failure."""
    text = f"{type(error).__name__} {error}".lower() if error is not None else ""
    return any(word in text for word in ("interrupt", "cancelled", "canceled"))


def _install_signal_handlers(stop: threading.Event) -> Callable[[], None] | None:
    """SIGTERM/SIGINT set `stop` (the query stops between batches' polls); only possible in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def request_stop(signum: int, frame: Any) -> None:
        log.info("signal %d: stopping the apply job after the current batch", signum)
        stop.set()

    for sig in previous:
        signal.signal(sig, request_stop)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
