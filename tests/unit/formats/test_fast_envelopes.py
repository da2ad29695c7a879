"""The C envelope encoders write exactly what the builders + fastavro + Confluent framing write, or None.

Reference: ``b"\\x00" + schema_id (4 bytes big-endian) + fastavro.schemaless_writer(value)`` for each message of
build_mutate_log / build_record_image, as confluent-kafka's AvroSerializer frames it (a RECORD_IMAGE tombstone
stays None). The fast path may decline (None) anything, but must not decline a plain record, and must decline
every record the reference refuses.
"""

from __future__ import annotations

import copy
import io
import math
import struct
import sys
from collections import OrderedDict, namedtuple
from collections.abc import Callable
from enum import IntEnum
from types import MappingProxyType, ModuleType
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp, MessageFormat
from cdcbridge.formats import fast_envelopes
from cdcbridge.formats.errors import FormatError
from cdcbridge.formats.fast_envelopes import (
    ENCODER_SCHEMA_FINGERPRINTS,
    FORCE_PURE_PYTHON_ENV,
    encode_mutate_log,
    encode_record_image,
    fast_path_available,
    load_encoder,
    schema_fingerprint,
    schema_matches_encoder,
)
from cdcbridge.formats.mutate_log import build_mutate_log
from cdcbridge.formats.record_image import build_record_image
from cdcbridge.formats.schemas import parsed_schema, schema_dict

MUTATE_LOG_SCHEMA = parsed_schema(MessageFormat.MUTATE_LOG)
RECORD_IMAGE_SCHEMA = parsed_schema(MessageFormat.RECORD_IMAGE)
INSTANCE = "inst-ü"
SCHEMA_ID = 0x01020304
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: What the reference raises for a record it cannot write (ours, fastavro's, and str.encode's).
REFERENCE_ERRORS = (FormatError, ValueError, TypeError, OverflowError)


def _framed(schema: Any, value: dict[str, Any], schema_id: int) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, value)  # as AvroSerializer calls it (strict=False)
    return b"\x00" + schema_id.to_bytes(4, "big") + buffer.getvalue()


def reference(record: ChangeRecord, instance: str = INSTANCE, schema_id: int = SCHEMA_ID) -> list[bytes]:
    return [_framed(MUTATE_LOG_SCHEMA, item.value, schema_id) for item in build_mutate_log(record, instance=instance)]


def reference_image(
    record: ChangeRecord,
    instance: str = INSTANCE,
    schema_id: int = SCHEMA_ID,
    current_row: Any = None,
    tombstones: bool = True,
) -> list[bytes | None]:
    items = build_record_image(record, instance=instance, current_row=current_row, tombstones=tombstones)
    return [None if item.value is None else _framed(RECORD_IMAGE_SCHEMA, item.value, schema_id) for item in items]


def c_module() -> ModuleType:
    """The C module with both encoders on, whatever CDCBRIDGE_PURE_PYTHON says in the environment of the run."""
    module, reasons = load_encoder(environ={})
    assert module is not None, f"the C module must be built for these tests (pip install -e .): {reasons}"
    assert not any(reasons.values()), reasons
    return module


ENCODE = c_module().encode_mutate_log
ENCODE_IMAGE = c_module().encode_record_image


def image(
    record: ChangeRecord, current_row: Any = None, tombstones: Any = True, instance: Any = INSTANCE
) -> list[bytes | None] | None:
    return ENCODE_IMAGE(record, instance, SCHEMA_ID, current_row, tombstones)


class Level(IntEnum):
    HIGH = 3


class Text(str):
    pass


class Ratio(float):
    pass


class Blob(bytes):
    pass


Column = namedtuple("Column", ["value", "version"])


# --- generated records ------------------------------------------------------------------------------------

