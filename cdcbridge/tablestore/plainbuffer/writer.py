"""PlainBuffer writer: rows for the emulator's answers and stream records, values for column filters.

Layout and checksums follow the Java SDK's PlainBufferCodedOutputStream; the one trap is that a cell's CRC covers
the timestamp before the cell type although the wire carries the type first.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from cdcbridge.tablestore.plainbuffer.constants import (
    CELL_TYPES,
    EXTENSION_SIZE,
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
)
from cdcbridge.tablestore.plainbuffer.crc import CRC8_TABLE, crc8
from cdcbridge.tablestore.plainbuffer.errors import PlainBufferEncodeError
from cdcbridge.tablestore.plainbuffer.rows import PlainCell, PlainRow, PrimaryKeySentinel

_HEADER_BYTES = struct.pack("<I", HEADER)
_pack_u32 = struct.Struct("<I").pack
_pack_i64 = struct.Struct("<q").pack
_pack_f64 = struct.Struct("<d").pack
_CELL_NAME_PREFIX = bytes((TAG_CELL, TAG_CELL_NAME))
_SEQ_INFO = struct.Struct("<BIBIBIBqBI")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT32_MAX = (1 << 32) - 1
_TRUE = bytes((VT_BOOLEAN, 1))
_FALSE = bytes((VT_BOOLEAN, 0))

#: A cell as the writer accepts it: a PlainCell, or a (name, value) / (name, value, timestamp) tuple.
CellLike = PlainCell | tuple


def _check_int64(value: int, what: str) -> None:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise PlainBufferEncodeError(f"{what} {value} does not fit a signed 64-bit integer")


def _encode_variant(value: object, *, primary_key: bool) -> bytes:
    """Type byte + payload of one value, as it appears after the int32 length of TAG_CELL_VALUE."""
    if isinstance(value, bool):  # before int: bool is an int subclass but a different Tablestore type
        return _TRUE if value else _FALSE
    if isinstance(value, int):
        _check_int64(value, "INTEGER value")
        return bytes((VT_INTEGER,)) + _pack_i64(value)
    if isinstance(value, str):
        try:
            raw = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PlainBufferEncodeError(f"STRING value {value!r} is not encodable as UTF-8 ({exc.reason})") from None
        return bytes((VT_STRING,)) + _pack_u32(len(raw)) + raw
    if isinstance(value, float):
        return bytes((VT_DOUBLE,)) + _pack_f64(value)
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        return bytes((VT_BLOB,)) + _pack_u32(len(raw)) + raw
    if isinstance(value, PrimaryKeySentinel):
        if not primary_key:
            raise PlainBufferEncodeError(f"{value!r} is only allowed as a primary-key value, not in an attribute cell")
        return bytes((value.variant_type,))
    raise PlainBufferEncodeError(
        f"unsupported value type {type(value).__name__} ({value!r}); use int, float, bool, str or bytes"
    )


def encode_column_value(value: object) -> bytes:
    """The value form used inside column filters (SingleColumnValueFilter.column_value): type byte + payload,
    without the length prefix."""
    return _encode_variant(value, primary_key=False)


def _write_cell(
    out: bytearray,
    name: str,
    variant: bytes | None,
    cell_type: int | None,
    timestamp: int | None,
) -> int:
    """Append one cell and return its CRC (needed for the row CRC)."""
    if not isinstance(name, str):
        raise PlainBufferEncodeError(f"cell name must be str, got {type(name).__name__} ({name!r})")
    try:
        raw_name = name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PlainBufferEncodeError(f"cell name {name!r} is not encodable as UTF-8 ({exc.reason})") from None
    out += _CELL_NAME_PREFIX
    out += _pack_u32(len(raw_name))
    out += raw_name
    crc = crc8(raw_name)
    if variant is not None:
        out.append(TAG_CELL_VALUE)
        out += _pack_u32(len(variant))
        out += variant
        crc = crc8(variant, crc)
    if cell_type is not None:
        if cell_type not in CELL_TYPES:
            raise PlainBufferEncodeError(
                f"cell {name!r}: unknown cell type {cell_type!r}; use CELL_DELETE_ALL_VERSION (1), "
                "CELL_DELETE_ONE_VERSION (3) or CELL_INCREMENT (4), or None for a put"
            )
        out.append(TAG_CELL_TYPE)
        out.append(cell_type)
    if timestamp is not None:
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise PlainBufferEncodeError(f"cell {name!r}: timestamp must be an int (ms), got {timestamp!r}")
        _check_int64(timestamp, f"cell {name!r}: timestamp")
        raw_ts = _pack_i64(timestamp)
        out.append(TAG_CELL_TIMESTAMP)
        out += raw_ts
        crc = crc8(raw_ts, crc)
    if cell_type is not None:  # CRC order: timestamp, then cell type (wire order is the reverse)
        crc = CRC8_TABLE[crc ^ cell_type]
    out.append(TAG_CELL_CHECKSUM)
    out.append(crc)
    return crc


def _as_cell(cell: CellLike) -> PlainCell:
    if isinstance(cell, PlainCell):
        return cell
    if isinstance(cell, tuple) and len(cell) in (2, 3):
        return PlainCell(cell[0], cell[1], None, cell[2] if len(cell) == 3 else None)
    raise PlainBufferEncodeError(
        f"attribute cell must be a PlainCell or a (name, value[, timestamp]) tuple, got {cell!r}"
    )


def _write_sequence(out: bytearray, sequence: Sequence[int]) -> None:
    try:
        epoch, timestamp_us, row_index = sequence
    except (TypeError, ValueError):
        raise PlainBufferEncodeError(f"sequence must be (epoch, timestamp_us, row_index), got {sequence!r}") from None
    for what, number in (("epoch", epoch), ("row_index", row_index)):
        if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= _UINT32_MAX:
            raise PlainBufferEncodeError(f"sequence {what} {number!r} must be an int in 0..{_UINT32_MAX}")
    if isinstance(timestamp_us, bool) or not isinstance(timestamp_us, int):
        raise PlainBufferEncodeError(f"sequence timestamp_us must be an int, got {timestamp_us!r}")
    _check_int64(timestamp_us, "sequence timestamp_us")
    out += _SEQ_INFO.pack(
        TAG_EXTENSION,
        EXTENSION_SIZE,
        TAG_SEQ_INFO,
        SEQ_INFO_SIZE,
        TAG_SEQ_INFO_EPOCH,
        epoch,
        TAG_SEQ_INFO_TS,
        timestamp_us,
        TAG_SEQ_INFO_ROW_INDEX,
        row_index,
    )


def _write_row(
    out: bytearray,
    primary_key: Iterable[tuple[str, object]],
    cells: Iterable[CellLike],
    delete_marker: bool,
    sequence: Sequence[int] | None,
) -> None:
    table = CRC8_TABLE
    row_crc = 0
    out.append(TAG_ROW_PK)
    for column in primary_key:
        try:
            name, value = column
        except (TypeError, ValueError):
            raise PlainBufferEncodeError(f"primary-key column must be a (name, value) pair, got {column!r}") from None
        row_crc = table[row_crc ^ _write_cell(out, name, _encode_variant(value, primary_key=True), None, None)]
    wrote_data_tag = False
    for cell_like in cells:
        if not wrote_data_tag:  # ROW_DATA only when there is at least one cell
            out.append(TAG_ROW_DATA)
            wrote_data_tag = True
        cell = _as_cell(cell_like)
        variant = None if cell.value is None else _encode_variant(cell.value, primary_key=False)
        row_crc = table[row_crc ^ _write_cell(out, cell.name, variant, cell.cell_type, cell.timestamp)]
    if delete_marker:
        out.append(TAG_DELETE_ROW_MARKER)
    row_crc = table[row_crc ^ (1 if delete_marker else 0)]
    if sequence is not None:  # the extension is outside the row CRC
        _write_sequence(out, sequence)
    out.append(TAG_ROW_CHECKSUM)
    out.append(row_crc)


def encode_row(
    primary_key: Iterable[tuple[str, object]],
    cells: Iterable[CellLike] = (),
    *,
    delete_marker: bool = False,
    sequence: Sequence[int] | None = None,
) -> bytes:
    """A block holding one row: what PutRow/UpdateRow/DeleteRow send, GetRow answers and a stream record carries.

    `sequence` = (epoch, timestamp_us, row_index) adds the stream-record extension.
    """
    out = bytearray(_HEADER_BYTES)
    _write_row(out, primary_key, cells, delete_marker, sequence)
    return bytes(out)


def encode_rows(rows: Iterable[PlainRow]) -> bytes:
    """A block holding several rows, as GetRange and BatchGetRow answers carry them (header only if no rows)."""
    out = bytearray(_HEADER_BYTES)
    for row in rows:
        _write_row(out, row.primary_key, row.cells, row.delete_marker, row.sequence)
    return bytes(out)
