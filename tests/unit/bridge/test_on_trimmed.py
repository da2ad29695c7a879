"""The bridge's per-table answer to trimmed data: continue, or stop until a newer snapshot covers the loss."""

from __future__ import annotations

import logging

import pytest

from cdcbridge.bridge.on_trimmed import TableTrimPolicy
from cdcbridge.changes import Sequence
from cdcbridge.config import OnTrimmed
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.coordination.trim_policy import TrimDecision, TrimmedRead
from cdcbridge.snapshot.errors import SnapshotInProgressError, SnapshotStateError

CHECKPOINT_US = 1_700_000_000_000_000
TRIMMED = TrimmedRead("stream-1", "shard-7", ExtendedSequence(Sequence(1, CHECKPOINT_US, 3)))


def _policy(mode: OnTrimmed, snapshot_start_us: int | None = None) -> TableTrimPolicy:
    return TableTrimPolicy("orders", mode, "worker-a", lambda: snapshot_start_us)


def test_continue_always_continues() -> None:
    assert _policy(OnTrimmed.CONTINUE).decide(TRIMMED) is TrimDecision.CONTINUE


def test_stop_halts_with_shard_table_owner_lost_range_and_fix(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    assert _policy(OnTrimmed.STOP).decide(TRIMMED) is TrimDecision.STOP
    [record] = [r for r in caplog.records if r.name == "cdcbridge.bridge.on_trimmed"]
    message = record.getMessage()
    assert "shard shard-7 of table orders (owner worker-a)" in message
    assert "records after 1:1700000000000000:3" in message and "2023-11-14" in message  # the lost range
    assert "cdcbridge snapshot" in message and "on_trimmed: continue" in message


def test_a_snapshot_started_after_the_checkpoint_lets_the_shard_continue() -> None:
    assert _policy(OnTrimmed.STOP, CHECKPOINT_US + 1).decide(TRIMMED) is TrimDecision.CONTINUE_REPAIRED


def test_a_snapshot_older_than_the_checkpoint_does_not() -> None:
    assert _policy(OnTrimmed.STOP, CHECKPOINT_US - 1).decide(TRIMMED) is TrimDecision.STOP


def test_a_running_snapshot_keeps_the_shard_halted() -> None:
    def running() -> int | None:
        raise SnapshotInProgressError("the snapshot of table orders is still running")

    policy = TableTrimPolicy("orders", OnTrimmed.STOP, "worker-a", running)
    assert policy.decide(TRIMMED) is TrimDecision.STOP


def test_a_halted_shard_asking_again_logs_the_first_and_every_tenth_time(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    policy = _policy(OnTrimmed.STOP)
    for _ in range(25):
        policy.decide(TRIMMED)
    assert len([r for r in caplog.records if r.name == "cdcbridge.bridge.on_trimmed"]) == 3  # 1st, 10th, 20th


def test_resnapshot_needs_a_way_to_request_snapshots() -> None:
    with pytest.raises(ValueError, match="needs a way to request snapshots"):
        _policy(OnTrimmed.RESNAPSHOT)


def _resnapshot(request_repair) -> TableTrimPolicy:  # type: ignore[no-untyped-def]
    return TableTrimPolicy("orders", OnTrimmed.RESNAPSHOT, "worker-a", lambda: None, request_repair)


def test_resnapshot_requests_a_repair_and_continues_loudly(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    asked: list[TrimmedRead] = []

    def request(trimmed: TrimmedRead) -> tuple[str, bool]:
        asked.append(trimmed)
        return "0000000000042-trim-abc", True

    assert _resnapshot(request).decide(TRIMMED) is TrimDecision.CONTINUE_REPAIRED
    assert asked == [TRIMMED]
    [record] = [r for r in caplog.records if r.name == "cdcbridge.bridge.on_trimmed"]
    message = record.getMessage()
    assert record.levelname == "ERROR" and "repaired by incremental snapshot 0000000000042-trim-abc" in message
    assert "shard shard-7 of table orders (owner worker-a)" in message
    assert "records after 1:1700000000000000:3" in message and "whole table" in message


def test_resnapshot_halts_and_asks_again_while_the_request_cannot_be_written() -> None:
    answers: list[object] = [SnapshotStateError("status table down"), ("id-1", True)]

    def request(trimmed: TrimmedRead) -> tuple[str, bool]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    policy = _resnapshot(request)
    assert policy.decide(TRIMMED) is TrimDecision.STOP
    assert policy.decide(TRIMMED) is TrimDecision.CONTINUE_REPAIRED
