"""The incremental-snapshot protocol rows: requests and signal rows, one exporter per snapshot (claim, takeover,
heartbeat), chunks, reports, their clean-up, and state changes — against the fake status table that evaluates the
encoded write conditions."""

from __future__ import annotations

import pytest
from tablestore import INF_MAX, INF_MIN, Row

from cdcbridge.snapshot.errors import SnapshotConflictError, SnapshotStateError
from cdcbridge.snapshot.incremental_state import (
    ChunkState,
    ExporterReplacedError,
    IncrementalChunk,
    IncrementalReport,
    IncrementalSnapshotStore,
    IncrementalState,
    PendingKey,
    RequestedBy,
)
from cdcbridge.snapshot.key_bounds import compare_key, key_in_range

from .fakes import SOURCE, STATUS, STREAM, source_with_rows


def _store() -> tuple[IncrementalSnapshotStore, object]:
    client = source_with_rows(0)
    return IncrementalSnapshotStore(client, STATUS), client


def test_a_request_round_trips_and_lists_by_table() -> None:
    store, _ = _store()
    snapshot = store.request(STREAM, SOURCE, now_ms=1_000, begin=[("id", 5)], end=[("id", 9)], rows_per_second=50)
    other = store.request(STREAM, "other", now_ms=2_000)
    assert store.read(STREAM, snapshot.snapshot_id) == snapshot
    assert snapshot.state is IncrementalState.PENDING and snapshot.requested_by is RequestedBy.CLI
    assert (snapshot.begin, snapshot.end, snapshot.rows_per_second) == ([("id", 5)], [("id", 9)], 50)
    assert store.list_snapshots(STREAM) == [snapshot, other]
    assert store.list_snapshots(STREAM, SOURCE) == [snapshot]
    assert other.begin is None and other.end is None and other.rows_per_second is None


def test_a_signal_row_with_only_table_and_state_is_a_request_of_the_whole_table() -> None:
    store, client = _store()
    key = [("StreamId", STREAM), ("StatusType", "IncrementalSnapshot"), ("StatusValue", "ask-1")]
    client.put_row(STATUS, Row(key, [("Table", SOURCE), ("State", "PENDING")]))
    (signal,) = store.list_snapshots(STREAM)
    assert (signal.snapshot_id, signal.table, signal.state) == ("ask-1", SOURCE, IncrementalState.PENDING)
    assert (signal.begin, signal.end, signal.resume, signal.exporter_id, signal.requested_by) == (
        None, None, None, "", RequestedBy.SIGNAL,
    )  # fmt: skip
    claimed = store.claim(signal, "exporter-a", 5_000)
    assert store.read(STREAM, "ask-1") == claimed and claimed.state is IncrementalState.RUNNING


def test_only_one_of_two_exporters_claims_a_pending_snapshot() -> None:
    store, _ = _store()
    pending = store.request(STREAM, SOURCE, now_ms=1_000)
    store.claim(pending, "exporter-a", 2_000)
    with pytest.raises(SnapshotConflictError, match="another exporter claimed"):
        store.claim(pending, "exporter-b", 2_001)
    assert store.read(STREAM, pending.snapshot_id).exporter_id == "exporter-a"


def test_a_takeover_replaces_the_exporter_seen_dead_and_the_old_one_can_no_longer_write() -> None:
    store, _ = _store()
    mine = store.claim(store.request(STREAM, SOURCE, now_ms=1_000), "exporter-a", 2_000)
    mine = store.heartbeat(mine, 3_000)
    seen = store.read(STREAM, mine.snapshot_id)
    assert seen.heartbeat_ms == 3_000 and seen.heartbeat_age_ms(20_000) == 17_000
    taken = store.claim(seen, "exporter-b", 20_000)
    assert taken.state is IncrementalState.RUNNING and taken.exporter_id == "exporter-b"
    with pytest.raises(ExporterReplacedError, match="taken over by another exporter"):
        store.heartbeat(mine, 21_000)
    with pytest.raises(ExporterReplacedError):
        store.save_progress(mine, now_ms=21_000, resume=[("id", 3)], range_done=False, rows=3, chunks=1)
    chunk = IncrementalChunk(STREAM, mine.snapshot_id, 1, 10, 20, opened_ms=21_000)
    with pytest.raises(ExporterReplacedError):
        store.open_chunk(mine, chunk)
    assert store.read_chunk(STREAM, mine.snapshot_id) is None
    # A takeover based on a stale read (the heartbeat moved on since) loses too.
    with pytest.raises(SnapshotConflictError):
        store.claim(seen, "exporter-c", 22_000)


