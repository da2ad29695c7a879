"""Per-shard progress for the metrics layer: records read, checkpoints (stored and failed), what is unconfirmed,
the commit time of the newest record handed out, trimmed data — counted by the consumer tasks per page."""

from __future__ import annotations

import pytest

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.coordination import FakeClock, InMemoryLeaseStore
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.errors import LeaseLostError, LeaseStoreError, LeaseStoreUnavailableError
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.coordination.leases.memory_store import WriteFault
from cdcbridge.coordination.stats import CheckpointCountingStore, CoordinationStats, ShardProgress
from tests.unit.coordination.helpers import STREAM, Cluster, fast_settings


def _record(n: int) -> ChangeRecord:
    return ChangeRecord("orders", RecordAction.PUT, [("pk", n)], [Cell("v", CellOp.PUT, n)], Sequence(1, n * 1000, 0))


def test_a_checkpoint_confirms_the_records_it_covers_across_pages() -> None:
    progress = ShardProgress()
    first, second = [_record(n) for n in (1, 2, 3)], [_record(n) for n in (4, 5)]
    progress.read(3, first)
    progress.read(2, second)
    assert progress.snapshot().records_unconfirmed == 5
    assert progress.snapshot().last_commit_ms == 5  # record 5 committed at 5000 µs

    progress.checkpointed(ExtendedSequence(first[1].sequence))  # records 1-2
    assert progress.snapshot().records_unconfirmed == 3
    progress.checkpointed(ExtendedSequence(second[0].sequence, 0))  # record 3, and only part 0 of record 4
    assert progress.snapshot().records_unconfirmed == 2
    progress.checkpointed(ExtendedSequence(second[0].sequence))  # record 4 whole
    assert progress.snapshot().records_unconfirmed == 1
    progress.checkpointed(None)  # SHARD_END (or the resume point after trimmed data) confirms everything
    snapshot = progress.snapshot()
    assert snapshot.records_unconfirmed == 0
    assert snapshot.checkpoints_written == 4
    assert snapshot.records_fetched == 5


def test_an_empty_read_means_caught_up_and_a_restart_forgets_what_it_will_read_again() -> None:
    progress = ShardProgress()
    progress.read(2, [_record(1), _record(2)])
    assert progress.snapshot().caught_up is False
    progress.read(0, [])
    assert progress.snapshot().caught_up is True
    assert progress.snapshot().last_commit_ms == 2  # kept: the newest record handed out
    progress.restarted()  # a new incarnation resumes at the stored checkpoint and hands these out again
    assert progress.snapshot().records_unconfirmed == 0
    # records skipped on resume are fetched but not handed out
    progress.read(3, [_record(3)])
    snapshot = progress.snapshot()
    assert (snapshot.records_fetched, snapshot.records_unconfirmed, snapshot.caught_up) == (5, 1, False)


class _FailingStore(InMemoryLeaseStore):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def checkpoint(self, lease: Lease, checkpoint: str, checkpoint_seq: ExtendedSequence | None) -> Lease:
        raise self.error


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (LeaseLostError("s0", "taken by w2"), "lease_lost"),
        (LeaseStoreUnavailableError("timeout"), "unavailable"),
        (LeaseStoreError("refused"), "store_error"),
        (RuntimeError("bug"), "error"),
    ],
)
def test_failed_checkpoint_writes_are_counted_by_reason_and_still_raise(error: Exception, reason: str) -> None:
    progress = ShardProgress()
    store = CheckpointCountingStore(_FailingStore(error), progress)
    with pytest.raises(type(error)):
        store.checkpoint(Lease(STREAM, "s0"), "it@1", None)
    snapshot = progress.snapshot()
    assert snapshot.checkpoint_failures == {reason: 1}
    assert snapshot.checkpoints_written == 0


