"""Workers failing and stopping, in simulated time: T3, T9, T10, T13, T14, fencing, adoption, restarts."""

from __future__ import annotations

import logging

import pytest

from cdcbridge.coordination import SHARD_END, LeaseLostError, ShutdownReason, WorkerState
from cdcbridge.coordination.lifecycle.states import ConsumerState
from cdcbridge.coordination.stream.simulator import StreamSimulator
from tests.unit.coordination.helpers import Cluster

D = 20.0  # default lease duration
TAKE = 6.0  # default take interval


def _write(stream: StreamSimulator, count: int, prefix: str = "k") -> None:
    for i in range(count):
        stream.put(f"{prefix}{i}")


def _each_record_delivered(cluster: Cluster, *, exactly_once: bool = False) -> None:
    delivered = cluster.journal.delivered_sequences()
    expected = {r.sequence for r in cluster.stream.history}
    assert set(delivered) == expected
    if exactly_once:
        assert len(delivered) == len(expected)


def test_kill_9_failover_resumes_from_the_last_checkpoint_after_expiry() -> None:
    """T1 in simulated time: duplicates only after the dead owner's last checkpoint; takeover after D."""
    cluster = Cluster(auto_ack=False)
    _write(cluster.stream, 10)
    cluster.add_worker("w1")
    cluster.add_worker("w2")
    cluster.run_until(lambda: len(cluster.journal.deliveries) == 10)
    owner = cluster.owners()["s0"]
    first = cluster.processors[owner][0]
    first.ack(4)  # records 0-3 confirmed; 4-9 produced but not confirmed
    cluster.crash(owner)
    survivor = next(iter(cluster.workers))
    crashed_at = cluster.clock.monotonic()
    took = cluster.run_until(lambda: cluster.owners()["s0"] == survivor)
    assert D <= took <= D + 2 * TAKE + 1  # observation lag + expiry + the next take cycle
    cluster.run_for(2)
    redelivered = [d.sequence for d in cluster.journal.deliveries if d.worker == survivor]
    assert redelivered == [r.sequence for r in cluster.stream.history[4:]]
    assert all(d.at >= crashed_at + D for d in cluster.journal.deliveries if d.worker == survivor)


def test_zombie_owner_is_fenced_and_cannot_overwrite_the_new_checkpoint() -> None:
    """T3: A freezes past the lease duration; B takes and checkpoints; A wakes up."""
    cluster = Cluster(auto_ack=False)
    _write(cluster.stream, 6)
    cluster.add_worker("A")
    cluster.run_for(2)
    zombie = cluster.processors["A"][0]
    assert len(zombie.pending) == 6
    zombie.ack(2)
    a = cluster.workers.pop("A")  # SIGSTOP: A's process runs nothing, not even its renewer
    held = a.held.get("s0")
    assert held is not None
    cluster.add_worker("B", auto_ack=True)
    cluster.run_until(lambda: cluster.leases()["s0"].owner == "B" and cluster.leases()["s0"].checkpoint == "s0@6")
    b_lease = cluster.leases()["s0"]
    assert cluster.clock.monotonic() >= held.proved_at + D  # B took only after A's lease duration

    # SIGCONT: A's late acks are refused and its consumer stops without fetching or delivering anything more.
    zombie.ack()
    assert zombie.checkpoint_errors and isinstance(zombie.checkpoint_errors[0], LeaseLostError)
    cluster.workers["A"] = a
    _write(cluster.stream, 3, "more")
    cluster.run_for(5)
    assert cluster.leases()["s0"].owner == "B"
    assert cluster.leases()["s0"].counter >= b_lease.counter
    assert [d for d in cluster.journal.deliveries if d.worker == "A"][6:] == []
    assert ("A", "s0", ShutdownReason.LEASE_LOST) in cluster.journal.shutdowns
    assert a.stats.leases_lost == 1


def test_frozen_owner_stops_delivering_before_a_peer_can_take_over() -> None:
    """I5: the owner's consumer self-fences at proved_at + D - margin, before the peer's expiry at ≥ proved_at + D."""
    cluster = Cluster()
    worker = cluster.add_worker("A")
    cluster.run_for(3)
    held = worker.held.get("s0")
    assert held is not None
    proved = held.proved_at
    # Renewals stall (the renewer thread is stuck) while the dispatch loop keeps running.
    worker.renew_now = lambda: None  # type: ignore[method-assign]
    worker._next_renew = float("inf")
    cluster.run_until(lambda: worker.consumers() == [] or worker.consumers()[0].state is ConsumerState.DONE)
    assert cluster.clock.monotonic() < proved + D
    assert held.ended is not None and held.ended.startswith("lost")
    _write(cluster.stream, 3)
    cluster.run_for(5)
    assert [d for d in cluster.journal.deliveries if d.worker == "A"] == []