def test_progress_with_pending_and_skipped_keys_round_trips() -> None:
    store, _ = _store()
    mine = store.claim(store.request(STREAM, SOURCE, now_ms=1_000), "exporter-a", 2_000)
    saved = store.save_progress(
        mine, now_ms=3_000, resume=[("id", 40)], range_done=True, rows=39, chunks=4,
        pending_keys=[PendingKey([("id", 7)], 2)], skipped_keys=[[("id", 8)], [("id", 9)]],
    )  # fmt: skip
    read = store.read(STREAM, mine.snapshot_id)
    assert read == saved
    assert (read.resume, read.range_done, read.rows, read.chunks) == ([("id", 40)], True, 39, 4)
    assert read.pending_keys == (PendingKey([("id", 7)], 2),) and read.skipped_keys == ([("id", 8)], [("id", 9)])


def test_state_changes_are_conditional_on_the_expected_state() -> None:
    store, _ = _store()
    snapshot = store.claim(store.request(STREAM, SOURCE, now_ms=1_000), "exporter-a", 2_000)
    store.set_state(STREAM, snapshot.snapshot_id, IncrementalState.PAUSED, now_ms=3_000,
                    expected=IncrementalState.RUNNING)  # fmt: skip
    assert store.read(STREAM, snapshot.snapshot_id).state is IncrementalState.PAUSED
    with pytest.raises(SnapshotConflictError, match="no longer RUNNING"):
        store.set_state(STREAM, snapshot.snapshot_id, IncrementalState.PAUSED, now_ms=3_001,
                        expected=IncrementalState.RUNNING)  # fmt: skip
    store.set_state(STREAM, snapshot.snapshot_id, IncrementalState.FAILED, now_ms=4_000, error="read failed")
    read = store.read(STREAM, snapshot.snapshot_id)
    assert (read.state, read.error, read.state.finished) == (IncrementalState.FAILED, "read failed", True)
    with pytest.raises(SnapshotConflictError):
        store.set_state(STREAM, "no-such-id", IncrementalState.CANCELLED, now_ms=5_000)


def test_chunks_open_and_close_and_closing_deletes_their_reports() -> None:
    store, client = _store()
    snapshot = store.claim(store.request(STREAM, SOURCE, now_ms=1_000), "exporter-a", 2_000)
    first = IncrementalChunk(STREAM, snapshot.snapshot_id, 1, 100, 200, begin=[("id", INF_MIN)], end=[("id", 10)],
                             opened_ms=3_000)  # fmt: skip
    store.open_chunk(snapshot, first)
    assert store.read_chunk(STREAM, snapshot.snapshot_id) == first
    assert store.list_chunks(STREAM) == [first]
    store.write_report(
        IncrementalReport(
            STREAM,
            snapshot.snapshot_id,
            1,
            "shard-a",
            True,
            dirty_keys=([("id", 3)],),
            epochs=(0,),
            newest_epoch=0,
            reported_ms=4_000,
        )
    )
    store.write_report(IncrementalReport(STREAM, snapshot.snapshot_id, 1, "shard-b", False, holding=True))
    reports = store.read_reports(STREAM, snapshot.snapshot_id, 1)
    assert [(r.shard_id, r.passed, r.dirty_keys, r.epochs, r.newest_epoch, r.holding) for r in reports] == [
        ("shard-a", True, ([("id", 3)],), (0,), 0, False), ("shard-b", False, (), (), None, True),
    ]  # fmt: skip
    store.close_chunk(first, ChunkState.EMITTED, 5_000)
    assert store.read_chunk(STREAM, snapshot.snapshot_id).state is ChunkState.EMITTED
    assert store.read_reports(STREAM, snapshot.snapshot_id, 1) == []
    # A key-list chunk replaces it; closing the older chunk again no longer applies.
    second = IncrementalChunk(STREAM, snapshot.snapshot_id, 2, 300, 400, keys=([("id", 3)], [("id", 12)]))
    store.open_chunk(snapshot, second)
    assert store.read_chunk(STREAM, snapshot.snapshot_id) == second
    with pytest.raises(SnapshotConflictError, match="no longer its open chunk"):
        store.close_chunk(first, ChunkState.ABANDONED, 6_000)
    store.delete(STREAM, snapshot.snapshot_id)
    assert client.tables[STATUS] == {}


def test_reports_of_one_chunk_are_read_apart_from_those_of_the_next() -> None:
    store, _ = _store()
    snapshot = store.request(STREAM, SOURCE, now_ms=1_000)
    for chunk in (1, 2, 10):
        store.write_report(IncrementalReport(STREAM, snapshot.snapshot_id, chunk, f"shard-{chunk}", True))
    assert [r.shard_id for r in store.read_reports(STREAM, snapshot.snapshot_id, 1)] == ["shard-1"]
    store.delete_reports(STREAM, snapshot.snapshot_id, 2)
    assert store.read_reports(STREAM, snapshot.snapshot_id, 2) == []
    assert [r.shard_id for r in store.read_reports(STREAM, snapshot.snapshot_id, 10)] == ["shard-10"]


