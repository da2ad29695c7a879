"""The RECORD_IMAGE checks of the chaos suite on hand-made source changes and image-topic messages (no servers)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.formats.keys import encode_key
from cdcbridge.harness.chaos.checks import (
    TOMBSTONE_SUFFIX,
    ImageMessage,
    SourceChange,
    check_image_delivery,
    check_image_order,
    check_image_state,
    image_expectation,
    last_images,
)

KEY_A, KEY_B = encode_key(["eu", 1]), encode_key(["us", 2])
ROW_A, ROW_B = ("eu", 1), ("us", 2)


def change(key: bytes, ts: int, *, deleted: bool = False, ops: int = 1, trimmed: bool = False) -> SourceChange:
    sequence = Sequence(1, ts, 0)
    seq_keys = tuple(sequence.key(i) for i in range(ops))
    return SourceChange(key, "shard-1", sequence.to_text(), seq_keys, trimmed, deleted)


def seq(ts: int) -> str:
    return Sequence(1, ts, 0).key(0)


class Topic:
    """An image-topic partition being written: offsets are given in order of `add`."""

    def __init__(self) -> None:
        self.messages: list[ImageMessage] = []

    def image(self, key: bytes, ts: int, columns: dict[str, Any] | None = None, *, partial: bool = False,
              partition: int = 0) -> Topic:  # fmt: skip
        self.add(ImageMessage(partition, len(self.messages), key, seq(ts), partial=partial, columns=columns or {}))
        return self

    def delete(self, key: bytes, ts: int, *, tombstone: bool = True, partition: int = 0) -> Topic:
        self.add(ImageMessage(partition, len(self.messages), key, seq(ts), row_deleted=True))
        if tombstone:
            self.add(ImageMessage(partition, len(self.messages), key, seq(ts), tombstone=True))
        return self

    def add(self, message: ImageMessage) -> None:
        self.messages.append(message)


# -- what a source change must become ----------------------------------------------------------------------------


def test_an_image_is_expected_at_op_index_0_and_a_delete_also_gets_its_tombstone() -> None:
    update = ChangeRecord(
        "t", RecordAction.UPDATE, [("region", "eu"), ("id", 1)],
        [Cell("note", CellOp.PUT, "x", 5), Cell("visits", CellOp.INCREMENT, 2, 5)], Sequence(3, 1000, 2), "s",
    )  # fmt: skip
    delete = ChangeRecord("t", RecordAction.DELETE, [("region", "eu"), ("id", 1)], [], Sequence(3, 1001, 0), "s")
    update_change, delete_change = SourceChange.from_record(update), SourceChange.from_record(delete)
    assert not update_change.row_deleted and delete_change.row_deleted
    assert len(update_change.seq_keys) == 2  # two MUTATE_LOG messages ...
    assert image_expectation(update_change).seq_keys == (Sequence(3, 1000, 2).key(0),)  # ... but one image
    image = Sequence(3, 1001, 0).key(0)
    assert image_expectation(delete_change).seq_keys == (image, image + TOMBSTONE_SUFFIX)
    assert image_expectation(delete_change, tombstones=False).seq_keys == (image,)


def test_a_tombstone_sorts_right_after_its_delete_image_and_before_any_later_record() -> None:
    image, tombstone = ImageMessage(0, 0, KEY_A, seq(5)), ImageMessage(0, 1, KEY_A, seq(5), tombstone=True)
    assert seq(4) < image.position < tombstone.position < Sequence(1, 5, 1).key(0) < seq(6)
    assert tombstone.removes_row and not image.removes_row


# -- no lost image ----------------------------------------------------------------------------------------------


def test_every_change_with_its_image_and_tombstone_passes_redeliveries_included() -> None:
    changes = [change(KEY_A, 1), change(KEY_B, 2, ops=2), change(KEY_A, 3, deleted=True)]
    topic = Topic().image(KEY_A, 1).image(KEY_B, 2).delete(KEY_A, 3).image(KEY_B, 2).delete(KEY_A, 3)
    result = check_image_delivery(changes, topic.messages)
    assert (result.records, result.expected_messages) == (3, 4)
    assert (result.lost, result.lost_by_trim, result.unexplained_messages) == (0, 0, 0)


def test_a_missing_image_or_a_missing_tombstone_loses_the_change_and_a_trimmed_one_is_lost_by_trim() -> None:
    kept, deleted, trimmed = change(KEY_A, 1), change(KEY_B, 2, deleted=True), change(KEY_A, 0, trimmed=True)
    topic = Topic().image(KEY_A, 1).delete(KEY_B, 2, tombstone=False)
    result = check_image_delivery([kept, deleted, trimmed], topic.messages)
    assert [c.sequence for c in result.missing] == [deleted.sequence]
    assert [c.sequence for c in result.missing_trimmed] == [trimmed.sequence]
    assert check_image_delivery([kept, deleted], topic.messages, tombstones=False).lost == 0


def test_an_image_under_another_key_or_a_tombstone_without_its_header_is_unexplained() -> None:
    deleted = change(KEY_A, 1, deleted=True)
    stray = [
        ImageMessage(0, 0, KEY_B, seq(1), row_deleted=True),
        ImageMessage(0, 1, KEY_A, "", tombstone=True),  # no cdcbridge-seq-key header
    ]
    result = check_image_delivery([deleted], stray)
    assert result.lost == 1 and result.unexplained_messages == 2


# -- per-key order ----------------------------------------------------------------------------------------------


def test_a_redelivered_run_is_duplicates_not_violations_also_when_it_resumes_at_a_tombstone() -> None:
    topic = Topic().image(KEY_A, 1).image(KEY_A, 2).delete(KEY_A, 3).image(KEY_B, 1)
    topic.image(KEY_A, 2).delete(KEY_A, 3)  # the successor resumed at an older checkpoint
    topic.add(ImageMessage(0, len(topic.messages), KEY_A, seq(3), tombstone=True))  # resumed at sub-sequence 1
    topic.image(KEY_A, 4)
    result = check_image_order(topic.messages)
    assert result.violations == [] and result.split_keys == []
    assert (result.keys, result.messages, result.duplicates) == (2, 10, 4)


def test_an_image_first_seen_after_a_newer_one_is_a_violation() -> None:
    topic = Topic().image(KEY_A, 1).image(KEY_A, 3).image(KEY_A, 2)
    result = check_image_order(topic.messages)
    assert [(v.offset, v.seq_key, v.after_seq_key) for v in result.violations] == [(2, seq(2), seq(3))]


def test_a_tombstone_first_seen_before_its_own_image_is_a_violation() -> None:
    tombstone_first = [ImageMessage(0, 0, KEY_A, seq(1), tombstone=True), ImageMessage(0, 1, KEY_A, seq(1))]
    assert len(check_image_order(tombstone_first).violations) == 1


def test_a_key_in_two_image_partitions_is_reported() -> None:
    topic = Topic().image(KEY_A, 1).image(KEY_A, 2, partition=1)
    assert check_image_order(topic.messages).split_keys == [KEY_A]


# -- final state ------------------------------------------------------------------------------------------------


def test_only_the_last_image_must_equal_the_source_an_earlier_one_may_show_a_later_state() -> None:
    final = {"owner": "bob", "balance": 12}
    # Update-lookup: the image of the change at ts 2 was read back after the change at ts 3.
    topic = Topic().image(KEY_A, 1, {"owner": "ann", "balance": 5}).image(KEY_A, 2, final).image(KEY_A, 3, final)
    result = check_image_state(topic.messages, {ROW_A: final}, ("balance",))
    assert result.mismatches == [] and result.counter_mismatches == []
    assert (result.keys, result.rows_source, result.rows_image) == (1, 1, 1)


def test_the_last_image_is_the_highest_seq_not_the_highest_offset() -> None:
    topic = Topic().image(KEY_A, 1, {"balance": 1}).image(KEY_A, 2, {"balance": 2}).image(KEY_A, 1, {"balance": 9})
    assert last_images(topic.messages)[KEY_A].columns == {"balance": 2}
    assert check_image_state(topic.messages, {ROW_A: {"balance": 2}}).mismatches == []


def test_a_tombstone_or_a_row_deleted_image_last_means_the_row_is_gone() -> None:
    topic = Topic().image(KEY_A, 1, {"balance": 1}).delete(KEY_A, 2).image(KEY_B, 1, {"balance": 3})
    topic.delete(KEY_B, 2, tombstone=False)
    assert check_image_state(topic.messages, {}).mismatches == []
    result = check_image_state(topic.messages, {ROW_A: {"balance": 1}})
    assert len(result.mismatches) == 1 and result.mismatches[0].startswith(str(ROW_A))


def test_a_counter_that_differs_is_a_mismatch_and_a_counter_mismatch() -> None:
    topic = Topic().image(KEY_A, 1, {"owner": "x", "balance": 7})
    result = check_image_state(topic.messages, {ROW_A: {"owner": "x", "balance": 8}}, ("balance", "visits"))
    assert len(result.mismatches) == 1 and len(result.counter_mismatches) == 1
    assert "'balance': 7" in result.counter_mismatches[0]


def test_a_source_row_without_any_image_and_an_image_row_not_in_the_source_are_mismatches() -> None:
    topic = Topic().image(KEY_B, 1, {"owner": "y"})
    result = check_image_state(topic.messages, {ROW_A: {"owner": "x"}})
    assert len(result.mismatches) == 2
    assert any("no image" in line for line in result.mismatches)


def test_a_partial_image_followed_by_a_delete_is_fine_and_a_partial_last_image_is_not() -> None:
    followed = Topic().image(KEY_A, 1, {"note": "a"}).image(KEY_A, 2, {"note": "b"}, partial=True).delete(KEY_A, 3)
    result = check_image_state(followed.messages, {})
    assert (result.mismatches, result.partial_without_delete, result.partial_images) == ([], [], 1)

    last = Topic().image(KEY_A, 1, {"note": "a"}).image(KEY_A, 2, {"note": "b"}, partial=True)
    result = check_image_state(last.messages, {ROW_A: {"note": "b"}})
    assert len(result.mismatches) == 1 and "partial image" in result.mismatches[0]
    assert result.partial_without_delete == [f"{KEY_A.decode()} {seq(2)}"]


def test_a_partial_image_followed_only_by_a_put_is_reported_even_when_the_last_image_matches() -> None:
    topic = Topic().image(KEY_A, 1, {"note": "b"}, partial=True).image(KEY_A, 2, {"note": "c"})
    result = check_image_state(topic.messages, {ROW_A: {"note": "c"}})
    assert result.mismatches == [] and len(result.partial_without_delete) == 1


# -- the three checks together on simulated histories -----------------------------------------------------------

OPERATIONS = st.sampled_from(["put", "update", "increment", "delete"])


def _history(operations: list[str], lookups: list[int]) -> tuple[list[dict[str, Any] | None], list[dict]]:
    """States after each operation of one row, and each operation's image (update-lookup at a later state)."""
    state: dict[str, Any] | None = None
    states: list[dict[str, Any] | None] = []
    for index, operation in enumerate(operations):
        if operation == "put":
            state = {"owner": f"o{index}", "balance": index, "visits": 0}
        elif operation == "update":
            state = {**(state or {}), "note": f"n{index}"}
        elif operation == "increment":
            state = {**(state or {}), "balance": (state or {}).get("balance", 0) + 3}
        else:
            state = None
        states.append(None if state is None else dict(state))
    images = []
    for index, operation in enumerate(operations):
        if operation == "delete":
            images.append({"delete": True})
        elif operation == "put":
            images.append({"columns": states[index]})
        else:
            seen = states[max(index, min(lookups[index], len(operations) - 1))]
            if seen is None:  # gone at lookup: the record's own cells (increments left out)
                own = {"note": f"n{index}"} if operation == "update" else {}
                images.append({"columns": own, "partial": True})
            else:
                images.append({"columns": seen})
    return states, images