def test_wall_clock_jumps_cause_no_expiry_or_takeover() -> None:
    """T9: lease timers use the monotonic clock only."""
    cluster = Cluster(shard_count=2)
    cluster.add_worker("w1")
    cluster.run_for(10)
    cluster.add_worker("w2")
    cluster.run_for(30)
    before = cluster.owners()
    counters = {sid: lease.counter for sid, lease in cluster.leases().items()}
    for jump in (3600.0, -7200.0, 3600.0):
        cluster.clock.jump_wall(jump)
        cluster.run_for(30)
    assert cluster.owners() == before
    assert all(lease.counter > counters[sid] for sid, lease in cluster.leases().items())  # still renewed
    assert sum(w.stats.leases_lost for w in cluster.workers.values()) == 0


def test_trimmed_checkpoint_is_counted_skipped_and_the_worker_keeps_running() -> None:
    """T10: the stored iterator predates retention."""
    cluster = Cluster()
    _write(cluster.stream, 5, "early")
    cluster.add_worker("w1")
    cluster.run_for(2)
    cluster.crash("w1")
    _write(cluster.stream, 10, "late")
    cluster.stream.trim(keep_last=6)  # the checkpoint (after record 5) and records 5-8 expire
    worker = cluster.add_worker("w2")
    cluster.run_for(D + TAKE + 5)
    assert worker.stats.trimmed_data_events == 1 and worker.stats.data_loss_events == 1
    assert worker.state is WorkerState.RUNNING
    retained = [r.sequence for r in cluster.stream.retained_records_of("s0")]
    assert [d.sequence for d in cluster.journal.deliveries if d.worker == "w2"] == retained
    lease = cluster.leases()["s0"]
    assert lease.checkpoint == "s0@15" and lease.owner == "w2"
    _write(cluster.stream, 2, "after")
    cluster.run_for(3)
    assert len([d for d in cluster.journal.deliveries if d.worker == "w2"]) == len(retained) + 2


def test_graceful_stop_drains_checkpoints_releases_and_peer_takes_at_once() -> None:
    """T13: SIGTERM → drain + checkpoint + release; the peer takes within one take interval, not D."""
    cluster = Cluster(shard_count=4, auto_ack=False)
    _write(cluster.stream, 40)
    w1 = cluster.add_worker("w1")
    cluster.run_for(3)
    assert cluster.counts() == {"w1": 4}
    cluster.add_worker("w2", auto_ack=True)
    w1.request_stop()
    stopped_at = cluster.clock.monotonic()
    cluster.run_until(lambda: w1.state is WorkerState.STOPPED)
    shutdowns = {(w, reason) for w, _, reason in cluster.journal.shutdowns}
    assert shutdowns == {("w1", ShutdownReason.REQUESTED)}
    assert all(lease.owner in ("", "w2") for lease in cluster.leases().values())
    took = cluster.run_until(lambda: cluster.counts().get("w2") == 4)
    assert cluster.clock.monotonic() - stopped_at <= TAKE + 2 < D
    del took
    cluster.run_for(3)
    _each_record_delivered(cluster, exactly_once=True)  # w1 confirmed its pending records before releasing


def test_stealer_dies_mid_handshake_and_the_lease_is_taken_after_expiry() -> None:
    """T14: the owner hands over to a dead stealer; the lease expires and a live worker takes it."""
    cluster = Cluster(shard_count=2)
    _write(cluster.stream, 20)
    cluster.add_worker("w1")
    cluster.run_for(3)
    stealer = cluster.add_worker("w2")
    stealer.run_once()  # its first take cycle places the steal request ...
    assert stealer.stats.steal_requests == 1
    cluster.crash("w2")  # ... and then it dies
    stolen = next(lease for lease in cluster.leases().values() if lease.stealer == "w2")
    cluster.add_worker("w3")
    cluster.run_until(lambda: cluster.leases()[stolen.shard_id].owner == "w2")  # transferred to the dead one
    transferred_at = cluster.clock.monotonic()
    cluster.run_until(lambda: cluster.leases()[stolen.shard_id].owner in ("w1", "w3"))
    assert cluster.clock.monotonic() - transferred_at >= D
    assert cluster.leases()[stolen.shard_id].stealer == ""
    _write(cluster.stream, 10, "more")
    cluster.run_for(5)
    _each_record_delivered(cluster)


