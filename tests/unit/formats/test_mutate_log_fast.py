"""The C MUTATE_LOG encoder writes exactly what build_mutate_log + fastavro + Confluent framing write, or None.

Reference: ``b"\\x00" + schema_id (4 bytes big-endian) + fastavro.schemaless_writer(value)`` for each message of
build_mutate_log, as confluent-kafka's AvroSerializer frames it. The fast path may decline (None) anything, but
must not decline a plain record, and must decline every record the reference refuses.
"""

from __future__ import annotations

import copy
import io
import math
import struct
import sys
from collections.abc import Callable
from enum import IntEnum
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.changes import Cell, CellOp, ChangeRecord, RecordAction, Sequence
from cdcbridge.formats import mutate_log_fast
from cdcbridge.formats.errors import FormatError
from cdcbridge.formats.mutate_log import build_mutate_log
from cdcbridge.formats.mutate_log_fast import (
    ENCODER_SCHEMA_FINGERPRINT,
    FORCE_PURE_PYTHON_ENV,
    encode_mutate_log,
    fast_path_available,
    load_encoder,
    schema_fingerprint,
    schema_matches_encoder,
)
from cdcbridge.formats.schemas import parsed_schema, schema_dict
from cdcbridge.formats.table_format import MessageFormat

SCHEMA = parsed_schema(MessageFormat.MUTATE_LOG)
INSTANCE = "inst-ü"
SCHEMA_ID = 0x01020304
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: What the reference raises for a record it cannot write (ours, fastavro's, and str.encode's).
REFERENCE_ERRORS = (FormatError, ValueError, TypeError, OverflowError)


def reference(record: ChangeRecord, instance: str = INSTANCE, schema_id: int = SCHEMA_ID) -> list[bytes]:
    framing = b"\x00" + schema_id.to_bytes(4, "big")
    values = []
    for item in build_mutate_log(record, instance=instance):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, SCHEMA, item.value)  # as AvroSerializer calls it (strict=False)
        values.append(framing + buffer.getvalue())
    return values


def c_encoder() -> Callable[[ChangeRecord, str, int], list[bytes] | None]:
    """The C encoder, whatever CDCBRIDGE_PURE_PYTHON says in the environment of the test run."""
    encoder, reason = load_encoder(environ={})
    assert encoder is not None, f"the C encoder must be built for these tests (pip install -e .): {reason}"
    return encoder.encode


ENCODE = c_encoder()


class Level(IntEnum):
    HIGH = 3


class Text(str):
    pass


class Ratio(float):
    pass


class Blob(bytes):
    pass


# --- generated records ------------------------------------------------------------------------------------

INT64 = st.one_of(
    st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    st.sampled_from([INT64_MIN, INT64_MIN + 1, -1, 0, 1, 63, 64, 127, 128, INT64_MAX - 1, INT64_MAX]),
)
FLOATS = st.one_of(st.floats(), st.sampled_from([math.nan, -math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324]))
TEXT = st.text(max_size=20)  # hypothesis text has no lone surrogates: all of it is valid UTF-8
NAMES = st.text(min_size=1, max_size=12)
PLAIN_VALUES = st.one_of(st.booleans(), INT64, FLOATS, TEXT, st.binary(max_size=40))
VERSIONS = st.one_of(st.none(), INT64)
#: Values the reference refuses or that are not the plain case (the fast path must return None for them).
ODD_VALUES = st.sampled_from(
    [2**63, INT64_MIN - 1, Level.HIGH, Text("x"), Ratio(0.5), Blob(b"b"), bytearray(b"a"), "\ud800", None, [1]]
)
PLAIN_PK_VALUES = st.one_of(INT64, TEXT, st.binary(max_size=20))
ODD_PK_VALUES = st.sampled_from([1.5, True, 2**63, Level.HIGH, Text("k"), "\udfff", None])
SEQ_NUMBERS = {
    "epoch": st.integers(min_value=0, max_value=10**10 - 1),
    "timestamp_us": st.one_of(st.integers(min_value=0, max_value=INT64_MAX), st.sampled_from([0, INT64_MAX])),
    "row_index": st.integers(min_value=0, max_value=10**10 - 1),
}
ODD_SEQ_NUMBERS = {
    "epoch": st.sampled_from([-1, 10**10, True, 1.0]),
    "timestamp_us": st.sampled_from([-1, 2**63]),
    "row_index": st.sampled_from([-1, 10**10]),
}


