"""Message keys: canonical form, round trip, rejection of foreign bytes, and Java-compatible partitioning."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.changes import ChangeRecord, RecordAction, Sequence
from cdcbridge.formats.errors import KeyDecodeError, KeyEncodeError
from cdcbridge.formats.keys import decode_key, encode_key, java_partition, murmur2, record_key

from .strategies import PK_VALUES


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([42], b"[42]"),
        ([-(2**63), 2**63 - 1], b"[-9223372036854775808,9223372036854775807]"),
        (["abc"], b'["abc"]'),
        ([b"\x00\x01"], b'[{"b64":"AAE="}]'),
        ([b""], b'[{"b64":""}]'),
        ([42, 'a"b,c', b"\x00\x01"], b'[42,"a\\"b,c",{"b64":"AAE="}]'),
        (["back\\slash"], b'["back\\\\slash"]'),
        (["tab\tnl\nnul\x00 del\x7f"], b'["tab\\tnl\\nnul\\u0000 del\x7f"]'),
        (["é中🙂"], '["é中🙂"]'.encode()),
        (["],[", "{"], b'["],[","{"]'),
    ],
)
def test_encode_key_writes_the_documented_canonical_form(values: list, expected: bytes) -> None:
    assert encode_key(values) == expected
    assert decode_key(expected) == values


def test_the_three_primary_key_types_never_share_a_key() -> None:
    keys = {encode_key([1]), encode_key(["1"]), encode_key([b"1"])}
    assert len(keys) == 3


def test_record_key_uses_primary_key_values_in_order() -> None:
    record = ChangeRecord("t", RecordAction.DELETE, [("b", "x"), ("a", 7)], [], Sequence(0, 0, 0))
    assert record_key(record) == b'["x",7]'


@settings(max_examples=300, deadline=None)
@given(st.lists(PK_VALUES, min_size=1, max_size=4))
def test_decode_inverts_encode(values: list) -> None:
    assert decode_key(encode_key(values)) == values


@settings(max_examples=300, deadline=None)
@given(st.lists(PK_VALUES, min_size=1, max_size=4), st.lists(PK_VALUES, min_size=1, max_size=4))
def test_distinct_primary_keys_get_distinct_keys(first: list, second: list) -> None:
    same_values = [(type(v), v) for v in first] == [(type(v), v) for v in second]
    assert (encode_key(first) == encode_key(second)) == same_values


@pytest.mark.parametrize(
    "values",
    [[], [True], [1.5], [None], [2**63], [-(2**63) - 1], ["lone \ud800 surrogate"]],
)
def test_encode_key_refuses_what_a_tablestore_primary_key_cannot_hold(values: list) -> None:
    with pytest.raises(KeyEncodeError):
        encode_key(values)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff",
        b"42",
        b"[]",
        b"[ 42]",
        b"[1.0]",
        b"[true]",
        b"[null]",
        b"[NaN]",
        b'[{"b64":"AAE"}]',
        b'[{"b64":"A?E="}]',
        b'[{"b64":"AAE=","x":1}]',
        b'[{"hex":"00"}]',
        b'["\\u0061"]',
        b'["\\/"]',
    ],
)
def test_decode_key_refuses_bytes_encode_key_never_writes(data: bytes) -> None:
    with pytest.raises(KeyDecodeError):
        decode_key(data)


# Kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java (testMurmur2).
KAFKA_MURMUR2_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka src/rdmurmur2.c (unittest_murmur2), as signed 32-bit values.
LIBRDKAFKA_MURMUR2_VECTORS = {
    b"kafka": 0xD067CF64 - 2**32,
    b"giberish123456789": 0x8F552B0C - 2**32,
    b"1234": 0x9FC97B14 - 2**32,
    b"234": 0xE7C009CA - 2**32,
    b"34": 0x873930DA - 2**32,
    b"4": 0x5A4B5CA1,
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x78424F1C,
    b"reAmbleWillBeRemoved,ThePrePartThatIs": 0x4A62B377,
    b"eAmbleWillBeRemoved,ThePrePartThatIs": 0xE0E4E09E - 2**32,
    b"AmbleWillBeRemoved,ThePrePartThatIs": 0x62B8B43F,
    b"": 0x106E08D9,
}


@pytest.mark.parametrize(("data", "expected"), [*KAFKA_MURMUR2_VECTORS.items(), *LIBRDKAFKA_MURMUR2_VECTORS.items()])
def test_murmur2_matches_kafka_and_librdkafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(
    ("key", "partitions", "expected"),
    [
        # toPositive(-973932308) = 1173551340
        (b"21", 4, 1173551340 % 4),
        (b"21", 7, 1173551340 % 7),
        # toPositive(479470107) = 479470107
        (b"abc", 12, 479470107 % 12),
        (b"abc", 1, 0),
    ],
)
def test_java_partition_is_to_positive_murmur2_modulo(key: bytes, partitions: int, expected: int) -> None:
    assert java_partition(key, partitions) == expected


def test_java_partition_spells_out_the_to_positive_step() -> None:
    # -973932308 & 0x7fffffff, computed by hand: 2**31 - 973932308.
    assert java_partition(b"21", 2**31 - 1) == 1173551340


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=10_000))
def test_java_partition_is_in_range_and_signed_murmur2_fits_an_int(key: bytes, partitions: int) -> None:
    assert -(2**31) <= murmur2(key) < 2**31
    assert 0 <= java_partition(key, partitions) < partitions


def test_java_partition_refuses_zero_partitions() -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        java_partition(b"x", 0)
