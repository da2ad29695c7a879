"""Exact values for each operation of the fold, and the guard on single rows."""

from __future__ import annotations

import pytest

from cdcbridge.apply.core import (
    ColumnValue,
    IncrementError,
    InvalidGroupError,
    TargetRow,
    apply_operation,
    decode_message,
    fold_row,
)
from tests.unit.apply.envelopes import (
    PK,
    TABLE,
    delete_all,
    delete_one,
    image,
    increment,
    mutation,
    put,
    seq_key,
)


def fold(messages, current=None):
    return fold_row(current, [decode_message(m) for m in messages])


def row(columns, *, seq=None, deleted=False, source_ts=None):
    cols = {name: ColumnValue(value, version) for name, (value, version) in columns.items()}
    return TargetRow(TABLE, PK, cols, seq, deleted, source_ts)


def cols(target: TargetRow) -> dict:
    return {name: (cell.value, cell.version) for name, cell in target.columns.items()}


# --- MUTATE_LOG ----------------------------------------------------------------------------------------------------


def test_put_row_on_absent_row_creates_it_with_seq_and_source_ts():
    result = fold([mutation(5, "PUT", [put("a", 1, 3), put("b", "x", 4)])])
    assert result.changed
    assert cols(result.row) == {"a": (1, 3), "b": ("x", 4)}
    assert result.row.seq == seq_key(5)
    assert result.row.source_ts == 5
    assert result.row.deleted is False


def test_put_row_replaces_the_whole_row():
    current = row({"a": (1, 1), "b": (2, 1)}, seq=seq_key(1))
    result = fold([mutation(2, "PUT", [put("c", 3, 2)])], current)
    assert cols(result.row) == {"c": (3, 2)}


def test_put_row_replaces_even_newer_versions():
    current = row({"a": (1, 90)}, seq=seq_key(1))
    result = fold([mutation(2, "PUT", [put("a", 2, 5)])], current)
    assert cols(result.row) == {"a": (2, 5)}


def test_cell_put_newer_or_equal_version_wins_older_is_ignored():
    current = row({"a": (1, 10), "b": (1, 10), "c": (1, 10)}, seq=seq_key(1))
    result = fold([mutation(2, "UPDATE", [put("a", 2, 11), put("b", 3, 10), put("c", 4, 9)])], current)
    assert cols(result.row) == {"a": (2, 11), "b": (3, 10), "c": (1, 10)}
    assert result.row.seq == seq_key(2)  # applied even though one cell changed nothing


def test_cell_put_without_version_takes_the_message_timestamp():
    result = fold([mutation(42, "UPDATE", [put("a", "v")])])
    assert cols(result.row) == {"a": ("v", 42)}


def test_cell_put_keeps_other_columns():
    current = row({"a": (1, 1)}, seq=seq_key(1))
    result = fold([mutation(2, "UPDATE", [put("b", 2, 2)])], current)
    assert cols(result.row) == {"a": (1, 1), "b": (2, 2)}


def test_delete_all_version_removes_the_column():
    current = row({"a": (1, 1), "b": (2, 1)}, seq=seq_key(1))
    result = fold([mutation(2, "UPDATE", [delete_all("a"), delete_all("missing")])], current)
    assert cols(result.row) == {"b": (2, 1)}


def test_delete_one_version_removes_only_the_latest_known_version():
    current = row({"a": (1, 5), "b": (2, 5)}, seq=seq_key(1))
    result = fold([mutation(2, "UPDATE", [delete_one("a", 5), delete_one("b", 4)])], current)
    assert cols(result.row) == {"b": (2, 5)}


def test_increment_by_amount_adds_to_the_held_integer():
    current = row({"n": (10, 1)}, seq=seq_key(1))
    result = fold([mutation(2, "INCREMENT", [increment("n", 5, version=2)])], current)
    assert cols(result.row) == {"n": (15, 2)}


def test_increment_of_absent_column_starts_from_zero_and_versions_with_timestamp():
    result = fold([mutation(3, "INCREMENT", [increment("n", -4)])])
    assert cols(result.row) == {"n": (-4, 3)}


def test_increment_with_resulting_value_sets_it():
    current = row({"n": (10, 1)}, seq=seq_key(1))
    result = fold([mutation(2, "INCREMENT", [increment("n", 5, value=99, version=2)])], current)
    assert cols(result.row) == {"n": (99, 2)}


@pytest.mark.parametrize("held", ["ten", True, 1.5])
def test_increment_of_non_integer_column_is_an_increment_error(held):
    current = row({"n": (held, 1)}, seq=seq_key(1))
    message = mutation(2, "INCREMENT", [increment("n", 1)], offset=77)
    with pytest.raises(IncrementError, match=r"column 'n'.*offset 77"):
        fold([message], current)


