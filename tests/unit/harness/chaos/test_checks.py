"""The end-of-run checks of the chaos suite on hand-made source changes and Kafka messages (no servers)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.harness.chaos.checks import (
    KafkaMessage,
    SourceChange,
    check_delivery,
    check_key_order,
    counter_mismatches,
)

KEY_A, KEY_B = b'["eu",1]', b'["us",2]'


def change(key: bytes, ts: int, ops: int = 1, *, trimmed: bool = False) -> SourceChange:
    sequence = Sequence(1, ts, 0)
    return SourceChange(key, "shard-1", sequence.to_text(), tuple(sequence.key(i) for i in range(ops)), trimmed)


def messages_of(*changes: SourceChange, partition: int = 0) -> list[KafkaMessage]:
    pairs = [(c.key, seq_key) for c in changes for seq_key in c.seq_keys]
    return [KafkaMessage(partition, offset, key, seq_key) for offset, (key, seq_key) in enumerate(pairs)]


def test_a_record_becomes_one_expected_message_per_unit_operation() -> None:
    record = ChangeRecord(
        "t", RecordAction.UPDATE, [("region", "eu"), ("id", 1)],
        [Cell("note", CellOp.PUT, "x", 5), Cell("visits", CellOp.INCREMENT, 2, 5)], Sequence(3, 1000, 2), "shard-9",
    )  # fmt: skip
    derived = SourceChange.from_record(record, trimmed=True)
    assert derived.key == KEY_A
    assert derived.seq_keys == (Sequence(3, 1000, 2).key(0), Sequence(3, 1000, 2).key(1))
    assert (derived.shard_id, derived.sequence, derived.trimmed) == ("shard-9", "3:1000:2", True)


def test_every_record_delivered_at_least_once_passes_with_duplicates() -> None:
    changes = [change(KEY_A, 10), change(KEY_B, 11, ops=2), change(KEY_A, 12)]
    delivered = messages_of(*changes) + messages_of(changes[1])  # a redelivered record
    result = check_delivery(changes, delivered)
    assert (result.records, result.expected_messages) == (3, 4)
    assert (result.lost, result.lost_by_trim, result.unexplained_messages) == (0, 0, 0)


def test_a_missing_message_makes_its_record_lost_and_a_trimmed_one_lost_by_trim() -> None:
    kept, partial, trimmed = change(KEY_A, 10), change(KEY_B, 11, ops=2), change(KEY_A, 5, trimmed=True)
    delivered = messages_of(kept) + messages_of(partial)[:1]  # the second part of `partial` never arrived
    result = check_delivery([kept, partial, trimmed], delivered)
    assert result.missing == [partial]
    assert result.missing_trimmed == [trimmed]
    assert (result.lost, result.lost_by_trim) == (1, 1)


def test_a_message_under_another_key_does_not_count_and_is_unexplained() -> None:
    record = change(KEY_A, 10)
    result = check_delivery([record], [KafkaMessage(0, 0, KEY_B, record.seq_keys[0])])
    assert result.lost == 1 and result.unexplained_messages == 1


def test_a_replayed_suffix_is_duplicates_not_violations() -> None:
    a1, a2, a3, a4 = (change(KEY_A, ts) for ts in (1, 2, 3, 4))
    b1 = change(KEY_B, 2)
    stream = messages_of(a1, a2, b1, a3, a2, a3, a4)  # a worker died after a3; its successor resumed at a2
    result = check_key_order(stream)
    assert result.violations == [] and result.split_keys == []
    assert (result.keys, result.messages, result.duplicates) == (2, 7, 2)


def test_a_first_occurrence_older_than_one_already_seen_is_a_violation() -> None:
    a1, a2, a3 = (change(KEY_A, ts) for ts in (1, 2, 3))
    result = check_key_order(messages_of(a1, a3, a2))  # a2 was never in Kafka before a3: a gap, then a fill
    assert len(result.violations) == 1
    violation = result.violations[0]
    assert (violation.offset, violation.seq_key, violation.after_seq_key) == (2, a2.seq_keys[0], a3.seq_keys[0])
    assert "after" in violation.describe()


def test_order_is_judged_by_offset_not_by_arrival_in_the_list() -> None:
    a1, a2 = change(KEY_A, 1), change(KEY_A, 2)
    in_order = messages_of(a1, a2)
    assert check_key_order(list(reversed(in_order))).violations == []


def test_a_key_in_two_partitions_is_reported() -> None:
    result = check_key_order(messages_of(change(KEY_A, 1)) + messages_of(change(KEY_A, 2), partition=1))
    assert result.split_keys == [KEY_A]


def test_counters_that_differ_are_reported_missing_rows_included() -> None:
    source = {("eu", 1): {"balance": 10, "visits": 2, "note": "x"}, ("us", 2): {"balance": 5}}
    target = {("eu", 1): {"balance": 10, "visits": 3, "note": "y"}}
    lines = counter_mismatches(source, target, ("balance", "visits"))
    assert len(lines) == 2
    assert lines[0].startswith("('eu', 1)") and "'visits': 3" in lines[0]
    assert counter_mismatches(source, source, ("balance", "visits")) == []


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    lengths=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=4),
)
def test_any_interleaving_of_in_order_deliveries_with_replayed_suffixes_passes(
    data: st.DataObject, lengths: list[int]
) -> None:
    """At-least-once delivery in per-key order, however redeliveries of suffixes interleave across keys."""
    queues = []
    for index, length in enumerate(lengths):
        key = f'["k",{index}]'.encode()
        records = [change(key, ts) for ts in range(1, length + 1)]
        produced = list(records)
        restart_at = data.draw(st.integers(min_value=0, max_value=length - 1))
        produced += records[restart_at:]  # a successor re-sends from an older checkpoint
        queues.append(produced)
    merged: list[SourceChange] = []
    while any(queues):
        queue = data.draw(st.sampled_from([q for q in queues if q]))
        merged.append(queue.pop(0))
    result = check_key_order(messages_of(*merged))
    assert result.violations == []
    assert result.duplicates == len(merged) - sum(lengths)


def test_incremental_snapshot_messages_explain_nothing_and_are_not_unexplained_but_keep_key_order() -> None:
    record = change(KEY_A, 10)
    snapshot_put = KafkaMessage(0, 1, KEY_A, Sequence(1, 20, 0).key(0), snapshot=True)
    result = check_delivery([record], [*messages_of(record), snapshot_put])
    assert (result.lost, result.unexplained_messages, result.snapshot_messages) == (0, 0, 1)
    # A snapshot message does not stand in for a stream record's message...
    alone = check_delivery([record], [KafkaMessage(0, 0, KEY_A, record.seq_keys[0], snapshot=True)])
    assert alone.lost == 1
    # ...and it is in the per-key order: a snapshot PUT before an older stream message is a violation.
    stale = [snapshot_put, KafkaMessage(0, 2, KEY_A, record.seq_keys[0])]
    assert len(check_key_order(stale).violations) == 1
