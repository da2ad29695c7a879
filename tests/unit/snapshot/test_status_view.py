"""What `cdcbridge status` shows of snapshots and of an end time."""

from __future__ import annotations

from cdcbridge.bridge.status import ClusterStatus, ShardStatus, SnapshotStatus, render_text


def shard(shard_id: str, passed: bool, state: str) -> ShardStatus:
    return ShardStatus(
        table="orders", shard_id=shard_id, owner="w1", stealer="", checkpoint="iterator", checkpoint_seq="1:5:0",
        parents=[], renewed_seconds_ago=1.0, lag_records=0, lag_records_capped=False, lag_seconds=0.0,
        finished=False, reached="2025-06-01T11:59:59.000+00:00", end_time_state=state, passed_end_time=passed,
    )  # fmt: skip


def test_snapshots_and_end_time_progress_are_listed() -> None:
    shards = [
        shard("shard-1", True, "passed end time (reached ...)"),
        shard("shard-2", False, "reached ..., 3.0s to go"),
    ]
    status = ClusterStatus(
        shards=shards,
        snapshots=[SnapshotStatus("orders", "RUNNING", "2025-06-01T11:00:00.000+00:00", 8, 3, 12_345)],
        end_time="2025-06-01T12:00:00.000+00:00",
    )
    text = render_text(status)
    assert "orders         RUNNING  2025-06-01T11:00:00.000+00:00        3/8       12,345" in text
    assert "END TIME 2025-06-01T12:00:00.000+00:00: 1/2 shards passed" in text
    assert "shard-2                      reached ..., 3.0s to go" in text


def test_incremental_snapshots_show_range_progress_the_open_chunk_its_holding_shards_and_skipped_keys() -> None:
    from cdcbridge.bridge.status import incremental_status
    from cdcbridge.snapshot.incremental_state import (
        ChunkState,
        IncrementalChunk,
        IncrementalReport,
        IncrementalSnapshotStore,
    )

    from .fakes import SOURCE, STATUS, STREAM, source_with_rows

    store = IncrementalSnapshotStore(source_with_rows(0), STATUS)
    requested = store.request(STREAM, SOURCE, now_ms=1_000, begin=[("id", 5)], rows_per_second=200)
    running = store.claim(requested, "exp-1", 9_000)
    running = store.save_progress(running, now_ms=9_000, resume=[("id", 50)], range_done=False, rows=45, chunks=3,
                                  skipped_keys=[[("id", 7)]])  # fmt: skip
    store.open_chunk(running, IncrementalChunk(STREAM, running.snapshot_id, 4, 10, 20, ChunkState.OPEN, [("id", 50)]))
    store.write_report(IncrementalReport(STREAM, running.snapshot_id, 4, "shard-b", True, holding=True))
    store.write_report(IncrementalReport(STREAM, running.snapshot_id, 4, "shard-a", True))
    store.write_report(IncrementalReport(STREAM, running.snapshot_id, 4, "shard-c", False))
    store.request(STREAM, SOURCE, now_ms=2_000)
    (first, second) = incremental_status(store, STREAM, SOURCE, now_ms=11_500)
    assert (first.state, first.range, first.rows, first.chunks) == ("RUNNING", "[(5), end)", 45, 3)
    assert (first.exporter, first.heartbeat_seconds_ago, first.held_shards) == ("exp-1", 2.5, ["shard-b"])
    assert first.open_chunk == "chunk 4 OPEN (fenced), 2 shard(s) past its fence" and first.skipped_keys == ["(7)"]
    assert second.state == "PENDING" and second.exporter == "" and second.open_chunk == ""
    text = render_text(ClusterStatus(incremental=[first, second]))
    line = f"{first.snapshot_id:<26} orders         RUNNING           45       3    200/s  [(5), end) exporter exp-1"
    assert f"{line} (2.5s ago)" in text
    assert "chunk 4 OPEN (fenced), 2 shard(s) past its fence; shards holding records after it: shard-b" in text
    assert "skipped hot keys: (7)" in text and "requested by cli, no exporter yet" in text