def test_store_outage_fences_the_worker_without_checkpointing() -> None:
    cluster = Cluster(auto_ack=False)
    _write(cluster.stream, 3)
    worker = cluster.add_worker("w1")
    cluster.run_for(2)
    writes = len(cluster.store.write_log)
    cluster.store.set_unavailable(True)
    cluster.run_until(lambda: worker.state is WorkerState.FENCED, limit=cluster.settings.no_progress_abort_seconds + 10)
    assert ("w1", "s0", ShutdownReason.LEASE_LOST) in cluster.journal.shutdowns
    processor = cluster.processors["w1"][0]
    processor.ack()
    assert processor.checkpoint_errors and isinstance(processor.checkpoint_errors[0], LeaseLostError)
    cluster.store.set_unavailable(False)
    assert len(cluster.store.write_log) == writes


def test_restarted_worker_with_the_same_id_adopts_its_leases_at_once() -> None:
    cluster = Cluster(shard_count=3)
    _write(cluster.stream, 9)
    cluster.add_worker("w1")
    cluster.run_for(3)
    cluster.crash("w1")
    restarted = cluster.add_worker("w1")
    assert restarted.held_shard_ids() == {"s0", "s1", "s2"}
    _write(cluster.stream, 3, "new")
    cluster.run_for(2)
    _each_record_delivered(cluster, exactly_once=True)


def test_processor_failure_restarts_from_the_stored_checkpoint_and_resumes_mid_record() -> None:
    """A sub-sequence checkpoint resumes inside the record (the KCL sub-sequence rule)."""
    cluster = Cluster(auto_ack=False)
    _write(cluster.stream, 5)
    worker = cluster.add_worker("w1")
    cluster.run_for(2)
    first = cluster.processors["w1"][0]
    third = cluster.stream.history[2]
    first.checkpointer.checkpoint(third.sequence, 1)  # parts 0 and 1 of record 2 are safely out
    first.fail_process = True
    first.pending.clear()
    cluster.stream.put("trigger")
    cluster.run_for(6)
    assert worker.stats.processor_failures == 1
    assert len(cluster.processors["w1"]) == 2  # a fresh processor from the factory
    resumed = [d.sequence for d in cluster.journal.deliveries[5:]]
    assert resumed == [r.sequence for r in cluster.stream.history[2:]]
    assert cluster.journal.partial_resumes == [("w1", third.sequence, 2)]


def test_closed_shard_that_vanished_is_finished_as_data_loss_and_children_proceed() -> None:
    cluster = Cluster(auto_ack=False)
    _write(cluster.stream, 4)
    cluster.add_worker("w1")
    cluster.run_for(2)
    cluster.processors["w1"][0].ack(2)
    left, right = cluster.stream.split("s0")
    cluster.crash("w1")
    cluster.stream.remove_shard("s0")
    _write(cluster.stream, 6, "child")
    survivor = cluster.add_worker("w2", auto_ack=True)
    cluster.run_for(D + 2 * TAKE + 10)
    assert survivor.stats.shard_gone_events + survivor.stats.unread_parent_events >= 1
    assert cluster.leases().get("s0") is None or cluster.leases()["s0"].checkpoint == SHARD_END
    children = {left, right}
    delivered_children = {d.shard_id for d in cluster.journal.deliveries if d.worker == "w2"}
    assert delivered_children <= children and delivered_children
    child_records = [r.sequence for r in cluster.stream.history if r.shard_id in children]
    assert set(child_records) <= set(cluster.journal.delivered_sequences())


def test_adoption_clears_our_own_stale_steal_request() -> None:
    """A worker that crashed mid-hand-off (owner == stealer == itself) and restarts takes the lease cleanly."""
    cluster = Cluster()
    cluster.add_worker("w1")
    cluster.run_for(2)
    lease = cluster.leases()["s0"]
    cluster.crash("w1")
    cluster.store.request_steal(lease.evolve(stealer=""), "w1")  # as a transfer to a stealer named w1 leaves it
    restarted = cluster.add_worker("w1")
    assert restarted.held_shard_ids() == {"s0"}
    assert cluster.leases()["s0"].stealer == "" and cluster.leases()["s0"].owner == "w1"


def test_a_processor_not_ready_yet_is_retried_quietly_and_then_delivers_everything(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster()
    _write(cluster.stream, 4)
    cluster.journal.not_ready = True
    caplog.set_level(logging.DEBUG, logger="cdcbridge.coordination")
    worker = cluster.add_worker("w1")
    cluster.run_for(10)
    assert cluster.journal.deliveries == []
    not_ready = [r for r in caplog.records if "not ready" in r.getMessage()]
    assert len(not_ready) >= 5  # retried at every back-off
    assert [r.levelno for r in not_ready[:2]] == [logging.INFO, logging.DEBUG]  # said once, then quietly
    assert all(r.exc_info is None for r in not_ready)  # no traceback: it is not a failure
    assert worker.stats.processor_failures == 0
    cluster.journal.not_ready = False
    cluster.run_for(4)
    _each_record_delivered(cluster, exactly_once=True)
