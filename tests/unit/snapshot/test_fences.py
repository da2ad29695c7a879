"""A worker's view of a table's open chunks: never older than the refresh, only live exporters' OPEN chunks of
unfinished snapshots, liveness judged by the heartbeat changing on this worker's monotonic clock, no view (hold
everything) while the status table cannot be read."""

from __future__ import annotations

import logging

import pytest
from tablestore import OTSServiceError

from cdcbridge.coordination.clock import FakeClock
from cdcbridge.snapshot.fences import SnapshotFences
from cdcbridge.snapshot.incremental_state import (
    ChunkState,
    IncrementalChunk,
    IncrementalSnapshotStore,
    IncrementalState,
)

from .fakes import SOURCE, STATUS, STREAM, source_with_rows


def _setup() -> tuple[IncrementalSnapshotStore, SnapshotFences, FakeClock, object]:
    client = source_with_rows(0)
    store = IncrementalSnapshotStore(client, STATUS)
    clock = FakeClock()
    fences = SnapshotFences(store, STREAM, SOURCE, refresh_seconds=1.0, exporter_timeout_seconds=15.0, clock=clock)
    return store, fences, clock, client


def _running(store: IncrementalSnapshotStore, table: str = SOURCE):
    return store.claim(store.request(STREAM, table, now_ms=1_000), "exporter-a", 2_000)


def test_the_view_holds_open_chunks_of_live_exporters_and_is_re_read_after_the_refresh() -> None:
    store, fences, clock, _ = _setup()
    assert fences.view().chunks == ()
    snapshot = _running(store)
    chunk = IncrementalChunk(STREAM, snapshot.snapshot_id, 1, 100, None, begin=[("id", 0)])
    store.open_chunk(snapshot, chunk)
    assert fences.view().chunks == (), "the cached view is younger than the refresh"
    clock.advance(1.0)
    assert fences.view().chunks == (chunk,)
    fenced = store.set_fence(chunk, 500, [("id", 9)])
    clock.advance(1.0)
    assert fences.view().chunks == (fenced,)
    store.close_chunk(fenced, ChunkState.EMITTED, 3_000)
    clock.advance(1.0)
    assert fences.view().chunks == ()


def test_chunks_of_other_tables_and_of_finished_snapshots_are_left_out() -> None:
    store, fences, clock, _ = _setup()
    other = _running(store, "other")
    store.open_chunk(other, IncrementalChunk(STREAM, other.snapshot_id, 1, 100, None))
    mine = _running(store)
    store.open_chunk(mine, IncrementalChunk(STREAM, mine.snapshot_id, 1, 100, None))
    assert [c.snapshot_id for c in fences.view().chunks] == [mine.snapshot_id]
    store.set_state(STREAM, mine.snapshot_id, IncrementalState.CANCELLED, now_ms=5_000)
    clock.advance(1.0)
    assert fences.view().chunks == ()


def test_an_exporter_whose_heartbeat_stops_changing_is_dead_after_the_timeout() -> None:
    store, fences, clock, _ = _setup()
    snapshot = _running(store)
    store.open_chunk(snapshot, IncrementalChunk(STREAM, snapshot.snapshot_id, 1, 100, None))
    assert len(fences.view().chunks) == 1
    clock.advance(14.0)
    assert len(fences.view().chunks) == 1, "unchanged for 14 s: still alive"
    snapshot = store.heartbeat(snapshot, 90_000)
    clock.advance(1.0)
    assert len(fences.view().chunks) == 1, "the heartbeat changed: the timer starts again from this read"
    clock.advance(14.5)
    assert len(fences.view().chunks) == 1
    clock.advance(1.0)
    assert fences.view().chunks == (), "unchanged for 15.5 s: dead, its chunk holds nothing"
    store.heartbeat(snapshot, 91_000)
    clock.advance(1.0)
    assert len(fences.view().chunks) == 1, "it came back"


def test_no_view_while_the_status_table_cannot_be_read(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="cdcbridge.snapshot.fences")
    store, fences, clock, client = _setup()
    snapshot = _running(store)
    assert fences.view() is not None
    clock.advance(1.0)
    client.fail_next("GetRange", OTSServiceError(503, "OTSServerUnavailable", "down"))
    assert fences.view() is None
    client.fail_next("GetRange", OTSServiceError(503, "OTSServerUnavailable", "down"))
    assert fences.view() is None, "a failed read is retried at the next use, not cached"
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "table orders: cannot read its incremental snapshots" in warnings[0]
    store.open_chunk(snapshot, IncrementalChunk(STREAM, snapshot.snapshot_id, 1, 100, None))
    assert len(fences.view().chunks) == 1


def test_a_report_merges_with_the_one_an_earlier_owner_of_the_shard_stored() -> None:
    from cdcbridge.snapshot.incremental_state import IncrementalReport

    store, fences, _, _ = _setup()
    snapshot = _running(store)
    store.write_report(IncrementalReport(STREAM, snapshot.snapshot_id, 1, "shard-a", True, dirty_keys=([("id", 1)],),
                                         epochs=(2,)))  # fmt: skip
    store.write_report(IncrementalReport(STREAM, snapshot.snapshot_id, 1, "shard-b", True, dirty_keys=([("id", 9)],)))
    fences.report(IncrementalReport(STREAM, snapshot.snapshot_id, 1, "shard-a", True,
                                    dirty_keys=([("id", 3)], [("id", 1)]), epochs=(3,), holding=True))  # fmt: skip
    mine = {r.shard_id: r for r in store.read_reports(STREAM, snapshot.snapshot_id, 1)}
    assert mine["shard-a"].dirty_keys == ([("id", 1)], [("id", 3)]) and mine["shard-a"].epochs == (2, 3)
    assert mine["shard-a"].holding and mine["shard-b"].dirty_keys == ([("id", 9)],)


def test_a_refresh_is_one_range_read_and_a_read_slower_than_the_refresh_gives_no_view(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="cdcbridge.snapshot.fences")
    store, fences, clock, client = _setup()
    snapshot = _running(store)
    store.open_chunk(snapshot, IncrementalChunk(STREAM, snapshot.snapshot_id, 1, 100, None))
    from cdcbridge.snapshot.incremental_state import IncrementalReport

    store.write_report(IncrementalReport(STREAM, snapshot.snapshot_id, 1, "shard-a", True))  # between the two types
    before = sum(api == "GetRange" for api, _ in client.requests)
    assert len(fences.view().chunks) == 1
    assert sum(api == "GetRange" for api, _ in client.requests) == before + 1
    real_get_range = client.get_range

    def slow_get_range(*args, **kwargs):  # type: ignore[no-untyped-def]
        clock.advance(1.0)
        return real_get_range(*args, **kwargs)

    client.get_range = slow_get_range
    clock.advance(1.0)
    assert fences.view() is None, "read in 1 s: as old as the refresh when it arrives"
    assert "longer than snapshot.incremental.fence_refresh_seconds" in caplog.records[-1].getMessage()