@settings(max_examples=150, deadline=None)
@given(data=st.data(), rows=st.integers(min_value=1, max_value=4))
def test_at_least_once_in_order_delivery_with_update_lookup_passes_every_image_check(
    data: st.DataObject, rows: int
) -> None:
    """However the rows' histories, lookups, redelivered runs and interleavings are drawn, the three checks pass."""
    changes: list[SourceChange] = []
    source: dict[tuple, dict[str, Any]] = {}
    queues: list[list[tuple[bytes, int, dict]]] = []
    for row in range(rows):
        key = encode_key(["k", row])
        operations = data.draw(st.lists(OPERATIONS, min_size=1, max_size=6))
        lookups = data.draw(st.lists(st.integers(0, 6), min_size=len(operations), max_size=len(operations)))
        states, images = _history(operations, lookups)
        changes += [change(key, ts, deleted=op == "delete") for ts, op in enumerate(operations, start=1)]
        if states[-1] is not None:
            source[("k", row)] = states[-1]
        produced = [(key, ts, image) for ts, image in enumerate(images, start=1)]
        restart = data.draw(st.integers(0, len(produced)))
        queues.append(produced + produced[restart:])  # a successor re-sends from an older checkpoint
    topic = Topic()
    while any(queues):
        key, ts, image = data.draw(st.sampled_from([q for q in queues if q])).pop(0)
        if image.get("delete"):
            topic.delete(key, ts)
        else:
            topic.image(key, ts, image["columns"], partial=image.get("partial", False))

    assert check_image_delivery(changes, topic.messages).lost == 0
    assert check_image_order(topic.messages).violations == []
    state = check_image_state(topic.messages, source, ("balance", "visits"))
    assert (state.mismatches, state.counter_mismatches, state.partial_without_delete) == ([], [], [])