INT64 = st.one_of(
    st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    st.sampled_from([INT64_MIN, INT64_MIN + 1, -1, 0, 1, 63, 64, 127, 128, INT64_MAX - 1, INT64_MAX]),
)
FLOATS = st.one_of(st.floats(), st.sampled_from([math.nan, -math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324]))
TEXT = st.text(max_size=20)  # hypothesis text has no lone surrogates: all of it is valid UTF-8
NAMES = st.text(min_size=1, max_size=12)
#: Names that often repeat inside one record (an image folds the cells of one column).
IMAGE_NAMES = st.one_of(st.sampled_from(["a", "b", "c", "é", "列"]), NAMES)
PLAIN_VALUES = st.one_of(st.booleans(), INT64, FLOATS, TEXT, st.binary(max_size=40))
VERSIONS = st.one_of(st.none(), INT64)
#: Versions that often tie or order the cells of one column.
IMAGE_VERSIONS = st.one_of(st.none(), st.sampled_from([1, 2, 3]), INT64)
#: Values the reference refuses or that are not the plain case (the fast path must return None for them).
ODD_VALUES = st.sampled_from(
    [2**63, INT64_MIN - 1, Level.HIGH, Text("x"), Ratio(0.5), Blob(b"b"), bytearray(b"a"), "\ud800", None, [1]]
)
#: A row read back holds None for a column the record deleted: only the other odd values are odd there.
ODD_ROW_VALUES = ODD_VALUES.filter(lambda value: value is not None)
#: An image record has up to 10 cells or columns with several odd chances each: rarer, so most cases are plain.
ODD_IN_IMAGES = 100
ODD_VERSIONS = st.sampled_from([True, 2**63, INT64_MIN - 1, Level.HIGH])
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


@st.composite
def maybe_odd(
    draw: st.DrawFn, plain: st.SearchStrategy, odd: st.SearchStrategy, flags: list[bool], one_in: int = 30
) -> Any:
    """A plain value, or now and then (one in `one_in`) an odd one (noted in `flags`)."""
    if draw(st.sampled_from(range(one_in))) == one_in - 1:
        flags.append(True)
        return draw(odd)
    return draw(plain)


@st.composite
def generated_cell(
    draw: st.DrawFn,
    ops: list[CellOp],
    flags: list[bool],
    names: st.SearchStrategy = NAMES,
    versions: st.SearchStrategy = VERSIONS,
    one_in: int = 30,
) -> Cell:
    op = draw(st.sampled_from(ops))
    name = draw(maybe_odd(names, st.sampled_from(["\ud83d", Text("a")]), flags, one_in))
    version = draw(maybe_odd(versions, ODD_VERSIONS, flags, one_in))
    if op is CellOp.PUT:
        return Cell(name, op, draw(maybe_odd(PLAIN_VALUES, ODD_VALUES, flags, one_in)), version)
    if op is CellOp.INCREMENT:
        odd_deltas = st.sampled_from([True, 1.5, 2**63, None])
        return Cell(name, op, draw(maybe_odd(INT64, odd_deltas, flags, one_in)), version)
    if op is CellOp.DELETE_ONE_VERSION:
        plain_versions = st.one_of(st.sampled_from([1, 2, 3]), INT64)
        odd_versions = st.one_of(st.none(), ODD_VERSIONS)
        return Cell(name, op, None, draw(maybe_odd(plain_versions, odd_versions, flags, one_in)))
    return Cell(name, op, None, version)


def _record(draw: st.DrawFn, action: RecordAction, cells: list[Cell], flags: list[bool]) -> ChangeRecord:
    """A record around `cells` whose pk, seq, table and shard are plain or, now and then, odd (noted in `flags`)."""
    pk_names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    primary_key = [(name, draw(maybe_odd(PLAIN_PK_VALUES, ODD_PK_VALUES, flags))) for name in pk_names]
    numbers = {name: draw(maybe_odd(plain, ODD_SEQ_NUMBERS[name], flags)) for name, plain in SEQ_NUMBERS.items()}
    return ChangeRecord(
        table=draw(maybe_odd(st.text(min_size=1, max_size=16), st.just("t\udc00"), flags)),
        action=action,
        primary_key=primary_key,
        cells=cells,
        sequence=Sequence(**numbers),
        shard_id=draw(st.text(max_size=10)),
    )


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
    record = _record(draw, action, cells, flags)
    instance = draw(st.one_of(st.just(INSTANCE), st.text(max_size=10)))
    return record, instance, not flags