def test_increments_in_order_accumulate():
    messages = [mutation(n, "INCREMENT", [increment("n", n)]) for n in (1, 2, 3)]
    assert cols(fold(messages).row) == {"n": (6, 3)}


def test_delete_is_a_soft_delete_that_keeps_its_seq():
    current = row({"a": (1, 1)}, seq=seq_key(1), source_ts=1)
    result = fold([mutation(2, "DELETE")], current)
    assert result.row == row({}, seq=seq_key(2), deleted=True, source_ts=2)


def test_delete_of_absent_row_records_a_deleted_row():
    result = fold([mutation(4, "DELETE")])
    assert result.changed
    assert result.row == row({}, seq=seq_key(4), deleted=True, source_ts=4)


def test_update_after_delete_recreates_the_row_with_only_its_cells():
    current = row({}, seq=seq_key(2), deleted=True)
    result = fold([mutation(3, "UPDATE", [put("b", 1, 3), delete_all("c")])], current)
    assert result.row == row({"b": (1, 3)}, seq=seq_key(3), source_ts=3)


def test_increment_after_delete_recreates_the_row_from_zero():
    current = row({}, seq=seq_key(2), deleted=True)
    result = fold([mutation(3, "INCREMENT", [increment("n", 2)])], current)
    assert result.row == row({"n": (2, 3)}, seq=seq_key(3), source_ts=3)


def test_update_with_only_deletes_leaves_a_deleted_row_deleted_but_takes_its_seq():
    current = row({}, seq=seq_key(2), deleted=True)
    result = fold([mutation(3, "UPDATE", [delete_all("a")])], current)
    assert result.row == row({}, seq=seq_key(3), deleted=True, source_ts=3)


def test_deleting_every_column_does_not_delete_the_row():
    current = row({"a": (1, 1)}, seq=seq_key(1))
    result = fold([mutation(2, "UPDATE", [delete_all("a")])], current)
    assert result.row == row({}, seq=seq_key(2), source_ts=2)


def test_delete_then_put_in_one_batch():
    messages = [mutation(1, "PUT", [put("a", 1, 1)]), mutation(2, "DELETE"), mutation(3, "PUT", [put("b", 2, 3)])]
    assert fold(messages).row == row({"b": (2, 3)}, seq=seq_key(3), source_ts=3)


def test_several_messages_of_one_record_apply_in_op_index_order():
    messages = [
        mutation(1, "UPDATE", [put("a", 1, 1)], op_index=0),
        mutation(1, "INCREMENT", [increment("n", 2)], op_index=1),
        mutation(1, "UPDATE", [delete_all("a")], op_index=2),
    ]
    result = fold(list(reversed(messages)))
    assert result.row == row({"n": (2, 1)}, seq=seq_key(1, 2), source_ts=1)


# --- RECORD_IMAGE --------------------------------------------------------------------------------------------------


def test_full_image_replaces_the_row():
    current = row({"a": (1, 1), "b": (2, 1)}, seq=seq_key(1))
    result = fold([image(2, {"b": (3, 2), "c": (True, None)})], current)
    assert result.row == row({"b": (3, 2), "c": (True, None)}, seq=seq_key(2), source_ts=2)


def test_latest_image_wins():
    messages = [image(3, {"a": (3, 3)}), image(1, {"a": (1, 1)}), image(2, {"b": (2, 2)})]
    assert fold(messages).row == row({"a": (3, 3)}, seq=seq_key(3), source_ts=3)


def test_row_deleted_image_soft_deletes():
    current = row({"a": (1, 1)}, seq=seq_key(1))
    result = fold([image(2, row_deleted=True)], current)
    assert result.row == row({}, seq=seq_key(2), deleted=True, source_ts=2)


def test_image_after_delete_recreates_the_row():
    current = row({}, seq=seq_key(2), deleted=True)
    assert fold([image(3, {"a": (1, 3)})], current).row == row({"a": (1, 3)}, seq=seq_key(3), source_ts=3)


def test_partial_image_merges_its_cells_onto_the_row():
    current = row({"keep": (0, 1), "put": (1, 1), "gone": (2, 1), "v5": (3, 5), "v4": (4, 4)}, seq=seq_key(1))
    columns = {"put": ("new", 2), "gone": (None, None), "v5": (None, 5), "v4": (None, 3)}
    result = fold([image(2, columns, partial=True)], current)
    assert cols(result.row) == {"keep": (0, 1), "put": ("new", 2), "v4": (4, 4)}