_ODD_ONE_IN_30 = [False] * 29 + [True]


@st.composite
def maybe_odd(draw: st.DrawFn, plain: st.SearchStrategy, odd: st.SearchStrategy, flags: list[bool]) -> Any:
    """A plain value, or now and then an odd one (noted in `flags`)."""
    if draw(st.sampled_from(_ODD_ONE_IN_30)):
        flags.append(True)
        return draw(odd)
    return draw(plain)


@st.composite
def generated_cell(draw: st.DrawFn, ops: list[CellOp], flags: list[bool]) -> Cell:
    op = draw(st.sampled_from(ops))
    name = draw(maybe_odd(NAMES, st.just("\ud83d"), flags))
    if op is CellOp.PUT:
        return Cell(name, op, draw(maybe_odd(PLAIN_VALUES, ODD_VALUES, flags)), draw(VERSIONS))
    if op is CellOp.INCREMENT:
        return Cell(name, op, draw(maybe_odd(INT64, st.sampled_from([True, 1.5, 2**63, None]), flags)), draw(VERSIONS))
    if op is CellOp.DELETE_ONE_VERSION:
        return Cell(name, op, None, draw(maybe_odd(INT64, st.none(), flags)))
    return Cell(name, op, None, draw(VERSIONS))


@st.composite
def generated_records(
    draw: st.DrawFn, actions: list[RecordAction] | None = None, cell_count: tuple[int, int] = (0, 8)
) -> tuple[ChangeRecord, str, bool]:
    """(record, instance, plain): plain records must be encoded by the fast path."""
    flags: list[bool] = []
    action = draw(st.sampled_from(actions or list(RecordAction)))
    # Any record may carry any cell op (the builder writes what it is given); deletes ignore their cells.
    cells = draw(st.lists(generated_cell(list(CellOp), flags), min_size=cell_count[0], max_size=cell_count[1]))
    if action is RecordAction.DELETE:
        flags.clear()
    pk_names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    primary_key = [(name, draw(maybe_odd(PLAIN_PK_VALUES, ODD_PK_VALUES, flags))) for name in pk_names]
    numbers = {name: draw(maybe_odd(plain, ODD_SEQ_NUMBERS[name], flags)) for name, plain in SEQ_NUMBERS.items()}
    record = ChangeRecord(
        table=draw(maybe_odd(st.text(min_size=1, max_size=16), st.just("t\udc00"), flags)),
        action=action,
        primary_key=primary_key,
        cells=cells,
        sequence=Sequence(**numbers),
        shard_id=draw(st.text(max_size=10)),
    )
    instance = draw(st.one_of(st.just(INSTANCE), st.text(max_size=10)))
    return record, instance, not flags


@settings(max_examples=300, deadline=None)
@given(generated_records(), st.integers(min_value=0, max_value=2**32 - 1))
def test_fast_path_writes_the_reference_bytes_or_declines(generated: tuple, schema_id: int) -> None:
    record, instance, plain = generated
    try:
        expected = reference(record, instance, schema_id)
    except REFERENCE_ERRORS:
        assert ENCODE(record, instance, schema_id) is None
        return
    encoded = ENCODE(record, instance, schema_id)
    if plain:
        assert encoded is not None
    if encoded is not None:
        assert encoded == expected


