"""Writer ↔ reader round trips over every value type, cell shape and row option, on both readers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.tablestore.plainbuffer import (
    PlainBufferEncodeError,
    PlainBufferError,
    PlainCell,
    decode_column_value,
    decode_row,
    decode_rows,
    encode_column_value,
    encode_row,
    encode_rows,
)

from .conftest import READERS
from .strategies import canonical, canonical_row, rows, values


@settings(max_examples=300, deadline=None)
@given(row=rows)
def test_row_round_trip(row) -> None:
    data = encode_row(row.primary_key, row.cells, delete_marker=row.delete_marker, sequence=row.sequence)
    for reader in READERS:
        for check_crc in (True, False):
            decoded = reader.decode_row(data, check_crc=check_crc)
            assert canonical_row(decoded) == canonical_row(row)
    assert encode_row(decoded.primary_key, decoded.cells, delete_marker=decoded.delete_marker,
                      sequence=decoded.sequence) == data  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(block=st.lists(rows, max_size=5))
def test_rows_round_trip(block) -> None:
    data = encode_rows(block)
    for reader in READERS:
        assert [canonical_row(r) for r in reader.decode_rows(data)] == [canonical_row(r) for r in block]
    assert [canonical_row(r) for r in decode_rows(data)] == [canonical_row(r) for r in block]


@settings(max_examples=300, deadline=None)
@given(value=values)
def test_column_value_round_trip(value) -> None:
    decoded = decode_column_value(encode_column_value(value))
    assert canonical(decoded) == canonical(value)
    assert type(decoded) is type(value)


def test_public_functions_accept_bytearray_and_memoryview() -> None:
    data = encode_row([("k", 1)], [("c", "v")])
    assert decode_row(bytearray(data)) == decode_row(memoryview(data)) == decode_row(data)
    assert decode_rows(bytearray(data)) == [decode_row(data)]


def test_decode_row_wants_exactly_one_row() -> None:
    one = encode_row([("k", 1)])
    two = encode_rows([decode_row(one), decode_row(one)])
    for reader in READERS:
        for data, reason in ((two, "exactly one row"), (b"", "too short"), (one[:4], "truncated")):
            try:
                reader.decode_row(data)
            except PlainBufferError as exc:
                assert reason in exc.reason
            else:
                raise AssertionError(f"{reader.name} accepted {data!r}")


def test_writer_rejects_what_it_cannot_encode() -> None:
    from cdcbridge.tablestore.plainbuffer import INF_MIN

    bad_calls = [
        lambda: encode_row([("k", 2**63)]),
        lambda: encode_row([("k", 1)], [("c", -(2**63) - 1)]),
        lambda: encode_row([("k", 1)], [("c", INF_MIN)]),
        lambda: encode_row([("k", 1)], [("c", None, 5.5)]),
        lambda: encode_row([("k", 1)], [("c", [1])]),
        lambda: encode_row([("k", 1)], [PlainCell("c", 1, 2)]),
        lambda: encode_row([("k", 1)], [("c", "\ud800")]),
        lambda: encode_row([(b"k", 1)]),
        lambda: encode_row([("k", 1)], sequence=(-1, 0, 0)),
        lambda: encode_row([("k", 1)], sequence=(0, 0)),
        lambda: encode_column_value(INF_MIN),
        lambda: encode_column_value(None),
    ]
    for call in bad_calls:
        try:
            call()
        except PlainBufferEncodeError as exc:
            assert str(exc).startswith("cannot encode PlainBuffer: ")
            assert isinstance(exc, PlainBufferError) and isinstance(exc, TypeError)
        else:
            raise AssertionError("expected PlainBufferEncodeError")
