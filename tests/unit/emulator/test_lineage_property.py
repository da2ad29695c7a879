"""Property: whatever the writes, splits and merges, reading shards parents-first yields each key's records in
commit order, every write appears exactly once, and sequences never go backwards."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.emulator.model import CellChange, Instance, RowChange, WriteKind
from cdcbridge.tablestore.plainbuffer import decode_row

from .conftest import T0_US, make_table

write_op = st.tuples(st.just("write"), st.lists(st.integers(0, 15), min_size=1, max_size=4, unique=True))
split_op = st.tuples(st.just("split"), st.integers(0, 100))
merge_op = st.tuples(st.just("merge"), st.integers(0, 100))
operations = st.lists(st.one_of(write_op, write_op, split_op, merge_op), min_size=1, max_size=60)
# Wall time may stand still or go backwards between calls; the commit clock must not.
clock_steps = st.lists(st.integers(-5, 50), min_size=60, max_size=60)


def read_in_lineage_order(instance: Instance, now_us: int) -> list[str]:
    """Shard ids in an order where every shard comes after its parent and parent sibling."""
    stream_id = instance.list_streams("t")[0].stream_id
    shards = instance.describe_stream(stream_id, now_us=now_us).shards
    parents = {s.shard_id: {p for p in (s.parent_id, s.parent_sibling_id) if p} for s in shards}
    order: list[str] = []
    while len(order) < len(shards):
        ready = sorted(i for i, ps in parents.items() if i not in order and ps <= set(order))
        order.append(ready[0])
    return order


@settings(max_examples=60, deadline=None)
@given(operations, clock_steps)
def test_per_key_order_survives_splits_and_merges(ops: list[tuple[str, object]], steps: list[int]) -> None:
    instance = Instance()
    make_table(instance)
    stream = instance.tables["t"].stream
    assert stream is not None
    now = T0_US
    expected: dict[int, list[int]] = defaultdict(list)  # key -> written versions, in commit order
    version = 0
    for (kind, arg), step in zip(ops, steps, strict=False):
        now += step
        if kind == "write":
            changes = []
            for key in arg:  # type: ignore[union-attr]
                version += 1
                expected[key].append(version)
                changes.append(("t", RowChange(WriteKind.PUT, [("id", key)], [CellChange("v", value=version)])))
            assert all(o.error is None for o in instance.batch_write(changes, now_us=now))
        else:
            open_shards = stream.open_shards()  # sorted by hash range
            index = int(arg) % len(open_shards)  # type: ignore[call-overload]
            if kind == "split":
                instance.split_shard("t", open_shards[index].shard_id, now_us=now)
            elif len(open_shards) > 1:
                index = min(index, len(open_shards) - 2)
                left, right = open_shards[index], open_shards[index + 1]  # neighbours in hash order
                first, second = (left, right) if step % 2 else (right, left)  # either may name the merge
                instance.merge_shards("t", first.shard_id, second.shard_id, now_us=now)

    seen: dict[int, list[int]] = defaultdict(list)
    sequences: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    stream_id = instance.list_streams("t")[0].stream_id
    for shard_id in read_in_lineage_order(instance, now):
        iterator = instance.get_shard_iterator(stream_id, shard_id, now_us=now)
        while iterator is not None:
            batch = instance.get_stream_records(iterator, 1000, now_us=now)
            for record in batch.records:
                row = decode_row(record.payload)
                key = row.primary_key[0][1]
                seen[key].append(row.cells[0].value)  # type: ignore[arg-type]
                sequences[key].append(record.sequence)
            if batch.next_iterator == iterator:
                break  # an open shard, read to its current end
            iterator = batch.next_iterator
    assert seen == expected
    for key_sequences in sequences.values():
        assert key_sequences == sorted(key_sequences) and len(set(key_sequences)) == len(key_sequences)
