"""decode_stream_record: stream records into the shared change model, on both implementations."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.harness.bench.decode import make_record, run_decode_bench
from cdcbridge.tablestore import records
from cdcbridge.tablestore.plainbuffer import (
    CELL_DELETE_ALL_VERSION,
    CELL_DELETE_ONE_VERSION,
    CELL_INCREMENT,
    INF_MIN,
    PlainBufferError,
    PlainCell,
    encode_row,
)
from cdcbridge.tablestore.plainbuffer.accelerator import speedups
from cdcbridge.tablestore.records import decode_stream_record, decode_stream_record_python

from .strategies import cell_types, int64s, names, uint32s

DECODERS = [decode_stream_record_python] + ([decode_stream_record] if speedups is not None else [])
PK = [("user_id", "u-1"), ("seq", 3)]
SEQ = (1, 1_700_000_000_000_123, 2)


@pytest.fixture(params=DECODERS, ids=lambda f: f.__name__)
def decode(request: pytest.FixtureRequest):
    return request.param


def call(decode, data: bytes, action_type: int = 2, **overrides) -> ChangeRecord:
    kwargs = {"table": "orders", "shard_id": "shard-7", "record_index": 12, **overrides}
    return decode(data, action_type, **kwargs)


def test_put_record(decode) -> None:
    data = encode_row(PK, [("a", 1, 100), ("b", "x", 101), ("c", b"\x00", 102)], sequence=SEQ)
    record = call(decode, data, 1)
    assert record == ChangeRecord(
        table="orders",
        action=RecordAction.PUT,
        primary_key=PK,
        cells=[Cell("a", CellOp.PUT, 1, 100), Cell("b", CellOp.PUT, "x", 101), Cell("c", CellOp.PUT, b"\x00", 102)],
        sequence=Sequence(*SEQ),
        shard_id="shard-7",
    )
    assert record.extra == {} and record.timestamp_ms == 1_700_000_000_000


def test_update_record_maps_every_cell_type(decode) -> None:
    cells = [
        PlainCell("p", 2.5, None, 200),
        PlainCell("d1", None, CELL_DELETE_ONE_VERSION, 150),
        PlainCell("da", None, CELL_DELETE_ALL_VERSION, None),
        PlainCell("inc", -4, CELL_INCREMENT, None),
    ]
    record = call(decode, encode_row(PK, cells, sequence=SEQ), 2)
    assert record.action is RecordAction.UPDATE
    assert record.cells == [
        Cell("p", CellOp.PUT, 2.5, 200),
        Cell("d1", CellOp.DELETE_ONE_VERSION, None, 150),
        Cell("da", CellOp.DELETE_ALL_VERSION, None, None),
        Cell("inc", CellOp.INCREMENT, -4, None),
    ]


def test_delete_record_has_no_cells(decode) -> None:
    for marker in (True, False):
        record = call(decode, encode_row(PK, delete_marker=marker, sequence=SEQ), 3)
        assert record.action is RecordAction.DELETE and record.cells == [] and record.primary_key == PK


def test_bool_stays_bool(decode) -> None:
    record = call(decode, encode_row(PK, [("flag", True, 1), ("n", 1, 1)], sequence=SEQ), 1)
    assert [type(c.value) for c in record.cells] == [bool, int]


@pytest.mark.parametrize(
    ("data", "action_type", "fragment"),
    [
        (encode_row(PK, [("a", 1, 1)]), 1, "no sequence extension"),
        (encode_row(PK, sequence=SEQ), 9, "unknown stream action type 9"),
        (encode_row([("k", INF_MIN)], sequence=SEQ), 1, "primary-key column 'k' of a stream record holds INF_MIN"),
        (encode_row(PK, [PlainCell("a", None, None, 5)], sequence=SEQ), 1, "put cell 'a' has no value"),
        (
            encode_row(PK, [PlainCell("a", None, CELL_DELETE_ONE_VERSION, None)], sequence=SEQ),
            2,
            "DELETE_ONE_VERSION cell 'a' has no timestamp",
        ),
        (
            encode_row(PK, [PlainCell("a", 1.5, CELL_INCREMENT, None)], sequence=SEQ),
            2,
            "INCREMENT cell 'a' must carry an INTEGER delta, found 1.5",
        ),
        (
            encode_row(PK, [PlainCell("a", True, CELL_INCREMENT, None)], sequence=SEQ),
            2,
            "INCREMENT cell 'a' must carry an INTEGER delta, found True",
        ),
        (encode_row(PK, sequence=SEQ)[:-1], 1, "truncated"),
    ],
)
def test_errors_carry_shard_and_record_index(decode, data: bytes, action_type: int, fragment: str) -> None:
    with pytest.raises(PlainBufferError) as info:
        call(decode, data, action_type)
    exc = info.value
    assert fragment in exc.reason
    assert exc.shard_id == "shard-7" and exc.record_index == 12
    assert "shard 'shard-7'" in str(exc) and "record #12" in str(exc)


@pytest.mark.parametrize("action_type", [0, 4, -1, 2**70, "PUT", None])
def test_unknown_action_types(decode, action_type: object) -> None:
    with pytest.raises(PlainBufferError, match=f"unknown stream action type {action_type!r};"):
        call(decode, encode_row(PK, sequence=SEQ), action_type)


def test_crc_errors_only_when_checking(decode) -> None:
    corrupt = bytearray(encode_row(PK, [("a", 1, 1)], sequence=SEQ))
    corrupt[corrupt.index(b"\x0a", 30) + 1] ^= 0x55  # a cell checksum byte
    with pytest.raises(PlainBufferError, match="checksum mismatch"):
        call(decode, bytes(corrupt))
    assert call(decode, bytes(corrupt), check_crc=False).cells[0].value == 1


def test_accepts_bytearray(decode) -> None:
    data = encode_row(PK, [("a", 1, 1)], sequence=SEQ)
    assert call(decode, bytearray(data)) == call(decode, data)


record_values = st.one_of(
    int64s, st.floats(allow_nan=False), st.booleans(), st.text(max_size=30), st.binary(max_size=60), st.none()
)
record_cells = st.lists(
    st.builds(PlainCell, names, record_values, cell_types, st.one_of(st.none(), int64s)), max_size=6
)


def _outcome(decode, *args, **kwargs):
    try:
        return ("ok", decode(*args, **kwargs))
    except PlainBufferError as exc:
        return ("error", exc.reason, exc.offset, exc.shard_id, exc.record_index)


@pytest.mark.parametrize("direct_construction", [True, False])
def test_accelerator_matches_python(direct_construction: bool) -> None:
    """Same ChangeRecords and same errors from both paths (trivially so when the accelerator is not built)."""
    records.configure_accelerator(direct_construction=direct_construction)
    try:
        _compare_random_records()
    finally:
        records.configure_accelerator()


@settings(max_examples=300, deadline=None)
@given(
    pk=st.lists(st.tuples(names, st.one_of(int64s, st.text(max_size=10))), max_size=3),
    cells=record_cells,
    action=st.integers(0, 4),
    seq=st.one_of(st.none(), st.tuples(uint32s, int64s, uint32s)),
    check_crc=st.booleans(),
)
def _compare_random_records(pk, cells, action, seq, check_crc) -> None:
    data = encode_row(pk, cells, sequence=seq)
    kwargs = {"table": "t", "shard_id": "s", "record_index": 1, "check_crc": check_crc}
    fast = _outcome(decode_stream_record, data, action, **kwargs)
    slow = _outcome(decode_stream_record_python, data, action, **kwargs)
    assert fast == slow


def test_direct_construction_builds_independent_objects() -> None:
    data = encode_row(PK, [("a", 1, 1)], sequence=SEQ)
    first = decode_stream_record(data, 1, table="t", shard_id="s", record_index=0)
    second = decode_stream_record(data, 1, table="t", shard_id="s", record_index=1)
    assert first == second and first is not second
    assert first.extra is not second.extra and first.cells[0] is not second.cells[0]
    first.extra["k"] = 1
    first.cells[0].value = 2
    assert second.extra == {} and second.cells[0].value == 1
    with pytest.raises(AttributeError):
        first.sequence.epoch = 5  # Sequence stays frozen
    assert type(first.cells[0]) is Cell and type(first.sequence) is Sequence


def test_slot_layout_refuses_classes_it_cannot_fill_directly() -> None:
    from dataclasses import dataclass

    @dataclass(slots=True)
    class WithPostInit:
        a: int

        def __post_init__(self) -> None:
            self.a += 1

    @dataclass
    class WithoutSlots:
        a: int

    assert records.slot_layout(WithPostInit, ("a",))[1] is None
    assert records.slot_layout(WithoutSlots, ("a",))[1] is None
    assert records.slot_layout(Cell, ("name", "op"))[1] is None
    assert records.slot_layout(Cell, ("name", "op", "value", "timestamp_ms"))[1] is not None


def test_bench_reports_rows_per_second() -> None:
    result = run_decode_bench(records=300, check_crc=True, seed=1)
    assert result["records"] == 300 and result["check_crc"] is True and result["rows_per_s"] > 0
    assert result["implementation"] in ("c", "python") and result["python"].startswith("CPython 3.")
    assert result["avg_record_bytes"] > 400


def test_bench_can_measure_the_fallback() -> None:
    assert run_decode_bench(records=50, implementation="python")["implementation"] == "python"
    with pytest.raises(ValueError, match="implementation must be"):
        run_decode_bench(records=50, implementation="rust")
    if speedups is not None:
        assert run_decode_bench(records=50, implementation="c")["implementation"] == "c"


def test_bench_records_are_realistic() -> None:
    import random

    record = decode_stream_record(make_record(random.Random(0), 5), 1, table="t", shard_id="s", record_index=0)
    assert len(record.primary_key) == 2 and [type(v) for _, v in record.primary_key] == [str, int]
    kinds = {type(c.value) for c in record.cells}
    assert len(record.cells) == 10 and kinds == {int, float, str, bool, bytes}
    assert all(c.timestamp_ms is not None for c in record.cells)
    assert any(isinstance(c.value, bytes) and len(c.value) == 100 for c in record.cells)
    assert not any(isinstance(c.value, float) and math.isnan(c.value) for c in record.cells)