@st.composite
def generated_current_row(draw: st.DrawFn, flags: list[bool]) -> Any:
    """A row read back: an exact dict of name → (value, version), now and then odd (noted in `flags`)."""
    row: dict[Any, Any] = {}
    for _ in range(draw(st.integers(min_value=0, max_value=10))):
        name = draw(maybe_odd(IMAGE_NAMES, st.sampled_from(["\ud800", Text("a")]), flags, ODD_IN_IMAGES))
        value = draw(maybe_odd(st.one_of(st.none(), PLAIN_VALUES), ODD_ROW_VALUES, flags, ODD_IN_IMAGES))
        version = draw(maybe_odd(VERSIONS, ODD_VERSIONS, flags, ODD_IN_IMAGES))
        shape = draw(maybe_odd(st.just(tuple), st.sampled_from([list, Column]), flags, ODD_IN_IMAGES))
        # A repeated name keeps its first position, as in the builder's dict.
        row[name] = Column(value, version) if shape is Column else shape((value, version))
    container = draw(maybe_odd(st.just(dict), st.sampled_from([OrderedDict, MappingProxyType]), flags))
    return row if container is dict else container(row)


#: Cell ops of generated PUT images. An INCREMENT makes the reference refuse a PUT record: rare, so that most are
#: written; deletes are there to be ignored.
PUT_RECORD_OPS = [CellOp.PUT] * 8 + [CellOp.DELETE_ONE_VERSION, CellOp.DELETE_ALL_VERSION] * 2 + [CellOp.INCREMENT]


@st.composite
def generated_image_cases(draw: st.DrawFn) -> tuple[ChangeRecord, str, Any, bool, bool]:
    """(record, instance, current_row, tombstones, plain): plain cases must be encoded by the fast path."""
    flags: list[bool] = []
    cell_flags: list[bool] = []
    action = draw(st.sampled_from([RecordAction.PUT, RecordAction.UPDATE, RecordAction.UPDATE, RecordAction.DELETE]))
    ops = PUT_RECORD_OPS if action is RecordAction.PUT else list(CellOp)
    cells = draw(st.lists(generated_cell(ops, cell_flags, IMAGE_NAMES, IMAGE_VERSIONS, ODD_IN_IMAGES), max_size=10))
    record = _record(draw, action, cells, flags)
    current_row = None
    if draw(st.booleans()):
        # Only an UPDATE reads it; PUT and DELETE ignore it, odd or not.
        current_row = draw(generated_current_row(flags if action is RecordAction.UPDATE else []))
    cells_ignored = action is RecordAction.DELETE or (action is RecordAction.UPDATE and current_row is not None)
    instance = draw(st.one_of(st.just(INSTANCE), st.text(max_size=10)))
    plain = not flags and (cells_ignored or not cell_flags)
    return record, instance, current_row, draw(st.booleans()), plain


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


@settings(max_examples=300, deadline=None)
@given(generated_image_cases(), st.integers(min_value=0, max_value=2**32 - 1))
def test_image_fast_path_writes_the_reference_bytes_or_declines(generated: tuple, schema_id: int) -> None:
    record, instance, current_row, tombstones, plain = generated
    try:
        expected = reference_image(record, instance, schema_id, current_row, tombstones)
    except REFERENCE_ERRORS:
        assert ENCODE_IMAGE(record, instance, schema_id, current_row, tombstones) is None
        return
    encoded = ENCODE_IMAGE(record, instance, schema_id, current_row, tombstones)
    if plain:
        assert encoded is not None
    if encoded is not None:
        assert encoded == expected


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


def test_c_encoders_are_enabled_for_the_shipped_schemas() -> None:
    module, reasons = load_encoder(environ={})
    assert module is not None
    assert reasons == {MessageFormat.MUTATE_LOG: "", MessageFormat.RECORD_IMAGE: ""}


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
    imaged = image(record)
    assert imaged == reference_image(record)
    assert imaged is not None and struct.pack("<d", value) in imaged[0]  # type: ignore[operator]


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
    imaged = image(record)
    assert imaged is not None
    assert imaged == reference_image(record)


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
    assert image(scripted(object())) is None  # type: ignore[arg-type]
    assert image(scripted(cells=[Cell("n", object(), 1, None)])) is None  # type: ignore[arg-type]
    assert image(scripted(RecordAction.UPDATE, [object()])) is None  # type: ignore[list-item]


