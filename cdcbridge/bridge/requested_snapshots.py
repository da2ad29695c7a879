"""Bridge workers run the incremental snapshots that were requested (signal rows, trims) or whose exporter died.

Every `poll_seconds` each worker looks, for the tables it serves, for a PENDING snapshot or a RUNNING one whose
exporter heartbeat is older than the exporter timeout, and claims one with the store's conditional claim (of two
workers racing for it, one wins). It runs the exporter in a thread of its own, with its own Kafka producer, beside
the shard consumers: the exporter waits for the owners' reports while the owners (other threads, possibly of this
very worker) hold records and report, so neither waits on the other's thread. A stop of the worker stops the
exporter between chunks (or while it waits for reports); it then clears its heartbeat and another worker takes over.
One snapshot at a time per worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from cdcbridge.snapshot.errors import SnapshotConflictError, SnapshotError
from cdcbridge.snapshot.incremental_state import IncrementalSnapshot, IncrementalState

log = logging.getLogger(__name__)


def runnable(snapshots: Iterable[IncrementalSnapshot], *, now_ms: int, timeout_ms: float) -> list[IncrementalSnapshot]:
    """The snapshots a worker should pick up, oldest id first: PENDING ones without an exporter, and RUNNING ones
    whose exporter's heartbeat is older than the timeout (0 = released by a stopped exporter). PAUSED ones wait for
    `cdcbridge snapshot resume`."""

    def wanted(snapshot: IncrementalSnapshot) -> bool:
        if snapshot.state is IncrementalState.PENDING:
            return not snapshot.exporter_id
        return snapshot.state is IncrementalState.RUNNING and now_ms - snapshot.heartbeat_ms > timeout_ms

    return sorted((s for s in snapshots if wanted(s)), key=lambda s: s.snapshot_id)


class SnapshotRunPort(Protocol):
    """What the runner needs of one table's snapshot machinery (IncrementalSnapshotRun, or a fake in tests)."""

    def list_snapshots(self) -> list[IncrementalSnapshot]: ...

    def claim(self, snapshot: IncrementalSnapshot) -> IncrementalSnapshot:
        """Conditional claim; SnapshotConflictError when another exporter got it first."""
        ...

    def export(self, snapshot: IncrementalSnapshot) -> object:
        """Run the claimed snapshot until it ends or the stop event is set."""
        ...


class RequestedSnapshotRunner:
    """One worker's runner of requested snapshots: a polling thread, and at most one exporter thread."""

    def __init__(
        self,
        tables: list[str],
        open_run: Callable[[str], SnapshotRunPort],
        stop: threading.Event,
        *,
        poll_seconds: float = 5.0,
        timeout_seconds: float = 15.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._tables = tables
        self._open_run = open_run
        self._stop = stop
        self._poll_seconds = poll_seconds
        self._timeout_ms = timeout_seconds * 1000
        self._clock = clock
        self._runs: dict[str, SnapshotRunPort] = {}
        self._thread = threading.Thread(target=self._loop, name="requested-snapshots", daemon=True)
        #: Snapshot ids this runner ran to an end (any end), in order: for tests and logs.
        self.finished: list[str] = []

    def start(self) -> RequestedSnapshotRunner:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def run_once(self) -> str | None:
        """Claim and run the first runnable snapshot of the served tables; its id, or None if there was none (or
        another worker claimed it first)."""
        for table in self._tables:
            if self._stop.is_set():
                return None
            run = self._run_of(table)
            if run is None:
                continue
            try:
                snapshots = run.list_snapshots()
            except SnapshotError as error:
                log.warning("table %s: cannot look for requested incremental snapshots: %s", table, error)
                continue
            for snapshot in runnable(snapshots, now_ms=int(self._clock() * 1000), timeout_ms=self._timeout_ms):
                try:
                    claimed = run.claim(snapshot)
                except SnapshotConflictError:
                    continue  # another worker (or the CLI) took it: it runs there
                except SnapshotError as error:
                    log.warning("table %s: cannot claim incremental snapshot %s: %s", table, snapshot.snapshot_id,
                                error)  # fmt: skip
                    continue
                why = "requested" if snapshot.state is IncrementalState.PENDING else "its exporter was dead"
                log.info("worker runs incremental snapshot %s of table %s (%s)", claimed.snapshot_id, table, why)
                self._export(table, run, claimed)
                return claimed.snapshot_id
        return None

    def _export(self, table: str, run: SnapshotRunPort, snapshot: IncrementalSnapshot) -> None:
        try:
            result = run.export(snapshot)
        except SnapshotError as error:
            if self._stop.is_set():
                log.info("incremental snapshot %s of table %s released at the worker's stop; another worker takes it "
                         "over", snapshot.snapshot_id, table)  # fmt: skip
            else:
                log.error("incremental snapshot %s of table %s stopped: %s; a worker takes it over once its "
                          "heartbeat is dead", snapshot.snapshot_id, table, error)  # fmt: skip
            return
        except Exception:  # never let a snapshot take the worker down: its shards go on
            log.exception("incremental snapshot %s of table %s failed", snapshot.snapshot_id, table)
            return
        line = getattr(result, "line", None)
        log.info("%s", line() if callable(line) else f"incremental snapshot {snapshot.snapshot_id} ended")
        self.finished.append(snapshot.snapshot_id)

    def _run_of(self, table: str) -> SnapshotRunPort | None:
        run = self._runs.get(table)
        if run is None:
            try:
                run = self._runs[table] = self._open_run(table)
            except Exception as error:  # the status table or source unreachable now: try again next poll
                log.warning("table %s: cannot prepare for requested incremental snapshots: %s", table, error)
                return None
        return run

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                ran = self.run_once()
            except Exception:
                log.exception("looking for requested incremental snapshots failed")
                ran = None
            if ran is None and self._stop.wait(self._poll_seconds):
                return
