"""A recording worker: a coordination Worker whose processor journals every delivered record to SQLite.

Failover tests and the failover benchmark kill, freeze and stop worker *processes*, then need to know exactly what
each one delivered, when, and which checkpoints it attempted. Each process appends to its own SQLite file (WAL, one
connection, one commit per batch) and checkpoints only after that commit, so everything a checkpoint covers is in the
journal; with a checkpoint lag a kill -9 leaves an uncheckpointed tail, the case at-least-once is about. Run as::

    python -m cdcbridge.harness.recording_worker --endpoint URL --table T --status-table S --worker-id W --db PATH

SIGTERM / SIGINT stop the worker gracefully (drain, checkpoint, release). Exit codes: 0 stopped, 3 fenced. Besides
deliveries and checkpoint attempts the journal holds processor events (initialize, shutdown) and the worker's
CoordinationStats whenever they change (steal requests, transfers, ...).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from cdcbridge.changes import ChangeRecord, Sequence
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.errors import CoordinationError, WorkerFencedError
from cdcbridge.coordination.processor import (
    InitializationInput,
    ProcessRecordsInput,
    RecordProcessor,
    RecordProcessorCheckpointer,
    ShutdownInput,
    ShutdownReason,
)
from cdcbridge.coordination.settings import CoordinationSettings

if TYPE_CHECKING:
    from cdcbridge.coordination.worker import Worker

log = logging.getLogger(__name__)

#: Short timings for multi-process tests: takeovers in seconds instead of the default 20 s leases.
FAST_TIMINGS: dict[str, float] = {
    "lease_duration_seconds": 4.0,
    "renew_interval_seconds": 1.0,
    "take_interval_seconds": 1.0,
    "shard_sync_interval_seconds": 1.0,
    "parent_poll_interval_seconds": 0.5,
    "handoff_timeout_seconds": 5.0,
    "no_progress_abort_seconds": 30.0,
    "idle_fetch_interval_seconds": 0.2,
    "task_retry_backoff_seconds": 0.5,
}

EXIT_FENCED = 3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT, worker TEXT NOT NULL, pid INTEGER NOT NULL, shard TEXT NOT NULL,
    pk TEXT NOT NULL, version INTEGER, seq TEXT NOT NULL, batch INTEGER NOT NULL, delivered_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT, worker TEXT NOT NULL, pid INTEGER NOT NULL, shard TEXT NOT NULL,
    position TEXT NOT NULL, outcome TEXT NOT NULL, detail TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, worker TEXT NOT NULL, pid INTEGER NOT NULL, shard TEXT NOT NULL,
    kind TEXT NOT NULL, detail TEXT NOT NULL, at REAL NOT NULL);
"""

# ----- what the journal holds ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivery:
    """One record handed to a processor. `delivered_at` is wall time (comparable across processes on one host)."""

    worker: str
    pid: int
    shard_id: str
    pk: str
    version: int | None
    sequence: Sequence
    batch: int
    delivered_at: float


@dataclass(frozen=True, slots=True)
class CheckpointAttempt:
    """A checkpoint the processor asked for; `outcome` is "ok" or the name of the error it raised."""

    worker: str
    pid: int
    shard_id: str
    position: ExtendedSequence
    outcome: str
    detail: str
    at: float

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


@dataclass(frozen=True, slots=True)
class ProcessorEvent:
    """worker_started / initialize (detail: the stored CheckpointSeq or Checkpoint) / shutdown (detail: reason)."""

    worker: str
    pid: int
    shard_id: str
    kind: str
    detail: str
    at: float


@dataclass(frozen=True)
class JournalContents:
    """Everything in one or more journals, each list in time order."""

    deliveries: list[Delivery]
    checkpoints: list[CheckpointAttempt]
    events: list[ProcessorEvent]

    def deliveries_of(self, *, worker: str | None = None, shards: Iterable[str] | None = None) -> list[Delivery]:
        wanted = None if shards is None else set(shards)
        return [
            d
            for d in self.deliveries
            if (worker is None or d.worker == worker) and (wanted is None or d.shard_id in wanted)
        ]


