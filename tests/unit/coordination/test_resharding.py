"""Parents before children across split and merge (I4, I8): T4, T5, T11, and the missing-parent-lease rule."""

from __future__ import annotations

from cdcbridge.coordination import SHARD_END, ShutdownReason
from cdcbridge.coordination.leases.memory_store import Primitive, WriteFault
from cdcbridge.coordination.lifecycle.states import ConsumerState
from tests.unit.coordination.helpers import STREAM, Cluster, Delivery


def _guard_parents_first(cluster: Cluster) -> list[str]:
    """At every delivery, each parent of the record's shard must already be SHARD_END in the store (or gone)."""
    violations: list[str] = []

    def check(delivery: Delivery) -> None:
        for parent in cluster.stream.parents_of(delivery.shard_id):
            lease = cluster.store.get_lease(STREAM, parent)
            listed = parent in cluster.stream.shard_ids()
            if listed and (lease is None or lease.checkpoint != SHARD_END):
                violations.append(f"{delivery.shard_id} delivered while parent {parent} is {lease}")

    cluster.journal.on_delivery = check
    return violations


def _first_delivery_order_is_monotonic(cluster: Cluster) -> None:
    """Per key, the versions delivered for the first time arrive in commit order (redeliveries aside)."""
    seen: dict[str, list[int]] = {}
    for delivery in cluster.journal.deliveries:
        versions = seen.setdefault(delivery.key, [])
        if delivery.value not in versions:
            assert not versions or delivery.value > versions[-1], (
                f"key {delivery.key}: {delivery.value} after {versions}"
            )
            versions.append(delivery.value)  # type: ignore[arg-type]
    truth: dict[str, list[object]] = {}
    for record in cluster.stream.history:
        truth.setdefault(str(record.primary_key[0][1]), []).append(record.cells[0].value)
    assert seen == truth


def _write_round(cluster: Cluster, keys: int = 12) -> None:
    for i in range(keys):
        cluster.stream.put(f"key{i}")


def test_split_children_wait_for_the_parent_to_finish_and_per_key_order_holds() -> None:
    """T4: P leased by A (acks pending); split; B takes the children; they wait until P says SHARD_END."""
    cluster = Cluster(auto_ack=False)
    cluster.journal.ack_on_shutdown = False  # A's acks arrive only when the test says so
    violations = _guard_parents_first(cluster)
    _write_round(cluster)
    cluster.add_worker("A")
    cluster.run_for(2)
    left, right = cluster.stream.split("s0")
    _write_round(cluster)
    cluster.add_worker("B", auto_ack=True)
    cluster.run_for(20)
    b_children = [c for c in cluster.workers["B"].consumers() if c.shard_id in (left, right)]
    assert b_children and all(c.state is ConsumerState.WAITING_ON_PARENTS for c in b_children)
    assert not any(d.shard_id in (left, right) for d in cluster.journal.deliveries)
    assert cluster.leases()["s0"].checkpoint != SHARD_END  # A's last records are not confirmed yet

    for processor in cluster.processors["A"]:
        processor.ack()  # Kafka confirms A's records: A may now finish P
    cluster.run_until(lambda: cluster.finished("s0"))
    _write_round(cluster)
    cluster.run_until(lambda: len({d.sequence for d in cluster.journal.deliveries}) == len(cluster.stream.history))
    for processor in cluster.processors.get("A", []):
        processor.ack()
    assert violations == []
    _first_delivery_order_is_monotonic(cluster)


def test_merge_child_waits_for_both_parents_held_by_different_workers() -> None:
    """T5: P1 (A) + P2 (B) → C; C emits nothing until both parents are SHARD_END."""
    cluster = Cluster(shard_count=2, auto_ack=False)
    cluster.journal.ack_on_shutdown = False
    violations = _guard_parents_first(cluster)
    _write_round(cluster, 20)
    cluster.add_worker("A")
    cluster.add_worker("B")
    cluster.run_for(20)
    assert sorted(cluster.owners().values()) == ["A", "B"]
    child = cluster.stream.merge("s0", "s1")
    _write_round(cluster, 20)
    cluster.run_for(15)
    assert not any(d.shard_id == child for d in cluster.journal.deliveries)
    owner_of = cluster.owners()
    for processor in cluster.processors[owner_of["s0"]]:
        processor.ack()  # only the first parent's records are confirmed
    cluster.run_until(lambda: cluster.finished("s0"))
    cluster.run_for(15)
    assert not any(d.shard_id == child for d in cluster.journal.deliveries)  # still waiting for s1
    for processors in cluster.processors.values():
        for processor in processors:
            processor.ack()
    cluster.run_until(lambda: cluster.finished("s1"))
    cluster.run_until(lambda: any(d.shard_id == child for d in cluster.journal.deliveries))
    assert violations == []
    assert cluster.leases()[child].parent_shard_ids == ("s0", "s1")
    _first_delivery_order_is_monotonic(cluster)


