"""All messages of a record across a table's formats: topics, order and sub-sequence numbering."""

from __future__ import annotations

from hypothesis import given, settings

from cdcbridge.changes import Cell, ChangeRecord, RecordAction
from cdcbridge.contract import CellOp, MessageFormat
from cdcbridge.formats.mutate_log import build_mutate_log
from cdcbridge.formats.record_image import build_record_image
from cdcbridge.formats.table_format import BridgeTableFormat
from cdcbridge.formats.table_messages import TableMessage, build_table_messages, needs_row_lookup

from .expected import INSTANCE, KEY, record
from .strategies import CURRENT_ROWS, change_records

BOTH = BridgeTableFormat(formats=[MessageFormat.MUTATE_LOG, MessageFormat.RECORD_IMAGE])


def test_delete_in_both_formats_numbers_image_tombstone_then_mutation() -> None:
    delete = record(RecordAction.DELETE, [])
    messages = build_table_messages(delete, BOTH, instance=INSTANCE, topic_prefix="cdc")
    image, tombstone = build_record_image(delete, instance=INSTANCE)
    (mutation,) = build_mutate_log(delete, instance=INSTANCE)
    assert messages == [
        TableMessage("cdc.orders.image", MessageFormat.RECORD_IMAGE, KEY, image.value, 0),
        TableMessage("cdc.orders.image", MessageFormat.RECORD_IMAGE, KEY, None, 1),
        TableMessage("cdc.orders.mutation", MessageFormat.MUTATE_LOG, KEY, mutation.value, 2),
    ]
    assert tombstone.value is None


def test_table_settings_reach_the_builders() -> None:
    table_format = BridgeTableFormat(formats=["RECORD_IMAGE"], image_topic="orders-img", tombstones=False)
    messages = build_table_messages(record(RecordAction.DELETE, []), table_format, instance=INSTANCE, topic_prefix="p")
    assert [(m.topic, m.value is None, m.sub_sequence) for m in messages] == [("orders-img", False, 0)]


def test_update_image_uses_the_row_read_back() -> None:
    update = record(RecordAction.UPDATE, [Cell("n", CellOp.INCREMENT, 1)])
    (message,) = build_table_messages(
        update,
        BridgeTableFormat(formats=["RECORD_IMAGE"]),
        instance=INSTANCE,
        topic_prefix="p",
        current_row={"n": (3, 9)},
    )
    assert message.value is not None
    assert message.value["columns"] == {"n": {"value": ("long", 3), "version": 9}}
    assert message.value["partial"] is False


def test_row_lookup_is_needed_only_for_updates_of_imaged_tables() -> None:
    assert needs_row_lookup(record(RecordAction.UPDATE, []), BOTH)
    assert not needs_row_lookup(record(RecordAction.PUT, []), BOTH)
    assert not needs_row_lookup(record(RecordAction.UPDATE, []), BridgeTableFormat(formats=["MUTATE_LOG"]))


@settings(max_examples=100, deadline=None)
@given(change_records(), CURRENT_ROWS)
def test_sub_sequences_count_from_zero_and_do_not_depend_on_the_row_read_back(
    change: ChangeRecord, current_row: dict | None
) -> None:
    with_row = build_table_messages(change, BOTH, instance="i", topic_prefix="p", current_row=current_row)
    without_row = build_table_messages(change, BOTH, instance="i", topic_prefix="p", current_row=None)
    assert [m.sub_sequence for m in with_row] == list(range(len(with_row)))
    assert [(m.topic, m.sub_sequence) for m in with_row] == [(m.topic, m.sub_sequence) for m in without_row]
    assert len(with_row) >= 2
