"""Recovery, drain and safe-trim judgements from lease rows against stream positions (no servers)."""

from __future__ import annotations

from cdcbridge.changes import Sequence
from cdcbridge.coordination.checkpoint.positions import SHARD_END, ExtendedSequence
from cdcbridge.coordination.leases.lease import Lease
from cdcbridge.harness.chaos.progress import lagging_shards, safe_trim_before_us, undelivered_shards


def lease(shard: str, ts: int | None = None, *, sub: int | None = None, finished: bool = False) -> Lease:
    position = None if ts is None else ExtendedSequence(Sequence(1, ts, 0), sub)
    return Lease("stream", shard, checkpoint=SHARD_END if finished else "iterator", checkpoint_seq=position)


def seqs(*timestamps: int) -> list[Sequence]:
    return [Sequence(1, ts, 0) for ts in timestamps]


def test_a_shard_lags_until_its_checkpoint_passes_the_time_unless_finished() -> None:
    leases = {"a": lease("a", 150), "b": lease("b", 90), "c": lease("c", finished=True), "d": lease("d")}
    assert lagging_shards(["a", "b", "c", "d", "e"], leases, since_us=100) == ["b", "d", "e"]
    assert lagging_shards(["a", "c"], leases, since_us=100) == []


def test_a_shard_is_delivered_when_its_checkpoint_covers_its_last_record() -> None:
    last = {"a": Sequence(1, 50, 0), "b": Sequence(1, 60, 0), "c": Sequence(1, 70, 0), "d": Sequence(1, 5, 0)}
    leases = {"a": lease("a", 50), "b": lease("b", 60, sub=0), "c": lease("c", finished=True)}
    # b confirmed only part 0 of its last record; d has no lease yet
    assert undelivered_shards(last, leases) == ["b", "d"]


def test_the_trim_cut_stops_at_the_first_record_a_shard_has_not_checkpointed() -> None:
    records = {"a": seqs(10, 20, 30, 40), "b": seqs(15, 25, 35)}
    leases = {"a": lease("a", 30), "b": lease("b", 15)}
    assert safe_trim_before_us(records, leases, now_us=1000) == 25  # b's 25 is the oldest unconfirmed record


def test_a_partly_confirmed_record_bounds_the_cut_and_finished_or_covered_shards_do_not() -> None:
    records = {"a": seqs(10, 20), "b": seqs(5, 6), "c": seqs(7, 8)}
    leases = {"a": lease("a", 20, sub=1), "b": lease("b", finished=True), "c": lease("c", 8)}
    assert safe_trim_before_us(records, leases, now_us=1000) == 20
    assert safe_trim_before_us({"b": seqs(5), "c": seqs(7, 8)}, leases, now_us=1000) == 1000


def test_a_shard_without_a_lease_or_checkpoint_keeps_everything() -> None:
    records = {"a": seqs(10, 20), "b": seqs(30)}
    assert safe_trim_before_us(records, {"a": lease("a", 20)}, now_us=1000) == 30
    assert safe_trim_before_us(records, {"a": lease("a"), "b": lease("b", 30)}, now_us=1000) == 10
