"""Lease balancing across workers in simulated time: T6 (a worker joins), T7 (no thrash), I7."""

from __future__ import annotations

from cdcbridge.coordination import ShutdownReason
from cdcbridge.coordination.lifecycle.states import ConsumerState
from tests.unit.coordination.helpers import Cluster

TAKE = 6.0


def _producers_per_shard(cluster: Cluster) -> dict[str, int]:
    """How many workers currently run a consumer that may hand out records for each shard."""
    counts: dict[str, int] = {}
    for worker in cluster.workers.values():
        for consumer in worker.consumers():
            if consumer.state in (ConsumerState.INITIALIZING, ConsumerState.PROCESSING):
                counts[consumer.shard_id] = counts.get(consumer.shard_id, 0) + 1
    return counts


def test_new_worker_converges_to_an_even_split_through_checkpointed_hand_offs() -> None:
    """T6: W1 holds 8; W2 joins → 4/4 within a few take cycles, one steal per cycle, no record twice."""
    cluster = Cluster(shard_count=8)
    for i in range(80):
        cluster.stream.put(f"k{i}")
    w1 = cluster.add_worker("w1")
    cluster.run_for(10)
    assert cluster.counts() == {"w1": 8}
    w2 = cluster.add_worker("w2")
    joined = cluster.clock.monotonic()
    while cluster.counts() != {"w1": 4, "w2": 4}:
        cluster.step(1.0)
        for i in range(3):
            cluster.stream.put(f"live{cluster.clock.monotonic()}-{i}")  # traffic during the hand-offs
        assert max(_producers_per_shard(cluster).values(), default=0) <= 1
        assert cluster.clock.monotonic() - joined <= 8 * TAKE, "did not converge within 8 take cycles"
    assert w2.stats.steal_requests == 4 and w1.stats.leases_transferred == 4
    assert [r for _, _, r in cluster.journal.shutdowns] == [ShutdownReason.STOLEN] * 4
    cluster.run_for(5)
    delivered = cluster.journal.delivered_sequences()
    assert sorted(delivered) == sorted(r.sequence for r in cluster.stream.history)  # every record exactly once


def test_no_thrash_after_convergence_for_thirty_simulated_minutes() -> None:
    """T7: 3 workers, 10 leases → {4, 3, 3}, then zero steals and zero ownership changes."""
    cluster = Cluster(shard_count=10)
    for worker_id in ("w1", "w2", "w3"):
        cluster.add_worker(worker_id)
    cluster.run_until(lambda: sorted(cluster.counts().values()) == [3, 3, 4], limit=300)
    owners = cluster.owners()
    steals = sum(w.stats.steal_requests for w in cluster.workers.values())
    for minute in range(30):
        cluster.run_for(60, dt=2.0)
        for i in range(5):
            cluster.stream.put(f"m{minute}-{i}")
    assert cluster.owners() == owners
    assert sum(w.stats.steal_requests for w in cluster.workers.values()) == steals
    assert sum(w.stats.leases_lost for w in cluster.workers.values()) == 0


def test_a_crashed_workers_leases_are_redistributed_and_balance_returns() -> None:
    cluster = Cluster(shard_count=9)
    for worker_id in ("w1", "w2", "w3"):
        cluster.add_worker(worker_id)
    cluster.run_until(lambda: sorted(cluster.counts().values()) == [3, 3, 3], limit=300)
    cluster.crash("w2")
    cluster.run_until(lambda: sorted(cluster.counts().values()) in ([4, 5], [5, 4]), limit=120)
    assert "w2" not in cluster.owners().values()
    cluster.add_worker("w4")
    cluster.run_until(lambda: sorted(cluster.counts().values()) == [3, 3, 3], limit=300)