def test_missing_parent_lease_of_a_listed_parent_blocks_and_forces_a_sync() -> None:
    """Stricter than the Java client: a missing parent lease is not 'done' while the parent is listed."""
    cluster = Cluster(auto_ack=True)
    violations = _guard_parents_first(cluster)
    _write_round(cluster)
    child, sibling = cluster.stream.split("s0")
    _write_round(cluster)
    # The first sync fails to create the parent's lease (its PutRow times out) but creates the children's.
    cluster.store.inject_write_fault(WriteFault.TIMEOUT_NOT_APPLIED, shard_id="s0", primitive=Primitive.PUT)
    worker = cluster.add_worker("w1")
    assert "s0" not in cluster.leases() and child in cluster.leases()
    cluster.run_for(1)
    assert not any(d.shard_id in (child, sibling) for d in cluster.journal.deliveries)
    cluster.run_until(lambda: cluster.finished("s0"), limit=120)
    assert worker.stats.forced_syncs >= 1
    cluster.run_until(lambda: len(cluster.journal.deliveries) == len(cluster.stream.history), limit=120)
    assert violations == []
    _first_delivery_order_is_monotonic(cluster)


def test_ack_failure_at_shard_end_keeps_shard_end_unwritten_until_a_retry_succeeds() -> None:
    """T11: the last parent batch is nacked: no SHARD_END, the child stays blocked, the tail is redelivered."""
    cluster = Cluster(auto_ack=False)
    violations = _guard_parents_first(cluster)
    _write_round(cluster)
    cluster.add_worker("w1")
    cluster.run_for(2)
    left, right = cluster.stream.split("s0")
    _write_round(cluster)
    cluster.journal.fail_shutdowns = True  # flushing at shard end fails: the records were not acked
    cluster.run_for(30)
    assert not cluster.finished("s0")
    assert not any(d.shard_id in (left, right) for d in cluster.journal.deliveries)
    assert cluster.workers["w1"].stats.processor_failures >= 1
    parent_deliveries = [d for d in cluster.journal.deliveries if d.shard_id == "s0"]
    assert len(parent_deliveries) > 12  # the unconfirmed tail was handed out again after each restart

    cluster.journal.fail_shutdowns = False
    cluster.run_until(lambda: cluster.finished("s0"))
    cluster.run_until(lambda: {d.shard_id for d in cluster.journal.deliveries} >= {left, right})
    shard_end_shutdowns = [r for _, shard, r in cluster.journal.shutdowns if shard == "s0"]
    assert ShutdownReason.SHARD_END in shard_end_shutdowns
    assert violations == []
    _first_delivery_order_is_monotonic(cluster)


def test_finished_parent_lease_is_deleted_only_after_the_shard_vanished_and_children_progressed() -> None:
    """I8: no lease of a listed shard is deleted (it would be re-created at TRIM_HORIZON)."""
    cluster = Cluster()
    _write_round(cluster)
    worker = cluster.add_worker("w1")
    cluster.stream.split("s0")
    cluster.run_until(lambda: cluster.finished("s0"))
    cluster.run_for(30)
    assert "s0" in cluster.leases()  # finished but still listed: kept
    cluster.stream.remove_shard("s0")
    cluster.run_for(15)
    assert "s0" in cluster.leases()  # children still at TRIM_HORIZON (no records yet): kept
    _write_round(cluster, 40)  # both children get records and checkpoint
    cluster.run_until(lambda: "s0" not in cluster.leases(), limit=60)
    assert worker.stats.leases_deleted == 1
    assert worker.stats.data_loss_events == 0


def test_a_shard_held_open_at_its_end_keeps_its_lease_without_restarts_until_the_worker_stops() -> None:
    """A processor that keeps its closed shard unfinished (records after bridge.end_time): no SHARD_END, no restart
    and no re-read while the worker runs, the children stay blocked; stopping the worker releases the lease."""
    cluster = Cluster(auto_ack=False)
    cluster.journal.hold_at_shard_end = True
    _write_round(cluster)
    worker = cluster.add_worker("w1")
    cluster.run_for(2)
    left, right = cluster.stream.split("s0")
    _write_round(cluster)
    cluster.run_for(10 * cluster.settings.handoff_timeout_seconds)

    (consumer,) = [c for c in worker.consumers() if c.shard_id == "s0"]
    assert consumer.state is ConsumerState.HOLDING
    assert not cluster.finished("s0") and cluster.owners()["s0"] == "w1"
    assert worker.stats.processor_failures == 0
    assert [shard for _, shard, _ in cluster.journal.shutdowns].count("s0") == 1  # one SHARD_END, no restart
    assert [i.shard_id for _, i in cluster.journal.initialized].count("s0") == 1
    assert len(cluster.journal.delivered_sequences("s0")) == 12  # each record once
    assert not any(d.shard_id in (left, right) for d in cluster.journal.deliveries)

    worker.request_stop()
    cluster.run_until(lambda: not worker.consumers())
    lease = cluster.leases()["s0"]
    assert lease.owner != "w1" and lease.checkpoint != SHARD_END
    assert [shard for _, shard, _ in cluster.journal.shutdowns].count("s0") == 1  # released without a second notice