def test_the_counting_store_passes_every_other_call_through() -> None:
    inner = InMemoryLeaseStore(clock=FakeClock())
    store = CheckpointCountingStore(inner, ShardProgress())
    store.ensure_table()
    assert store.create_lease_if_absent(Lease(STREAM, "s0")) is True
    taken = store.take(store.get_lease(STREAM, "s0"), "w1")
    renewed = store.renew(taken)
    asked = store.request_steal(renewed, "w2")
    moved = store.transfer(asked, "w2")
    released = store.release(moved)
    assert [lease.shard_id for lease in store.list_leases(STREAM)] == ["s0"]
    assert inner.get_lease(STREAM, "s0") == released
    assert store.delete(released) is True


def test_a_worker_counts_reads_checkpoints_and_unconfirmed_records_per_shard() -> None:
    cluster = Cluster(fast_settings(max_records=3), auto_ack=False, shard_count=2)
    for i in range(10):
        cluster.stream.put(f"k{i}")
    worker = cluster.add_worker("w1")
    cluster.run_until(lambda: len(cluster.journal.deliveries) == 10)
    cluster.run_for(2)  # one more read per shard finds nothing newer

    progress = worker.stats.shards()
    assert set(progress) == {"s0", "s1"}
    assert sum(p.records_fetched for p in progress.values()) == 10
    assert all(p.records_unconfirmed == p.records_fetched for p in progress.values())
    assert all(p.checkpoints_written == 0 and p.caught_up for p in progress.values())
    for shard_id, shard in progress.items():
        newest = cluster.stream.records_of(shard_id)[-1]
        assert shard.last_commit_ms == newest.timestamp_ms

    s0 = next(p for p in cluster.processors["w1"] if p.shard_id == "s0")
    before = progress["s0"].records_unconfirmed
    s0.ack(2)
    after = worker.stats.shards()["s0"]
    assert after.records_unconfirmed == before - 2
    assert after.checkpoints_written == 1
    assert worker.stats.shards()["s1"].checkpoints_written == 0


def test_trimmed_data_is_counted_for_the_shard_it_hit() -> None:
    cluster = Cluster(shard_count=2)
    for i in range(6):
        cluster.stream.put(f"early{i}")
    cluster.add_worker("w1")
    cluster.run_for(2)
    cluster.crash("w1")
    for i in range(12):
        cluster.stream.put(f"late{i}")
    cluster.stream.trim(keep_last=3)
    worker = cluster.add_worker("w2")
    cluster.run_for(40)

    trimmed = {shard_id: p.trimmed_data_events for shard_id, p in worker.stats.shards().items()}
    assert sum(trimmed.values()) == worker.stats.trimmed_data_events >= 1
    assert all(count <= 1 for count in trimmed.values())


def test_a_checkpoint_store_failure_in_a_worker_is_counted_for_its_shard() -> None:
    cluster = Cluster(auto_ack=False)
    for i in range(4):
        cluster.stream.put(f"k{i}")
    worker = cluster.add_worker("w1")
    cluster.run_until(lambda: len(cluster.journal.deliveries) == 4)
    cluster.store.inject_write_fault(WriteFault.TIMEOUT_NOT_APPLIED, shard_id="s0", times=10)
    processor = cluster.processors["w1"][0]
    processor.ack()

    assert processor.checkpoint_errors, "the injected timeout must reach the processor"
    progress = worker.stats.shards()["s0"]
    assert progress.checkpoint_failures == {"unavailable": 1}
    assert progress.checkpoints_written == 0 and progress.records_unconfirmed == 4


def test_shards_are_kept_apart_and_created_on_first_use() -> None:
    stats = CoordinationStats()
    stats.shard("a").read(2, [_record(1), _record(2)])
    stats.shard("b").trimmed()
    shards = stats.shards()
    assert shards["a"].records_fetched == 2 and shards["a"].trimmed_data_events == 0
    assert shards["b"].records_fetched == 0 and shards["b"].trimmed_data_events == 1
    assert stats.shard("a") is stats.shard("a")
    assert "shards" not in stats.snapshot()  # the per-worker counters stay plain integers
