"""The bridge processor applies a table's column settings before encoding: the C page encoder and the builders get
the same masked records, the row read back for RECORD_IMAGE is masked too, and every message names the redacted
columns in a header. Values are decoded with the real schemas, so masked values also fit them."""

from __future__ import annotations

import io
import struct

import fastavro
import pytest

from cdcbridge.bridge.processor import BridgeContext, BridgeProcessor
from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import REDACTED_COLUMNS_HEADER, TOMBSTONE_SEQ_KEY_HEADER, CellOp, MessageFormat
from cdcbridge.coordination.processor import InitializationInput, ProcessRecordsInput
from cdcbridge.formats.columns import ColumnPolicy, ColumnSettings, hash_value
from cdcbridge.formats.fast_envelopes import FastFormat
from cdcbridge.formats.schemas import parsed_schema
from cdcbridge.formats.table_format import BridgeTableFormat

from ..formats.test_fast_envelopes import c_module
from .test_processor import FakeCheckpointer, FakeSink

ML, RI = MessageFormat.MUTATE_LOG, MessageFormat.RECORD_IMAGE
SCHEMA_IDS = {ML: 7, RI: 8}
KEY = b"unit-test-column-hash-key"
EMAIL, SSN, NOTES = "ann@example.com", "123-45-6789", "private notes"
SECRETS = (EMAIL.encode(), SSN.encode(), NOTES.encode())


@pytest.fixture(autouse=True, scope="module")
def _c_on() -> None:
    c_module()


def serialize(topic: str, value: dict | None) -> bytes | None:
    """The Confluent wire format the registry-bound serializer writes, without a registry."""
    if value is None:
        return None
    fmt = RI if topic.endswith(".image") else ML
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed_schema(fmt), value, strict=True)
    return b"\0" + struct.pack(">I", SCHEMA_IDS[fmt]) + buffer.getvalue()


def decode(topic: str, value: bytes) -> dict:
    fmt = RI if topic.endswith(".image") else ML
    assert value[:5] == b"\0" + struct.pack(">I", SCHEMA_IDS[fmt])
    return fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed_schema(fmt))


def make(fast: bool) -> tuple[BridgeProcessor, FakeSink]:
    sink = FakeSink()
    encoders = {f: FastFormat(f, "inst", SCHEMA_IDS[f]) for f in (RI, ML)} if fast else {}
    settings = ColumnSettings.model_validate({"exclude": ["notes"], "mask": {"email": "hash", "ssn": "redact"}})
    context = BridgeContext(
        table_format=BridgeTableFormat(formats=(RI, ML)), table="users", instance="inst", topic_prefix="cdc",
        serialize=serialize, sink=sink, checkpoint_interval_seconds=3600, fast_encoders=encoders,
        read_rows=lambda table, pks: [
            {"name": ("Ann", 1), "email": (EMAIL, 1), "ssn": (SSN, 1), "notes": (NOTES, 1)} for _ in pks
        ],
        columns=ColumnPolicy("users", settings, KEY),
    )  # fmt: skip
    processor = BridgeProcessor(context)
    processor.initialize(InitializationInput("stream", "shard-0", (), "TRIM_HORIZON", None))
    return processor, sink


def records() -> list[ChangeRecord]:
    def rec(i: int, action: RecordAction, cells: list[Cell]) -> ChangeRecord:
        return ChangeRecord("users", action, [("id", i)], cells, Sequence(1, 1_000_000 + i, 0), "shard-0")

    every = [Cell("name", CellOp.PUT, "Ann", 1), Cell("email", CellOp.PUT, EMAIL, 1), Cell("ssn", CellOp.PUT, SSN, 1),
             Cell("notes", CellOp.PUT, NOTES, 1)]  # fmt: skip
    return [rec(1, RecordAction.PUT, every), rec(2, RecordAction.UPDATE, every[1:]), rec(3, RecordAction.DELETE, [])]


@pytest.mark.parametrize("fast", [True, False], ids=["C encoder", "builders"])
def test_no_excluded_or_plain_masked_value_reaches_a_message_on_either_path(fast: bool) -> None:
    processor, sink = make(fast)
    processor.process_records(ProcessRecordsInput(records(), FakeCheckpointer()))
    produced = [(topic, value) for topic, _, value, _ in sink.produced]
    assert [t for t, _ in produced] == ["cdc.users.image", "cdc.users.mutation"] * 2 + [
        "cdc.users.image", "cdc.users.image", "cdc.users.mutation"]  # fmt: skip
    assert not any(secret in value for _, value in produced if value is not None for secret in SECRETS)
    hashed = hash_value(KEY, EMAIL)
    put_image, put_mutation, update_image, update_mutation = (decode(t, v) for t, v in produced[:4])
    assert put_image["columns"] == {"name": {"value": "Ann", "version": 1}, "email": {"value": hashed, "version": 1}}
    assert [(c["name"], c["op"], c["value"]) for c in put_mutation["cells"]] == [
        ("name", "PUT", "Ann"), ("email", "PUT", hashed)]  # fmt: skip
    assert update_image["columns"] == put_image["columns"]  # the row read back, masked the same way
    assert [(c["name"], c["op"], c["value"]) for c in update_mutation["cells"]] == [
        ("email", "PUT", hashed), ("ssn", "DELETE_ALL_VERSION", None)]  # fmt: skip
    redacted = (REDACTED_COLUMNS_HEADER, b"ssn")
    assert sink.headers[:4] == [[redacted]] * 4
    assert sink.headers[5] == [(TOMBSTONE_SEQ_KEY_HEADER, records()[2].sequence.key(0).encode()), redacted]


def test_a_table_without_column_settings_publishes_every_value_as_it_is_without_a_header() -> None:
    sink = FakeSink()
    context = BridgeContext(
        table_format=BridgeTableFormat(formats=(RI, ML)), table="users", instance="inst", topic_prefix="cdc",
        serialize=serialize, sink=sink, checkpoint_interval_seconds=3600,
        read_rows=lambda table, pks: [None] * len(pks),
        fast_encoders={f: FastFormat(f, "inst", SCHEMA_IDS[f]) for f in (RI, ML)},
    )  # fmt: skip
    processor = BridgeProcessor(context)
    processor.initialize(InitializationInput("stream", "shard-0", (), "TRIM_HORIZON", None))
    processor.process_records(ProcessRecordsInput(records()[:1], FakeCheckpointer()))
    assert EMAIL.encode() in sink.produced[0][2] and sink.headers[:2] == [None, None]