@settings(max_examples=100, deadline=None)
@given(generated_records(actions=[RecordAction.UPDATE], cell_count=(2, 12)))
def test_updates_of_many_runs_are_written_as_the_reference_writes_them(generated: tuple) -> None:
    record, instance, plain = generated
    try:
        expected = reference(record, instance)
    except REFERENCE_ERRORS:
        assert ENCODE(record, instance, SCHEMA_ID) is None
        return
    encoded = ENCODE(record, instance, SCHEMA_ID)
    if plain:
        assert encoded is not None
    assert encoded in (None, expected)


# --- scripted records -------------------------------------------------------------------------------------


def scripted(action: RecordAction = RecordAction.PUT, cells: list[Cell] | None = None, **fields: Any) -> ChangeRecord:
    values: dict[str, Any] = {
        "table": "orders",
        "action": action,
        "primary_key": [("user_id", "user-000000042"), ("event_seq", 42)],
        "cells": [Cell("n", CellOp.PUT, 1, None)] if cells is None else cells,
        "sequence": Sequence(epoch=2, timestamp_us=1_700_000_000_123_456, row_index=9),
        "shard_id": "shard-0",
    }
    values.update(fields)
    return ChangeRecord(**values)


def test_c_encoder_is_enabled_for_the_shipped_schema() -> None:
    encoder, reason = load_encoder(environ={})
    assert encoder is not None and reason == ""


def test_a_put_record_is_written_byte_for_byte_as_fastavro_writes_it() -> None:
    record = scripted(
        cells=[
            Cell("count", CellOp.PUT, 300, 1_700_000_000_000),
            Cell("ratio", CellOp.PUT, -0.0, None),
            Cell("flag", CellOp.PUT, False, None),
            Cell("label", CellOp.PUT, "", None),
            Cell("blob", CellOp.PUT, b"", None),
        ]
    )
    encoded = ENCODE(record, INSTANCE, SCHEMA_ID)
    assert encoded == reference(record)
    assert encoded is not None and encoded[0][:5] == b"\x00\x01\x02\x03\x04"


