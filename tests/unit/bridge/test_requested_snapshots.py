"""The worker-side runner of requested incremental snapshots: which snapshots it picks up, that of several workers
exactly one runs a snapshot, and that a stop releases it for another worker."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from cdcbridge.bridge.requested_snapshots import RequestedSnapshotRunner, runnable
from cdcbridge.snapshot.errors import SnapshotConflictError, SnapshotError
from cdcbridge.snapshot.incremental_state import IncrementalSnapshot, IncrementalState

NOW_MS = 1_000_000
TIMEOUT_MS = 15_000


def _snapshot(snapshot_id: str, state: IncrementalState, exporter: str = "", heartbeat_ms: int = 0):
    return IncrementalSnapshot("stream", snapshot_id, "t", state, exporter_id=exporter, heartbeat_ms=heartbeat_ms)


def test_runnable_takes_pending_and_dead_running_ones_oldest_first() -> None:
    snapshots = [
        _snapshot("5-alive", IncrementalState.RUNNING, "e1", NOW_MS - 1000),
        _snapshot("4-dead", IncrementalState.RUNNING, "e2", NOW_MS - TIMEOUT_MS - 1),
        _snapshot("3-released", IncrementalState.RUNNING, "e3", 0),
        _snapshot("2-pending", IncrementalState.PENDING),
        _snapshot("1-paused-dead", IncrementalState.PAUSED, "e4", 0),
        _snapshot("0-done", IncrementalState.DONE, "e5", 0),
        _snapshot("0-cancelled", IncrementalState.CANCELLED),
    ]
    chosen = runnable(snapshots, now_ms=NOW_MS, timeout_ms=TIMEOUT_MS)
    assert [s.snapshot_id for s in chosen] == ["2-pending", "3-released", "4-dead"]


class _SharedStore:
    """The status table's snapshot rows, with the conditional claim of IncrementalSnapshotStore.claim."""

    def __init__(self, *snapshots: IncrementalSnapshot) -> None:
        self.rows = {s.snapshot_id: s for s in snapshots}
        self.lock = threading.Lock()
        self.exports: list[tuple[str, str]] = []

    def claim(self, snapshot: IncrementalSnapshot, exporter: str) -> IncrementalSnapshot:
        with self.lock:
            row = self.rows[snapshot.snapshot_id]
            if (row.exporter_id, row.heartbeat_ms, row.state) != (snapshot.exporter_id, snapshot.heartbeat_ms,
                                                                 snapshot.state):  # fmt: skip
                raise SnapshotConflictError("claimed first elsewhere")
            claimed = replace(row, exporter_id=exporter, heartbeat_ms=NOW_MS, state=IncrementalState.RUNNING)
            self.rows[snapshot.snapshot_id] = claimed
            return claimed


class _Port:
    def __init__(self, store: _SharedStore, worker: str, export=None) -> None:
        self._store = store
        self._worker = worker
        self._export = export

    def list_snapshots(self) -> list[IncrementalSnapshot]:
        with self._store.lock:
            return list(self._store.rows.values())

    def claim(self, snapshot: IncrementalSnapshot) -> IncrementalSnapshot:
        return self._store.claim(snapshot, self._worker)

    def export(self, snapshot: IncrementalSnapshot) -> object:
        self._store.exports.append((self._worker, snapshot.snapshot_id))
        if self._export is not None:
            return self._export(self._store, snapshot)
        self._store.rows[snapshot.snapshot_id] = replace(snapshot, state=IncrementalState.DONE)
        return None


def _runner(store: _SharedStore, worker: str, stop: threading.Event, export=None) -> RequestedSnapshotRunner:
    return RequestedSnapshotRunner(["t"], lambda table: _Port(store, worker, export), stop, poll_seconds=0.01,
                                   timeout_seconds=TIMEOUT_MS / 1000, clock=lambda: NOW_MS / 1000)  # fmt: skip


def test_of_racing_workers_exactly_one_runs_each_snapshot() -> None:
    store = _SharedStore(_snapshot("1-a", IncrementalState.PENDING), _snapshot("2-b", IncrementalState.PENDING))
    stop = threading.Event()
    runners = [_runner(store, f"w{i}", stop) for i in range(4)]
    threads = [threading.Thread(target=lambda r=r: [r.run_once() for _ in range(5)]) for r in runners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(snapshot_id for _, snapshot_id in store.exports) == ["1-a", "2-b"]
    assert all(row.state is IncrementalState.DONE for row in store.rows.values())
    assert sum(len(r.finished) for r in runners) == 2


def test_a_stopped_exporter_releases_the_snapshot_and_another_worker_takes_it_over() -> None:
    store = _SharedStore(_snapshot("1-a", IncrementalState.PENDING))
    first_stop = threading.Event()

    def stopped_mid_way(store: _SharedStore, snapshot: IncrementalSnapshot) -> object:
        first_stop.set()  # the worker's SIGTERM arrives while the exporter runs
        store.rows[snapshot.snapshot_id] = replace(snapshot, heartbeat_ms=0)  # the exporter clears its heartbeat
        raise SnapshotError("stopped at 10 rows")

    first = _runner(store, "w1", first_stop, stopped_mid_way)
    assert first.run_once() == "1-a"
    assert first.finished == []  # stopped, not ended
    assert store.rows["1-a"].exporter_id == "w1"
    second = _runner(store, "w2", threading.Event())
    assert second.run_once() == "1-a"
    assert store.exports == [("w1", "1-a"), ("w2", "1-a")]
    assert store.rows["1-a"].state is IncrementalState.DONE and second.finished == ["1-a"]


def test_a_live_exporter_is_left_alone_and_a_failing_export_does_not_raise() -> None:
    store = _SharedStore(_snapshot("1-a", IncrementalState.RUNNING, "cli", NOW_MS - 100))
    assert _runner(store, "w1", threading.Event()).run_once() is None
    store.rows["1-b"] = _snapshot("1-b", IncrementalState.PENDING)

    def broken(store: _SharedStore, snapshot: IncrementalSnapshot) -> object:
        raise RuntimeError("boom")

    runner = _runner(store, "w1", threading.Event(), broken)
    assert runner.run_once() == "1-b" and runner.finished == []


def test_the_polling_thread_runs_a_request_and_ends_at_stop() -> None:
    store = _SharedStore(_snapshot("1-a", IncrementalState.PENDING))
    stop = threading.Event()
    runner = _runner(store, "w1", stop).start()
    for _ in range(500):
        if runner.finished:
            break
        threading.Event().wait(0.01)
    stop.set()
    runner.join(5)
    assert runner.finished == ["1-a"]
    assert not runner._thread.is_alive()


@pytest.mark.parametrize("failure", [SnapshotError("status table down"), OSError("unreachable")])
def test_an_unreachable_table_is_skipped_until_the_next_poll(failure: Exception) -> None:
    calls = []

    def open_run(table: str) -> _Port:
        calls.append(table)
        raise failure

    runner = RequestedSnapshotRunner(["t"], open_run, threading.Event(), poll_seconds=0.01)
    assert runner.run_once() is None and runner.run_once() is None
    assert calls == ["t", "t"]
