"""Workers as real processes failing and stopping against the emulator: T1 kill -9, T3 zombie, T13 graceful stop,
T14 a stealer killed mid-hand-off (leases.md §5.6). Short timings (4 s leases, 1 s take); order and causality are
asserted, never speed."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.harness.bench.failover import wait_until
from cdcbridge.harness.recording_worker import WorkerOptions
from tests.integration.coordination.checks import (
    SLOW,
    after,
    checkpoint_seq_of,
    delivered_after,
    delivered_recently,
    drain_load,
    duplicates,
    held_by,
    stop_all,
    wait_counts,
    wait_reading,
)
from tests.integration.coordination.conftest import Scenario

pytestmark = pytest.mark.timeout(240)

#: Acks arrive 1.5 s after a batch is journaled, so a kill or freeze always leaves an unconfirmed tail.
LAGGING = WorkerOptions(ack_delay=1.5, process_delay=0.05)


def test_kill_9_mid_batch_redelivers_only_after_the_last_checkpoint(scenario: Callable[[int], Scenario]) -> None:
    """T1: every record is delivered at least once; duplicates only after the victim's last checkpoint; the peer
    resumes exactly there; the survivor's own shard is not disturbed."""
    s = scenario(2)
    cluster = s.cluster
    load = s.start_load()
    cluster.start_worker("a", LAGGING)
    wait_reading(cluster, "a", s.shards)
    cluster.start_worker("b", LAGGING)
    wait_counts(cluster, {"a": 1, "b": 1})
    (victim_shard,) = held_by(cluster, "a")
    (own_shard,) = held_by(cluster, "b")
    wait_until(lambda: delivered_recently(cluster, "b", {own_shard}, within=30), SLOW, "b delivering its shard")
    wait_until(lambda: delivered_recently(cluster, "a", {victim_shard}), SLOW, "a delivering right now")

    killed_at = cluster.workers["a"].kill()
    time.sleep(0.5)  # a write a sent just before dying may still land
    checkpoint = checkpoint_seq_of(cluster, victim_shard)
    assert cluster.owners()[victim_shard] == "a", "nobody may take a lease before it expires"
    wait_until(lambda: delivered_after(cluster, "b", {victim_shard}, killed_at), SLOW, "b taking over a's shard")
    time.sleep(1)
    drain_load(cluster, load.stop())
    stop_all(cluster)
    journal = cluster.journal()

    victim = journal.deliveries_of(shards=[victim_shard])
    by_a = [d for d in victim if d.worker == "a"]
    by_b = [d for d in victim if d.worker == "b"]
    tail = [d for d in by_a if after(checkpoint, d.sequence)]
    assert tail, "a was killed with an unconfirmed tail (its acks lag by 1.5 s)"
    assert all(d.delivered_at > killed_at for d in by_b), "b read a's shard before a died"
    # b resumes at the stored checkpoint: its first record is the first one after it, and the tail is redelivered.
    resumed = [e for e in journal.events if e.worker == "b" and e.shard_id == victim_shard and e.kind == "initialize"]
    assert resumed[0].detail == (checkpoint.to_text() if checkpoint else "TRIM_HORIZON")
    unconfirmed = sorted({d.sequence for d in victim if after(checkpoint, d.sequence)})
    assert by_b[0].sequence == unconfirmed[0]
    assert {d.sequence for d in tail} <= {d.sequence for d in by_b}
    dups = duplicates(journal.deliveries)
    assert dups, "the unconfirmed tail must have been delivered twice"
    assert all(after(checkpoint, d.sequence) and d.shard_id == victim_shard for ds in dups.values() for d in ds)
    # The survivor's own shard kept flowing through the failover.
    own = journal.deliveries_of(worker="b", shards=[own_shard])
    assert any(d.delivered_at < killed_at for d in own) and any(d.delivered_at > killed_at for d in own)


def test_a_frozen_owner_is_fenced_and_its_late_checkpoint_is_refused(scenario: Callable[[int], Scenario]) -> None:
    """T3: SIGSTOP the owner past its lease; the peer takes over; after SIGCONT the zombie's late acks are refused
    with LeaseLostError, it delivers nothing more, and the peer's checkpoint is never overwritten."""
    s = scenario(1)
    cluster = s.cluster
    load = s.start_load(rate=20)
    zombie = cluster.start_worker("a", LAGGING)
    wait_counts(cluster, {"a": 1})
    (shard,) = held_by(cluster, "a")
    cluster.start_worker("b", LAGGING)
    wait_until(lambda: any(e.worker == "b" for e in cluster.journal().events), SLOW, "b running")
    wait_until(lambda: delivered_recently(cluster, "a", {shard}), SLOW, "a delivering right now")

    stopped_at = zombie.send(signal.SIGSTOP)
    wait_until(
        lambda: cluster.owners()[shard] == "b" and any(c.worker == "b" and c.ok for c in cluster.journal().checkpoints),
        SLOW, "b owning the shard and checkpointing",
    )  # fmt: skip
    resumed_at = zombie.send(signal.SIGCONT)
    wait_until(
        lambda: [c for c in cluster.journal().checkpoints if c.worker == "a" and c.at > resumed_at],
        SLOW, "the zombie's late acks",
    )  # fmt: skip
    time.sleep(2)
    written = load.stop()
    drain_load(cluster, written)
    time.sleep(LAGGING.ack_delay + 1)  # b confirms its last batches
    final = next(lease for lease in cluster.leases() if lease.shard_id == shard)
    journal = cluster.journal()
    assert zombie.alive, "the zombie keeps running (it lost a lease, nothing more)"
    stop_all(cluster)

    a_deliveries = journal.deliveries_of(worker="a")
    b_deliveries = journal.deliveries_of(worker="b")
    a_checkpoints = [c for c in journal.checkpoints if c.worker == "a"]
    late = [c for c in a_checkpoints if c.at > resumed_at]
    assert late and all(c.outcome == "LeaseLostError" for c in late), [(c.outcome, c.detail) for c in late]
    assert ("a", shard, "shutdown", "LEASE_LOST") in [(e.worker, e.shard_id, e.kind, e.detail) for e in journal.events]
    # The zombie handed out nothing after its freeze, and nothing written after it: no two producers at once (I5).
    assert all(d.delivered_at < stopped_at for d in a_deliveries)
    assert max(d.delivered_at for d in a_deliveries) < min(d.delivered_at for d in b_deliveries)
    written_at = {(w.pk, w.version): w.at for w in written}
    assert all(written_at[(d.pk, d.version)] < stopped_at for d in a_deliveries)
    # Every checkpoint a got in was before b's takeover; the row ends at b's last checkpoint (I1).
    assert all(c.at < b_deliveries[0].delivered_at for c in a_checkpoints if c.ok)
    assert final.owner == "b"
    assert final.checkpoint_seq == ExtendedSequence(b_deliveries[-1].sequence)
    assert final.checkpoint_seq in {c.position for c in journal.checkpoints if c.worker == "b" and c.ok}
    last_a = max((c.position for c in a_checkpoints if c.ok), default=None)
    assert all(after(last_a, d.sequence) for ds in duplicates(journal.deliveries).values() for d in ds)


