"""`cdcbridge run`: one bridge worker process, wiring the pieces together.

Start-up, in order: the Tablestore client and status table; every configured table's stream (a clear error if a
table is missing or has no stream, or with `source.wait_for_tables` a logged wait for it); the Kafka topics (created
with the configured partitions, checked against the recorded counts); the value schemas in the registry; then one
coordination Worker per table, all sharing one Kafka producer. Broker or registry outages at start are retried with
backoff and logged; nothing is checkpointed before everything is up. SIGTERM drains, checkpoints and releases the
leases so peers take over at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from functools import partial

from cdcbridge.bridge.end_time import watch_end_time
from cdcbridge.bridge.gc_tuning import tune_for_throughput
from cdcbridge.bridge.on_trimmed import TableTrimPolicy
from cdcbridge.bridge.partition_watch import PartitionWatch
from cdcbridge.bridge.processor import BridgeContext, BridgeProcessor
from cdcbridge.bridge.requested_snapshots import RequestedSnapshotRunner
from cdcbridge.bridge.row_lookup import SourceRowReader
from cdcbridge.bridge.trim_repair import TrimRepair
from cdcbridge.bridge.worker_metrics import StatsPump
from cdcbridge.changes import to_us
from cdcbridge.config import BridgeConfig, ConfigError
from cdcbridge.coordination.clock import SystemClock
from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore
from cdcbridge.coordination.stream.tablestore_access import TablestoreStreamAccess
from cdcbridge.coordination.worker import Worker
from cdcbridge.kafka.delivery_stats import DeliveryStats
from cdcbridge.kafka.sink import DEFAULT_PRODUCER_CONFIG, KafkaSink
from cdcbridge.kafka.topics import TopicAdmin, TopicSpec
from cdcbridge.observability.metrics import PRODUCE_LATENCY_BUCKETS, WorkerMetrics, start_metrics_server
from cdcbridge.observability.retention import RetentionThresholds, RetentionWatch
from cdcbridge.publish.tables import (
    BridgeStartError,
    TableRuntime,
    encoding_path,
    fast_encoders,
    prepare_tables,
    retry_until_up,
    source_client,
)
from cdcbridge.snapshot.fences import SnapshotFences
from cdcbridge.snapshot.incremental_runner import WorkerSnapshotRun
from cdcbridge.snapshot.incremental_state import IncrementalSnapshotStore
from cdcbridge.snapshot.state import SnapshotStateStore
from cdcbridge.snapshot.stream_start import StreamStartReader, wait_for_snapshots
from cdcbridge.tablestore.client import StreamClient
from cdcbridge.tablestore.errors import StreamError

log = logging.getLogger(__name__)


#: RECORD_IMAGE topics are compacted (the last image per key is the row); MUTATE_LOG topics keep every operation.
def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class BridgeRuntime:
    """The running pieces, kept so tests and `status` can look at them."""

    config: BridgeConfig
    worker_id: str
    tables: list[TableRuntime] = field(default_factory=list)
    #: The coordination worker of each table, by table name.
    workers: dict[str, Worker] = field(default_factory=dict)
    sink: KafkaSink | None = None
    #: Each table's stream expiration in seconds (DescribeStream), for the retention watch.
    expiration_seconds: dict[str, float] = field(default_factory=dict)


def prepare_dead_letters(config: BridgeConfig, topics: list[str], stop: threading.Event) -> int:
    """Create the dead-letter topic if missing; return the smallest `max.message.bytes` of the bridge's topics,
    above which a message is dead-lettered instead of stopping its shard."""
    topic = config.kafka.dead_letter_topic
    assert topic is not None
    admin = TopicAdmin(config.kafka.client_config())
    if not retry_until_up("checking the dead-letter topic", partial(admin.partition_counts, [topic]), stop):
        spec = TopicSpec(topic, 1, "delete", config.kafka.replication_factor)
        retry_until_up("creating the dead-letter topic", partial(admin.ensure, [spec], {}), stop)
    limits = retry_until_up("reading the topics' max.message.bytes", partial(admin.max_message_bytes, topics), stop)
    return min(limits.values())


def local_size_limit(producer: dict[str, object], topic_limit: int) -> dict[str, object]:
    """Producer settings that make librdkafka refuse an oversize message by itself, one message at a time, instead
    of the broker refusing the whole batch that holds it (which would also fail the batch's small messages)."""
    limit = min(int(producer.get("message.max.bytes", 1_000_000)), topic_limit)  # type: ignore[call-overload]
    batch = min(int(producer.get("batch.size", DEFAULT_PRODUCER_CONFIG["batch.size"])), limit)  # type: ignore[call-overload]
    return {"message.max.bytes": limit, "batch.size": batch}


def stream_expirations(streams: StreamClient, tables: list[TableRuntime]) -> dict[str, float]:
    """Each table's stream expiration in seconds; a table whose DescribeStream fails is left out (logged): its
    shards then show their age without the share of retention, and no warning."""
    expirations: dict[str, float] = {}
    for rt in tables:
        try:
            expirations[rt.table.name] = streams.describe_stream(rt.stream_id, shard_limit=1).expiration_hours * 3600.0
        except StreamError as error:
            log.warning("table %s: cannot read the stream's expiration, so no retention warnings: %s",
                        rt.table.name, error)  # fmt: skip
    return expirations


def start_bridge(config: BridgeConfig, worker_id: str, stop: threading.Event) -> BridgeRuntime:
    """Prepare every table and start its coordination worker; returns once all workers run.

    A table whose snapshot is running is waited for first (its stream records must not overtake the snapshot's
    images); with `bridge.end_time` a watch sets `stop` once every shard passed it.
    """
    source = config.source
    ots = source_client(config)
    streams = StreamClient(ots, check_crc=source.check_crc)
    runtime = BridgeRuntime(config, worker_id)
    store = TablestoreLeaseStore.from_settings(ots, config.coordination)
    store.ensure_table()
    prefix = config.kafka.topic_prefix
    runtime.tables, serializers = prepare_tables(config, ots, streams, stop)
    snapshots = SnapshotStateStore(ots, config.coordination.status_table)
    table_streams = [(rt.table.name, rt.stream_id) for rt in runtime.tables]
    if not wait_for_snapshots(snapshots, table_streams, stop, config.snapshot.wait_poll_seconds):
        raise BridgeStartError("stopped while waiting for a table's snapshot to finish")

    producer = {**config.kafka.client_config(), "client.id": f"cdcbridge-{worker_id}", **config.kafka.producer}
    dead_letter_over = 0
    if config.kafka.dead_letter_topic is not None:
        dead_letter_over = prepare_dead_letters(config, [t for rt in runtime.tables for t in rt.topics.values()], stop)
        producer = {**producer, **local_size_limit(producer, dead_letter_over)}
    sink = KafkaSink(
        producer,
        stats=DeliveryStats(PRODUCE_LATENCY_BUCKETS),  # counted per message in the sink, exported by the StatsPump
    )
    runtime.sink = sink
    rows = SourceRowReader(ots)
    incremental = config.snapshot.incremental
    incremental_store = IncrementalSnapshotStore(ots, config.coordination.status_table)
    for rt in runtime.tables:
        fences = SnapshotFences(
            incremental_store, rt.stream_id, rt.table.name, refresh_seconds=incremental.fence_refresh_seconds,
            exporter_timeout_seconds=incremental.exporter_timeout_seconds, clock=SystemClock(),
        )  # fmt: skip
        context = BridgeContext(
            table_format=rt.table, table=rt.table.name, instance=source.instance, topic_prefix=prefix,
            serialize=serializers.serialize, sink=sink, read_rows=rows.read_rows,
            stream_start=StreamStartReader(snapshots, rt.stream_id, rt.table.name),
            end_time_us=to_us(config.bridge.end_time) if config.bridge.end_time else None,
            dead_letter_topic=config.kafka.dead_letter_topic, dead_letter_over_bytes=dead_letter_over,
            fast_encoders=fast_encoders(rt, serializers, source.instance),
            columns=source.column_policy(rt.table.name),
            fences=fences, fence_margin_us=int(incremental.clock_skew_margin_seconds * 1_000_000),
        )  # fmt: skip
        log.info("table %s: %s", rt.table.name, encoding_path(rt.table.formats, context.fast_encoders))
        runtime.workers[rt.table.name] = Worker(
            worker_id=worker_id, stream_id=rt.stream_id, store=store,
            stream=TablestoreStreamAccess(streams, rt.table.name),
            processor_factory=lambda context=context: BridgeProcessor(context), settings=config.coordination,
            trim_policy=TableTrimPolicy(
                rt.table.name, rt.table.on_trimmed, worker_id, context.stream_start,
                TrimRepair(incremental_store, rt.stream_id, rt.table.name).request,
                workers_run_snapshots=incremental.run_in_workers,
            ),
        )  # fmt: skip
    runtime.expiration_seconds = stream_expirations(streams, runtime.tables)
    if config.bridge.end_time is not None:
        watch_end_time(streams, store.list_leases, table_streams, config.bridge, stop)
    return runtime


def start_snapshot_runner(
    config: BridgeConfig, worker_id: str, tables: list[str], stop: threading.Event
) -> RequestedSnapshotRunner | None:
    """With `snapshot.incremental.run_in_workers`, the worker runs its tables' requested snapshots (signal rows,
    trims) and takes over those whose exporter died (cdcbridge.bridge.requested_snapshots)."""
    settings = config.snapshot.incremental
    if not settings.run_in_workers:
        return None
    return RequestedSnapshotRunner(
        tables, lambda table: WorkerSnapshotRun(config, table, worker_id, stop), stop,
        poll_seconds=settings.worker_poll_seconds, timeout_seconds=settings.exporter_timeout_seconds,
    ).start()  # fmt: skip


def run_bridge(
    config: BridgeConfig,
    worker_id: str | None = None,
    stop: threading.Event | None = None,
    *,
    own_process: bool = False,
) -> None:
    """Run until `stop` is set (SIGTERM in the CLI): then drain, checkpoint, release and close the producer.

    `own_process`: the process exists for this worker (the CLI, the benchmark), so its cycle-collector settings may
    be tuned for throughput (cdcbridge.bridge.gc_tuning); a library caller keeps its own."""
    stop = stop or threading.Event()
    worker_id = worker_id or default_worker_id()
    if not config.source.tables:
        raise ConfigError("source.tables is empty; list the tables to replicate")
    metrics = WorkerMetrics()
    server = None
    observability = config.observability
    if observability.metrics_port is not None:  # before start-up, so a worker waiting for its table is scraped too
        server = start_metrics_server(observability.metrics_port, observability.metrics_host, registry=metrics)
        log.info("metrics at %s", server.url)
    try:
        runtime = start_bridge(config, worker_id, stop)
    except BaseException:
        if server is not None:
            server.stop()
        raise
    if own_process:
        tune_for_throughput()  # after start-up: its objects are frozen out of the cycle collector's scans
    failures: list[BaseException] = []

    def run_table(rt: TableRuntime) -> None:
        try:
            runtime.workers[rt.table.name].run(stop)
        except BaseException as error:  # a fenced or failed worker stops the whole process, visibly
            failures.append(error)
            log.error("worker for table %s stopped: %s", rt.table.name, error)
            stop.set()

    threads = [threading.Thread(target=run_table, args=(rt,), name=f"worker-{rt.table.name}") for rt in runtime.tables]
    log.info("bridge worker %s running %d table(s)", worker_id, len(threads))
    pump = StatsPump(
        metrics, dict(runtime.workers), worker_id,
        delivery=runtime.sink.stats if runtime.sink is not None else None,
        topic_tables={topic: rt.table.name for rt in runtime.tables for topic in rt.topics.values()},
        expiration_seconds=runtime.expiration_seconds,
        retention=RetentionWatch(
            RetentionThresholds(observability.retention_warning_share, observability.retention_error_share),
            observability.retention_log_repeat_seconds,
        ),
    ).start()  # fmt: skip
    partitions = PartitionWatch(
        TopicAdmin(config.kafka.client_config()),
        {topic: count for rt in runtime.tables for topic, count in rt.partitions.items()},
        stop,
        config.kafka.partition_check_interval_seconds,
    ).start()
    for thread in threads:
        thread.start()
    snapshots = start_snapshot_runner(config, worker_id, [rt.table.name for rt in runtime.tables], stop)
    try:
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        if snapshots is not None:
            snapshots.join(60)  # the exporter stops between chunks (or abandons the open one) and clears its heartbeat
        partitions.stop()
        pump.stop()
        if server is not None:
            server.stop()
        if runtime.sink is not None:
            remaining = runtime.sink.close(30)
            if remaining:
                log.warning("%d messages were still unacknowledged at exit; they will be sent again", remaining)
    if partitions.failure is not None:
        raise partitions.failure
    if failures:
        raise failures[0]