@pytest.mark.parametrize("schema_id", [-1, 2**32, True, 1.0])
def test_an_impossible_schema_id_is_declined(schema_id: Any) -> None:
    assert ENCODE(scripted(), INSTANCE, schema_id) is None
    assert ENCODE_IMAGE(scripted(), INSTANCE, schema_id, None, True) is None


@pytest.mark.parametrize("instance", [Text("inst"), b"inst", "\ud800"])
def test_an_instance_that_is_not_a_plain_str_is_declined(instance: Any) -> None:
    assert ENCODE(scripted(), instance, SCHEMA_ID) is None
    assert image(scripted(), instance=instance) is None


def test_a_record_whose_slots_are_unset_is_declined() -> None:
    record = ChangeRecord.__new__(ChangeRecord)
    assert ENCODE(record, INSTANCE, SCHEMA_ID) is None
    assert image(record) is None


def test_op_index_beyond_the_seq_key_width_is_declined() -> None:
    """An UPDATE with more than 10**6 runs would overflow seq_key's 6 op digits; shown with a smaller limit."""
    module = c_module()
    alternating = [Cell(f"c{i}", CellOp.INCREMENT if i % 2 else CellOp.PUT, i, None) for i in range(4)]
    try:
        module.configure(
            ChangeRecord,
            Cell,
            Sequence,
            (RecordAction.PUT, RecordAction.UPDATE, RecordAction.DELETE),
            (CellOp.PUT, CellOp.DELETE_ONE_VERSION, CellOp.DELETE_ALL_VERSION, CellOp.INCREMENT),
            "0.1.0",
            (10**10, 2**63, 10**10, 3),
        )
        assert module.encode_mutate_log(scripted(RecordAction.UPDATE, alternating[:3]), INSTANCE, SCHEMA_ID) is not None
        assert module.encode_mutate_log(scripted(RecordAction.UPDATE, alternating), INSTANCE, SCHEMA_ID) is None
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


# --- RECORD_IMAGE -----------------------------------------------------------------------------------------


def decoded_columns(value: bytes | None) -> dict[str, Any]:
    assert value is not None
    return fastavro.schemaless_reader(io.BytesIO(value[5:]), RECORD_IMAGE_SCHEMA, None)["columns"]  # type: ignore[index]


def test_a_put_image_holds_the_highest_version_of_each_column_where_its_name_first_appeared() -> None:
    record = scripted(
        cells=[
            Cell("a", CellOp.PUT, "a@5", 5),
            Cell("b", CellOp.PUT, 1.5, None),
            Cell("a", CellOp.PUT, "a@3", 3),  # older: ignored
            Cell("c", CellOp.DELETE_ALL_VERSION, None, None),  # deletes in a PUT: ignored
            Cell("b", CellOp.DELETE_ONE_VERSION, None, 9),
            Cell("a", CellOp.PUT, "a@7", 7),  # newer: replaces, "a" stays first
            Cell("b", CellOp.PUT, b"b", 4),  # versionless before: replaces
        ]
    )
    encoded = image(record)
    assert encoded == reference_image(record)
    assert list(decoded_columns(encoded[0]).items()) == [  # type: ignore[index]
        ("a", {"value": "a@7", "version": 7}),
        ("b", {"value": b"b", "version": 4}),
    ]


