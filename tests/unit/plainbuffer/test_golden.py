"""Golden bytes built by hand from the grammar: the writer must produce them, the readers must parse them."""

from __future__ import annotations

import math

from cdcbridge.tablestore.plainbuffer import (
    AUTO_INCREMENT,
    CELL_DELETE_ALL_VERSION,
    CELL_DELETE_ONE_VERSION,
    CELL_INCREMENT,
    INF_MAX,
    INF_MIN,
    PlainCell,
    PlainRow,
    encode_row,
    encode_rows,
)
from cdcbridge.tablestore.plainbuffer.crc import CRC8_TABLE, crc8

from . import handmade as hm


def test_crc_table_matches_bitwise_definition_and_sdk() -> None:
    from tablestore.plainbuffer.plain_buffer_crc8 import CRC8_TABLE as SDK_TABLE

    assert [hm.crc8_bitwise(bytes([b])) for b in range(256)] == CRC8_TABLE == SDK_TABLE
    assert crc8(b"123456789") == hm.crc8_bitwise(b"123456789") == 0xF4  # CRC-8/SMBUS check value


def test_smallest_row_literal_bytes() -> None:
    # PK ("a", 1): name CRC over b"a", value CRC over type 0x00 + int64 LE 1; row CRC over that + 0x00.
    cell_crc = hm.crc8_bitwise(b"a" + b"\x00" + (1).to_bytes(8, "little"))
    row_crc = hm.crc8_bitwise(bytes([cell_crc, 0]))
    expected = (
        bytes.fromhex("75000000" "01" "03" "04" "01000000") + b"a"
        + bytes.fromhex("05" "09000000" "00" "0100000000000000" "0a") + bytes([cell_crc])
        + bytes.fromhex("09") + bytes([row_crc])
    )  # fmt: skip
    assert encode_row([("a", 1)]) == expected


def test_put_row_with_every_value_type() -> None:
    pk = [hm.cell("id", hm.v_str("user-1")), hm.cell("seq", hm.v_int(-7))]
    data = [
        hm.cell("i", hm.v_int(2**63 - 1), ts=1700000000000),
        hm.cell("d", hm.v_double(-0.5), ts=1),
        hm.cell("b", hm.v_bool(True), ts=2),
        hm.cell("f", hm.v_bool(False), ts=3),
        hm.cell("s", hm.v_str("héllo ✓"), ts=4),
        hm.cell("e", hm.v_str(""), ts=5),
        hm.cell("x", hm.v_blob(b"\x00\xff\x10"), ts=6),
    ]
    golden = hm.HEADER + hm.row(pk, data)
    cells = [
        PlainCell("i", 2**63 - 1, None, 1700000000000),
        PlainCell("d", -0.5, None, 1),
        PlainCell("b", True, None, 2),
        PlainCell("f", False, None, 3),
        PlainCell("s", "héllo ✓", None, 4),
        PlainCell("e", "", None, 5),
        PlainCell("x", b"\x00\xff\x10", None, 6),
    ]
    assert encode_row([("id", "user-1"), ("seq", -7)], cells) == golden


def test_update_cells_crc_covers_timestamp_before_type(reader) -> None:
    pk = [hm.cell("k", hm.v_int(1))]
    data = [
        hm.cell("put", hm.v_int(5), ts=10),
        hm.cell("del1", None, cell_type=3, ts=11),
        hm.cell("delall", None, cell_type=1),
        hm.cell("inc", hm.v_int(-3), cell_type=4),
        hm.cell("inc_ts", hm.v_int(2), cell_type=4, ts=12),
    ]
    golden = hm.HEADER + hm.row(pk, data)
    cells = [
        PlainCell("put", 5, None, 10),
        PlainCell("del1", None, CELL_DELETE_ONE_VERSION, 11),
        PlainCell("delall", None, CELL_DELETE_ALL_VERSION, None),
        PlainCell("inc", -3, CELL_INCREMENT, None),
        PlainCell("inc_ts", 2, CELL_INCREMENT, 12),
    ]
    assert encode_row([("k", 1)], cells) == golden
    assert reader.decode_row(golden) == PlainRow([("k", 1)], cells)
    # Wire order really is type before timestamp (the trap): the type tag precedes the timestamp tag.
    del1 = data[1][0]
    assert del1.index(b"\x06\x03") < del1.index(b"\x07")


