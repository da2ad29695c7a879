"""Decoding envelopes: what is accepted, and bad input refused with errors that name the field and the message."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cdcbridge.apply.core import CellChange, ImageCell, IncrementError, InvalidMessageError, decode_message
from cdcbridge.contract import SEQ_KEY_LENGTH, CellOp, MessageFormat, MutationType
from tests.unit.apply.envelopes import delete_one, image, increment, mutation, put, seq_key


def test_mutation_decodes_to_an_operation():
    operation = decode_message(mutation(3, "UPDATE", [put("a", 1, 2), delete_one("b", 1)], offset=12))
    assert operation.message_format is MessageFormat.MUTATE_LOG
    assert operation.mutation_type is MutationType.UPDATE
    assert operation.table == "orders"
    assert operation.pk == (("id", 7),)
    assert operation.seq_key == seq_key(3)
    assert len(operation.seq_key) == SEQ_KEY_LENGTH == 46
    assert operation.timestamp_ms == 3
    assert operation.cells == (
        CellChange("a", CellOp.PUT, 1, 2),
        CellChange("b", CellOp.DELETE_ONE_VERSION, None, 1),
    )
    assert (operation.location.topic, operation.location.partition, operation.location.offset) == ("cdc.orders", 0, 12)


def test_image_decodes_to_an_operation():
    operation = decode_message(image(3, {"a": (1.5, 2), "b": (None, None)}, partial=True))
    assert operation.message_format is MessageFormat.RECORD_IMAGE
    assert operation.partial
    assert operation.columns == {"a": ImageCell(1.5, 2), "b": ImageCell(None, None)}


def test_format_is_inferred_or_taken_from_the_format_key():
    assert decode_message(image(1, {})).message_format is MessageFormat.RECORD_IMAGE
    assert decode_message(mutation(1, "DELETE")).message_format is MessageFormat.MUTATE_LOG
    assert decode_message({**image(1, {}), "_format": "RECORD_IMAGE"}).message_format is MessageFormat.RECORD_IMAGE
    with pytest.raises(InvalidMessageError, match="unknown message format 'AVRO'"):
        decode_message({**image(1, {}), "_format": "AVRO"})


def test_fastavro_tuple_notation_and_arrow_map_pairs_are_accepted():
    message = image(2, {})
    message["pk"] = [{"name": "id", "value": ("long", 7)}]
    message["columns"] = [("a", {"value": ("boolean", True), "version": 2})]
    operation = decode_message(message)
    assert operation.pk == (("id", 7),)
    assert operation.columns == {"a": ImageCell(True, 2)}


def test_timestamp_millis_datetimes_become_ms():
    message = mutation(1, "DELETE")
    message["timestamp"] = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    expected = 1767323045678
    assert decode_message(message).timestamp_ms == expected
    message["timestamp"] = datetime(2026, 1, 2, 3, 4, 5, 678000)  # naive: UTC
    assert decode_message(message).timestamp_ms == expected


def _without(message: dict, *path: str) -> dict:
    copy = {**message, **({path[0]: dict(message[path[0]])} if len(path) > 1 else {})}
    holder = copy
    for key in path[:-1]:
        holder = holder[key]
    del holder[path[-1]]
    return copy


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (("source", "table"), "'source.table' is missing"),
        (("seq", "seq_key"), "seq.seq_key None is not a 46-digit"),
        (("seq",), "'seq' is missing"),
        (("timestamp",), "'timestamp' is missing"),
        (("pk",), "'pk' is missing"),
        (("type",), "'type' is missing"),
    ],
)
def test_missing_required_fields_are_named_with_the_message_location(path, text):
    message = _without(mutation(1, "UPDATE", [put("a", 1)], offset=31), *path)
    with pytest.raises(InvalidMessageError) as caught:
        decode_message(message)
    assert text in str(caught.value)
    assert "topic 'cdc.orders' partition 0 offset 31" in str(caught.value)
    assert "on_bad_input='dead_letter'" in str(caught.value)
    assert caught.value.location.offset == 31


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"type": "UNKNOWN"}, "unknown mutation type 'UNKNOWN'"),
        ({"cells": [{"name": "a", "op": "TRUNCATE"}]}, "unknown op 'TRUNCATE'"),
        ({"cells": [{"name": "a", "op": "PUT", "value": None}]}, "PUT without a value"),
        ({"cells": [{"name": "a", "op": "DELETE_ONE_VERSION"}]}, "without the version"),
        ({"cells": [{"name": "a", "op": "INCREMENT"}]}, "neither amount nor resulting value"),
        ({"cells": [{"name": "a", "op": "PUT", "value": 1, "amount": 2}]}, "only INCREMENT carries one"),
        ({"cells": [{"name": "", "op": "PUT", "value": 1}]}, "has no column name"),
        ({"cells": [{"name": "a", "op": "PUT", "value": [1]}]}, "value is list"),
        ({"cells": [{"name": "a", "op": "PUT", "value": 1, "version": "x"}]}, "version is 'x'"),
        ({"row_deleted": True}, "type UPDATE contradicts row_deleted=True"),
        ({"replace_row": True}, "replace_row is set on a UPDATE"),
        ({"row_deleted": "yes"}, "'row_deleted' is 'yes'"),
        ({"pk": [{"name": "id", "value": True}]}, "pk column 'id' holds bool"),
        ({"pk": [{"name": "id", "value": 1}, {"name": "id", "value": 2}]}, "pk names a column twice"),
        ({"timestamp": "yesterday"}, "'timestamp' is str"),
        ({"seq": {**mutation(1, "PUT")["seq"], "seq_key": "12"}}, "not a 46-digit"),
        ({"seq": {**mutation(1, "PUT")["seq"], "op_index": 3}}, "does not match seq numbers"),
        ({"seq": {**mutation(1, "PUT")["seq"], "epoch": -1}}, "seq.epoch is -1"),
    ],
)
def test_malformed_mutations_are_refused(change, text):
    message = {**mutation(1, "UPDATE", [put("a", 1)], offset=4), **change}
    with pytest.raises(InvalidMessageError, match="offset 4") as caught:
        decode_message(message)
    assert text in str(caught.value)


def test_delete_with_cells_is_refused():
    message = {**mutation(1, "DELETE"), "cells": [put("a", 1)]}
    with pytest.raises(InvalidMessageError, match="must not carry cells"):
        decode_message(message)


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"columns": {"a": {"value": None, "version": 1}}}, "null in a full image"),
        ({"row_deleted": True}, "must carry the pk only"),
        ({"columns": "a=1"}, "'columns' is not a map"),
        ({"columns": {"a": 1}}, "is not a record"),
    ],
)
def test_malformed_images_are_refused(change, text):
    message = {**image(1, {"a": (1, 1)}), **change}
    with pytest.raises(InvalidMessageError, match=text):
        decode_message(message)


@pytest.mark.parametrize(
    "cell", [increment("n", "3"), increment("n", 1.5), increment("n", True), increment("n", value="9")]
)
def test_non_integer_increments_are_increment_errors(cell):
    with pytest.raises(IncrementError, match="non-integer increment"):
        decode_message(mutation(1, "INCREMENT", [cell], offset=2))


def test_null_and_non_dict_values_are_refused():
    with pytest.raises(InvalidMessageError, match="tombstone_message"):
        decode_message(None)
    with pytest.raises(InvalidMessageError, match="dict of envelope fields"):
        decode_message(["not", "a", "dict"])  # type: ignore[arg-type]


def test_tombstone_on_a_mutation_topic_is_refused():
    message = {**mutation(1, "DELETE"), "_tombstone": True}
    with pytest.raises(InvalidMessageError, match="only meaningful on a RECORD_IMAGE topic"):
        decode_message(message)
