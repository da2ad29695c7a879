"""Malformed input: every failure is a PlainBufferError naming what and where, never a hang or another exception,
and both readers agree on the outcome byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.tablestore.plainbuffer import (
    CELL_DELETE_ALL_VERSION,
    CELL_DELETE_ONE_VERSION,
    CELL_INCREMENT,
    PlainBufferError,
    PlainCell,
    encode_row,
    encode_rows,
)

from . import handmade as hm
from .conftest import READERS, outcome
from .strategies import canonical_row

RICH_CELLS = [
    PlainCell("i", -5, None, 1700000000000),
    PlainCell("d", 2.5, None, 1700000000001),
    PlainCell("b", True, None, 1700000000002),
    PlainCell("s", "héllo", None, 1700000000003),
    PlainCell("x", b"\x00\x01\x02", None, 1700000000004),
    PlainCell("del1", None, CELL_DELETE_ONE_VERSION, 1700000000005),
    PlainCell("delall", None, CELL_DELETE_ALL_VERSION, None),
    PlainCell("inc", 3, CELL_INCREMENT, None),
]
RICH = encode_row([("pk", "key-1"), ("n", 9)], RICH_CELLS, sequence=(2, 1700000000000123, 4))
DELETED = encode_row([("pk", "key-2")], delete_marker=True, sequence=(2, 1700000000000124, 0))
SAMPLES = [RICH, DELETED]


def expect_error(data: bytes, fragment: str, *, check_crc: bool = True) -> PlainBufferError:
    """Both readers raise PlainBufferError whose reason contains `fragment`, with identical reason and offset."""
    results = [outcome(reader.decode_row, data, check_crc=check_crc) for reader in READERS]
    assert results[0][0] == "error", f"accepted: {results[0]}"
    assert fragment in results[0][1], results[0][1]
    assert all(r == results[0] for r in results), results
    try:
        READERS[0].decode_row(data, check_crc=check_crc)
    except PlainBufferError as exc:
        return exc
    raise AssertionError("unreachable")


@pytest.mark.parametrize("data", SAMPLES)
def test_truncated_at_every_position(data: bytes) -> None:
    for cut in range(len(data)):
        prefix = data[:cut]
        for check_crc in (True, False):
            single = [outcome(reader.decode_row, prefix, check_crc=check_crc) for reader in READERS]
            many = [outcome(reader.decode_rows, prefix, check_crc=check_crc) for reader in READERS]
            assert single[0][0] == "error", f"cut at {cut} accepted"
            assert all(r == single[0] for r in single) and all(r == many[0] for r in many)
            if cut in (0, 4):
                assert many[0] == ("ok", [])
            else:
                assert many[0][0] == "error"
                assert "truncated" in many[0][1] or "runs past" in many[0][1], many[0][1]


@pytest.mark.parametrize("data", SAMPLES)
def test_every_single_byte_corruption_is_caught_or_harmless(data: bytes) -> None:
    original = canonical_row(READERS[0].decode_row(data))
    extension_start = data.index(b"\x0b\x18\x00\x00\x00")
    extension_end = extension_start + 5 + 24
    for position in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            corrupt = bytearray(data)
            corrupt[position] ^= mask
            for check_crc in (True, False):
                results = [outcome(reader.decode_row, bytes(corrupt), check_crc=check_crc) for reader in READERS]
                assert all(r[0] == results[0][0] for r in results), (position, mask, results)
                if results[0][0] == "error":
                    assert all(r == results[0] for r in results), (position, mask, results)
                    continue
                rows = [canonical_row(r[1]) for r in results]
                assert all(r == rows[0] for r in rows)
                if check_crc and not extension_start <= position < extension_end:
                    # Outside the (unchecksummed) extension, CRCs catch every single-byte change.
                    assert rows[0][:3] == original[:3], (position, mask)


@settings(max_examples=300, deadline=None)
@given(junk=st.binary(max_size=80), with_header=st.booleans())
def test_random_bytes_only_raise_plainbuffer_error(junk: bytes, with_header: bool) -> None:
    data = (hm.HEADER if with_header else b"") + junk
    for check_crc in (True, False):
        singles = [outcome(reader.decode_row, data, check_crc=check_crc) for reader in READERS]
        manys = [outcome(reader.decode_rows, data, check_crc=check_crc) for reader in READERS]
        assert all(r[:1] == singles[0][:1] for r in singles) and all(r[:1] == manys[0][:1] for r in manys)
        if singles[0][0] == "error":
            assert all(r == singles[0] for r in singles)


@settings(max_examples=300, deadline=None)
@given(position=st.integers(0, len(RICH) - 1), replacement=st.binary(min_size=1, max_size=6))
def test_spliced_garbage_only_raises_plainbuffer_error(position: int, replacement: bytes) -> None:
    data = RICH[:position] + replacement + RICH[position + len(replacement) :]
    results = [outcome(reader.decode_row, data, check_crc=False) for reader in READERS]
    assert all(r[0] == results[0][0] for r in results)
    if results[0][0] == "error":
        assert all(r == results[0] for r in results)


def test_flipped_cell_checksum_names_cell_and_both_values() -> None:
    data = encode_row([("k", 1)], [("col", 5, 10)])
    crc_at = len(data) - 3  # ... 0x0a <cell crc> 0x09 <row crc>
    corrupt = bytearray(data)
    corrupt[crc_at] ^= 0xFF
    exc = expect_error(bytes(corrupt), "cell checksum mismatch in cell 'col'")
    assert f"expected 0x{corrupt[crc_at]:02x} (stored), actual 0x{data[crc_at]:02x} (computed)" in exc.reason
    assert exc.offset == crc_at
    assert "byte offset" in str(exc) and "col" in str(exc)
    for reader in READERS:  # without CRC checks the same bytes are accepted
        assert reader.decode_row(bytes(corrupt), check_crc=False).cells[0].value == 5


def test_flipped_row_checksum() -> None:
    corrupt = bytearray(encode_row([("k", 1)], [("col", 5, 10)]))
    corrupt[-1] ^= 0x01
    exc = expect_error(bytes(corrupt), "row checksum mismatch: expected")
    assert exc.offset == len(corrupt) - 1


def test_bad_header() -> None:
    expect_error(b"\x76\x00\x00\x00" + RICH[4:], "bad header 0x00000076, expected 0x00000075")


def test_unknown_tag_where_the_row_checksum_belongs() -> None:
    corrupt = bytearray(encode_row([("k", 1)]))
    corrupt[-2] = 0x20
    exc = expect_error(bytes(corrupt), "expected TAG_ROW_CHECKSUM, found unknown tag 0x20")
    assert exc.offset == len(corrupt) - 2


def test_unknown_tag_inside_a_cell() -> None:
    wire, _ = hm.cell("c", hm.v_int(1))
    wire = wire[:-2] + b"\x30" + wire[-1:]
    data = hm.HEADER + b"\x01" + hm.cell("k", hm.v_int(1))[0] + b"\x02" + wire + b"\x09\x00"
    expect_error(data, "expected TAG_CELL_CHECKSUM in cell 'c', found unknown tag 0x30")


def test_row_must_start_with_primary_key_tag() -> None:
    expect_error(hm.HEADER + b"\x02\x09\x00", "expected TAG_ROW_PK, found TAG_ROW_DATA")


def _row_with_data_cell(wire_cell: tuple[bytes, int]) -> bytes:
    return hm.HEADER + hm.row([hm.cell("k", hm.v_int(1))], [wire_cell])


def test_unknown_value_type() -> None:
    exc = expect_error(_row_with_data_cell(hm.cell("c", b"\x06")), "unknown value type 0x06")
    assert exc.offset is not None


def test_inconsistent_value_length() -> None:
    expect_error(_row_with_data_cell(hm.cell("c", b"\x00" + b"\x01" * 4)), "inconsistent length 5")
    bad_string = b"\x03" + hm.u32(5) + b"ab"  # claims 5 bytes, carries 2
    expect_error(_row_with_data_cell(hm.cell("c", bad_string)), "inconsistent length 7")


def test_sentinel_outside_primary_key() -> None:
    expect_error(_row_with_data_cell(hm.cell("c", hm.V_INF_MAX)), "INF_MAX (value type 0x0a) is only valid")


def test_unknown_cell_type() -> None:
    expect_error(_row_with_data_cell(hm.cell("c", hm.v_int(1), cell_type=2)), "unknown cell type 0x02 in cell 'c'")


def test_boolean_byte_must_be_zero_or_one() -> None:
    expect_error(_row_with_data_cell(hm.cell("c", b"\x02\x02")), "BOOLEAN value byte is 2")


def test_invalid_utf8_in_name_and_value() -> None:
    bad_name = hm.HEADER + b"\x01\x03\x04" + hm.u32(2) + b"\xff\xfe" + b"\x05" + hm.u32(9) + hm.v_int(1)
    expect_error(bad_name + b"\x0a\x00\x09\x00", "not valid UTF-8 (invalid start byte)")
    bad_value = b"\x03" + hm.u32(2) + b"\xc3\x28"
    expect_error(_row_with_data_cell(hm.cell("c", bad_value)), "not valid UTF-8")


def test_primary_key_cell_must_have_only_a_value() -> None:
    expect_error(hm.HEADER + hm.row([hm.cell("k", hm.v_int(1), ts=5)]), "primary-key cell 'k' must have a value")
    expect_error(hm.HEADER + hm.row([hm.cell("k")]), "primary-key cell 'k' must have a value")


def test_huge_lengths_are_truncation_not_allocation() -> None:
    expect_error(hm.HEADER + b"\x01\x03\x04" + b"\xff\xff\xff\xff" + b"abc", "cell name runs past the end")
    value = hm.HEADER + b"\x01\x03\x04" + hm.u32(1) + b"k" + b"\x05\xff\xff\xff\xff\x03"
    expect_error(value, "cell value runs past the end")


def _with_extension(ext_payload: bytes) -> bytes:
    base = hm.row([hm.cell("k", hm.v_int(1))])
    return hm.HEADER + base[:-2] + b"\x0b" + hm.u32(len(ext_payload)) + ext_payload + base[-2:]


SEQ = hm.extension(5, 123456, 7)[5:]  # TAG_SEQ_INFO sub-tag with its length and payload


def test_unknown_extension_sub_tags_are_skipped() -> None:
    unknown = b"\x10" + hm.u32(3) + b"abc"
    known_tag_as_unknown = b"\x03" + hm.u32(0)
    for payload in (unknown + SEQ, SEQ + unknown, known_tag_as_unknown + SEQ + unknown):
        for reader in READERS:
            assert reader.decode_row(_with_extension(payload)).sequence == (5, 123456, 7)
    for reader in READERS:
        assert reader.decode_row(_with_extension(unknown)).sequence is None
        assert reader.decode_row(_with_extension(b"")).sequence is None


def test_longer_sequence_info_keeps_the_known_fields() -> None:
    longer = b"\x0c" + hm.u32(23) + SEQ[5:] + b"more"
    for reader in READERS:
        assert reader.decode_row(_with_extension(longer)).sequence == (5, 123456, 7)


def test_malformed_extensions() -> None:
    expect_error(_with_extension(b"\x10" + hm.u32(9) + b"abc"), "runs past the end of the extension")
    expect_error(_with_extension(b"\x10\x01"), "has no room for its length")
    expect_error(_with_extension(b"\x0c" + hm.u32(3) + b"abc"), "TAG_SEQ_INFO is 3 bytes, expected 19")
    wrong_inner = bytearray(SEQ)
    wrong_inner[5 + 5] = 0x0F  # where TAG_SEQ_INFO_TS belongs
    expect_error(_with_extension(bytes(wrong_inner)), "expected TAG_SEQ_INFO_TS, found TAG_SEQ_INFO_ROW_INDEX")
    huge = hm.HEADER + hm.row([hm.cell("k", hm.v_int(1))])[:-2] + b"\x0b\xff\xff\xff\x7f"
    expect_error(huge, "extension runs past the end of the data")


def test_garbage_after_last_row_of_a_block() -> None:
    data = encode_rows([]) + b"\x01"
    results = [outcome(reader.decode_rows, data) for reader in READERS]
    assert results[0][0] == "error" and "truncated" in results[0][1]
    assert all(r == results[0] for r in results)
