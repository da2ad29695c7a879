"""The snapshot's rows in the status table: one start per table (conditional), ranges before their count,
progress round trips, and removal."""

from __future__ import annotations

import pytest
from tablestore import INF_MAX, INF_MIN

from cdcbridge.snapshot.errors import SnapshotConflictError, SnapshotStateError
from cdcbridge.snapshot.split_points import ranges_from_points
from cdcbridge.snapshot.state import SnapshotState, SnapshotStateStore

from .fakes import SOURCE, STATUS, STREAM, source_with_rows


def test_only_one_snapshot_of_a_table_can_begin() -> None:
    store = SnapshotStateStore(source_with_rows(0), STATUS)
    assert store.read(STREAM, SOURCE) is None
    created = store.create(STREAM, SOURCE, 42_000_000, 7)
    assert store.read(STREAM, SOURCE) == created
    assert created.state is SnapshotState.RUNNING and created.ranges is None
    with pytest.raises(SnapshotConflictError, match="another snapshot of table orders"):
        store.create(STREAM, SOURCE, 43_000_000, 8)
    assert store.read(STREAM, SOURCE).start_us == 42_000_000


def test_ranges_and_their_progress_round_trip_and_finish_marks_done() -> None:
    store = SnapshotStateStore(source_with_rows(0), STATUS)
    store.create(STREAM, SOURCE, 42_000_000, 7)
    ranges = store.store_ranges(STREAM, SOURCE, ranges_from_points(["id"], [[("id", 5)], [("id", 9)]]))
    assert store.read(STREAM, SOURCE).ranges == 3
    assert store.read_ranges(STREAM) == ranges
    assert ranges[0].resume == [("id", INF_MIN)] and ranges[2].end == [("id", INF_MAX)]
    store.save_progress(STREAM, ranges[1].advanced([("id", 7)], 2))
    store.save_progress(STREAM, ranges[2].advanced(None, 11))
    read = store.read_ranges(STREAM)
    assert (read[1].resume, read[1].rows, read[1].done) == ([("id", 7)], 2, False)
    assert (read[2].resume, read[2].rows, read[2].done) == (None, 11, True)
    store.finish(STREAM, SOURCE, 13, 99)
    record = store.read(STREAM, SOURCE)
    assert (record.state, record.rows, record.finished_at_ms) == (SnapshotState.DONE, 13, 99)


def test_delete_removes_the_start_and_every_range() -> None:
    client = source_with_rows(0)
    store = SnapshotStateStore(client, STATUS)
    store.create(STREAM, SOURCE, 1, 1)
    store.store_ranges(STREAM, SOURCE, ranges_from_points(["id"], [[("id", 5)]]))
    store.delete(STREAM, SOURCE)
    assert store.read(STREAM, SOURCE) is None and store.read_ranges(STREAM) == []
    assert client.tables[STATUS] == {}


def test_a_malformed_start_row_names_the_fix() -> None:
    from tablestore import Row

    client = source_with_rows(0)
    client.put_row(STATUS, Row([("StreamId", STREAM), ("StatusType", "Snapshot"), ("StatusValue", SOURCE)],
                               [("State", "HALF")]))  # fmt: skip
    with pytest.raises(SnapshotStateError, match=r"malformed .* delete it and run the snapshot again"):
        SnapshotStateStore(client, STATUS).read(STREAM, SOURCE)


def test_storing_ranges_again_replaces_those_of_an_attempt_that_stopped_half_way() -> None:
    store = SnapshotStateStore(source_with_rows(0), STATUS)
    store.create(STREAM, SOURCE, 1, 1)
    store.store_ranges(STREAM, SOURCE, ranges_from_points(["id"], [[("id", 3)], [("id", 6)], [("id", 9)]]))
    again = store.store_ranges(STREAM, SOURCE, ranges_from_points(["id"], [[("id", 5)]]))
    assert store.read_ranges(STREAM) == again and len(again) == 2