def test_a_partial_update_image_folds_deletes_as_the_builder_does() -> None:
    record = scripted(
        RecordAction.UPDATE,
        [
            Cell("kept", CellOp.PUT, 1, 5),
            Cell("kept", CellOp.DELETE_ONE_VERSION, None, 4),  # another version survives: still the PUT
            Cell("gone", CellOp.PUT, 2, 5),
            Cell("gone", CellOp.DELETE_ONE_VERSION, None, 5),  # the put version itself: null, version 5
            Cell("cleared", CellOp.DELETE_ALL_VERSION, None, 8),
            Cell("counter", CellOp.INCREMENT, 1.5, None),  # only a delta: left out, even an odd one
            Cell("back", CellOp.DELETE_ALL_VERSION, None, None),
            Cell("back", CellOp.PUT, "again", 1),  # after a delete: the PUT, at the delete's position
            Cell("versionless", CellOp.PUT, True, None),
            Cell("versionless", CellOp.DELETE_ONE_VERSION, None, 3),  # None != 3: the PUT survives
        ],
    )
    encoded = image(record)
    assert encoded == reference_image(record)
    assert list(decoded_columns(encoded[0]).items()) == [  # type: ignore[index]
        ("kept", {"value": 1, "version": 5}),
        ("gone", {"value": None, "version": 5}),
        ("cleared", {"value": None, "version": None}),
        ("back", {"value": "again", "version": 1}),
        ("versionless", {"value": True, "version": None}),
    ]


def test_an_update_image_with_the_row_read_back_follows_the_row_in_its_order() -> None:
    record = scripted(RecordAction.UPDATE, [Cell("ignored", CellOp.INCREMENT, "not even a delta", None), "junk"])  # type: ignore[list-item]
    row = {"z": (1, 2), "empty": (None, None), "text": ("é", 3), "blob": (b"\x00", INT64_MIN), "flag": (False, 0)}
    row["z"] = (7, 8)  # re-assigned: keeps its first position
    encoded = image(record, row)
    assert encoded == reference_image(record, current_row=row)
    assert list(decoded_columns(encoded[0])) == ["z", "empty", "text", "blob", "flag"]  # type: ignore[index]
    assert image(record, {}) == reference_image(record, current_row={})


@pytest.mark.parametrize("tombstones", [True, False])
def test_a_delete_image_is_followed_by_a_tombstone_when_asked(tombstones: bool) -> None:
    record = scripted(RecordAction.DELETE, [Cell("ignored", CellOp.PUT, None, None)])
    encoded = image(record, tombstones=tombstones)
    assert encoded == reference_image(record, tombstones=tombstones)
    assert encoded is not None and len(encoded) == (2 if tombstones else 1)
    assert (encoded[-1] is None) is tombstones


@pytest.mark.parametrize("action", [RecordAction.PUT, RecordAction.DELETE])
@pytest.mark.parametrize("current_row", [{"x": (1, None)}, ["not", "a", "mapping"], OrderedDict()])
def test_puts_and_deletes_ignore_the_current_row(action: RecordAction, current_row: Any) -> None:
    record = scripted(action)
    encoded = image(record, current_row)
    assert encoded is not None
    assert encoded == reference_image(record, current_row=current_row)


def test_many_cells_of_few_columns_fold_as_the_builder_folds_them() -> None:
    ops = [CellOp.PUT, CellOp.PUT, CellOp.DELETE_ONE_VERSION, CellOp.DELETE_ALL_VERSION, CellOp.INCREMENT]
    cells = [Cell(f"col-{i * 7 % 300}", ops[i % 5], i, (i * 13) % 50) for i in range(2_000)]
    for action in (RecordAction.UPDATE, RecordAction.PUT):
        record = scripted(action, [cell for cell in cells if action is RecordAction.UPDATE or cell.op is CellOp.PUT])
        encoded = image(record)
        assert encoded is not None
        assert encoded == reference_image(record)


IMAGE_REFUSED_BY_THE_REFERENCE = {
    "increment-in-a-put": (scripted(cells=[Cell("n", CellOp.INCREMENT, 1, None)]), None),
    "put-without-value": (scripted(RecordAction.UPDATE, [Cell("n", CellOp.PUT, None, None)]), None),
    "delete-one-version-without-version-in-a-put": (
        scripted(cells=[Cell("n", CellOp.DELETE_ONE_VERSION, None, None)]),
        None,
    ),
    "held-value-beyond-int64": (scripted(cells=[Cell("n", CellOp.PUT, 2**63, 5)]), None),
    "held-lone-surrogate-name": (scripted(RecordAction.UPDATE, [Cell("\ud800", CellOp.DELETE_ALL_VERSION)]), None),
    "row-value-beyond-int64": (scripted(RecordAction.UPDATE), {"n": (2**63, None)}),
    "row-bool-version": (scripted(RecordAction.UPDATE), {"n": (1, True)}),
    "row-version-beyond-int64": (scripted(RecordAction.UPDATE), {"n": (1, 2**63)}),
    "row-lone-surrogate-name": (scripted(RecordAction.UPDATE), {"\udc00": (1, None)}),
    "row-unknown-value-type": (scripted(RecordAction.UPDATE), {"n": ([1], None)}),
    "row-column-of-three": (scripted(RecordAction.UPDATE), {"n": (1, 2, 3)}),
    "pk-empty": (scripted(primary_key=[]), None),
    "lone-surrogate-table": (scripted(RecordAction.DELETE, table="t\ud800"), None),
    "epoch-too-wide": (scripted(sequence=Sequence(epoch=10**10, timestamp_us=0, row_index=0)), None),
}


