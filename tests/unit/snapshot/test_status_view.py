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