def test_delete_marker_and_sequence_extension(reader) -> None:
    pk = [hm.cell("k", hm.v_str("a")), hm.cell("n", hm.v_int(2))]
    golden = hm.HEADER + hm.row(pk, delete_marker=True, ext=hm.extension(7, 1_700_000_000_123_456, 3))
    encoded = encode_row([("k", "a"), ("n", 2)], delete_marker=True, sequence=(7, 1_700_000_000_123_456, 3))
    assert encoded == golden
    assert reader.decode_row(golden) == PlainRow(
        [("k", "a"), ("n", 2)], [], delete_marker=True, sequence=(7, 1_700_000_000_123_456, 3)
    )


def test_extension_is_outside_the_row_crc(reader) -> None:
    pk = [hm.cell("k", hm.v_int(1))]
    without = hm.row(pk, [hm.cell("c", hm.v_int(1), ts=1)])
    with_ext = hm.row(pk, [hm.cell("c", hm.v_int(1), ts=1)], ext=hm.extension(1, 2, 3))
    assert without[-1] == with_ext[-1]
    assert reader.decode_row(hm.HEADER + with_ext).sequence == (1, 2, 3)


def test_primary_key_sentinels(reader) -> None:
    pk = [hm.cell("a", hm.V_INF_MIN), hm.cell("b", hm.V_INF_MAX), hm.cell("c", hm.V_AUTO_INCREMENT)]
    golden = hm.HEADER + hm.row(pk)
    assert encode_row([("a", INF_MIN), ("b", INF_MAX), ("c", AUTO_INCREMENT)]) == golden
    decoded = reader.decode_row(golden)
    assert decoded.primary_key[0][1] is INF_MIN
    assert decoded.primary_key[1][1] is INF_MAX
    assert decoded.primary_key[2][1] is AUTO_INCREMENT


def test_several_rows_in_one_block(reader) -> None:
    rows = [
        PlainRow([("k", 1)], [PlainCell("c", 1.5, None, 9)]),
        PlainRow([("k", 2)], []),
        PlainRow([("k", 3)], [PlainCell("c", "z", None, 9)], delete_marker=False),
    ]
    golden = hm.HEADER + b"".join(
        [
            hm.row([hm.cell("k", hm.v_int(1))], [hm.cell("c", hm.v_double(1.5), ts=9)]),
            hm.row([hm.cell("k", hm.v_int(2))]),
            hm.row([hm.cell("k", hm.v_int(3))], [hm.cell("c", hm.v_str("z"), ts=9)]),
        ]
    )
    assert encode_rows(rows) == golden
    assert reader.decode_rows(golden) == rows


def test_empty_block_and_bare_header_hold_no_rows(reader) -> None:
    assert reader.decode_rows(b"") == []
    assert reader.decode_rows(hm.HEADER) == []
    assert encode_rows([]) == hm.HEADER


def test_value_types_are_not_confused(reader) -> None:
    row = reader.decode_row(
        encode_row(
            [("k", 0)],
            [("t", True), ("one", 1), ("f", 1.0), ("s", "1"), ("b", b"1"), ("ba", bytearray(b"1"))],
        )
    )
    values = [cell.value for cell in row.cells]
    assert [type(v) for v in values] == [bool, int, float, str, bytes, bytes]
    assert values[0] is True


def test_special_doubles(reader) -> None:
    row = reader.decode_row(encode_row([("k", 0)], [("n", math.nan), ("p", math.inf), ("m", -math.inf), ("z", -0.0)]))
    n, p, m, z = (cell.value for cell in row.cells)
    assert math.isnan(n) and p == math.inf and m == -math.inf
    assert z == 0.0 and math.copysign(1.0, z) == -1.0


def test_sentinels_and_errors_survive_pickling() -> None:
    import copy
    import pickle

    from cdcbridge.tablestore.plainbuffer import PlainBufferError

    assert pickle.loads(pickle.dumps([INF_MIN, INF_MAX, AUTO_INCREMENT])) == [INF_MIN, INF_MAX, AUTO_INCREMENT]
    assert copy.deepcopy(INF_MIN) is INF_MIN and repr(INF_MAX) == "INF_MAX"
    error = pickle.loads(pickle.dumps(PlainBufferError("bad tag", 7, shard_id="s-1", record_index=3)))
    assert (error.reason, error.offset, error.shard_id, error.record_index) == ("bad tag", 7, "s-1", 3)
    assert str(error) == "invalid PlainBuffer (shard 's-1', record #3, byte offset 7): bad tag"