def test_a_chunk_covers_its_range_or_its_key_list_and_its_window_is_closed() -> None:
    ranged = IncrementalChunk(STREAM, "s", 1, 100, 200, begin=[("id", 5)], end=[("id", 9)])
    assert [ranged.covers([("id", i)]) for i in (4, 5, 8, 9)] == [False, True, True, False]
    open_ended = IncrementalChunk(STREAM, "s", 1, 100, 200, begin=[("id", 5)], end=None)
    assert open_ended.covers([("id", 10**12)]) and not open_ended.covers([("id", 4)])
    listed = IncrementalChunk(STREAM, "s", 2, 100, 200, keys=([("id", 3)],))
    assert listed.covers([("id", 3)]) and not listed.covers([("id", 4)])
    assert [ranged.in_window(t) for t in (99, 100, 200, 201)] == [False, True, True, False]


def test_keys_compare_in_tablestore_order_with_sentinels() -> None:
    assert compare_key([("a", 5), ("b", "x")], [("a", 5), ("b", INF_MIN)]) == 1
    assert compare_key([("a", 5), ("b", "x")], [("a", 5), ("b", INF_MAX)]) == -1
    assert compare_key([("a", 5), ("b", "x")], [("a", 6), ("b", INF_MIN)]) == -1
    assert compare_key([("a", b"\x01")], [("a", b"\x01")]) == 0
    assert key_in_range([("a", "é")], [("a", "z")], [("a", INF_MAX)])  # code point order = UTF-8 byte order
    assert not key_in_range([("a", 9)], [("a", 0)], [("a", 9)])


def test_a_malformed_chunk_row_names_the_fix() -> None:
    store, client = _store()
    key = [("StreamId", STREAM), ("StatusType", "IncrementalChunk"), ("StatusValue", "s")]
    client.put_row(STATUS, Row(key, [("Number", 1), ("State", "OPEN")]))
    with pytest.raises(
        SnapshotStateError,
        match=r"malformed \(column 'WindowStartUs' is missing\); cancel it \(`cdcbridge snapshot cancel`\)",
    ):
        store.list_chunks(STREAM)


def test_an_announced_chunk_has_no_fence_until_the_read_sets_it_and_narrows_the_range() -> None:
    store, _ = _store()
    snapshot = store.claim(store.request(STREAM, SOURCE, now_ms=1_000), "exporter-a", 2_000)
    announced = IncrementalChunk(STREAM, snapshot.snapshot_id, 1, 100, None, begin=[("id", 5)], end=None)
    store.open_chunk(snapshot, announced)
    read = store.read_chunk(STREAM, snapshot.snapshot_id)
    assert read == announced and read.fence_us is None
    assert read.in_window(100) and read.in_window(10**15) and not read.in_window(99)
    assert read.covers([("id", 10**9)])
    fenced = store.set_fence(read, 900, [("id", 20)])
    assert store.read_chunk(STREAM, snapshot.snapshot_id) == fenced
    assert (fenced.fence_us, fenced.end) == (900, [("id", 20)])
    assert not fenced.in_window(901) and not fenced.covers([("id", 20)])
    store.open_chunk(snapshot, IncrementalChunk(STREAM, snapshot.snapshot_id, 2, 1000, None, keys=([("id", 3)],)))
    with pytest.raises(SnapshotConflictError, match="no longer its open chunk"):
        store.set_fence(fenced, 950, [("id", 30)])


def test_a_late_report_on_a_closed_chunk_goes_with_the_snapshot_s_reports() -> None:
    store, client = _store()
    snapshot = store.claim(store.request(STREAM, SOURCE, now_ms=1_000), "exporter-a", 2_000)
    other = store.request(STREAM, SOURCE, now_ms=1_001)
    chunk = IncrementalChunk(STREAM, snapshot.snapshot_id, 1, 100, 200)
    store.open_chunk(snapshot, chunk)
    store.close_chunk(chunk, ChunkState.EMITTED, 3_000)
    store.write_report(IncrementalReport(STREAM, snapshot.snapshot_id, 1, "shard-late", True))  # after the close
    store.write_report(IncrementalReport(STREAM, other.snapshot_id, 1, "shard-x", True))
    store.delete_snapshot_reports(STREAM, snapshot.snapshot_id)
    assert store.read_reports(STREAM, snapshot.snapshot_id, 1) == []
    assert [r.shard_id for r in store.read_reports(STREAM, other.snapshot_id, 1)] == ["shard-x"]
    store.delete(STREAM, other.snapshot_id)
    store.delete(STREAM, snapshot.snapshot_id)
    assert client.tables[STATUS] == {}
