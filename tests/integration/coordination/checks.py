"""Assertions over recorded journals: delivery completeness, duplicates, per-key order, lineage order."""

from __future__ import annotations

import signal
import time
from collections import Counter, defaultdict

from cdcbridge.changes import Sequence
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.harness.bench.failover import WorkerCluster, Written, delivered_all, wait_until
from cdcbridge.harness.recording_worker import Delivery, JournalContents

#: Bound for "eventually" in these tests: generous, the machine is shared (assert order, not speed).
SLOW = 90.0


def drain_load(scenario_cluster: WorkerCluster, written: list[Written]) -> JournalContents:
    """Wait until every written record was delivered; returns the journals then."""
    wait_until(lambda: delivered_all(scenario_cluster.journal(), written), SLOW, "every written record delivered")
    return scenario_cluster.journal()


def stop_all(cluster: WorkerCluster) -> None:
    """SIGTERM every live worker; each must drain, release and exit 0."""
    live = [w for w in cluster.workers.values() if w.alive]
    for worker in live:
        worker.send(signal.SIGTERM)
    for worker in live:
        assert worker.wait(SLOW) == 0, f"{worker.worker_id} did not stop cleanly:\n{worker.log_tail()}"


def duplicates(deliveries: list[Delivery]) -> dict[tuple[str, int | None], list[Delivery]]:
    """Records delivered more than once: (pk, version) → every delivery of it."""
    counts = Counter((d.pk, d.version) for d in deliveries)
    found: dict[tuple[str, int | None], list[Delivery]] = defaultdict(list)
    for d in deliveries:
        if counts[(d.pk, d.version)] > 1:
            found[(d.pk, d.version)].append(d)
    return dict(found)


def assert_first_deliveries_in_key_order(journal: JournalContents) -> None:
    """Per primary key, the versions' first deliveries come in version order (I4: no key ever goes backwards)."""
    seen: dict[str, set[int | None]] = defaultdict(set)
    order: dict[str, list[int]] = defaultdict(list)
    for d in journal.deliveries:  # time order
        if d.version not in seen[d.pk]:
            seen[d.pk].add(d.version)
            assert d.version is not None, f"record of {d.pk} without a version column"
            order[d.pk].append(d.version)
    for pk, versions in order.items():
        assert versions == sorted(versions), f"key {pk}: versions first delivered in the order {versions}"


def assert_children_after_parents(journal: JournalContents, child: str, parents: list[str]) -> None:
    """A child shard's first delivery comes after every delivery of each of its parents (I4)."""
    child_times = [d.delivered_at for d in journal.deliveries_of(shards=[child])]
    assert child_times, f"child shard {child} delivered nothing"
    for parent in parents:
        parent_times = [d.delivered_at for d in journal.deliveries_of(shards=[parent])]
        assert parent_times, f"parent shard {parent} delivered nothing"
        assert max(parent_times) < min(child_times), (
            f"child {child} delivered at {min(child_times):.3f}, before parent {parent}'s last delivery at "
            f"{max(parent_times):.3f}"
        )


def delivered_recently(cluster: WorkerCluster, worker: str, shards: set[str], within: float = 0.4) -> bool:
    """Whether `worker` handed out a record of each of `shards` in the last `within` seconds."""
    now = time.time()
    latest: dict[str, float] = {}
    for d in cluster.journal().deliveries_of(worker=worker, shards=shards):
        latest[d.shard_id] = d.delivered_at
    return len(latest) == len(shards) and all(now - t < within for t in latest.values())


def delivered_after(cluster: WorkerCluster, worker: str, shards: set[str], after: float) -> bool:
    """Whether `worker` handed out a record of each of `shards` after wall time `after`."""
    got = {d.shard_id for d in cluster.journal().deliveries_of(worker=worker, shards=shards) if d.delivered_at > after}
    return got == set(shards)


def held_by(cluster: WorkerCluster, worker: str) -> set[str]:
    return {shard for shard, owner in cluster.owners().items() if owner == worker}


def wait_counts(cluster: WorkerCluster, expected: dict[str, int]) -> None:
    wait_until(lambda: cluster.counts() == expected, SLOW, f"lease counts {expected} (now {cluster.counts()})")


def wait_reading(cluster: WorkerCluster, worker: str, shards: list[str]) -> None:
    """Wait until `worker` holds exactly `shards` and has initialized a processor on each: past the moment its
    leases are taken one by one, and past any parent it still had to finish first."""

    def reading() -> bool:
        initialized = {e.shard_id for e in cluster.journal().events if e.worker == worker and e.kind == "initialize"}
        return held_by(cluster, worker) == set(shards) and set(shards) <= initialized

    wait_until(reading, SLOW, f"{worker} reading {sorted(shards)} (it holds {sorted(held_by(cluster, worker))})")


def checkpoint_seq_of(cluster: WorkerCluster, shard: str) -> ExtendedSequence | None:
    lease = next(lease for lease in cluster.leases() if lease.shard_id == shard)
    return lease.checkpoint_seq


def after(position: ExtendedSequence | None, sequence: Sequence) -> bool:
    """Whether the record at `sequence` lies after a stored checkpoint position (everything does after None)."""
    return position is None or not position.covers(sequence)


def assert_one_reader_at_a_time(journal: JournalContents) -> None:
    """Per shard, the workers' deliveries never interleave (no two producers outside a hand-off)."""
    for shard in {d.shard_id for d in journal.deliveries}:
        runs: list[str] = []
        for d in journal.deliveries_of(shards=[shard]):
            if not runs or runs[-1] != d.worker:
                runs.append(d.worker)
        assert len(runs) == len(set(runs)), f"shard {shard} read by {runs}"
