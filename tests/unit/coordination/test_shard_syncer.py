"""Shard sync: parents first, never reset, and the I8 deletion rule at the syncer level."""

from __future__ import annotations

from cdcbridge.coordination import SHARD_END, CoordinationStats, FakeClock, InMemoryLeaseStore, Lease, ShardInfo
from cdcbridge.coordination.leases.memory_store import Primitive
from cdcbridge.coordination.leases.shard_syncer import ShardSyncer, parents_first
from cdcbridge.coordination.stream.simulator import StreamSimulator


def test_parents_come_first_whatever_the_listing_order() -> None:
    shards = [ShardInfo("c", "a", "b"), ShardInfo("b", "root"), ShardInfo("a", "root"), ShardInfo("root")]
    order = [s.shard_id for s in parents_first(shards)]
    assert order.index("root") < order.index("a") < order.index("c") and order.index("b") < order.index("c")
    cyclic = [ShardInfo("x", "y"), ShardInfo("y", "x")]  # malformed lineage must not hang
    assert sorted(s.shard_id for s in parents_first(cyclic)) == ["x", "y"]


def test_sync_creates_parent_leases_before_child_leases_and_keeps_existing_ones() -> None:
    stream = StreamSimulator("st")
    left, right = stream.split("s0")
    store = InMemoryLeaseStore(clock=FakeClock())
    store.create_lease_if_absent(Lease("st", left))
    progressed = store.checkpoint(store.take(store.get_lease("st", left), "w1"), "it", None)  # type: ignore[arg-type]
    syncer = ShardSyncer(store, stream, "st", CoordinationStats())
    result = syncer.sync()
    assert result.created == ["s0", right]
    puts = [w.key.shard_id for w in store.write_log if w.primitive is Primitive.PUT]
    assert puts.index("s0") < puts.index(right)
    assert store.get_lease("st", left) == progressed  # never reset
    assert store.get_lease("st", right).parent_shard_ids == ("s0",)  # type: ignore[union-attr]
    assert syncer.listed_shards() == frozenset({"s0", left, right})


def test_leases_of_vanished_shards_go_only_after_their_children_progressed() -> None:
    stream = StreamSimulator("st")
    left, right = stream.split("s0")
    store = InMemoryLeaseStore(clock=FakeClock())
    stats = CoordinationStats()
    syncer = ShardSyncer(store, stream, "st", stats)
    syncer.sync()
    parent = store.get_lease("st", "s0")
    assert parent is not None
    store.checkpoint(store.take(parent, "w1"), SHARD_END, None)
    assert syncer.sync().deleted == []  # listed: kept
    stream.remove_shard("s0")
    assert syncer.sync().deleted == []  # children still at TRIM_HORIZON: kept
    for child in (left, right):
        lease = store.get_lease("st", child)
        store.checkpoint(store.take(lease, "w2"), f"{child}@3", None)  # type: ignore[arg-type]
    assert syncer.sync().deleted == ["s0"]
    assert store.get_lease("st", "s0") is None and stats.leases_deleted == 1
    assert syncer.sync().created == []  # a vanished shard's lease is never re-created
