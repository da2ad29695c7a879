"""Shards split and merged while two worker processes hold them (T4, T5), and workers joining 1 → 2 → 3 (T6):
per-key order across the lineage, children after parents, even balance and no steals once balanced."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from cdcbridge.coordination.checkpoint.positions import SHARD_END
from cdcbridge.harness.bench.failover import WorkerCluster, wait_until
from cdcbridge.harness.recording_worker import JournalContents
from tests.integration.coordination.checks import (
    SLOW,
    assert_children_after_parents,
    assert_first_deliveries_in_key_order,
    assert_one_reader_at_a_time,
    delivered_recently,
    drain_load,
    held_by,
    stop_all,
    wait_counts,
    wait_reading,
)
from tests.integration.coordination.conftest import Scenario

pytestmark = pytest.mark.timeout(240)


def _delivered_on(cluster: WorkerCluster, shards: list[str]) -> bool:
    got = {d.shard_id for d in cluster.journal().deliveries_of(shards=shards)}
    return got == set(shards)


def _checkpoints_of(cluster: WorkerCluster) -> dict[str, str]:
    return {lease.shard_id: lease.checkpoint for lease in cluster.leases()}


def test_split_while_leased_keeps_per_key_order(scenario: Callable[[int], Scenario]) -> None:
    """T4: P is read by a; P splits into C1, C2 while records flow; the children wait for P's SHARD_END, b takes one
    of them, and no key ever sees an older version after a newer one."""
    s = scenario(1)
    cluster = s.cluster
    load = s.start_load()
    cluster.start_worker("a")
    wait_counts(cluster, {"a": 1})
    (parent,) = held_by(cluster, "a")
    cluster.start_worker("b")
    wait_until(lambda: len(cluster.journal().deliveries_of(shards=[parent])) >= 30, SLOW, "records on the parent")

    children = s.emulator.admin.split(cluster.table, parent)
    wait_until(lambda: _delivered_on(cluster, children), SLOW, "records on both children")
    wait_counts(cluster, {"a": 1, "b": 1})
    # b may take its child after a has read everything so far: keep the load on until b has read from it.
    wait_until(
        lambda: "b" in {d.worker for d in cluster.journal().deliveries_of(shards=children)}, SLOW, "b reading a child"
    )
    journal = drain_load(cluster, load.stop())
    stop_all(cluster)

    assert _checkpoints_of(cluster)[parent] == SHARD_END
    for child in children:
        assert_children_after_parents(journal, child, [parent])
    assert_first_deliveries_in_key_order(journal)
    assert "b" in {d.worker for d in journal.deliveries_of(shards=children)}, "b read a child"


def test_merge_of_shards_held_by_two_workers_keeps_per_key_order(scenario: Callable[[int], Scenario]) -> None:
    """T5: P1 (read by a) and P2 (read by b) merge into C while records flow; C starts only after both parents end."""
    s = scenario(2)
    cluster = s.cluster
    load = s.start_load()
    cluster.start_worker("a")
    wait_reading(cluster, "a", s.shards)
    cluster.start_worker("b")
    wait_counts(cluster, {"a": 1, "b": 1})
    (p1,), (p2,) = held_by(cluster, "a"), held_by(cluster, "b")
    wait_until(lambda: delivered_recently(cluster, "a", {p1}) and delivered_recently(cluster, "b", {p2}), SLOW, "flow")

    child = s.emulator.admin.merge(cluster.table, p1, p2)
    wait_until(lambda: _delivered_on(cluster, [child]), SLOW, "records on the merged child")
    journal = drain_load(cluster, load.stop())
    stop_all(cluster)

    checkpoints = _checkpoints_of(cluster)
    assert checkpoints[p1] == checkpoints[p2] == SHARD_END
    assert_children_after_parents(journal, child, [p1, p2])
    assert_first_deliveries_in_key_order(journal)


def _steal_requests(cluster: WorkerCluster) -> int:
    return sum(cluster.latest_stats(worker).get("steal_requests", 0) for worker in cluster.workers)


def _assert_quiet(cluster: WorkerCluster, seconds: float) -> None:
    """Once balanced: no ownership change, no steal request, for `seconds` (I7: no thrash)."""
    time.sleep(0.5)  # let the last stats reports land
    owners, steals = cluster.owners(), _steal_requests(cluster)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        leases = cluster.leases()
        assert {lease.shard_id: lease.owner for lease in leases if not lease.is_finished} == owners
        # stealer == owner is a finished transfer the new owner has yet to claim (its next take clears the field)
        assert not [lease.describe() for lease in leases if lease.stealer not in ("", lease.owner)]
        time.sleep(0.2)
    assert _steal_requests(cluster) == steals


def _assert_hand_offs_resume_at_the_checkpoint(journal: JournalContents) -> None:
    """Each STOLEN drain ends with a checkpoint of everything delivered, and the next owner starts exactly there."""
    for stolen in [e for e in journal.events if e.kind == "shutdown" and e.detail == "STOLEN"]:
        flush = [
            c for c in journal.checkpoints
            if c.worker == stolen.worker and c.shard_id == stolen.shard_id and c.at >= stolen.at
        ]  # fmt: skip
        if not flush:
            continue  # nothing was delivered on that shard by this owner
        assert flush[0].ok, f"hand-off checkpoint of {stolen.shard_id} by {stolen.worker}: {flush[0].detail}"
        successor = next(
            e for e in journal.events
            if e.kind == "initialize" and e.shard_id == stolen.shard_id and e.worker != stolen.worker
            and e.at > stolen.at
        )  # fmt: skip
        assert successor.detail == flush[0].position.to_text()


def test_workers_joining_split_six_shards_evenly_and_then_stay_put(scenario: Callable[[int], Scenario]) -> None:
    """T6: one worker holds 6 shards; a second joins → 3/3; a third → 2/2/2; after each convergence nothing moves
    for several take intervals. Every hand-off checkpoints and the next owner resumes there."""
    s = scenario(6)
    cluster = s.cluster
    load = s.start_load(keys=24, rate=12)
    cluster.start_worker("a")
    wait_counts(cluster, {"a": 6})
    cluster.start_worker("b")
    wait_counts(cluster, {"a": 3, "b": 3})
    _assert_quiet(cluster, 6.0)
    steals_two = _steal_requests(cluster)
    cluster.start_worker("c")
    wait_counts(cluster, {"a": 2, "b": 2, "c": 2})
    _assert_quiet(cluster, 6.0)
    steals_three = _steal_requests(cluster) - steals_two
    journal = drain_load(cluster, load.stop())
    stop_all(cluster)

    assert steals_two >= 3 and steals_three >= 2  # the least that can move 3 and then 2 leases
    print(f"steal requests: 1→2 workers {steals_two}, 2→3 workers {steals_three}")
    _assert_hand_offs_resume_at_the_checkpoint(journal)
    assert_one_reader_at_a_time(journal)
    assert_first_deliveries_in_key_order(journal)
