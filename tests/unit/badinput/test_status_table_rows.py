"""A status table edited by hand: an invalid lease row stalls only its own shard, says once (and again every few
minutes) which row is wrong and how to fix it, never crashes a worker, and once fixed nothing was skipped."""

from __future__ import annotations

import logging

import pytest

from cdcbridge.coordination import LeaseLostError, ShutdownReason, WorkerState
from cdcbridge.coordination.leases.conditional import RowCondition, RowExistence
from cdcbridge.coordination.leases.lease import Lease, LeaseKey
from cdcbridge.coordination.leases.row_format import (
    REPORT_AGAIN_AFTER_SECONDS,
    InvalidLeaseRowError,
    parse_lease_row,
)
from tests.unit.coordination.helpers import STREAM, Cluster

GOOD_ROW: dict[str, str | int] = {
    "LeaseCounter": 3,
    "LeaseOwner": "",
    "LeaseStealer": "",
    "Checkpoint": "TRIM_HORIZON",
    "ParentShardIds": "",
}


@pytest.mark.parametrize(
    ("change", "problem", "fix"),
    [
        ({"LeaseCounter": None}, "it has no LeaseCounter column", "set LeaseCounter to an INTEGER such as 0"),
        ({"LeaseCounter": "7"}, "LeaseCounter is STRING '7', not an INTEGER", "set LeaseCounter to an INTEGER"),
        ({"LeaseCounter": True}, "LeaseCounter is BOOLEAN True, not an INTEGER", "set LeaseCounter to an INTEGER"),
        ({"LeaseCounter": 2.0}, "LeaseCounter is DOUBLE 2.0, not an INTEGER", "set LeaseCounter to an INTEGER"),
        ({"LeaseCounter": 2**63 - 1}, "cannot be raised any further", "set LeaseCounter to an INTEGER such as 0"),
        ({"Checkpoint": 42}, "Checkpoint is INTEGER 42, not a STRING", "write Checkpoint as a STRING"),
        ({"Checkpoint": "shard_end"}, "Checkpoint 'shard_end' is not the sentinel 'SHARD_END'", "exactly SHARD_END"),
        ({"Checkpoint": "TRIM_HORIZON "}, "is not the sentinel 'TRIM_HORIZON'", "exactly TRIM_HORIZON"),
        ({"LeaseOwner": 5}, "LeaseOwner is INTEGER 5, not a STRING", "write LeaseOwner as a STRING"),
        ({"LeaseStealer": False}, "LeaseStealer is BOOLEAN False", "write LeaseStealer as a STRING"),
        ({"ParentShardIds": bytearray(b"p1")}, "ParentShardIds is BINARY", "write ParentShardIds as a STRING"),
        ({"CheckpointSeq": 12}, "CheckpointSeq is INTEGER 12, not a STRING", "write CheckpointSeq as a STRING"),
    ],
)
def test_invalid_rows_name_the_row_the_problem_and_the_fix(change: dict[str, object], problem: str, fix: str) -> None:
    row = {**GOOD_ROW, **change}
    row = {name: value for name, value in row.items() if value is not None}
    with pytest.raises(InvalidLeaseRowError) as raised:
        parse_lease_row(STREAM, "shard-7", row)  # type: ignore[arg-type]
    message = str(raised.value)
    assert message.startswith(f"lease row (StreamId='{STREAM}', StatusType='LeaseKey', StatusValue='shard-7')")
    assert problem in message and fix in message
    assert "delete the row" in message and "none is lost" in message


def test_several_problems_are_reported_together() -> None:
    with pytest.raises(InvalidLeaseRowError) as raised:
        parse_lease_row(STREAM, "s", {"LeaseCounter": "x", "LeaseOwner": 1, "Checkpoint": "Shard_End"})
    assert len(raised.value.problems) == 3


