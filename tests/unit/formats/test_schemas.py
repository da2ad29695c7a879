"""The .avsc files: found from the source tree or an install location, and shaped as DESIGN §6 fixes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from cdcbridge.contract import MessageFormat
from cdcbridge.formats.errors import SchemaNotFoundError
from cdcbridge.formats.schemas import (
    INSTALLED_SCHEMAS_SUBDIR,
    SCHEMA_FILE_NAMES,
    candidate_dirs,
    find_schemas_dir,
    schema_dict,
    schema_text,
)

REPO_SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"

COMMON_FIELDS = ["source", "seq", "timestamp", "pk", "row_deleted"]
# Fields that identify a message; everything else must carry a default so it could be added or dropped.
IDENTITY_FIELDS = {
    "source",
    "seq",
    "timestamp",
    "pk",
    "instance",
    "table",
    "epoch",
    "timestamp_us",
    "row_index",
    "seq_key",
    "name",
    "value",
}


def _fields(schema: dict[str, Any]) -> dict[str, Any]:
    return {f["name"]: f for f in schema["fields"]}


def _walk_fields(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        if node.get("type") == "record":
            found.extend(node["fields"])
        for child in node.values():
            found.extend(_walk_fields(child))
    elif isinstance(node, list):
        for child in node:
            found.extend(_walk_fields(child))
    return found


def _walk_enums(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        if node.get("type") == "enum":
            found.append(node)
        for child in node.values():
            found.extend(_walk_enums(child))
    elif isinstance(node, list):
        for child in node:
            found.extend(_walk_enums(child))
    return found


def test_source_checkout_schemas_are_found() -> None:
    assert find_schemas_dir() == REPO_SCHEMAS
    assert REPO_SCHEMAS in candidate_dirs()


def test_install_locations_are_searched_after_the_source_tree() -> None:
    candidates = candidate_dirs()
    installed = [c for c in candidates if c.parts[-3:] == INSTALLED_SCHEMAS_SUBDIR.parts]
    assert installed
    assert candidates.index(REPO_SCHEMAS) < candidates.index(installed[0])


def test_first_directory_holding_every_schema_wins(tmp_path: Path) -> None:
    incomplete, complete = tmp_path / "incomplete", tmp_path / "complete"
    incomplete.mkdir()
    complete.mkdir()
    (incomplete / "record_image.avsc").write_text("{}")
    for name in SCHEMA_FILE_NAMES.values():
        (complete / name).write_text("{}")
    assert find_schemas_dir([tmp_path / "missing", incomplete, complete]) == complete


def test_missing_schemas_name_the_places_searched(tmp_path: Path) -> None:
    with pytest.raises(SchemaNotFoundError, match="reinstall cdcbridge") as excinfo:
        find_schemas_dir([tmp_path / "a", tmp_path / "b"])
    assert str(tmp_path / "a") in str(excinfo.value)


@pytest.mark.parametrize("message_format", list(MessageFormat))
def test_schema_text_is_the_file_verbatim(message_format: MessageFormat) -> None:
    assert schema_text(message_format) == (REPO_SCHEMAS / SCHEMA_FILE_NAMES[message_format]).read_text()
    assert schema_dict(message_format) == json.loads(schema_text(message_format))
    fastavro.parse_schema(schema_dict(message_format))


def test_record_image_fields_follow_the_contract() -> None:
    schema = schema_dict(MessageFormat.RECORD_IMAGE)
    assert schema["name"] == "RecordImage" and schema["namespace"] == "io.cdcbridge.v1"
    assert list(_fields(schema)) == [*COMMON_FIELDS, "columns", "partial"]
    image_cell = _fields(schema)["columns"]["type"]["values"]
    assert [f["name"] for f in image_cell["fields"]] == ["value", "version"]
    assert _fields(image_cell)["value"]["type"] == ["null", "boolean", "long", "double", "string", "bytes"]


def test_mutate_log_fields_follow_the_contract() -> None:
    schema = schema_dict(MessageFormat.MUTATE_LOG)
    assert schema["name"] == "MutateLog" and schema["namespace"] == "io.cdcbridge.v1"
    assert list(_fields(schema)) == [*COMMON_FIELDS, "type", "replace_row", "cells"]
    assert _fields(schema)["type"]["type"]["symbols"] == ["PUT", "UPDATE", "DELETE", "INCREMENT", "UNKNOWN"]
    cell = _fields(schema)["cells"]["type"]["items"]
    assert [f["name"] for f in cell["fields"]] == ["name", "op", "value", "version", "amount"]
    assert _fields(cell)["op"]["type"]["symbols"] == [
        "PUT",
        "DELETE_ONE_VERSION",
        "DELETE_ALL_VERSION",
        "INCREMENT",
        "UNKNOWN",
    ]


def _without_docs(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _without_docs(value) for key, value in node.items() if key != "doc"}
    if isinstance(node, list):
        return [_without_docs(item) for item in node]
    return node


def test_common_parts_are_identical_in_both_schemas() -> None:
    image, mutation = _fields(schema_dict(MessageFormat.RECORD_IMAGE)), _fields(schema_dict(MessageFormat.MUTATE_LOG))
    for name in COMMON_FIELDS:
        assert _without_docs(image[name]) == _without_docs(mutation[name])
    source = _fields(image["source"]["type"])
    assert list(source) == ["instance", "table", "shard_id", "record_type", "bridge_version"]
    seq = _fields(image["seq"]["type"])
    assert list(seq) == ["epoch", "timestamp_us", "row_index", "op_index", "seq_key"]
    assert image["timestamp"]["type"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert _fields(image["pk"]["type"]["items"])["value"]["type"] == ["long", "string", "bytes"]


@pytest.mark.parametrize("message_format", list(MessageFormat))
def test_every_enum_has_a_default_symbol(message_format: MessageFormat) -> None:
    enums = _walk_enums(schema_dict(message_format))
    assert enums
    for enum in enums:
        assert enum.get("default") == "UNKNOWN" and "UNKNOWN" in enum["symbols"], enum["name"]


@pytest.mark.parametrize("message_format", list(MessageFormat))
def test_every_non_identity_field_has_a_default(message_format: MessageFormat) -> None:
    for field in _walk_fields(schema_dict(message_format)):
        if field["name"] not in IDENTITY_FIELDS:
            assert "default" in field, field["name"]
        if isinstance(field["type"], list) and field["type"][0] == "null":
            assert field.get("default", "missing") is None, field["name"]