@pytest.mark.parametrize(
    ("record", "current_row"), IMAGE_REFUSED_BY_THE_REFERENCE.values(), ids=IMAGE_REFUSED_BY_THE_REFERENCE.keys()
)
def test_images_the_reference_refuses_are_declined(record: ChangeRecord, current_row: Any) -> None:
    with pytest.raises(REFERENCE_ERRORS):
        reference_image(record, current_row=current_row)
    assert image(record, current_row) is None


IMAGE_NOT_PLAIN = {
    "row-as-ordered-dict": (scripted(RecordAction.UPDATE), OrderedDict(n=(1, None)), True),
    "row-as-mapping-proxy": (scripted(RecordAction.UPDATE), MappingProxyType({"n": (1, None)}), True),
    "row-column-as-list": (scripted(RecordAction.UPDATE), {"n": [1, None]}, True),
    "row-column-as-namedtuple": (scripted(RecordAction.UPDATE), {"n": Column(1, None)}, True),
    "row-name-str-subclass": (scripted(RecordAction.UPDATE), {Text("n"): (1, None)}, True),
    "row-int-subclass-value": (scripted(RecordAction.UPDATE), {"n": (Level.HIGH, None)}, True),
    "row-bytearray-value": (scripted(RecordAction.UPDATE), {"n": (bytearray(b"x"), None)}, True),
    "row-int-subclass-version": (scripted(RecordAction.UPDATE), {"n": (1, Level.HIGH)}, True),
    "held-int-subclass-value": (scripted(cells=[Cell("n", CellOp.PUT, Level.HIGH, None)]), None, True),
    "cell-name-str-subclass": (scripted(cells=[Cell(Text("n"), CellOp.PUT, 1, None)]), None, True),
    "unheld-cell-with-bool-version": (
        scripted(RecordAction.UPDATE, [Cell("n", CellOp.INCREMENT, 1, True)]),
        None,
        True,
    ),
    "op-as-plain-str": (scripted(cells=[Cell("n", "PUT", 1, None)]), None, True),  # type: ignore[arg-type]
    "cells-as-tuple": (scripted(cells=(Cell("n", CellOp.PUT, 1, None),)), None, True),
    "tombstones-as-int": (scripted(RecordAction.DELETE), None, 1),
    "pk-column-as-list": (scripted(primary_key=[["k", 1]]), None, True),
}


@pytest.mark.parametrize(("record", "current_row", "tombstones"), IMAGE_NOT_PLAIN.values(), ids=IMAGE_NOT_PLAIN.keys())
def test_images_that_are_not_the_plain_case_are_declined(
    record: ChangeRecord, current_row: Any, tombstones: Any
) -> None:
    reference_image(record, current_row=current_row, tombstones=tombstones)  # the Python path writes these
    assert image(record, current_row, tombstones) is None


def test_an_update_row_that_is_not_a_mapping_is_declined() -> None:
    record = scripted(RecordAction.UPDATE)
    with pytest.raises(AttributeError):
        reference_image(record, current_row=[("n", (1, None))])
    assert image(record, [("n", (1, None))]) is None


