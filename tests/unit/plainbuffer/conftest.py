"""Both readers (pure Python and, when built, the C accelerator) run every reader test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from cdcbridge.tablestore.plainbuffer import PlainBufferError, PlainRow
from cdcbridge.tablestore.plainbuffer.accelerator import speedups
from cdcbridge.tablestore.plainbuffer.reader import py_parse_rows, py_parse_single_row, to_plain_row

IMPLEMENTATIONS = ["python"] + (["c"] if speedups is not None else [])


@dataclass(frozen=True)
class Reader:
    """decode_row / decode_rows bound to one implementation."""

    name: str
    parse_rows: Callable
    parse_single_row: Callable

    def decode_row(self, data: bytes, *, check_crc: bool = True) -> PlainRow:
        return to_plain_row(self.parse_single_row(bytes(data), check_crc))

    def decode_rows(self, data: bytes, *, check_crc: bool = True) -> list[PlainRow]:
        return [to_plain_row(raw) for raw in self.parse_rows(bytes(data), check_crc)]


def reader_for(name: str) -> Reader:
    if name == "python":
        return Reader("python", py_parse_rows, py_parse_single_row)
    assert speedups is not None
    return Reader("c", speedups.parse_rows, speedups.parse_single_row)


READERS = [reader_for(name) for name in IMPLEMENTATIONS]


@pytest.fixture(params=IMPLEMENTATIONS)
def reader(request: pytest.FixtureRequest) -> Reader:
    return reader_for(request.param)


def outcome(fn: Callable, *args, **kwargs) -> tuple:
    """("ok", result) or ("error", reason, offset); any other exception propagates and fails the test."""
    try:
        return ("ok", fn(*args, **kwargs))
    except PlainBufferError as exc:
        return ("error", exc.reason, exc.offset)
