"""PlainBuffer reader: rows of GetRow/GetRange answers, SDK write requests and stream records.

Unlike the SDK's reader it understands cell types and the sequence extension, and checks the cell CRC in the order
the writers compute it (name, value, timestamp, cell type). `parse_row` is the pure-Python reference: one flat
function (struct unpackers bound locally, per-byte loops only to verify checksums, no helper call per cell).
_speedups.c mirrors it check for check and is used when built. Every malformed input ends in PlainBufferError:
the parser never reads past the end and never loops without consuming bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from cdcbridge.tablestore.plainbuffer.accelerator import speedups
from cdcbridge.tablestore.plainbuffer.constants import (
    CELL_TYPES,
    HEADER,
    SEQ_INFO_SIZE,
    TAG_CELL,
    TAG_CELL_CHECKSUM,
    TAG_CELL_NAME,
    TAG_CELL_TIMESTAMP,
    TAG_CELL_TYPE,
    TAG_CELL_VALUE,
    TAG_DELETE_ROW_MARKER,
    TAG_EXTENSION,
    TAG_ROW_CHECKSUM,
    TAG_ROW_DATA,
    TAG_ROW_PK,
    TAG_SEQ_INFO,
    TAG_SEQ_INFO_EPOCH,
    TAG_SEQ_INFO_ROW_INDEX,
    TAG_SEQ_INFO_TS,
    VT_BLOB,
    VT_BOOLEAN,
    VT_DOUBLE,
    VT_INTEGER,
    VT_STRING,
    tag_name,
)
from cdcbridge.tablestore.plainbuffer.crc import CRC8_TABLE
from cdcbridge.tablestore.plainbuffer.errors import PlainBufferError
from cdcbridge.tablestore.plainbuffer.rows import SENTINELS_BY_TYPE, PlainCell, PlainRow, Value

#: A decoded row before it becomes a PlainRow or a ChangeRecord:
#: (primary_key [(name, value)], cells [(name, value, cell_type, timestamp)], delete_marker, sequence).
RawRow = tuple[list, list, bool, "tuple[int, int, int] | None"]

_unpack_u32 = struct.Struct("<I").unpack_from
_unpack_i64 = struct.Struct("<q").unpack_from
_unpack_f64 = struct.Struct("<d").unpack_from
_unpack_len_type = struct.Struct("<IB").unpack_from
_unpack_seq_info = struct.Struct("<BIBqBI").unpack_from
_SENTINELS = SENTINELS_BY_TYPE
_KNOWN_VALUE_TYPES = {VT_INTEGER, VT_DOUBLE, VT_BOOLEAN, VT_STRING, VT_BLOB, *SENTINELS_BY_TYPE}


def _value_error(vt: int, vlen: int, offset: int, in_pk: bool) -> PlainBufferError:
    """Explain why a TAG_CELL_VALUE was rejected (kept out of the hot loop)."""
    if vt not in _KNOWN_VALUE_TYPES:
        return PlainBufferError(f"unknown value type 0x{vt:02x}", offset)
    if vt in _SENTINELS and not in_pk:
        return PlainBufferError(f"{_SENTINELS[vt]!r} (value type 0x{vt:02x}) is only valid in a primary key", offset)
    return PlainBufferError(f"value of type 0x{vt:02x} has inconsistent length {vlen}", offset)


def parse_row(data: bytes, pos: int, check_crc: bool) -> tuple[RawRow, int]:
    """Parse the row starting at `pos` (at TAG_ROW_PK); return it and the offset after its checksum.

    Raises PlainBufferError; truncation surfaces as IndexError/struct.error and bad UTF-8 as UnicodeDecodeError,
    which the callers translate (they know where the row started). _speedups.c mirrors this function.
    """
    end = len(data)
    unpack_u32 = _unpack_u32
    unpack_len_type = _unpack_len_type
    table = CRC8_TABLE
    if data[pos] != TAG_ROW_PK:
        raise PlainBufferError(f"expected TAG_ROW_PK, found {tag_name(data[pos])}", pos)
    pos += 1
    primary_key: list = []
    cells: list = []
    in_pk = True
    row_crc = 0
    while True:
        tag = data[pos]
        if tag != TAG_CELL:
            if tag == TAG_ROW_DATA and in_pk:
                in_pk = False
                pos += 1
                continue
            break
        cell_start = pos
        if data[pos + 1] != TAG_CELL_NAME:
            raise PlainBufferError(f"expected TAG_CELL_NAME after TAG_CELL, found {tag_name(data[pos + 1])}", pos + 1)
        name_start = pos + 6
        name_end = name_start + unpack_u32(data, pos + 2)[0]
        if name_end > end:
            raise PlainBufferError("cell name runs past the end of the data (truncated)", pos + 2)
        name = data[name_start:name_end].decode()
        pos = name_end
        tag = data[pos]
        value: Value | object | None = None
        value_start = 0
        if tag == TAG_CELL_VALUE:
            vlen, vt = unpack_len_type(data, pos + 1)
            value_start = pos + 5
            pos = value_start + vlen
            if pos > end:
                raise PlainBufferError("cell value runs past the end of the data (truncated)", value_start - 4)
            if vt == VT_INTEGER and vlen == 9:
                value = _unpack_i64(data, value_start + 1)[0]
            elif vt in (VT_STRING, VT_BLOB) and vlen >= 5 and unpack_u32(data, value_start + 1)[0] == vlen - 5:
                value = data[value_start + 5 : pos]
                if vt == VT_STRING:
                    value = value.decode()
            elif vt == VT_DOUBLE and vlen == 9:
                value = _unpack_f64(data, value_start + 1)[0]
            elif vt == VT_BOOLEAN and vlen == 2:
                flag = data[value_start + 1]
                if flag > 1:
                    raise PlainBufferError(f"BOOLEAN value byte is {flag}, expected 0 or 1", value_start + 1)
                value = flag == 1
            elif vt in _SENTINELS and vlen == 1 and in_pk:
                value = _SENTINELS[vt]
            else:
                raise _value_error(vt, vlen, value_start, in_pk)
            tag = data[pos]
        cell_type = None
        if tag == TAG_CELL_TYPE:
            cell_type = data[pos + 1]
            if cell_type not in CELL_TYPES:
                raise PlainBufferError(f"unknown cell type 0x{cell_type:02x} in cell {name!r}", pos + 1)
            pos += 2
            tag = data[pos]
        timestamp = None
        if tag == TAG_CELL_TIMESTAMP:
            timestamp = _unpack_i64(data, pos + 1)[0]
            pos += 9
            tag = data[pos]
        if tag != TAG_CELL_CHECKSUM:
            raise PlainBufferError(f"expected TAG_CELL_CHECKSUM in cell {name!r}, found {tag_name(tag)}", pos)
        if check_crc:
            crc = 0
            for byte in data[name_start:name_end]:
                crc = table[crc ^ byte]
            if value_start:
                for byte in data[value_start : value_start + vlen]:
                    crc = table[crc ^ byte]
            if timestamp is not None:
                for byte in data[pos - 8 : pos]:
                    crc = table[crc ^ byte]
            if cell_type is not None:
                crc = table[crc ^ cell_type]
            stored = data[pos + 1]
            if crc != stored:
                raise PlainBufferError(
                    f"cell checksum mismatch in cell {name!r}: expected 0x{stored:02x} (stored), "
                    f"actual 0x{crc:02x} (computed)",
                    pos + 1,
                )
            row_crc = table[row_crc ^ crc]
        elif pos + 1 >= end:
            raise IndexError
        pos += 2
        if in_pk:
            if value is None or cell_type is not None or timestamp is not None:
                raise PlainBufferError(
                    f"primary-key cell {name!r} must have a value and no cell type or timestamp", cell_start
                )
            primary_key.append((name, value))
        else:
            cells.append((name, value, cell_type, timestamp))

    delete_marker = tag == TAG_DELETE_ROW_MARKER
    if delete_marker:
        pos += 1
        tag = data[pos]
    sequence = None
    if tag == TAG_EXTENSION:
        sequence, pos = _parse_extension(data, pos)
        tag = data[pos]
    if tag != TAG_ROW_CHECKSUM:
        raise PlainBufferError(f"expected TAG_ROW_CHECKSUM, found {tag_name(tag)}", pos)
    stored = data[pos + 1]
    if check_crc:
        row_crc = table[row_crc ^ delete_marker]
        if row_crc != stored:
            raise PlainBufferError(
                f"row checksum mismatch: expected 0x{stored:02x} (stored), actual 0x{row_crc:02x} (computed)", pos + 1
            )
    return (primary_key, cells, delete_marker, sequence), pos + 2


def _parse_extension(data: bytes, pos: int) -> tuple[tuple[int, int, int] | None, int]:
    """TAG_EXTENSION at `pos`: a length, then sub-tags each with an int32 length; unknown ones are skipped."""
    ext_start = pos + 5
    ext_end = ext_start + _unpack_u32(data, pos + 1)[0]
    if ext_end > len(data):
        raise PlainBufferError("extension runs past the end of the data (truncated)", pos + 1)
    sequence = None
    sub = ext_start
    while sub < ext_end:
        sub_tag = data[sub]
        if sub + 5 > ext_end:
            raise PlainBufferError(f"extension sub-tag {tag_name(sub_tag)} has no room for its length", sub)
        payload = sub + 5
        payload_end = payload + _unpack_u32(data, sub + 1)[0]
        if payload_end > ext_end:
            raise PlainBufferError(f"extension sub-tag {tag_name(sub_tag)} runs past the end of the extension", sub)
        if sub_tag == TAG_SEQ_INFO:
            if payload_end - payload < SEQ_INFO_SIZE:
                raise PlainBufferError(f"TAG_SEQ_INFO is {payload_end - payload} bytes, expected {SEQ_INFO_SIZE}", sub)
            t_epoch, epoch, t_ts, timestamp_us, t_row, row_index = _unpack_seq_info(data, payload)
            for offset, found, wanted in (
                (0, t_epoch, TAG_SEQ_INFO_EPOCH),
                (5, t_ts, TAG_SEQ_INFO_TS),
                (14, t_row, TAG_SEQ_INFO_ROW_INDEX),
            ):
                if found != wanted:
                    raise PlainBufferError(f"expected {tag_name(wanted)}, found {tag_name(found)}", payload + offset)
            sequence = (epoch, timestamp_us, row_index)
        sub = payload_end
    return sequence, ext_end


def _truncated(data: bytes, row_start: int) -> PlainBufferError:
    return PlainBufferError(f"data ends inside the row that starts at offset {row_start} (truncated)", len(data))


def _bad_utf8(exc: UnicodeDecodeError, row_start: int) -> PlainBufferError:
    return PlainBufferError(
        f"a cell name or STRING value in the row at offset {row_start} is not valid UTF-8 ({exc.reason})", row_start
    )


def _check_header(data: bytes) -> None:
    if len(data) < 4:
        raise PlainBufferError(f"data is {len(data)} bytes, too short for the 4-byte header (truncated)", 0)
    header = _unpack_u32(data, 0)[0]
    if header != HEADER:
        raise PlainBufferError(f"bad header 0x{header:08x}, expected 0x{HEADER:08x}", 0)


def py_parse_rows(data: bytes, check_crc: bool = True) -> list[RawRow]:
    """All rows of a block (empty data, or a bare header, is zero rows). Pure-Python reference."""
    if not data:
        return []
    _check_header(data)
    rows = []
    pos = 4
    end = len(data)
    while pos < end:
        start = pos
        try:
            row, pos = parse_row(data, pos, check_crc)
        except (IndexError, struct.error):
            raise _truncated(data, start) from None
        except UnicodeDecodeError as exc:
            raise _bad_utf8(exc, start) from None
        rows.append(row)
    return rows


def py_parse_single_row(data: bytes, check_crc: bool = True) -> RawRow:
    """The one row of a block that must hold exactly one (GetRow answers, write requests, stream records).
    Pure-Python reference."""
    _check_header(data)
    try:
        row, pos = parse_row(data, 4, check_crc)
    except (IndexError, struct.error):
        raise _truncated(data, 4) from None
    except UnicodeDecodeError as exc:
        raise _bad_utf8(exc, 4) from None
    if pos != len(data):
        raise PlainBufferError(f"expected exactly one row, but {len(data) - pos} more bytes follow it", pos)
    return row


#: The readers the public functions use: the C accelerator's when it is built, else the pure-Python ones.
parse_rows: Callable[[bytes, bool], list[RawRow]] = speedups.parse_rows if speedups else py_parse_rows
parse_single_row: Callable[[bytes, bool], RawRow] = speedups.parse_single_row if speedups else py_parse_single_row


def _as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    return data if type(data) is bytes else bytes(data)


def to_plain_row(raw: RawRow) -> PlainRow:
    """A raw parsed row as the public PlainRow."""
    primary_key, cells, delete_marker, sequence = raw
    return PlainRow(primary_key, [PlainCell(*cell) for cell in cells], delete_marker, sequence)


def decode_rows(data: bytes | bytearray | memoryview, *, check_crc: bool = True) -> list[PlainRow]:
    """Every row of a PlainBuffer block (GetRange/BatchGetRow answers)."""
    return [to_plain_row(raw) for raw in parse_rows(_as_bytes(data), check_crc)]


def decode_row(data: bytes | bytearray | memoryview, *, check_crc: bool = True) -> PlainRow:
    """The single row of a block; more or fewer rows is an error."""
    return to_plain_row(parse_single_row(_as_bytes(data), check_crc))


def decode_column_value(data: bytes | bytearray | memoryview) -> Value:
    """Inverse of encode_column_value: type byte + payload, exactly, no length prefix."""
    data = _as_bytes(data)
    if not data:
        raise PlainBufferError("column value is empty (truncated)", 0)
    vt = data[0]
    size = len(data)
    try:
        if vt == VT_INTEGER and size == 9:
            return _unpack_i64(data, 1)[0]
        if vt == VT_DOUBLE and size == 9:
            return _unpack_f64(data, 1)[0]
        if vt == VT_BOOLEAN and size == 2 and data[1] <= 1:
            return data[1] == 1
        if vt in (VT_STRING, VT_BLOB) and size >= 5 and _unpack_u32(data, 1)[0] == size - 5:
            return data[5:].decode() if vt == VT_STRING else data[5:]
    except UnicodeDecodeError as exc:
        raise PlainBufferError(f"STRING column value is not valid UTF-8 ({exc.reason})", 5) from None
    if vt not in _KNOWN_VALUE_TYPES:
        raise PlainBufferError(f"unknown value type 0x{vt:02x}", 0)
    if vt in _SENTINELS:
        raise PlainBufferError(f"{_SENTINELS[vt]!r} is not a column value", 0)
    raise PlainBufferError(f"column value of type 0x{vt:02x} has inconsistent length {size}", 0)