def test_image_encoding_keeps_reference_counts_unchanged() -> None:
    """Every image path releases what it took: refcounts of the parts are the same after 200 runs."""
    value, name, pk_value = "välue-" + "x" * 3, "name-" + "y" * 3, "pk-" + "z" * 3
    row = {name: (value, 5), "other": (None, None)}
    odd_row = {name: (value, 5), "bad": (2**63, None)}  # declined after the first column
    cases = [
        (scripted(cells=[Cell(name, CellOp.PUT, value, 5), Cell(name, CellOp.PUT, value, 7)]), None, True),
        (scripted(RecordAction.UPDATE, [Cell(name, CellOp.DELETE_ONE_VERSION, value, 3)]), None, True),
        (scripted(RecordAction.UPDATE, [Cell(name, CellOp.INCREMENT, value, None)]), row, True),
        (scripted(RecordAction.UPDATE), odd_row, True),
        (scripted(RecordAction.DELETE, primary_key=[("k", pk_value)]), row, True),
        (scripted(cells=[Cell(name, CellOp.PUT, value, None), Cell(name, CellOp.INCREMENT, 1, None)]), None, True),
        (scripted(cells=[Cell(name, CellOp.PUT, value, None), Cell("x", CellOp.PUT, 2**63, 1)]), None, True),
        (scripted(RecordAction.UPDATE, [Cell(name, CellOp.PUT, value, True)]), None, True),
        (scripted(primary_key=[("k", pk_value), ("b", True)]), None, True),
    ]
    watched = [value, name, pk_value, row, odd_row, *row.values(), CellOp.PUT, CellOp.DELETE_ONE_VERSION]
    watched += [record for record, _, _ in cases]
    for record, current_row, tombstones in cases:
        image(record, current_row, tombstones)  # the first call may cache UTF-8 and hashes inside the strs
    before = [sys.getrefcount(obj) for obj in watched]
    for _ in range(200):
        for record, current_row, tombstones in cases:
            image(record, current_row, tombstones)
    assert [sys.getrefcount(obj) for obj in watched] == before


# --- the public face and its guards -----------------------------------------------------------------------


def test_the_public_encoders_use_the_c_module_when_available() -> None:
    record = scripted(RecordAction.DELETE, [Cell("n", CellOp.PUT, 1.25, 3)])
    if fast_envelopes.IMPLEMENTATION == "c":
        assert fast_path_available(MessageFormat.MUTATE_LOG) and fast_path_available(MessageFormat.RECORD_IMAGE)
        assert encode_mutate_log(record, INSTANCE, SCHEMA_ID) == reference(record)
        assert encode_record_image(record, INSTANCE, SCHEMA_ID) == reference_image(record)
        assert encode_record_image(record, INSTANCE, SCHEMA_ID, tombstones=False) == reference_image(
            record, tombstones=False
        )
    else:  # the test run set CDCBRIDGE_PURE_PYTHON
        assert not fast_path_available(MessageFormat.MUTATE_LOG)
        assert not fast_path_available(MessageFormat.RECORD_IMAGE)
        assert encode_mutate_log(record, INSTANCE, SCHEMA_ID) is None
        assert encode_record_image(record, INSTANCE, SCHEMA_ID) is None


@pytest.mark.parametrize(("setting", "enabled"), [("1", False), ("yes", False), ("0", True), ("", True)])
def test_pure_python_switch(setting: str, enabled: bool) -> None:
    module, reasons = load_encoder(environ={FORCE_PURE_PYTHON_ENV: setting})
    assert (module is not None) is enabled
    for message_format in (MessageFormat.MUTATE_LOG, MessageFormat.RECORD_IMAGE):
        assert (FORCE_PURE_PYTHON_ENV in reasons[message_format]) is not enabled


@pytest.mark.parametrize("message_format", [MessageFormat.MUTATE_LOG, MessageFormat.RECORD_IMAGE])
def test_the_shipped_schemas_are_the_ones_the_encoders_were_written_for(message_format: MessageFormat) -> None:
    schema = schema_dict(message_format)
    assert schema_fingerprint(schema) == ENCODER_SCHEMA_FINGERPRINTS[message_format]
    assert schema_matches_encoder(schema, message_format)