def test_harmless_oddities_are_accepted_with_a_warning() -> None:
    negative = parse_lease_row(STREAM, "s", {**GOOD_ROW, "LeaseCounter": -7})
    assert negative.lease.counter == -7 and negative.warnings == ()  # a counter only has to change
    bad_seq = parse_lease_row(STREAM, "s", {**GOOD_ROW, "CheckpointSeq": "not-a-sequence"})
    assert bad_seq.lease.checkpoint_seq is None
    (warning,) = bad_seq.warnings
    assert "StatusValue='s'" in warning and "not-a-sequence" in warning and "none is lost" in warning
    no_checkpoint = {k: v for k, v in GOOD_ROW.items() if k != "Checkpoint"}
    parsed = parse_lease_row(STREAM, "s", {**no_checkpoint, "CheckpointSeq": "1:5:0"})
    assert parsed.lease.checkpoint == "TRIM_HORIZON"
    assert "no Checkpoint column" in parsed.warnings[0] and "skipping records up to 1:5:0" in parsed.warnings[0]
    java_row = {k: v for k, v in GOOD_ROW.items() if k != "LeaseStealer"}  # the Java client may leave it out
    assert parse_lease_row(STREAM, "s", java_row).warnings == ()


def _errors_about(caplog: pytest.LogCaptureFixture, shard_id: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.ERROR and f"StatusValue={shard_id!r}" in record.getMessage()
    ]


def _write(cluster: Cluster, count: int, prefix: str = "k") -> None:
    for i in range(count):
        cluster.stream.put(f"{prefix}{i}")


def _delivered(cluster: Cluster, shard_id: str | None = None) -> set[object]:
    return set(cluster.journal.delivered_sequences(shard_id))


def _history(cluster: Cluster, shard_id: str | None = None) -> set[object]:
    records = cluster.stream.history if shard_id is None else cluster.stream.records_of(shard_id)
    return {r.sequence for r in records}


@pytest.mark.parametrize("repair", ["fix the counter", "delete the row"])
def test_an_invalid_row_stalls_only_its_shard_loudly_and_nothing_is_lost_once_repaired(
    caplog: pytest.LogCaptureFixture, repair: str
) -> None:
    caplog.set_level(logging.WARNING, logger="cdcbridge")
    cluster = Cluster(shard_count=2)
    _write(cluster, 30)
    assert cluster.stream.records_of("s0") and cluster.stream.records_of("s1")
    cluster.store.put_raw_row(STREAM, "s1", {**GOOD_ROW, "LeaseCounter": "3"})
    cluster.add_worker("w1")
    cluster.run_for(60)

    assert _delivered(cluster) == _history(cluster, "s0")  # the other shard goes on, s1 is not read
    (error,) = _errors_about(caplog, "s1")  # one report for ten take cycles
    assert "LeaseCounter is STRING '3', not an INTEGER" in error and "set LeaseCounter to an INTEGER" in error
    assert [e.shard_id for e in cluster.store.invalid_lease_rows(STREAM)] == ["s1"]
    assert cluster.workers["w1"].state is WorkerState.RUNNING
    cluster.run_for(REPORT_AGAIN_AFTER_SECONDS)
    assert len(_errors_about(caplog, "s1")) == 2  # reminded while it persists

    if repair == "fix the counter":
        cluster.store.put_raw_row(STREAM, "s1", {**GOOD_ROW, "LeaseCounter": 3})
    else:
        cluster.store._delete_row(LeaseKey(STREAM, "s1"), RowCondition(RowExistence.IGNORE))
    cluster.run_until(lambda: _delivered(cluster) == _history(cluster))
    assert cluster.store.invalid_lease_rows(STREAM) == []
    assert cluster.leases()["s1"].owner == "w1"


def test_a_row_edited_under_its_owner_ends_that_ownership_and_resumes_without_a_gap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="cdcbridge")
    cluster = Cluster()
    _write(cluster, 5)
    cluster.add_worker("w1")
    cluster.run_until(lambda: len(_delivered(cluster)) == 5)
    row = cluster.store.row(STREAM, "s0")
    assert row is not None
    cluster.store.put_raw_row(STREAM, "s0", {**row, "LeaseCounter": "edited"})
    _write(cluster, 5, prefix="later")
    cluster.run_for(30)

    assert cluster.workers["w1"].state is WorkerState.RUNNING
    assert ("w1", "s0", ShutdownReason.LEASE_LOST) in cluster.journal.shutdowns
    assert _errors_about(caplog, "s0")
    cluster.store.put_raw_row(STREAM, "s0", {**row, "LeaseCounter": 40})
    cluster.run_until(lambda: _delivered(cluster) == _history(cluster))


