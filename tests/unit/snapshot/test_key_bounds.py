"""Range bounds survive the status table: typed values, bytes and the SDK's INF_MIN / INF_MAX sentinels."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tablestore import INF_MAX, INF_MIN

from cdcbridge.snapshot.errors import SnapshotStateError
from cdcbridge.snapshot.key_bounds import decode_bound, describe_bound, encode_bound

values = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.booleans(),
    st.sampled_from([INF_MIN, INF_MAX]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), values), min_size=1, max_size=4))
def test_a_bound_decodes_to_the_same_typed_values(bound: list) -> None:
    decoded = decode_bound(encode_bound(bound))
    assert decoded == bound
    assert [type(v) for _, v in decoded] == [type(v) for _, v in bound]  # 1 stays int, True stays bool


def test_a_malformed_bound_names_the_fix() -> None:
    with pytest.raises(SnapshotStateError, match="delete the table's snapshot rows"):
        decode_bound('[["id", "float", 1.5]]')


def test_bounds_read_well_in_logs() -> None:
    assert describe_bound([("region", "eu"), ("id", INF_MIN)]) == "('eu', -inf)"
