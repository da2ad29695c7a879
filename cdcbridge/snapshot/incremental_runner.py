"""`cdcbridge snapshot --table T` and its siblings: pick (or request) a table's incremental snapshot, claim it, run
the exporter in the foreground; change a snapshot's state (pause, resume, cancel); run the PENDING requests that
signal rows left.

Which snapshot a run takes: with --id that one; else an unfinished one of the table over the same range whose
exporter is dead (taken over: a killed exporter resumes) or that waits for one (PENDING, e.g. a signal row);
else a new request. A snapshot whose exporter is alive is refused with its id and exporter.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from cdcbridge.config import BridgeConfig
from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore
from cdcbridge.kafka.sink import KafkaSink
from cdcbridge.publish.tables import fast_encoders, prepare_tables, source_client
from cdcbridge.snapshot.errors import SnapshotError
from cdcbridge.snapshot.export import Publisher
from cdcbridge.snapshot.incremental import (
    ExporterSettings,
    IncrementalExporter,
    IncrementalResult,
    StreamShards,
)
from cdcbridge.snapshot.incremental_state import (
    IncrementalSnapshot,
    IncrementalSnapshotStore,
    IncrementalState,
    RequestedBy,
    new_exporter_id,
)
from cdcbridge.snapshot.key_bounds import KeyBound, describe_bound
from cdcbridge.snapshot.key_text import parse_key_text
from cdcbridge.snapshot.report_quorum import shard_nodes
from cdcbridge.tablestore.client import StreamClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SnapshotRequest:
    """What `cdcbridge snapshot --table T ...` asks for (texts as given on the command line)."""

    table: str
    begin_text: str | None = None
    end_text: str | None = None
    rows_per_second: float | None = None
    chunk_rows: int | None = None
    snapshot_id: str | None = None


def pick_snapshot(
    snapshots: list[IncrementalSnapshot], *, now_ms: int, timeout_ms: float, begin: KeyBound | None,
    end: KeyBound | None, snapshot_id: str | None = None, any_range: bool = False,
) -> IncrementalSnapshot | None:  # fmt: skip
    """The snapshot a run should claim among the table's `snapshots` (None: request a new one). Raises
    SnapshotError when the one it would take runs under a live exporter, or `snapshot_id` is not resumable."""
    if snapshot_id is not None:
        chosen = [s for s in snapshots if s.snapshot_id == snapshot_id]
        if not chosen:
            raise SnapshotError(f"no incremental snapshot {snapshot_id}; `cdcbridge status` lists them")
        candidates = chosen
    else:
        candidates = [s for s in snapshots if not s.state.finished
                      and (any_range or (s.begin, s.end) == (begin, end))]  # fmt: skip
    for snapshot in candidates:
        if snapshot.state.finished:
            raise SnapshotError(f"incremental snapshot {snapshot.snapshot_id} is {snapshot.state.value}; request a new "
                                "one (leave out --id)")  # fmt: skip
        if snapshot.state is IncrementalState.PENDING and not snapshot.exporter_id:
            return snapshot
        age = now_ms - snapshot.heartbeat_ms
        if snapshot.exporter_id and age <= timeout_ms:
            raise SnapshotError(
                f"incremental snapshot {snapshot.snapshot_id} of table {snapshot.table} runs under exporter "
                f"{snapshot.exporter_id} (heartbeat {age / 1000:.1f}s ago); let it finish, or pause / cancel it "
                "with `cdcbridge snapshot pause|cancel`"
            )
        return snapshot
    return None


class IncrementalSnapshotRun:
    """The exporter's surroundings for one table: source client, status store, Kafka publisher, stream shards."""

    def __init__(self, config: BridgeConfig, table: str, stop: threading.Event,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        table_config = next((t for t in config.source.tables if t.name == table), None)
        if table_config is None:
            names = ", ".join(t.name for t in config.source.tables)
            raise SnapshotError(f"table {table} is not in source.tables ({names}); add it to the configuration first")
        self._config = config.model_copy(update={"source": config.source.model_copy(update={"tables": [table_config]})})
        self._table = table
        self._stop = stop
        self._clock = clock
        self.ots = source_client(config)
        self.streams = StreamClient(self.ots, check_crc=config.source.check_crc)
        self.leases = TablestoreLeaseStore.from_settings(self.ots, config.coordination)
        self.leases.ensure_table()
        self.store = IncrementalSnapshotStore(self.ots, config.coordination.status_table)
        self.stream_id = self.streams.describe_table_stream(table).stream_id
        if not self.stream_id:
            raise SnapshotError(f"table {table} has no stream; enable it (`cdcbridge table enable-stream {table}`)")
        self.settings = ExporterSettings.from_config(config.snapshot.incremental)

    def schema(self) -> list[tuple[str, str]]:
        return [(str(c[0]), str(c[1])) for c in self.ots.describe_table(self._table).table_meta.schema_of_primary_key]

    def shards(self) -> StreamShards:
        leases = self.leases.list_leases(self.stream_id)
        epochs = [lease.checkpoint_seq.sequence.epoch for lease in leases if lease.checkpoint_seq is not None]
        return StreamShards(shard_nodes(self.streams.list_all_shards(self.stream_id), leases),
                            max(epochs) if epochs else None)  # fmt: skip

    def claim(self, request: SnapshotRequest, *, any_range: bool = False) -> IncrementalSnapshot:
        """Take over, pick up or request the snapshot `request` names (see the module docstring)."""
        schema = self.schema()
        begin = parse_key_text("--from", request.begin_text, schema) if request.begin_text else None
        end = parse_key_text("--to", request.end_text, schema) if request.end_text else None
        now_ms = int(self._clock() * 1000)
        timeout_ms = self.settings.exporter_timeout_seconds * 1000
        snapshots = self.store.list_snapshots(self.stream_id, self._table)
        snapshot = pick_snapshot(snapshots, now_ms=now_ms, timeout_ms=timeout_ms, begin=begin, end=end,
                                 snapshot_id=request.snapshot_id, any_range=any_range)  # fmt: skip
        if snapshot is None:
            snapshot = self.store.request(
                self.stream_id, self._table, now_ms=now_ms, begin=begin, end=end, requested_by=RequestedBy.CLI,
                rows_per_second=request.rows_per_second,
            )  # fmt: skip
            log.info("requested incremental snapshot %s of table %s over [%s, %s)", snapshot.snapshot_id, self._table,
                     _shown(begin, "start"), _shown(end, "end"))  # fmt: skip
        elif snapshot.exporter_id:
            log.info("taking over incremental snapshot %s of table %s from exporter %s (heartbeat %.1fs old)",
                     snapshot.snapshot_id, self._table, snapshot.exporter_id,
                     (now_ms - snapshot.heartbeat_ms) / 1000)  # fmt: skip
        exporter_id = f"{socket.gethostname()}-{os.getpid()}-{new_exporter_id()[:8]}"
        return self.store.claim(snapshot, exporter_id, int(self._clock() * 1000))

    def export(self, snapshot: IncrementalSnapshot, request: SnapshotRequest,
               progress_file: IO[str] | None = None) -> IncrementalResult:  # fmt: skip
        settings = self.settings
        if request.chunk_rows:
            settings = ExporterSettings(**{**settings.__dict__, "chunk_rows": request.chunk_rows})
        if request.rows_per_second:
            settings = ExporterSettings(**{**settings.__dict__, "rows_per_second": request.rows_per_second})
        config = self._config
        tables, serializers = prepare_tables(config, self.ots, self.streams, self._stop)
        (runtime,) = tables
        client_id = f"cdcbridge-incremental-{socket.gethostname()}-{os.getpid()}"
        sink = KafkaSink({**config.kafka.client_config(), "client.id": client_id, **config.kafka.producer,
                          "message.timeout.ms": int(settings.delivery_seconds * 1000)})  # fmt: skip
        publisher = Publisher(
            table=self._table, instance=config.source.instance, table_format=runtime.table,
            topic_prefix=config.kafka.topic_prefix, topics=runtime.topics, serialize=serializers.serialize, sink=sink,
            fast_encoders=fast_encoders(runtime, serializers, config.source.instance),
            columns=config.source.column_policy(self._table),
        )  # fmt: skip
        exporter = IncrementalExporter(ots=self.ots, store=self.store, shards=self.shards, publisher=publisher,
                                       settings=settings, stop=self._stop, progress_file=progress_file,
                                       clock=self._clock)  # fmt: skip
        try:
            return exporter.run(snapshot)
        finally:
            remaining = sink.close(30)
            if remaining:
                log.warning("%d incremental snapshot messages were unacknowledged at exit", remaining)


class WorkerSnapshotRun:
    """One table's snapshot machinery as a bridge worker's runner of requested snapshots uses it
    (cdcbridge.bridge.requested_snapshots): list, claim under the worker's name, export with its own producer."""

    def __init__(self, config: BridgeConfig, table: str, worker_id: str, stop: threading.Event) -> None:
        self._run = IncrementalSnapshotRun(config, table, stop)
        self._table = table
        self._worker_id = worker_id

    def list_snapshots(self) -> list[IncrementalSnapshot]:
        return self._run.store.list_snapshots(self._run.stream_id, self._table)

    def claim(self, snapshot: IncrementalSnapshot) -> IncrementalSnapshot:
        exporter_id = f"{self._worker_id}-{new_exporter_id()[:8]}"
        return self._run.store.claim(snapshot, exporter_id, int(time.time() * 1000))

    def export(self, snapshot: IncrementalSnapshot) -> IncrementalResult:
        return self._run.export(snapshot, SnapshotRequest(self._table, snapshot_id=snapshot.snapshot_id))


def run_incremental_snapshot(config: BridgeConfig, request: SnapshotRequest, stop: threading.Event | None = None,
                             *, progress_file: IO[str] | None = None) -> IncrementalResult:  # fmt: skip
    """`cdcbridge snapshot --table T`: claim and run the table's snapshot in the foreground until it ends."""
    stop = stop or threading.Event()
    run = IncrementalSnapshotRun(config, request.table, stop)
    snapshot = run.claim(request)
    return run.export(snapshot, request, progress_file)


def run_pending_snapshots(config: BridgeConfig, stop: threading.Event | None = None) -> list[IncrementalResult]:
    """`cdcbridge snapshot run-pending`: run every PENDING request (signal rows) of the configured tables, in order."""
    stop = stop or threading.Event()
    results = []
    for table in config.source.tables:
        run = IncrementalSnapshotRun(config, table.name, stop)
        for pending in run.store.list_snapshots(run.stream_id, table.name):
            if pending.state is not IncrementalState.PENDING or stop.is_set():
                continue
            request = SnapshotRequest(table.name, snapshot_id=pending.snapshot_id)
            results.append(run.export(run.claim(request), request))
    return results


def change_snapshot_state(config: BridgeConfig, table: str, action: str, snapshot_id: str | None = None) -> list[str]:
    """`cdcbridge snapshot pause|resume|cancel`: one line per snapshot changed. Without --id, every unfinished
    snapshot of the table the action applies to."""
    target, allowed = {
        "pause": (IncrementalState.PAUSED, (IncrementalState.RUNNING, IncrementalState.PENDING)),
        "resume": (IncrementalState.RUNNING, (IncrementalState.PAUSED,)),
        "cancel": (IncrementalState.CANCELLED, (IncrementalState.RUNNING, IncrementalState.PAUSED,
                                                IncrementalState.PENDING)),
    }[action]  # fmt: skip
    ots = source_client(config)
    streams = StreamClient(ots, check_crc=config.source.check_crc)
    stream_id = streams.describe_table_stream(table).stream_id
    store = IncrementalSnapshotStore(ots, config.coordination.status_table)
    snapshots = [s for s in store.list_snapshots(stream_id, table)
                 if (snapshot_id is None or s.snapshot_id == snapshot_id)]  # fmt: skip
    if snapshot_id is not None and not snapshots:
        raise SnapshotError(f"no incremental snapshot {snapshot_id} of table {table}; `cdcbridge status` lists them")
    lines = []
    for snapshot in snapshots:
        state = snapshot.state
        if state not in allowed:
            if snapshot_id is not None:
                raise SnapshotError(f"incremental snapshot {snapshot.snapshot_id} is {state.value}; cannot {action} it")
            continue
        if action == "resume" and not snapshot.exporter_id:
            target = IncrementalState.PENDING  # never claimed: it waits for an exporter again
        store.set_state(stream_id, snapshot.snapshot_id, target, now_ms=int(time.time() * 1000), expected=state)
        lines.append(f"incremental snapshot {snapshot.snapshot_id} of table {table}: {state.value} -> {target.value}")
    if not lines:
        raise SnapshotError(f"table {table} has no incremental snapshot to {action}")
    return lines


def _shown(bound: KeyBound | None, default: str) -> str:
    return default if bound is None else describe_bound(bound)