def test_partial_image_with_values_recreates_a_deleted_row_with_only_them():
    current = row({}, seq=seq_key(1), deleted=True)
    result = fold([image(2, {"a": (1, 2), "b": (None, None)}, partial=True)], current)
    assert result.row == row({"a": (1, 2)}, seq=seq_key(2), source_ts=2)


def test_partial_image_without_values_leaves_a_deleted_row_deleted():
    current = row({}, seq=seq_key(1), deleted=True)
    result = fold([image(2, {"b": (None, None)}, partial=True)], current)
    assert result.row == row({}, seq=seq_key(2), deleted=True, source_ts=2)


# --- guard, dedup, grouping ----------------------------------------------------------------------------------------


def test_operations_not_newer_than_the_row_are_stale():
    current = row({"n": (10, 5)}, seq=seq_key(5))
    messages = [mutation(4, "INCREMENT", [increment("n", 1)]), mutation(5, "INCREMENT", [increment("n", 1)])]
    result = fold(messages, current)
    assert not result.changed
    assert result.row is current
    assert result.stats.stale == 2
    assert result.stats.applied == 0


def test_redelivered_increment_counts_once_across_batches():
    message = mutation(2, "INCREMENT", [increment("n", 5)])
    first = fold([mutation(1, "PUT", [put("n", 1, 1)]), message, message])
    assert cols(first.row) == {"n": (6, 2)}
    assert first.stats.duplicates == 1
    second = fold([message, mutation(3, "INCREMENT", [increment("n", 1)]), message], first.row)
    assert cols(second.row) == {"n": (7, 3)}
    assert second.stats.stale == 1
    assert second.stats.duplicates == 1


def test_a_deleted_row_is_not_resurrected_by_a_late_older_put():
    deleted = fold([mutation(1, "PUT", [put("a", 1, 1)]), mutation(2, "DELETE")]).row
    late = fold([mutation(1, "PUT", [put("a", 1, 1)])], deleted)
    assert not late.changed
    assert late.row.deleted


def test_replaying_everything_is_a_no_op():
    messages = [mutation(1, "PUT", [put("n", 1, 1)]), mutation(2, "INCREMENT", [increment("n", 1)])]
    once = fold(messages).row
    again = fold(messages, once)
    assert not again.changed
    assert again.row == once


def test_fold_never_modifies_the_input_row():
    current = row({"a": (1, 1)}, seq=seq_key(1))
    snapshot = current.copy()
    fold([mutation(2, "UPDATE", [put("a", 2, 2)]), mutation(3, "DELETE")], current)
    assert current == snapshot


def test_no_operations_leave_the_row_as_is():
    current = row({"a": (1, 1)}, seq=seq_key(1))
    result = fold_row(current, [])
    assert result.row is current
    assert not result.changed


def test_operations_of_two_rows_are_refused():
    other = mutation(2, "UPDATE", [put("a", 1)], pk=(("id", 8),))
    with pytest.raises(InvalidGroupError, match="two rows"):
        fold([mutation(1, "UPDATE", [put("a", 1)]), other])


def test_current_row_of_another_key_is_refused():
    with pytest.raises(InvalidGroupError, match="two rows"):
        fold([mutation(1, "UPDATE", [put("a", 1)])], TargetRow(TABLE, (("id", 8),)))


def test_image_and_mutation_operations_for_one_row_are_refused():
    with pytest.raises(InvalidGroupError, match="both RECORD_IMAGE and MUTATE_LOG"):
        fold([mutation(1, "UPDATE", [put("a", 1)]), image(2, {"a": (1, 2)})])


def test_apply_operation_applies_without_guard():
    current = row({"n": (1, 1)}, seq=seq_key(9))
    after = apply_operation(current, decode_message(mutation(2, "INCREMENT", [increment("n", 1)])))
    assert after == row({"n": (2, 2)}, seq=seq_key(2), source_ts=2)
    assert current == row({"n": (1, 1)}, seq=seq_key(9))


def test_target_row_record_round_trip():
    target = row({"a": (b"\x00", 3), "b": (1.5, None)}, seq=seq_key(3), deleted=False, source_ts=3)
    record = target.to_record()
    assert record["_seq"] == seq_key(3)
    assert record["pk"] == [{"name": "id", "value": 7}]
    assert record["columns"]["a"] == {"value": b"\x00", "version": 3}
    assert TargetRow.from_record(record) == target
    arrow_style = {**record, "pk": [("id", 7)], "columns": list(record["columns"].items())}
    assert TargetRow.from_record(arrow_style) == target
