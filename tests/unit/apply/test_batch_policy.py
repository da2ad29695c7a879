"""A whole batch through fold_batch, and the bad-input policy: stop (default) or dead-letter, never a silent drop."""

from __future__ import annotations

import pytest

from cdcbridge.apply.core import (
    BadInputAction,
    BadInputPolicy,
    ColumnValue,
    IncrementError,
    InvalidMessageError,
    InvalidSettingError,
    TargetRow,
    decode_batch,
    decode_messages,
    fold_batch,
    fold_row,
)
from tests.unit.apply.envelopes import PK, TABLE, increment, mutation, put, seq_key

OTHER_PK = (("id", 8),)


def test_fold_batch_returns_only_changed_rows_with_stats():
    current = {(TABLE, OTHER_PK): TargetRow(TABLE, OTHER_PK, {"a": ColumnValue(1, 1)}, seq_key(9), False, 9)}
    messages = [
        mutation(1, "PUT", [put("a", 1, 1)]),
        mutation(2, "INCREMENT", [increment("n", 2)]),
        mutation(2, "INCREMENT", [increment("n", 2)]),
        mutation(3, "UPDATE", [put("a", 5, 3)], pk=OTHER_PK),
    ]
    result = fold_batch(messages, current)
    assert list(result.rows) == [(TABLE, PK)]
    assert result.rows[(TABLE, PK)].columns == {"a": ColumnValue(1, 1), "n": ColumnValue(2, 2)}
    stats = result.stats
    assert (stats.messages, stats.duplicates, stats.stale, stats.applied, stats.rows_changed) == (4, 1, 1, 2, 1)
    assert result.dead_letters == []


def test_decode_batch_lists_the_rows_to_read():
    decoded = decode_batch([mutation(1, "DELETE"), mutation(2, "DELETE", pk=OTHER_PK), mutation(3, "DELETE")])
    assert decoded.row_keys == [(TABLE, PK), (TABLE, OTHER_PK)]
    assert decoded.messages == 3


def test_stop_policy_raises_on_the_first_bad_message():
    bad = {**mutation(2, "UPDATE", [put("a", 1)], offset=41), "type": "TRUNCATE"}
    with pytest.raises(InvalidMessageError, match="offset 41"):
        fold_batch([mutation(1, "PUT", [put("a", 1)]), bad], {})


def test_dead_letter_policy_sets_bad_messages_aside_and_applies_the_rest():
    bad = {**mutation(2, "UPDATE", [put("a", 1)], offset=41), "type": "TRUNCATE"}
    result = fold_batch([mutation(1, "PUT", [put("a", 1, 1)]), bad], {}, policy=BadInputPolicy("dead_letter"))
    assert result.rows[(TABLE, PK)].columns == {"a": ColumnValue(1, 1)}
    assert len(result.dead_letters) == 1
    record = result.dead_letters[0].to_record()
    assert (record["topic"], record["partition"], record["offset"]) == ("cdc.orders", 0, 41)
    assert record["error_type"] == "InvalidMessageError"
    assert "unknown mutation type 'TRUNCATE'" in record["error"]
    assert record["message"] is bad
    assert result.stats.dead_lettered == 1


def test_increment_failing_at_fold_time_is_dead_lettered_atomically_without_advancing_seq():
    current = TargetRow(TABLE, PK, {"s": ColumnValue("text", 1)}, seq_key(1), False, 1)
    messages = [
        mutation(2, "INCREMENT", [increment("n", 1), increment("s", 1)], offset=5),  # n must not move either
        mutation(3, "UPDATE", [put("a", 1, 3)], offset=6),
        mutation(4, "INCREMENT", [increment("s", 1)], offset=7),
    ]
    operations, _ = decode_messages(messages)
    result = fold_row(current, operations, policy=BadInputPolicy(BadInputAction.DEAD_LETTER))
    assert result.row.columns == {"s": ColumnValue("text", 1), "a": ColumnValue(1, 3)}
    assert result.row.seq == seq_key(3)
    assert [letter.location.offset for letter in result.dead_letters] == [5, 7]
    assert all(isinstance(letter.error, IncrementError) for letter in result.dead_letters)
    assert result.stats.dead_lettered == 2


def test_increment_failing_at_fold_time_stops_by_default():
    current = {(TABLE, PK): TargetRow(TABLE, PK, {"s": ColumnValue("text", 1)}, seq_key(1), False, 1)}
    with pytest.raises(IncrementError, match="holds str 'text'"):
        fold_batch([mutation(2, "INCREMENT", [increment("s", 1)])], current)


def test_unknown_policy_action_is_refused():
    with pytest.raises(InvalidSettingError, match="on_bad_input is 'skip'"):
        BadInputPolicy("skip")  # type: ignore[arg-type]