@pytest.mark.parametrize("value", [math.nan, -math.nan, struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\x7f")[0]])
def test_nan_keeps_its_bit_pattern(value: float) -> None:
    record = scripted(cells=[Cell("x", CellOp.PUT, value, None)])
    encoded = ENCODE(record, INSTANCE, SCHEMA_ID)
    assert encoded == reference(record)
    assert encoded is not None and struct.pack("<d", value) in encoded[0]


def test_an_update_splits_into_runs_of_increments_and_other_cells() -> None:
    record = scripted(
        RecordAction.UPDATE,
        [
            Cell("a", CellOp.PUT, "x", 5),
            Cell("b", CellOp.DELETE_ONE_VERSION, None, 4),
            Cell("c", CellOp.INCREMENT, -3, None),
            Cell("d", CellOp.INCREMENT, INT64_MAX, 7),
            Cell("e", CellOp.DELETE_ALL_VERSION, None, None),
        ],
    )
    encoded = ENCODE(record, INSTANCE, SCHEMA_ID)
    assert encoded is not None and len(encoded) == 3
    assert encoded == reference(record)


@pytest.mark.parametrize(
    "record",
    [
        scripted(RecordAction.UPDATE, []),
        scripted(RecordAction.DELETE, [Cell("ignored", CellOp.PUT, None, None), "not a cell"]),  # type: ignore[list-item]
        scripted(RecordAction.PUT, []),
        scripted(table="tábla-表", shard_id="", primary_key=[("ключ", b"\x00\xff")]),
        scripted(sequence=Sequence(epoch=10**10 - 1, timestamp_us=INT64_MAX, row_index=10**10 - 1)),
        scripted(sequence=Sequence(epoch=0, timestamp_us=0, row_index=0)),
    ],
    ids=["empty-update", "delete-ignores-cells", "empty-put", "non-ascii-names", "largest-seq", "zero-seq"],
)
def test_edge_records_are_written_as_the_reference_writes_them(record: ChangeRecord) -> None:
    encoded = ENCODE(record, INSTANCE, SCHEMA_ID)
    assert encoded is not None
    assert encoded == reference(record)


REFUSED_BY_THE_REFERENCE = {
    "int-cell-beyond-int64": scripted(cells=[Cell("n", CellOp.PUT, 2**63, None)]),
    "int-cell-below-int64": scripted(cells=[Cell("n", CellOp.PUT, INT64_MIN - 1, None)]),
    "put-without-value": scripted(cells=[Cell("n", CellOp.PUT, None, None)]),
    "delete-one-version-without-version": scripted(
        RecordAction.UPDATE, [Cell("n", CellOp.DELETE_ONE_VERSION, None, None)]
    ),
    "increment-float-delta": scripted(RecordAction.UPDATE, [Cell("n", CellOp.INCREMENT, 1.5, None)]),
    "increment-bool-delta": scripted(RecordAction.UPDATE, [Cell("n", CellOp.INCREMENT, True, None)]),
    "increment-delta-beyond-int64": scripted(RecordAction.UPDATE, [Cell("n", CellOp.INCREMENT, 2**63, None)]),
    "version-beyond-int64": scripted(cells=[Cell("n", CellOp.PUT, 1, 2**63)]),
    "bool-version": scripted(cells=[Cell("n", CellOp.PUT, 1, True)]),
    "pk-float": scripted(primary_key=[("k", 1.5)]),
    "pk-bool": scripted(primary_key=[("k", True)]),
    "pk-beyond-int64": scripted(primary_key=[("k", 2**63)]),
    "pk-empty": scripted(primary_key=[]),
    "epoch-too-wide": scripted(sequence=Sequence(epoch=10**10, timestamp_us=0, row_index=0)),
    "epoch-negative": scripted(sequence=Sequence(epoch=-1, timestamp_us=0, row_index=0)),
    "timestamp-negative": scripted(sequence=Sequence(epoch=0, timestamp_us=-1, row_index=0)),
    "timestamp-beyond-int64": scripted(sequence=Sequence(epoch=0, timestamp_us=2**63, row_index=0)),
    "row-index-too-wide": scripted(sequence=Sequence(epoch=0, timestamp_us=0, row_index=10**10)),
    "lone-surrogate-value": scripted(cells=[Cell("n", CellOp.PUT, "a\ud800", None)]),
    "lone-surrogate-cell-name": scripted(cells=[Cell("\udc00", CellOp.PUT, 1, None)]),
    "lone-surrogate-table": scripted(table="t\ud800"),
    "lone-surrogate-shard": scripted(shard_id="\ud800"),
    "lone-surrogate-pk": scripted(primary_key=[("k", "\ud800")]),
    "unknown-cell-value-type": scripted(cells=[Cell("n", CellOp.PUT, [1], None)]),
}


@pytest.mark.parametrize("record", REFUSED_BY_THE_REFERENCE.values(), ids=REFUSED_BY_THE_REFERENCE.keys())
def test_records_the_reference_refuses_are_declined(record: ChangeRecord) -> None:
    with pytest.raises(REFERENCE_ERRORS):
        reference(record)
    assert ENCODE(record, INSTANCE, SCHEMA_ID) is None


NOT_PLAIN = {
    "int-subclass-value": scripted(cells=[Cell("n", CellOp.PUT, Level.HIGH, None)]),
    "str-subclass-value": scripted(cells=[Cell("n", CellOp.PUT, Text("x"), None)]),
    "float-subclass-value": scripted(cells=[Cell("n", CellOp.PUT, Ratio(0.5), None)]),
    "bytes-subclass-value": scripted(cells=[Cell("n", CellOp.PUT, Blob(b"x"), None)]),
    "bytearray-value": scripted(cells=[Cell("n", CellOp.PUT, bytearray(b"x"), None)]),
    "int-subclass-increment": scripted(RecordAction.UPDATE, [Cell("n", CellOp.INCREMENT, Level.HIGH, None)]),
    "int-subclass-pk": scripted(primary_key=[("k", Level.HIGH)]),
    "bool-epoch": scripted(sequence=Sequence(epoch=True, timestamp_us=0, row_index=0)),
    "op-as-plain-str": scripted(cells=[Cell("n", "PUT", 1, None)]),  # type: ignore[arg-type]
    "action-as-plain-str": scripted("UPDATE"),  # type: ignore[arg-type]
    "cells-as-tuple": scripted(cells=(Cell("n", CellOp.PUT, 1, None),)),
    "pk-as-tuple": scripted(primary_key=(("k", 1),)),
    "pk-column-as-list": scripted(primary_key=[["k", 1]]),
}


@pytest.mark.parametrize("record", NOT_PLAIN.values(), ids=NOT_PLAIN.keys())
def test_records_that_are_not_the_plain_case_are_declined(record: ChangeRecord) -> None:
    reference(record)  # the Python path writes these; the fast path leaves them to it
    assert ENCODE(record, INSTANCE, SCHEMA_ID) is None


def test_unknown_action_and_op_objects_are_declined() -> None:
    assert ENCODE(scripted(object()), INSTANCE, SCHEMA_ID) is None  # type: ignore[arg-type]
    assert ENCODE(scripted(cells=[Cell("n", object(), 1, None)]), INSTANCE, SCHEMA_ID) is None  # type: ignore[arg-type]
    assert ENCODE(scripted(RecordAction.UPDATE, [object()]), INSTANCE, SCHEMA_ID) is None  # type: ignore[list-item]


@pytest.mark.parametrize("schema_id", [-1, 2**32, True, 1.0])
def test_an_impossible_schema_id_is_declined(schema_id: Any) -> None:
    assert ENCODE(scripted(), INSTANCE, schema_id) is None


@pytest.mark.parametrize("instance", [Text("inst"), b"inst", "\ud800"])
def test_an_instance_that_is_not_a_plain_str_is_declined(instance: Any) -> None:
    assert ENCODE(scripted(), instance, SCHEMA_ID) is None


def test_a_record_whose_slots_are_unset_is_declined() -> None:
    record = ChangeRecord.__new__(ChangeRecord)
    assert ENCODE(record, INSTANCE, SCHEMA_ID) is None


def test_op_index_beyond_the_seq_key_width_is_declined() -> None:
    """An UPDATE with more than 10**6 runs would overflow seq_key's 6 op digits; shown with a smaller limit."""
    encoder, _ = load_encoder(environ={})
    assert encoder is not None
    alternating = [Cell(f"c{i}", CellOp.INCREMENT if i % 2 else CellOp.PUT, i, None) for i in range(4)]
    try:
        encoder.configure(
            ChangeRecord,
            Cell,
            Sequence,
            (RecordAction.PUT, RecordAction.UPDATE, RecordAction.DELETE),
            (CellOp.PUT, CellOp.DELETE_ONE_VERSION, CellOp.DELETE_ALL_VERSION, CellOp.INCREMENT),
            "0.1.0",
            (10**10, 2**63, 10**10, 3),
        )
        assert encoder.encode(scripted(RecordAction.UPDATE, alternating[:3]), INSTANCE, SCHEMA_ID) is not None
        assert encoder.encode(scripted(RecordAction.UPDATE, alternating), INSTANCE, SCHEMA_ID) is None
    finally:
        load_encoder(environ={})  # configures it as shipped again
    assert ENCODE(scripted(RecordAction.UPDATE, alternating), INSTANCE, SCHEMA_ID) == reference(
        scripted(RecordAction.UPDATE, alternating)
    )


def test_encoding_keeps_reference_counts_unchanged() -> None:
    """Every path through the C code releases what it took: refcounts of the parts are the same after 200 runs."""
    value, name, pk_value = "välue-" + "x" * 3, "name-" + "y" * 3, "pk-" + "z" * 3
    records = [
        scripted(RecordAction.UPDATE, [Cell(name, CellOp.PUT, value, 5), Cell(name, CellOp.INCREMENT, 7, None)]),
        scripted(primary_key=[("k", pk_value)], cells=[Cell(name, CellOp.PUT, value, None)]),
        scripted(cells=[Cell(name, CellOp.PUT, value, None), Cell(name, CellOp.PUT, 2**63, None)]),  # declined late
        scripted(RecordAction.UPDATE, [Cell(name, CellOp.DELETE_ONE_VERSION, value, None)]),
        scripted(primary_key=[("k", pk_value), ("b", True)]),
    ]
    watched = [value, name, pk_value, RecordAction.PUT, RecordAction.UPDATE, CellOp.PUT, CellOp.INCREMENT, *records]
    for record in records:
        ENCODE(record, INSTANCE, SCHEMA_ID)  # the first call may cache UTF-8 inside the strs
    before = [sys.getrefcount(obj) for obj in watched]
    for _ in range(200):
        for record in records:
            ENCODE(record, INSTANCE, SCHEMA_ID)
    assert [sys.getrefcount(obj) for obj in watched] == before


# --- the public face and its guards -----------------------------------------------------------------------


def test_encode_mutate_log_uses_the_c_encoder_when_available() -> None:
    record = scripted(cells=[Cell("n", CellOp.PUT, 1.25, 3)])
    if fast_path_available():
        assert mutate_log_fast.IMPLEMENTATION == "c"
        assert encode_mutate_log(record, INSTANCE, SCHEMA_ID) == reference(record)
    else:  # the test run set CDCBRIDGE_PURE_PYTHON
        assert mutate_log_fast.IMPLEMENTATION == "none"
        assert encode_mutate_log(record, INSTANCE, SCHEMA_ID) is None


@pytest.mark.parametrize(("setting", "enabled"), [("1", False), ("yes", False), ("0", True), ("", True)])
def test_pure_python_switch(setting: str, enabled: bool) -> None:
    encoder, reason = load_encoder(environ={FORCE_PURE_PYTHON_ENV: setting})
    assert (encoder is not None) is enabled
    assert (FORCE_PURE_PYTHON_ENV in reason) is not enabled


def test_the_shipped_schema_is_the_one_the_encoder_was_written_for() -> None:
    schema = schema_dict(MessageFormat.MUTATE_LOG)
    assert schema_fingerprint(schema) == ENCODER_SCHEMA_FINGERPRINT
    assert schema_matches_encoder(schema)


def _evolved(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    schema = copy.deepcopy(schema_dict(MessageFormat.MUTATE_LOG))
    change(schema)
    return schema


def _field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(field for field in schema["fields"] if field["name"] == name)


def _cell_field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(field for field in _field(schema, "cells")["type"]["items"]["fields"] if field["name"] == name)


SCHEMA_CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "extra-field": lambda s: s["fields"].append({"name": "extra", "type": "string", "default": ""}),
    "enum-symbol-added": lambda s: _cell_field(s, "op")["type"]["symbols"].insert(0, "NONE"),
    "union-branches-reordered": lambda s: _cell_field(s, "value")["type"].reverse(),
    "field-type-changed": lambda s: _field(s, "timestamp").update(type="long"),
    "fields-reordered": lambda s: s["fields"].reverse(),
}


@pytest.mark.parametrize("change", SCHEMA_CHANGES.values(), ids=SCHEMA_CHANGES.keys())
def test_a_changed_schema_disables_the_fast_path(change: Callable[[dict[str, Any]], None]) -> None:
    schema = _evolved(change)
    assert not schema_matches_encoder(schema)
    encoder, reason = load_encoder(environ={}, schema=schema)
    assert encoder is None
    assert "differs from the schema the C encoder was written for" in reason


def test_docs_and_defaults_do_not_disable_the_fast_path() -> None:
    def reword(schema: dict[str, Any]) -> None:
        schema["doc"] = "reworded"
        _field(schema, "row_deleted")["default"] = True

    encoder, reason = load_encoder(environ={}, schema=_evolved(reword))
    assert encoder is not None and reason == ""
