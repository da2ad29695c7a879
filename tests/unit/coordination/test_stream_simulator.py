"""The stream simulator behaves like a Tablestore stream where the coordination tests rely on it."""

from __future__ import annotations

import pytest

from cdcbridge.coordination import ShardInfo, ShardNotFoundError, TrimmedDataError
from cdcbridge.coordination.stream.simulator import StreamSimulator


def test_reads_in_commit_order_and_a_caught_up_open_shard_returns_the_same_iterator() -> None:
    stream = StreamSimulator("st")
    written = [stream.put(f"k{i}") for i in range(5)]
    iterator = stream.get_shard_iterator("st", "s0")
    first = stream.get_records(iterator, 3)
    second = stream.get_records(first.next_iterator or "", 3)
    assert first.records + second.records == written
    idle = stream.get_records(second.next_iterator or "", 3)
    assert idle.records == [] and idle.next_iterator == second.next_iterator


def test_split_closes_the_parent_and_each_key_moves_to_exactly_one_child() -> None:
    stream = StreamSimulator("st")
    before = [stream.put(f"k{i}") for i in range(20)]
    left, right = stream.split("s0")
    after = [stream.put(f"k{i}") for i in range(20)]
    assert stream.list_shards("st") == [ShardInfo("s0"), ShardInfo(left, "s0"), ShardInfo(right, "s0")]
    batch = stream.get_records(stream.get_shard_iterator("st", "s0"), 100)
    assert batch.records == before and batch.next_iterator is None  # closed and fully read
    homes = {str(r.primary_key[0][1]): r.shard_id for r in after}
    assert set(homes.values()) == {left, right}
    for record in after:
        assert record.shard_id == homes[str(record.primary_key[0][1])]


def test_merge_has_both_parents_and_requires_adjacent_shards() -> None:
    stream = StreamSimulator("st", shard_count=3)
    with pytest.raises(ValueError, match="adjacent"):
        stream.merge("s0", "s2")
    assert stream.adjacent_open_pairs() == [("s0", "s1"), ("s1", "s2")]
    child = stream.merge("s0", "s1")
    assert stream.parents_of(child) == ("s0", "s1")
    assert sorted(stream.open_shard_ids()) == sorted([child, "s2"])


def test_trimmed_positions_fail_and_removed_shards_vanish() -> None:
    stream = StreamSimulator("st")
    for i in range(10):
        stream.put(f"k{i}")
    old_iterator = stream.get_shard_iterator("st", "s0")
    stream.trim(keep_last=4)
    with pytest.raises(TrimmedDataError):
        stream.get_records(old_iterator, 10)
    oldest = stream.get_records(stream.get_shard_iterator("st", "s0"), 10)
    assert oldest.records == stream.history[6:]
    stream.split("s0")
    stream.remove_shard("s0")
    assert "s0" not in stream.shard_ids()
    with pytest.raises(ShardNotFoundError):
        stream.get_shard_iterator("st", "s0")
    with pytest.raises(TrimmedDataError):
        stream.get_records(oldest.next_iterator or "", 10)
