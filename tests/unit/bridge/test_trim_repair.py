"""The incremental snapshot that repairs a trim: one per shard and trim (not per retry, not per worker), none while
a whole-table snapshot of the table is still PENDING, whole table always (a shard's key range is not known)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cdcbridge.bridge.trim_repair import TrimRepair, repair_id
from cdcbridge.changes import Sequence
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.trim_policy import TrimmedRead
from cdcbridge.snapshot.errors import SnapshotConflictError, SnapshotStateError
from cdcbridge.snapshot.incremental_state import IncrementalSnapshot, IncrementalState, RequestedBy

TRIMMED = TrimmedRead("stream-1", "shard-7", ExtendedSequence(Sequence(1, 1_700_000_000_000_000, 3)))


class _Store:
    """The snapshot rows of IncrementalSnapshotStore, with its conditional request."""

    def __init__(self, *snapshots: IncrementalSnapshot) -> None:
        self.rows = {s.snapshot_id: s for s in snapshots}
        self.requests: list[str] = []
        self.down = False

    def list_snapshots(self, stream_id: str, table: str) -> list[IncrementalSnapshot]:
        if self.down:
            raise SnapshotStateError("status table down")
        return [s for s in self.rows.values() if s.table == table]

    def request(self, stream_id: str, table: str, *, now_ms: int, requested_by: RequestedBy,
                snapshot_id: str) -> IncrementalSnapshot:  # fmt: skip
        self.requests.append(snapshot_id)
        if snapshot_id in self.rows:
            raise SnapshotConflictError("taken")
        snapshot = IncrementalSnapshot(stream_id, snapshot_id, table, IncrementalState.PENDING,
                                       requested_by=requested_by)  # fmt: skip
        self.rows[snapshot_id] = snapshot
        return snapshot


def _repair(store: _Store) -> TrimRepair:
    return TrimRepair(store, "stream-1", "orders", clock=lambda: 1_800_000_000.0)  # type: ignore[arg-type]


def test_one_request_per_shard_and_trim_whatever_the_retries_and_workers() -> None:
    store = _Store()
    snapshot_id, requested = _repair(store).request(TRIMMED)
    assert requested and snapshot_id == repair_id("orders", TRIMMED)
    assert snapshot_id.startswith("1700000000000-trim-")
    row = store.rows[snapshot_id]
    assert row.requested_by is RequestedBy.TRIM and (row.begin, row.end) == (None, None)  # the whole table
    row = store.rows[snapshot_id] = replace(row, state=IncrementalState.RUNNING, exporter_id="w2")
    # A retry, or another worker meeting the same trim after a crash: the same snapshot, no new request.
    assert _repair(store).request(TRIMMED) == (snapshot_id, False)
    assert list(store.rows) == [snapshot_id]


def test_a_racing_worker_that_lost_the_conditional_put_names_the_same_snapshot() -> None:
    wanted = repair_id("orders", TRIMMED)

    class _Raced(_Store):
        def list_snapshots(self, stream_id: str, table: str) -> list[IncrementalSnapshot]:
            listed = super().list_snapshots(stream_id, table)  # read before the other worker's put landed
            self.rows[wanted] = IncrementalSnapshot("stream-1", wanted, "orders", IncrementalState.PENDING)
            return listed

    store = _Raced()
    assert _repair(store).request(TRIMMED) == (wanted, False)
    assert store.requests == [wanted]


def test_a_pending_whole_table_snapshot_repairs_it_already() -> None:
    pending = IncrementalSnapshot("stream-1", "ask-1", "orders", IncrementalState.PENDING)
    store = _Store(pending)
    assert _repair(store).request(TRIMMED) == ("ask-1", False)
    assert store.requests == []


@pytest.mark.parametrize("other", [
    IncrementalSnapshot("stream-1", "running", "orders", IncrementalState.RUNNING, exporter_id="w1"),
    IncrementalSnapshot("stream-1", "part", "orders", IncrementalState.PENDING, begin=[("id", 5)]),
    IncrementalSnapshot("stream-1", "done", "orders", IncrementalState.DONE),
    IncrementalSnapshot("stream-1", "other-table", "users", IncrementalState.PENDING),
])  # fmt: skip
def test_running_partial_finished_or_other_snapshots_do_not(other: IncrementalSnapshot) -> None:
    """A running one may have read chunks before the lost changes; a key range may not hold the lost keys."""
    store = _Store(other)
    snapshot_id, requested = _repair(store).request(TRIMMED)
    assert requested and snapshot_id == repair_id("orders", TRIMMED)


def test_a_different_shard_or_a_later_trim_gets_its_own_snapshot() -> None:
    later = TrimmedRead("stream-1", "shard-7", ExtendedSequence(Sequence(1, 1_700_000_500_000_000, 0)))
    other_shard = replace(TRIMMED, shard_id="shard-8")
    never_checkpointed = replace(TRIMMED, checkpoint_seq=None)
    ids = {repair_id("orders", t) for t in (TRIMMED, later, other_shard, never_checkpointed)}
    assert len(ids) == 4
    assert repair_id("orders", never_checkpointed).startswith("0000000000000-trim-")


def test_an_unreachable_status_table_raises() -> None:
    store = _Store()
    store.down = True
    with pytest.raises(SnapshotStateError):
        _repair(store).request(TRIMMED)
