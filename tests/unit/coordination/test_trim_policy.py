"""A read that hits trimmed data obeys the worker's trim policy: STOP halts the shard at its checkpoint (nothing
read after the gap, nothing written, the lease kept), CONTINUE resumes from the oldest retained record,
CONTINUE_REPAIRED too without calling it a loss."""

from __future__ import annotations

import logging

import pytest

from cdcbridge.coordination import WorkerState
from cdcbridge.coordination.trim_policy import TrimDecision, TrimmedRead
from tests.unit.coordination.helpers import Cluster

D = 20.0  # default lease duration
TAKE = 6.0  # default take interval


class ScriptedPolicy:
    """Answers `decision` and remembers what it was asked."""

    def __init__(self, decision: TrimDecision) -> None:
        self.decision = decision
        self.asked: list[TrimmedRead] = []

    def decide(self, trimmed: TrimmedRead) -> TrimDecision:
        self.asked.append(trimmed)
        return self.decision


def _cluster_behind_a_trim() -> Cluster:
    """w1 checkpoints after 5 records and dies; 10 more are written and all but the last 6 expire."""
    cluster = Cluster()
    for i in range(5):
        cluster.stream.put(f"early{i}")
    cluster.add_worker("w1")
    cluster.run_for(2)
    cluster.crash("w1")
    for i in range(10):
        cluster.stream.put(f"late{i}")
    cluster.stream.trim(keep_last=6)
    return cluster


def test_stop_halts_the_shard_at_its_checkpoint_and_keeps_the_lease() -> None:
    cluster = _cluster_behind_a_trim()
    checkpoint_before = cluster.leases()["s0"].checkpoint
    policy = ScriptedPolicy(TrimDecision.STOP)
    worker = cluster.add_worker("w2", trim_policy=policy)
    cluster.run_for(D + TAKE + 100)
    assert [d for d in cluster.journal.deliveries if d.worker == "w2"] == []  # nothing after the gap
    lease = cluster.leases()["s0"]
    assert lease.owner == "w2" and lease.checkpoint == checkpoint_before
    assert worker.state is WorkerState.RUNNING
    assert worker.stats.trimmed_data_events == 0 and worker.stats.halted_shards == 1
    assert worker.stats.shards()["s0"].halted
    assert len(policy.asked) >= 2  # asked again on retries, so the policy can let it go
    assert policy.asked[0].shard_id == "s0" and policy.asked[0].checkpoint_seq is not None


def test_a_halted_shard_continues_once_the_policy_lets_it() -> None:
    cluster = _cluster_behind_a_trim()
    policy = ScriptedPolicy(TrimDecision.STOP)
    worker = cluster.add_worker("w2", trim_policy=policy)
    cluster.run_for(D + TAKE + 5)
    policy.decision = TrimDecision.CONTINUE
    cluster.run_for(60)
    retained = [r.sequence for r in cluster.stream.retained_records_of("s0")]
    assert [d.sequence for d in cluster.journal.deliveries if d.worker == "w2"] == retained
    assert worker.stats.trimmed_data_events == 1 and not worker.stats.shards()["s0"].halted


def test_continue_resumes_from_the_oldest_retained_record_and_counts_the_loss() -> None:
    cluster = _cluster_behind_a_trim()
    worker = cluster.add_worker("w2", trim_policy=ScriptedPolicy(TrimDecision.CONTINUE))
    cluster.run_for(D + TAKE + 5)
    retained = [r.sequence for r in cluster.stream.retained_records_of("s0")]
    assert [d.sequence for d in cluster.journal.deliveries if d.worker == "w2"] == retained
    assert worker.stats.trimmed_data_events == 1 and worker.stats.halted_shards == 0


def test_a_repaired_trim_resumes_like_continue_but_is_not_logged_as_data_loss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = _cluster_behind_a_trim()
    with caplog.at_level(logging.WARNING, logger="cdcbridge.coordination"):
        worker = cluster.add_worker("w2", trim_policy=ScriptedPolicy(TrimDecision.CONTINUE_REPAIRED))
        cluster.run_for(D + TAKE + 5)
    retained = [r.sequence for r in cluster.stream.retained_records_of("s0")]
    assert [d.sequence for d in cluster.journal.deliveries if d.worker == "w2"] == retained
    assert worker.stats.trimmed_data_events == 1 and worker.stats.halted_shards == 0
    trim_lines = [r for r in caplog.records if "expired before it was read" in r.getMessage()]
    assert trim_lines and all(r.levelno == logging.WARNING for r in trim_lines)
    assert not any("DATA LOSS" in r.getMessage() for r in caplog.records)
    assert "the trim policy repairs it" in trim_lines[0].getMessage()


def test_continue_logs_the_trim_as_data_loss(caplog: pytest.LogCaptureFixture) -> None:
    cluster = _cluster_behind_a_trim()
    with caplog.at_level(logging.WARNING, logger="cdcbridge.coordination"):
        cluster.add_worker("w2", trim_policy=ScriptedPolicy(TrimDecision.CONTINUE))
        cluster.run_for(D + TAKE + 5)
    assert any(r.levelno == logging.ERROR and "DATA LOSS shard s0" in r.getMessage() for r in caplog.records)
