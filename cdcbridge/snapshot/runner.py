"""`cdcbridge snapshot`: export every configured table's existing rows, so the bridge can stream from a start
taken before the export (base + incremental, DESIGN §8).

Per table, in order:

1. The stream start T0 (wall clock minus `snapshot.clock_skew_margin_seconds`) is stored in the status table
   before anything is read. A table already DONE is left alone; one RUNNING (an interrupted run) is resumed with
   its stored T0 and ranges.
2. A new snapshot is refused while a bridge worker holds a live lease of the table: its stream messages could reach
   Kafka before the rows' images, and the apply guard would then keep the stream's partial rows. (Workers started
   while a snapshot runs wait for it.)
3. The key range is cut with ComputeSplitPointsBySize; the ranges are stored, then exported in parallel
   (`snapshot.parallelism` threads), each from where it stopped.
4. Once every range is acknowledged the table is marked DONE: workers then skip records committed before T0 and
   replay the rest onto the images.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import IO, Any

from cdcbridge.changes import format_time_us
from cdcbridge.config import BridgeConfig
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore, lease_renew_times
from cdcbridge.kafka.schemas import TopicValueSerializers
from cdcbridge.kafka.sink import KafkaSink
from cdcbridge.publish.tables import TableRuntime, fast_encoders, prepare_tables, source_client
from cdcbridge.snapshot.errors import SnapshotError, SnapshotRefusedError
from cdcbridge.snapshot.export import Publisher, RangeExporter, RowCounter
from cdcbridge.snapshot.progress_display import ProgressDisplay
from cdcbridge.snapshot.split_points import key_ranges
from cdcbridge.snapshot.state import RangeProgress, SnapshotRecord, SnapshotState, SnapshotStateStore
from cdcbridge.tablestore.client import StreamClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableSnapshotResult:
    table: str
    start_us: int
    rows: int
    ranges: int
    seconds: float
    rows_per_second: float
    resumed: bool = False
    already_done: bool = False

    def line(self) -> str:
        start = format_time_us(self.start_us)
        if self.already_done:
            return f"table {self.table}: snapshot already done ({self.rows:,} rows, stream start {start})"
        how = "resumed and finished" if self.resumed else "done"
        return (f"table {self.table}: snapshot {how}, {self.rows:,} rows in {self.ranges} range(s), "
                f"{self.seconds:.1f}s ({self.rows_per_second:,.0f} rows/s this run); stream start {start}")  # fmt: skip


def run_snapshot(
    config: BridgeConfig, stop: threading.Event | None = None, *, progress_file: IO[str] | None = None,
    clock: Callable[[], float] = time.time,
) -> list[TableSnapshotResult]:  # fmt: skip
    """Snapshot every table of `config.source.tables` (see the module docstring); raises SnapshotError (or a
    start-up error of the bridge) when a table cannot be finished; running it again resumes."""
    stop = stop or threading.Event()
    ots = source_client(config)
    streams = StreamClient(ots, check_crc=config.source.check_crc)
    TablestoreLeaseStore.from_settings(ots, config.coordination).ensure_table()
    tables, serializers = prepare_tables(config, ots, streams, stop)
    client_id = f"cdcbridge-snapshot-{socket.gethostname()}-{os.getpid()}"
    sink = KafkaSink({**config.kafka.client_config(), "client.id": client_id, **config.kafka.producer})
    results = []
    try:
        for table in tables:
            snapshot = TableSnapshot(config, ots, table, serializers, sink, stop, progress_file, clock)
            result = snapshot.run()
            log.info("%s", result.line())
            results.append(result)
    finally:
        remaining = sink.close(30)
        if remaining:
            log.warning("%d snapshot messages were unacknowledged at exit; their ranges resume before them", remaining)
    return results


def live_lease_owners(leases: list[Lease], renewed_ms: dict[str, int], *, now_ms: float, lease_ms: float) -> list[str]:
    """Owners of unfinished leases renewed less than a lease period ago (by the LeaseCounter cell's version)."""
    return sorted({
        lease.owner for lease in leases
        if lease.is_owned and not lease.is_finished and now_ms - renewed_ms.get(lease.shard_id, 0) < lease_ms
    })  # fmt: skip


class TableSnapshot:
    """One table's snapshot, from its stored state to DONE."""

    def __init__(
        self, config: BridgeConfig, ots: Any, table: TableRuntime, serializers: TopicValueSerializers,
        sink: KafkaSink, stop: threading.Event, progress_file: IO[str] | None, clock: Callable[[], float],
    ) -> None:  # fmt: skip
        self._config = config
        self._ots = ots
        self._table = table
        self._name = table.table.name
        self._stream_id = table.stream_id
        self._store = SnapshotStateStore(ots, config.coordination.status_table)
        self._publisher = Publisher(
            table=self._name, instance=config.source.instance, table_format=table.table,
            topic_prefix=config.kafka.topic_prefix, topics=table.topics, serialize=serializers.serialize, sink=sink,
            fast_encoders=fast_encoders(table, serializers, config.source.instance),
            columns=config.source.column_policy(self._name),
        )  # fmt: skip
        self._stop = stop
        self._progress_file = progress_file
        self._clock = clock

    def run(self) -> TableSnapshotResult:
        started = time.monotonic()
        record = self._store.read(self._stream_id, self._name)
        if record is not None and record.state is SnapshotState.DONE:
            return TableSnapshotResult(self._name, record.start_us, record.rows, record.ranges or 0, 0.0, 0.0,
                                       already_done=True)  # fmt: skip
        resumed = record is not None
        if record is None:
            record = self._begin()
        else:
            log.info("resuming the snapshot of table %s (stream start %s)", self._name, format_time_us(record.start_us))
        ranges = self._ranges(record)
        rows, rate = self._export(record, ranges)
        self._store.finish(self._stream_id, self._name, rows, int(self._clock() * 1000))
        return TableSnapshotResult(self._name, record.start_us, rows, len(ranges), time.monotonic() - started, rate,
                                   resumed=resumed)  # fmt: skip

    # ----- steps ---------------------------------------------------------------------------------------------

    def _begin(self) -> SnapshotRecord:
        """Store T0 first, then look for live workers: a worker that takes a lease after this check finds the
        snapshot RUNNING when its shard starts and waits."""
        now = self._clock()
        start_us = int((now - self._config.snapshot.clock_skew_margin_seconds) * 1_000_000)
        record = self._store.create(self._stream_id, self._name, start_us, int(now * 1000))
        try:
            owners = self._live_workers()
        except Exception:
            self._store.delete(self._stream_id, self._name)
            raise
        if owners:
            self._store.delete(self._stream_id, self._name)
            raise SnapshotRefusedError(
                f"bridge workers {', '.join(owners)} are running for table {self._name}; stop them (SIGTERM) and "
                "run the snapshot again (workers started while it runs wait for it)"
            )
        log.info("snapshot of table %s begins; its stream start is %s", self._name, format_time_us(start_us))
        return record

    def _live_workers(self) -> list[str]:
        """Owners of unfinished leases of the table renewed within a lease period (a killed worker's lease ages out
        after `coordination.lease_duration_seconds`)."""
        status_table = self._config.coordination.status_table
        leases = TablestoreLeaseStore.from_settings(self._ots, self._config.coordination).list_leases(self._stream_id)
        renewed = lease_renew_times(self._ots, status_table, self._stream_id)
        lease_ms = self._config.coordination.lease_duration_seconds * 1000
        return live_lease_owners(leases, renewed, now_ms=self._clock() * 1000, lease_ms=lease_ms)

    def _ranges(self, record: SnapshotRecord) -> list[RangeProgress]:
        if record.ranges is not None:
            stored = self._store.read_ranges(self._stream_id)
            if len(stored) == record.ranges:
                return stored
        # Ranges are stored before their count, and nothing is exported before the count: recomputing is safe.
        computed = key_ranges(self._ots, self._name, self._config.snapshot.split_size_bytes)
        log.info("table %s: %d key range(s)", self._name, len(computed))
        return self._store.store_ranges(self._stream_id, self._name, computed)

    def _export(self, record: SnapshotRecord, ranges: list[RangeProgress]) -> tuple[int, float]:
        """Export the unfinished ranges in parallel; returns (rows of the whole snapshot, rows/s of this run)."""
        settings = self._config.snapshot
        pending = [progress for progress in ranges if not progress.done]
        counter = RowCounter()
        counter.add(sum(progress.rows for progress in ranges))
        halt = threading.Event()
        exporter = RangeExporter(
            ots=self._ots, publisher=self._publisher, store=self._store, stream_id=self._stream_id,
            start_us=record.start_us, page_rows=settings.page_rows, counter=counter, halt=halt,
        )  # fmt: skip
        done = len(ranges) - len(pending)
        display = ProgressDisplay(self._name, len(ranges), done, counter.rows, file=self._progress_file)
        failures: list[BaseException] = []
        with ThreadPoolExecutor(max(1, min(settings.parallelism, len(pending))), f"snapshot-{self._name}") as pool:
            running: set[Future[RangeProgress]] = {pool.submit(exporter.export, progress) for progress in pending}
            while running:
                finished, running = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in finished:
                    error = future.exception()
                    if error is not None:
                        failures.append(error)
                        halt.set()  # the other ranges stop after their current page, keeping their progress
                    elif future.result().done:
                        done += 1
                if self._stop.is_set():
                    halt.set()
                display.show(done, counter.rows)
        rate = display.close(counter.rows)
        if failures:
            raise failures[0]
        if done < len(ranges):
            raise SnapshotError(
                f"the snapshot of table {self._name} was stopped at {counter.rows:,} rows ({done}/{len(ranges)} "
                "ranges); run `cdcbridge snapshot` again to resume it"
            )
        return counter.rows, rate