class JournalWriter:
    """Append-only SQLite journal of one process: one connection shared by every shard thread, one commit per call."""

    def __init__(self, path: Path, worker_id: str) -> None:
        self.worker_id = worker_id
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._batches = 0
        self._db = sqlite3.connect(str(path), timeout=30.0, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # a process crash loses no commit (only an OS crash could)
        self._db.executescript(_SCHEMA)

    def record_batch(self, shard_id: str, records: Seq[ChangeRecord], delivered_at: float, version_column: str) -> None:
        with self._lock:
            self._batches += 1
            rows = [
                (self.worker_id, self.pid, shard_id, primary_key_text(r), _version(r, version_column),
                 r.sequence.to_text(), self._batches, delivered_at)
                for r in records
            ]  # fmt: skip
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO deliveries (worker, pid, shard, pk, version, seq, batch, delivered_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            self._db.execute("COMMIT")

    def record_checkpoint(self, shard_id: str, position: ExtendedSequence, outcome: str, detail: str) -> None:
        self._insert("checkpoints", "position, outcome, detail", (position.to_text(), outcome, detail), shard_id)

    def record_event(self, shard_id: str, kind: str, detail: str) -> None:
        self._insert("events", "kind, detail", (kind, detail), shard_id)

    def _insert(self, table: str, columns: str, values: tuple[str, ...], shard_id: str) -> None:
        with self._lock:
            marks = ", ".join("?" * len(values))
            self._db.execute(
                f"INSERT INTO {table} (worker, pid, shard, {columns}, at) VALUES (?, ?, ?, {marks}, ?)",
                (self.worker_id, self.pid, shard_id, *values, time.time()),
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


def read_journals(paths: Iterable[Path]) -> JournalContents:
    """Read journals (of live, stopped or killed processes) into one time-ordered view."""
    deliveries: list[Delivery] = []
    checkpoints: list[CheckpointAttempt] = []
    events: list[ProcessorEvent] = []
    for path in paths:
        if not Path(path).exists():
            continue
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
        try:
            if not db.execute("SELECT name FROM sqlite_master WHERE name = 'events'").fetchone():
                continue  # the process died before creating its schema
            for w, pid, shard, pk, version, seq, batch, at in db.execute(
                "SELECT worker, pid, shard, pk, version, seq, batch, delivered_at FROM deliveries ORDER BY id"
            ):
                deliveries.append(Delivery(w, pid, shard, pk, version, Sequence.from_text(seq), batch, at))
            for w, pid, shard, position, outcome, detail, at in db.execute(
                "SELECT worker, pid, shard, position, outcome, detail, at FROM checkpoints ORDER BY id"
            ):
                checkpoints.append(
                    CheckpointAttempt(w, pid, shard, ExtendedSequence.from_text(position), outcome, detail, at)
                )
            for w, pid, shard, kind, detail, at in db.execute(
                "SELECT worker, pid, shard, kind, detail, at FROM events ORDER BY id"
            ):
                events.append(ProcessorEvent(w, pid, shard, kind, detail, at))
        finally:
            db.close()
    deliveries.sort(key=lambda d: (d.delivered_at, d.pid, d.batch))
    checkpoints.sort(key=lambda c: c.at)
    events.sort(key=lambda e: e.at)
    return JournalContents(deliveries, checkpoints, events)


def primary_key_text(record: ChangeRecord) -> str:
    """The primary-key values joined by "|" (enough to tell rows apart in tests)."""
    return "|".join(str(value) for _, value in record.primary_key)


def _version(record: ChangeRecord, column: str) -> int | None:
    for cell in record.cells:
        if cell.name == column and isinstance(cell.value, int) and not isinstance(cell.value, bool):
            return cell.value
    return None


# ----- the processor ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordingPolicy:
    """How a recording processor behaves: when it checkpoints and how slow it is."""

    #: Checkpoint after every N-th batch (synchronously, right after the journal commit). Ignored with ack_delay.
    checkpoint_every: int = 1
    #: When > 0, confirm each batch this long after its commit on a separate thread, as producer acks would arrive;
    #: acks due after a lost lease still arrive (and are refused), like Kafka callbacks of messages already sent.
    ack_delay_seconds: float = 0.0
    #: Sleep at the start of each batch (a slow sink), so a kill often lands mid-batch.
    process_delay_seconds: float = 0.0
    #: Sleep in shutdown(STOLEN / REQUESTED / SHARD_END) before the final checkpoint (a slow drain).
    shutdown_delay_seconds: float = 0.0
    #: Integer attribute column whose value is journaled with each record (per-key order checks).
    version_column: str = "v"


class _DelayedAcks:
    """Confirms batches `delay` seconds after they were recorded, on its own daemon thread."""

    def __init__(self, delay: float, confirm: Callable[[Sequence], None]) -> None:
        self._delay = delay
        self._confirm = confirm
        self._cond = threading.Condition()
        self._due: deque[tuple[float, Sequence]] = deque()
        self._closing = False
        self._thread: threading.Thread | None = None

    def add(self, sequence: Sequence) -> None:
        with self._cond:
            self._due.append((time.monotonic() + self._delay, sequence))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="recording-acks", daemon=True)
                self._thread.start()
            self._cond.notify()

    def cancel(self) -> None:
        """Drop pending acks (the caller confirms everything itself) and end the thread."""
        with self._cond:
            self._due.clear()
            self._closing = True
            self._cond.notify()

    def finish(self) -> None:
        """Let the pending acks still arrive, then end the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._due:
                        wait = self._due[0][0] - time.monotonic()
                        if wait <= 0:
                            last = None
                            while self._due and self._due[0][0] <= time.monotonic():
                                last = self._due.popleft()[1]
                            break
                        self._cond.wait(wait)
                    elif self._closing:
                        return
                    else:
                        self._cond.wait()
            if last is not None:
                self._confirm(last)


class RecordingProcessor(RecordProcessor):
    """Journals each batch, then checkpoints per its policy; records every checkpoint attempt and its outcome."""

    def __init__(self, journal: JournalWriter, policy: RecordingPolicy) -> None:
        self._journal = journal
        self._policy = policy
        self._shard_id = ""
        self._batches = 0
        self._checkpointer: RecordProcessorCheckpointer | None = None
        self._acks = _DelayedAcks(policy.ack_delay_seconds, self._confirm) if policy.ack_delay_seconds > 0 else None

    def initialize(self, initialization: InitializationInput) -> None:
        self._shard_id = initialization.shard_id
        seq = initialization.checkpoint_sequence
        self._journal.record_event(self._shard_id, "initialize", seq.to_text() if seq else initialization.checkpoint)

    def process_records(self, records: ProcessRecordsInput) -> None:
        delivered_at = time.time()
        if self._policy.process_delay_seconds > 0:
            time.sleep(self._policy.process_delay_seconds)
        self._journal.record_batch(self._shard_id, records.records, delivered_at, self._policy.version_column)
        self._checkpointer = records.checkpointer
        self._batches += 1
        last = records.records[-1].sequence
        if self._acks is not None:
            self._acks.add(last)
        elif self._batches % self._policy.checkpoint_every == 0:
            self._checkpoint(records.checkpointer, last)

    def shutdown(self, shutdown: ShutdownInput) -> None:
        self._journal.record_event(self._shard_id, "shutdown", shutdown.reason.value)
        if shutdown.reason is ShutdownReason.LEASE_LOST:
            if self._acks is not None:
                self._acks.finish()
            return
        if self._acks is not None:
            self._acks.cancel()
        if shutdown.reason is ShutdownReason.FAILED:
            return
        if self._policy.shutdown_delay_seconds > 0:
            time.sleep(self._policy.shutdown_delay_seconds)
        self._checkpoint(shutdown.checkpointer, None)

    def _confirm(self, sequence: Sequence) -> None:
        if self._checkpointer is not None:
            self._checkpoint(self._checkpointer, sequence)

    def _checkpoint(self, checkpointer: RecordProcessorCheckpointer, sequence: Sequence | None) -> None:
        position = ExtendedSequence(sequence) if sequence is not None else checkpointer.largest_permitted_checkpoint
        if position is None:
            return  # nothing handed out yet
        try:
            checkpointer.checkpoint(sequence)
        except CoordinationError as exc:
            self._journal.record_checkpoint(self._shard_id, position, type(exc).__name__, str(exc))
            log.info("shard %s: checkpoint %s refused: %s", self._shard_id, position.to_text(), exc)
        else:
            self._journal.record_checkpoint(self._shard_id, position, "ok", "")


# ----- the program ------------------------------------------------------------------------------------------------


def build_settings(status_table: str, timings: str, overrides: dict[str, Any]) -> CoordinationSettings:
    """Fast (test) or default timings, plus explicit overrides (CoordinationSettings field names)."""
    base: dict[str, Any] = dict(FAST_TIMINGS) if timings == "fast" else {}
    return CoordinationSettings(**{**base, **overrides, "status_table": status_table})


@dataclass(frozen=True)
class WorkerOptions:
    """How to run one recording worker process: the options of its command line, as data."""

    timings: str = "fast"
    settings: dict[str, Any] = field(default_factory=dict)
    checkpoint_every: int = 1
    ack_delay: float = 0.0
    process_delay: float = 0.0
    shutdown_delay: float = 0.0
    version_column: str = "v"
    #: Wall time at which the worker starts working (after its imports), so processes can start at one instant.
    start_at: float | None = None

    def argv(self, *, endpoint: str, table: str, status_table: str, worker_id: str, db: Path) -> list[str]:
        """The command line of `python -m cdcbridge.harness.recording_worker` with these options."""
        argv = [
            sys.executable, "-m", "cdcbridge.harness.recording_worker", "--endpoint", endpoint, "--table", table,
            "--status-table", status_table, "--worker-id", worker_id, "--db", str(db), "--timings", self.timings,
            "--settings-json", json.dumps(self.settings), "--checkpoint-every", str(self.checkpoint_every),
            "--ack-delay", str(self.ack_delay), "--process-delay", str(self.process_delay),
            "--shutdown-delay", str(self.shutdown_delay), "--version-column", self.version_column,
        ]  # fmt: skip
        if self.start_at is not None:
            argv += ["--start-at", repr(self.start_at)]
        return argv


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--endpoint", "--emulator", "endpoint", required=True, help="Tablestore endpoint URL.")
@click.option("--instance", default="cdcbridge", show_default=True)
@click.option("--access-key-id", default="emulator-id", show_default=True)
@click.option("--access-key-secret", default="emulator-secret", show_default=True)
@click.option("--table", required=True, help="Source table (with a stream).")
@click.option("--status-table", required=True, help="Lease status table.")
@click.option("--worker-id", required=True)
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), required=True, help="SQLite journal.")
@click.option("--timings", type=click.Choice(["fast", "default"]), default="fast", show_default=True)
@click.option("--settings-json", default="{}", help="CoordinationSettings overrides as a JSON object.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=1, help="Checkpoint every N-th batch.")
@click.option("--ack-delay", type=float, default=0.0, help="Confirm batches this many seconds later.")
@click.option("--process-delay", type=float, default=0.0, help="Sleep per batch (seconds).")
@click.option("--shutdown-delay", type=float, default=0.0, help="Sleep before the final checkpoint (seconds).")
@click.option("--version-column", default="v", show_default=True)
@click.option("--start-at", type=float, default=None, help="Wall time (epoch s) to start at, so several workers race.")
def main(
    endpoint: str, instance: str, access_key_id: str, access_key_secret: str, table: str, status_table: str,
    worker_id: str, db: Path, timings: str, settings_json: str, checkpoint_every: int, ack_delay: float,
    process_delay: float, shutdown_delay: float, version_column: str, start_at: float | None,
) -> None:  # fmt: skip
    """Run one coordination worker whose processor journals every delivered record to SQLite."""
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {worker_id} %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    # Imported here: they pull in the Tablestore SDK, which the journal reader does not need.
    from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore
    from cdcbridge.coordination.stream.tablestore_access import TablestoreStreamAccess
    from cdcbridge.coordination.worker import Worker
    from cdcbridge.tablestore import StreamClient, build_ots_client

    settings = build_settings(status_table, timings, json.loads(settings_json))
    policy = RecordingPolicy(
        checkpoint_every=checkpoint_every,
        ack_delay_seconds=ack_delay,
        process_delay_seconds=process_delay,
        shutdown_delay_seconds=shutdown_delay,
        version_column=version_column,
    )
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    journal = JournalWriter(db, worker_id)
    ots = build_ots_client(endpoint, instance, access_key_id, access_key_secret)
    streams = StreamClient(ots)
    stream_id = streams.describe_table_stream(table).stream_id
    worker = Worker(
        worker_id=worker_id,
        stream_id=stream_id,
        store=TablestoreLeaseStore(ots, settings.status_table),
        stream=TablestoreStreamAccess(streams, table),
        processor_factory=lambda: RecordingProcessor(journal, policy),
        settings=settings,
    )
    if start_at is not None:
        stop.wait(max(0.0, start_at - time.time()))
    journal.record_event("", "worker_started", stream_id)
    reporter = threading.Thread(target=_report_stats, args=(worker, journal), name="recording-stats", daemon=True)
    reporter.start()
    try:
        worker.run(stop)
    except WorkerFencedError as exc:
        log.error("%s", exc)
        sys.exit(EXIT_FENCED)
    finally:
        journal.record_event("", "stats", json.dumps(worker.stats.snapshot()))
    journal.record_event("", "worker_stopped", "")


def _report_stats(worker: Worker, journal: JournalWriter, every: float = 0.2) -> None:
    """Journal the worker's counters whenever they change, so even a killed worker's steals can be counted."""
    last: dict[str, int] = {}
    while True:
        snapshot = worker.stats.snapshot()
        if snapshot != last:
            journal.record_event("", "stats", json.dumps(snapshot))
            last = snapshot
        time.sleep(every)


if __name__ == "__main__":
    main(prog_name="python -m cdcbridge.harness.recording_worker")