def test_a_write_that_meets_an_edited_row_is_a_lost_lease_naming_the_edit() -> None:
    cluster = Cluster()
    cluster.store.create_lease_if_absent(Lease(STREAM, "s0"))
    taken = cluster.store.take(Lease(STREAM, "s0"), "w1")
    cluster.store.put_raw_row(STREAM, "s0", {**GOOD_ROW, "LeaseCounter": taken.counter, "LeaseOwner": 9})
    with pytest.raises(LeaseLostError, match="edited into an invalid state"):
        cluster.store.renew(taken)


def test_a_negative_counter_is_an_ordinary_lease(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="cdcbridge")
    cluster = Cluster()
    _write(cluster, 8)
    cluster.store.put_raw_row(STREAM, "s0", {**GOOD_ROW, "LeaseCounter": -7})
    cluster.add_worker("w1")
    cluster.run_until(lambda: _delivered(cluster) == _history(cluster))
    assert cluster.leases()["s0"].counter > -7
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_unparseable_checkpoint_seq_resumes_with_duplicates_only_and_is_rewritten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="cdcbridge")
    cluster = Cluster()
    _write(cluster, 6)
    cluster.store.put_raw_row(STREAM, "s0", {**GOOD_ROW, "CheckpointSeq": "garbage"})
    cluster.add_worker("w1")
    cluster.run_until(lambda: _delivered(cluster) == _history(cluster))
    warnings = [r.getMessage() for r in caplog.records if "CheckpointSeq 'garbage'" in r.getMessage()]
    assert len(warnings) == 1 and "StatusValue='s0'" in warnings[0]
    cluster.run_for(10)
    assert cluster.leases()["s0"].checkpoint_seq is not None  # the next checkpoint wrote a valid one


def test_a_garbage_iterator_checkpoint_neither_skips_records_nor_crashes_the_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An opaque Checkpoint that the service cannot use: the worker says so naming the shard, the other shards go
    on, and the shard re-reads from its oldest retained record, so every record is delivered."""
    caplog.set_level(logging.WARNING, logger="cdcbridge")
    cluster = Cluster(shard_count=2)
    _write(cluster, 20)
    cluster.store.put_raw_row(STREAM, "s1", {**GOOD_ROW, "Checkpoint": "not-an-iterator"})
    cluster.add_worker("w1")
    cluster.run_for(30)
    assert _delivered(cluster, "s0") == _history(cluster, "s0")
    assert _delivered(cluster, "s1") == _history(cluster, "s1")
    assert cluster.workers["w1"].state is WorkerState.RUNNING
    assert any("s1" in r.getMessage() and "not-an-iterator" in r.getMessage() for r in caplog.records)
    assert cluster.leases()["s1"].checkpoint != "not-an-iterator", "the unusable position was replaced"


def test_a_garbage_iterator_with_a_checkpoint_seq_re_reads_without_repeating_confirmed_records() -> None:
    """With CheckpointSeq stored beside the unusable iterator, the re-read from the oldest record skips what an
    earlier owner confirmed: nothing is lost and nothing confirmed is sent again."""
    cluster = Cluster(shard_count=1)
    _write(cluster, 20)
    history = sorted(_history(cluster, "s0"))
    confirmed = history[7]
    cluster.store.put_raw_row(
        STREAM, "s0", {**GOOD_ROW, "Checkpoint": "not-an-iterator", "CheckpointSeq": confirmed.to_text()}
    )
    cluster.add_worker("w1")
    cluster.run_for(30)
    assert sorted(cluster.journal.delivered_sequences("s0")) == history[8:]


def test_a_row_broken_again_after_a_fix_is_reported_at_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="cdcbridge")
    cluster = Cluster()
    broken = {**GOOD_ROW, "LeaseOwner": 1}
    cluster.store.put_raw_row(STREAM, "s0", broken)
    cluster.store.list_leases(STREAM)
    cluster.store.list_leases(STREAM)
    assert len(_errors_about(caplog, "s0")) == 1
    cluster.store.put_raw_row(STREAM, "s0", GOOD_ROW)
    assert [lease.shard_id for lease in cluster.store.list_leases(STREAM)] == ["s0"]
    cluster.store.put_raw_row(STREAM, "s0", broken)
    cluster.store.list_leases(STREAM)
    assert len(_errors_about(caplog, "s0")) == 2
