"""The per-message fast paths give exactly what the general code gives (keys and tagged values)."""

from __future__ import annotations

from enum import IntEnum

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.formats.common import tagged_value
from cdcbridge.formats.errors import KeyEncodeError
from cdcbridge.formats.keys import _encode_key_general, encode_key

KEY_VALUES = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.text(max_size=12),
    st.text(alphabet=st.characters(exclude_categories=()), max_size=6),  # controls, quotes, lone surrogates
    st.binary(max_size=6),
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(KEY_VALUES, min_size=1, max_size=4))
def test_key_fast_path_equals_the_json_encoding(values: list[object]) -> None:
    try:
        expected = _encode_key_general(values)
    except KeyEncodeError:
        with pytest.raises(KeyEncodeError):
            encode_key(values)
        return
    assert encode_key(values) == expected


class Level(IntEnum):
    HIGH = 3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, ("boolean", True)),
        (7, ("long", 7)),
        (Level.HIGH, ("long", Level.HIGH)),
        (1.5, ("double", 1.5)),
        ("x", ("string", "x")),
        (b"\x00", ("bytes", b"\x00")),
        (bytearray(b"\x01"), ("bytes", b"\x01")),
        (None, None),
    ],
)
def test_tagged_values_keep_their_branch_for_exact_types_and_subclasses(value: object, expected: object) -> None:
    tagged = tagged_value(value, table="t", column="c")
    assert tagged == expected
    if tagged is not None:
        assert type(tagged[1]) is (bytes if isinstance(value, bytes | bytearray) else type(value))


def test_out_of_range_longs_are_still_refused() -> None:
    from cdcbridge.formats.errors import InvalidRecordError

    with pytest.raises(InvalidRecordError, match="does not fit a long"):
        tagged_value(2**63, table="t", column="c")
