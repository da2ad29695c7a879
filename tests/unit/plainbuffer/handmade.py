"""PlainBuffer built by hand from the grammar (research/tablestore_stream.md §4), independent of our writer.

CRC-8 here is the bitwise definition (poly 0x07, init 0), not the table, so a wrong table would show.
"""

from __future__ import annotations

import struct


def crc8_bitwise(data: bytes, crc: int = 0) -> int:
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def u32(n: int) -> bytes:
    return struct.pack("<I", n)


def i64(n: int) -> bytes:
    return struct.pack("<q", n)


HEADER = u32(0x75)


# Variants: type byte + payload (the CRC covers exactly these bytes).
def v_int(n: int) -> bytes:
    return b"\x00" + i64(n)


def v_double(x: float) -> bytes:
    return b"\x01" + struct.pack("<d", x)


def v_bool(flag: bool) -> bytes:
    return b"\x02" + (b"\x01" if flag else b"\x00")


def v_str(text: str) -> bytes:
    raw = text.encode()
    return b"\x03" + u32(len(raw)) + raw


def v_blob(raw: bytes) -> bytes:
    return b"\x07" + u32(len(raw)) + raw


V_INF_MIN, V_INF_MAX, V_AUTO_INCREMENT = b"\x09", b"\x0a", b"\x0b"


def cell(
    name: str, variant: bytes | None = None, cell_type: int | None = None, ts: int | None = None
) -> tuple[bytes, int]:
    """Wire bytes of one cell and its CRC. Wire: name, value, type, timestamp; CRC: name, value, ts, type."""
    raw_name = name.encode()
    wire = b"\x03\x04" + u32(len(raw_name)) + raw_name
    crc = crc8_bitwise(raw_name)
    if variant is not None:
        wire += b"\x05" + u32(len(variant)) + variant
        crc = crc8_bitwise(variant, crc)
    if cell_type is not None:
        wire += b"\x06" + bytes([cell_type])
    if ts is not None:
        wire += b"\x07" + i64(ts)
        crc = crc8_bitwise(i64(ts), crc)
    if cell_type is not None:
        crc = crc8_bitwise(bytes([cell_type]), crc)
    return wire + b"\x0a" + bytes([crc]), crc


def extension(epoch: int, ts_us: int, row_index: int) -> bytes:
    seq = b"\x0d" + u32(epoch) + b"\x0e" + i64(ts_us) + b"\x0f" + u32(row_index)
    assert len(seq) == 19
    return b"\x0b" + u32(24) + b"\x0c" + u32(19) + seq


def row(
    pk_cells: list[tuple[bytes, int]],
    data_cells: list[tuple[bytes, int]] = (),
    *,
    delete_marker: bool = False,
    ext: bytes = b"",
) -> bytes:
    """One row (no header). Row CRC: each cell CRC, then the delete-marker byte; the extension is excluded."""
    wire = b"\x01" + b"".join(w for w, _ in pk_cells)
    crcs = [c for _, c in pk_cells]
    if data_cells:
        wire += b"\x02" + b"".join(w for w, _ in data_cells)
        crcs += [c for _, c in data_cells]
    if delete_marker:
        wire += b"\x08"
    row_crc = crc8_bitwise(bytes(crcs) + (b"\x01" if delete_marker else b"\x00"))
    return wire + ext + b"\x09" + bytes([row_crc])