def test_graceful_stop_hands_over_at_once_without_duplicates(scenario: Callable[[int], Scenario]) -> None:
    """T13: SIGTERM drains, checkpoints and releases; the peer takes over within a few take intervals, far less than
    the (here 30 s) lease duration it would wait for an expired lease; nothing is delivered twice."""
    long_lease = WorkerOptions(
        settings={"lease_duration_seconds": 30.0, "renew_interval_seconds": 3.0, "no_progress_abort_seconds": 120.0},
        ack_delay=1.5,
    )
    s = scenario(2)
    cluster = s.cluster
    load = s.start_load()
    leaving = cluster.start_worker("a", long_lease)
    wait_reading(cluster, "a", s.shards)
    cluster.start_worker("b", long_lease)
    wait_counts(cluster, {"a": 1, "b": 1})
    (handed,) = held_by(cluster, "a")
    wait_until(lambda: delivered_recently(cluster, "a", {handed}), SLOW, "a delivering right now")

    stopped_at = leaving.send(signal.SIGTERM)
    assert leaving.wait(SLOW) == 0
    wait_until(lambda: delivered_after(cluster, "b", {handed}, stopped_at), SLOW, "b delivering a's shard")
    taken_at = min(d.delivered_at for d in cluster.journal().deliveries_of(worker="b", shards=[handed]))
    journal = drain_load(cluster, load.stop())
    stop_all(cluster)

    assert taken_at - stopped_at < 30.0, f"hand-off took {taken_at - stopped_at:.1f} s: it waited for expiry"
    events = [(e.shard_id, e.kind, e.detail) for e in journal.events if e.worker == "a"]
    assert (handed, "shutdown", "REQUESTED") in events
    by_a = journal.deliveries_of(worker="a", shards=[handed])
    final_a = [c for c in journal.checkpoints if c.worker == "a" and c.shard_id == handed][-1]
    assert final_a.ok and final_a.position == ExtendedSequence(by_a[-1].sequence)
    initialize = [e for e in journal.events if e.worker == "b" and e.shard_id == handed and e.kind == "initialize"]
    assert initialize[0].detail == final_a.position.to_text()
    assert duplicates(journal.deliveries) == {}


def test_a_stealer_killed_mid_hand_off_leaves_nothing_stuck(scenario: Callable[[int], Scenario]) -> None:
    """T14: b asks for a lease and dies; a still drains and transfers it to b; the lease then expires and a live
    worker takes it; every record arrives and the hand-off's checkpoint means none twice on that shard."""
    slow_drain = WorkerOptions(shutdown_delay=2.0)
    s = scenario(2)
    cluster = s.cluster
    load = s.start_load()
    cluster.start_worker("a", slow_drain)
    wait_reading(cluster, "a", s.shards)
    stealer = cluster.start_worker("b")
    contested = wait_until(
        lambda: next((lease.shard_id for lease in cluster.leases() if lease.stealer == "b"), None),
        SLOW, "b's steal request", poll=0.02,
    )  # fmt: skip
    stealer.kill()
    cluster.start_worker("c")
    wait_until(lambda: cluster.latest_stats("a").get("leases_transferred", 0) >= 1, SLOW, "a's transfer to b")
    wait_until(
        lambda: cluster.owners().get(contested) in ("a", "c") and not any(lease.stealer for lease in cluster.leases()),
        SLOW, "a live worker owning the contested lease",
    )  # fmt: skip
    settled_at = time.time()
    wait_until(lambda: delivered_after(cluster, cluster.owners()[contested], {contested}, settled_at), SLOW, "flow")
    journal = drain_load(cluster, load.stop())
    stop_all(cluster)

    assert journal.deliveries_of(worker="b") == [], "b died before delivering anything"
    assert ("a", contested, "shutdown", "STOLEN") in [(e.worker, e.shard_id, e.kind, e.detail) for e in journal.events]
    assert [d for ds in duplicates(journal.deliveries).values() for d in ds if d.shard_id == contested] == []
