"""What the bridge does with a table's snapshot: nothing while it runs, skip before its start once it is done."""

from __future__ import annotations

import threading

import pytest

from cdcbridge.snapshot.errors import SnapshotInProgressError
from cdcbridge.snapshot.split_points import ranges_from_points
from cdcbridge.snapshot.state import SnapshotStateStore
from cdcbridge.snapshot.stream_start import StreamStartReader, running_snapshot_progress, wait_for_snapshots

from .fakes import SOURCE, STATUS, STREAM, source_with_rows


def test_the_start_is_none_without_a_snapshot_refused_while_it_runs_and_t0_once_done() -> None:
    store = SnapshotStateStore(source_with_rows(0), STATUS)
    reader = StreamStartReader(store, STREAM, SOURCE)
    assert reader() is None
    store.create(STREAM, SOURCE, 42_000_000, 1)
    with pytest.raises(SnapshotInProgressError, match="snapshot of table orders is still running"):
        reader()
    store.finish(STREAM, SOURCE, 0, 2)
    assert reader() == 42_000_000


class FinishesAfter:
    """A store whose snapshot is RUNNING for the first `polls` reads of the start row, then DONE."""

    def __init__(self, polls: int) -> None:
        self._store = SnapshotStateStore(source_with_rows(0), STATUS)
        self._store.create(STREAM, SOURCE, 1, 1)
        self._store.store_ranges(STREAM, SOURCE, ranges_from_points(["id"], [[("id", 5)]]))
        self._polls = polls

    def read(self, stream_id: str, table: str):
        self._polls -= 1
        if self._polls < 0:
            self._store.finish(STREAM, SOURCE, 10, 2)
        return self._store.read(stream_id, table)

    def read_ranges(self, stream_id: str):
        return self._store.read_ranges(stream_id)


def test_a_starting_worker_waits_until_the_snapshot_is_done(caplog: pytest.LogCaptureFixture) -> None:
    store = FinishesAfter(polls=3)
    with caplog.at_level("INFO", logger="cdcbridge.snapshot.stream_start"):
        assert wait_for_snapshots(store, [(SOURCE, STREAM)], threading.Event(), poll_seconds=0)
    waits = [r.getMessage() for r in caplog.records]
    assert waits == ["waiting for the snapshot of table orders to finish (0/2 ranges, 0 rows exported)"] * 3


def test_a_stop_ends_the_wait() -> None:
    stop = threading.Event()
    stop.set()
    assert not wait_for_snapshots(FinishesAfter(polls=100), [(SOURCE, STREAM)], stop, poll_seconds=60)


def test_progress_is_none_for_a_table_without_a_running_snapshot() -> None:
    store = SnapshotStateStore(source_with_rows(0), STATUS)
    assert running_snapshot_progress(store, STREAM, SOURCE) is None
    assert wait_for_snapshots(store, [(SOURCE, STREAM)], threading.Event(), poll_seconds=60)
