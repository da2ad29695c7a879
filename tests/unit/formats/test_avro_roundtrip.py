"""Every built message validates against its schema, survives an Avro round trip, and stays readable by older
and newer readers (the FULL_TRANSITIVE promise); the real Confluent serializer accepts the values as built."""

from __future__ import annotations

import copy
import json
from typing import Any

import fastavro
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro.validation import validate
from hypothesis import given, settings

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp, MessageFormat
from cdcbridge.formats.mutate_log import build_mutate_log
from cdcbridge.formats.record_image import build_record_image
from cdcbridge.formats.schemas import parsed_schema, schema_dict, schema_text

from .avro_helpers import as_read, decode, encode
from .strategies import CURRENT_ROWS, change_records

IMAGE = MessageFormat.RECORD_IMAGE
MUTATION = MessageFormat.MUTATE_LOG


@settings(max_examples=150, deadline=None)
@given(change_records(), CURRENT_ROWS)
def test_record_images_validate_and_round_trip(record: ChangeRecord, current_row: Any) -> None:
    schema = parsed_schema(IMAGE)
    for item in build_record_image(record, instance="inst", current_row=current_row):
        if item.value is None:
            continue
        assert validate(item.value, schema, raise_errors=True)
        assert decode(encode(schema, item.value), schema) == as_read(item.value)


@settings(max_examples=150, deadline=None)
@given(change_records())
def test_mutation_logs_validate_and_round_trip(record: ChangeRecord) -> None:
    schema = parsed_schema(MUTATION)
    for item in build_mutate_log(record, instance="inst"):
        assert validate(item.value, schema, raise_errors=True)
        assert decode(encode(schema, item.value), schema) == as_read(item.value)


@settings(max_examples=60, deadline=None)
@given(change_records(actions=[RecordAction.UPDATE]))
def test_booleans_stay_booleans_and_ints_stay_longs_after_a_round_trip(record: ChangeRecord) -> None:
    schema = parsed_schema(MUTATION)
    for item in build_mutate_log(record, instance="inst"):
        assert item.value is not None
        read = decode(encode(schema, item.value), schema)
        for built, got in zip(item.value["cells"], read["cells"], strict=True):
            if built["value"] is not None:
                assert type(got["value"]) is type(built["value"][1])


def _without_field(schema: dict[str, Any], path: list[str]) -> dict[str, Any]:
    """A copy of `schema` as an older release would have had it: the field at `path` not yet added."""
    older = copy.deepcopy(schema)
    fields = older["fields"]
    for name in path[:-1]:
        fields = next(f for f in fields if f["name"] == name)["type"]["fields"]
    fields[:] = [f for f in fields if f["name"] != path[-1]]
    return older


def _without_symbol(schema: dict[str, Any], enum_name: str, symbol: str) -> dict[str, Any]:
    older = copy.deepcopy(schema)

    def strip(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "enum" and node.get("name") == enum_name:
                node["symbols"] = [s for s in node["symbols"] if s != symbol]
            for child in node.values():
                strip(child)
        elif isinstance(node, list):
            for child in node:
                strip(child)

    strip(older)
    return older


def _scripted_update() -> ChangeRecord:
    cells = [Cell("a", CellOp.PUT, True, 5), Cell("n", CellOp.INCREMENT, 2, 6), Cell("z", CellOp.DELETE_ALL_VERSION)]
    return ChangeRecord("t", RecordAction.UPDATE, [("id", 1)], cells, Sequence(1, 1_700_000_000_000_000, 3), "s-1")


def test_an_older_image_reader_without_partial_reads_new_images() -> None:
    writer = parsed_schema(IMAGE)
    older = fastavro.parse_schema(_without_field(schema_dict(IMAGE), ["partial"]))
    (item,) = build_record_image(_scripted_update(), instance="inst", current_row=None)
    assert item.value is not None and item.value["partial"] is True
    expected = as_read(item.value)
    del expected["partial"]
    assert decode(encode(writer, item.value), writer, older) == expected


def test_a_newer_image_reader_defaults_partial_and_bridge_version_for_old_messages() -> None:
    old_schema = _without_field(_without_field(schema_dict(IMAGE), ["partial"]), ["source", "bridge_version"])
    old_writer = fastavro.parse_schema(old_schema)
    (item,) = build_record_image(_scripted_update(), instance="inst", current_row={"a": (1, 2)})
    assert item.value is not None
    old_value = copy.deepcopy(item.value)
    del old_value["partial"]
    del old_value["source"]["bridge_version"]
    read = decode(encode(old_writer, old_value), old_writer, parsed_schema(IMAGE))
    assert read["partial"] is False
    assert read["source"]["bridge_version"] == ""


def test_an_older_mutation_reader_maps_unknown_symbols_to_unknown() -> None:
    writer = parsed_schema(MUTATION)
    older_dict = _without_symbol(
        _without_symbol(schema_dict(MUTATION), "MutationType", "INCREMENT"), "CellOp", "INCREMENT"
    )
    older = fastavro.parse_schema(older_dict)
    items = build_mutate_log(_scripted_update(), instance="inst")
    increment = next(i.value for i in items if i.value is not None and i.value["type"] == "INCREMENT")
    read = decode(encode(writer, increment), writer, older)
    assert read["type"] == "UNKNOWN"
    assert read["cells"] == [{"name": "n", "op": "UNKNOWN", "value": None, "version": 6, "amount": 2}]


def test_an_older_mutation_reader_without_amount_reads_new_cells() -> None:
    writer = parsed_schema(MUTATION)
    older_dict = copy.deepcopy(schema_dict(MUTATION))
    cells_field = next(f for f in older_dict["fields"] if f["name"] == "cells")
    cell_fields = cells_field["type"]["items"]["fields"]
    cell_fields[:] = [f for f in cell_fields if f["name"] != "amount"]
    older = fastavro.parse_schema(older_dict)
    for item in build_mutate_log(_scripted_update(), instance="inst"):
        assert item.value is not None
        read = decode(encode(writer, item.value), writer, older)
        assert all("amount" not in c for c in read["cells"])
        assert [c["name"] for c in read["cells"]] == [c["name"] for c in item.value["cells"]]


def test_confluent_avro_serializer_round_trips_built_values() -> None:
    registry = SchemaRegistryClient.new_client({"url": "mock://formats-test"})  # in-process mock
    for message_format, items, topic in [
        (IMAGE, build_record_image(_scripted_update(), instance="inst", current_row=None), "cdc.t.image"),
        (MUTATION, build_mutate_log(_scripted_update(), instance="inst"), "cdc.t.mutation"),
    ]:
        serializer = AvroSerializer(registry, schema_text(message_format))
        deserializer = AvroDeserializer(registry)
        context = SerializationContext(topic, MessageField.VALUE)
        for item in items:
            framed = serializer(item.value, context)
            assert framed is not None and framed[0] == 0  # Confluent wire format: magic byte, then schema id
            assert deserializer(framed, context) == as_read(item.value)
        registered = registry.get_latest_version(f"{topic}-value").schema.schema_str
        assert json.loads(registered) == schema_dict(message_format)