def test_the_two_fingerprints_tell_the_schemas_apart() -> None:
    assert not schema_matches_encoder(schema_dict(MessageFormat.MUTATE_LOG), MessageFormat.RECORD_IMAGE)
    assert not schema_matches_encoder(schema_dict(MessageFormat.RECORD_IMAGE), MessageFormat.MUTATE_LOG)


def _evolved(message_format: MessageFormat, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    schema = copy.deepcopy(schema_dict(message_format))
    change(schema)
    return schema


def _field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(field for field in schema["fields"] if field["name"] == name)


def _cell_field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(field for field in _field(schema, "cells")["type"]["items"]["fields"] if field["name"] == name)


def _image_cell_field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(field for field in _field(schema, "columns")["type"]["values"]["fields"] if field["name"] == name)


SCHEMA_CHANGES: dict[str, tuple[MessageFormat, Callable[[dict[str, Any]], None]]] = {
    "extra-field": (
        MessageFormat.MUTATE_LOG,
        lambda s: s["fields"].append({"name": "extra", "type": "string", "default": ""}),
    ),
    "enum-symbol-added": (
        MessageFormat.MUTATE_LOG,
        lambda s: _cell_field(s, "op")["type"]["symbols"].insert(0, "NONE"),
    ),
    "union-branches-reordered": (MessageFormat.MUTATE_LOG, lambda s: _cell_field(s, "value")["type"].reverse()),
    "field-type-changed": (MessageFormat.MUTATE_LOG, lambda s: _field(s, "timestamp").update(type="long")),
    "fields-reordered": (MessageFormat.MUTATE_LOG, lambda s: s["fields"].reverse()),
    "image-extra-field": (
        MessageFormat.RECORD_IMAGE,
        lambda s: s["fields"].append({"name": "extra", "type": "string", "default": ""}),
    ),
    "image-value-branches-reordered": (
        MessageFormat.RECORD_IMAGE,
        lambda s: _image_cell_field(s, "value")["type"].reverse(),
    ),
    "image-columns-as-array": (
        MessageFormat.RECORD_IMAGE,
        lambda s: _field(s, "columns").update(
            type={"type": "array", "items": _field(s, "columns")["type"]["values"]}, default=[]
        ),
    ),
    "image-version-not-nullable": (
        MessageFormat.RECORD_IMAGE,
        lambda s: _image_cell_field(s, "version").update(type="long", default=0),
    ),
    "image-partial-removed": (
        MessageFormat.RECORD_IMAGE,
        lambda s: s["fields"].remove(_field(s, "partial")),
    ),
}


@pytest.mark.parametrize(("message_format", "change"), SCHEMA_CHANGES.values(), ids=SCHEMA_CHANGES.keys())
def test_a_changed_schema_disables_only_its_own_encoder(
    message_format: MessageFormat, change: Callable[[dict[str, Any]], None]
) -> None:
    schema = _evolved(message_format, change)
    assert not schema_matches_encoder(schema, message_format)
    module, reasons = load_encoder(environ={}, schemas={message_format: schema})
    assert module is not None  # the other format keeps its encoder
    assert "differs from the schema the C encoder was written for" in reasons[message_format]
    other = MessageFormat.RECORD_IMAGE if message_format is MessageFormat.MUTATE_LOG else MessageFormat.MUTATE_LOG
    assert reasons[other] == ""


def test_two_changed_schemas_disable_the_c_module() -> None:
    extra = {"name": "extra", "type": "string", "default": ""}
    schemas = {fmt: _evolved(fmt, lambda s: s["fields"].append(extra)) for fmt in MessageFormat}
    module, reasons = load_encoder(environ={}, schemas=schemas)
    assert module is None
    assert all("differs" in reason for reason in reasons.values())


@pytest.mark.parametrize("message_format", [MessageFormat.MUTATE_LOG, MessageFormat.RECORD_IMAGE])
def test_docs_and_defaults_do_not_disable_the_fast_path(message_format: MessageFormat) -> None:
    def reword(schema: dict[str, Any]) -> None:
        schema["doc"] = "reworded"
        _field(schema, "row_deleted")["default"] = True

    module, reasons = load_encoder(environ={}, schemas={message_format: _evolved(message_format, reword)})
    assert module is not None and not any(reasons.values())
