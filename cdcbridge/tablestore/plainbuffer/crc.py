"""CRC-8 of PlainBuffer cells and rows: polynomial 0x07, init 0, no reflection, no final xor.

The table is a plain list: indexing a list is the fastest per-byte step pure Python has (measured faster than a
bytes table, a 16-bit pair table or memoryview word iteration on CPython 3.11).
"""

from __future__ import annotations

from collections.abc import Iterable

_POLYNOMIAL = 0x07


def _build_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = ((crc << 1) ^ _POLYNOMIAL) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
        table.append(crc)
    return table


#: CRC8_TABLE[crc ^ byte] is the next CRC; identical to the table of the official SDKs.
CRC8_TABLE: list[int] = _build_table()


def crc8(data: Iterable[int], crc: int = 0) -> int:
    """CRC of `data` (bytes or any iterable of byte values), continuing from `crc`."""
    table = CRC8_TABLE
    for byte in data:
        crc = table[crc ^ byte]
    return crc
