"""The seq block: its fields, and seq_key text order equal to (epoch, timestamp_us, row_index, op_index) order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.changes import Sequence
from cdcbridge.formats.common import seq_block
from cdcbridge.formats.errors import InvalidRecordError

EPOCHS = st.integers(min_value=0, max_value=10**10 - 1)
TIMESTAMPS = st.integers(min_value=0, max_value=2**63 - 1)
ROWS = st.integers(min_value=0, max_value=10**10 - 1)
OPS = st.integers(min_value=0, max_value=10**6 - 1)
POSITIONS = st.tuples(EPOCHS, TIMESTAMPS, ROWS, OPS)


def test_seq_block_fields() -> None:
    assert seq_block(Sequence(3, 1_700_000_000_000_123, 42), 5) == {
        "epoch": 3,
        "timestamp_us": 1_700_000_000_000_123,
        "row_index": 42,
        "op_index": 5,
        "seq_key": "0000000003" + "00001700000000000123" + "0000000042" + "000005",
    }


def test_seq_key_is_fixed_width() -> None:
    assert len(seq_block(Sequence(0, 0, 0), 0)["seq_key"]) == 46
    assert len(seq_block(Sequence(10**10 - 1, 2**63 - 1, 10**10 - 1), 10**6 - 1)["seq_key"]) == 46


@settings(max_examples=500, deadline=None)
@given(POSITIONS, POSITIONS)
def test_seq_key_text_order_is_numeric_order(first: tuple, second: tuple) -> None:
    key_of = lambda p: seq_block(Sequence(p[0], p[1], p[2]), p[3])["seq_key"]  # noqa: E731
    assert (key_of(first) < key_of(second)) == (first < second)
    assert (key_of(first) == key_of(second)) == (first == second)


@settings(max_examples=50, deadline=None)
@given(st.lists(POSITIONS, min_size=2, max_size=30))
def test_sorting_by_seq_key_sorts_by_position(positions: list) -> None:
    by_key = sorted(positions, key=lambda p: seq_block(Sequence(p[0], p[1], p[2]), p[3])["seq_key"])
    assert by_key == sorted(positions)


@pytest.mark.parametrize(
    ("sequence", "op_index"),
    [
        (Sequence(10**10, 0, 0), 0),
        (Sequence(-1, 0, 0), 0),
        (Sequence(0, 2**63, 0), 0),
        (Sequence(0, 0, 10**10), 0),
        (Sequence(0, 0, 0), 10**6),
        (Sequence(0, 0, 0), -1),
    ],
)
def test_seq_block_refuses_numbers_that_would_break_the_sort(sequence: Sequence, op_index: int) -> None:
    with pytest.raises(InvalidRecordError, match="would not sort"):
        seq_block(sequence, op_index)
