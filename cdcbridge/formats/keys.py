"""Kafka message keys: the canonical text of a row's primary key, and Java-compatible partition placement.

Key format (a contract: it decides the partition and the compaction identity of a row, so it never changes
with the Avro schemas). The key is the UTF-8 encoding of a JSON array of the primary-key values in
table-schema order, with no whitespace:

- INTEGER → a JSON integer in decimal, ``-9223372036854775808`` … ``9223372036854775807``;
- STRING  → a JSON string in which only ``"``, ``\\`` and U+0000–U+001F are escaped (``\\b \\t \\n \\f \\r``
  short forms, otherwise ``\\u00xx`` in lower-case hex) and every other character is written as itself
  (the string rules of RFC 8785);
- BINARY  → ``{"b64":"<standard base64 with padding>"}``.

Example: the key of ``(42, 'a"b,c', b"\\x00\\x01")`` is ``[42,"a\\"b,c",{"b64":"AAE="}]``.
JSON escaping makes separators inside values harmless, the three types stay apart (``1``, ``"1"``,
``{"b64":"MQ=="}``), and any consumer can parse a key with a stock JSON library. :func:`decode_key` accepts
only the exact bytes :func:`encode_key` writes, so the mapping between keys and value lists is one-to-one.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from collections.abc import Sequence

from cdcbridge.changes import ChangeRecord, Value
from cdcbridge.formats.common import INT64_MAX, INT64_MIN
from cdcbridge.formats.errors import KeyDecodeError, KeyEncodeError

#: A Tablestore primary-key value: INTEGER → int, STRING → str, BINARY → bytes.
PrimaryKeyValue = int | str | bytes

_BINARY_TAG = "b64"


#: Characters json.dumps(ensure_ascii=False) escapes in a string; a string without them is written as is.
_JSON_ESCAPED = re.compile(r'[\x00-\x1f"\\]')


def encode_key(values: Sequence[Value]) -> bytes:
    """Canonical key bytes of primary-key values (format in the module docstring)."""
    if not values:
        raise KeyEncodeError("a message key needs at least one primary-key value; got an empty primary key")
    # Fast path (every key of every message goes through here): plain ints and strings needing no escape are
    # written directly, exactly as json.dumps would; anything else takes the general path below.
    parts = []
    for value in values:
        kind = type(value)
        if kind is int and INT64_MIN <= value <= INT64_MAX:
            parts.append(str(value))
        elif kind is str and _JSON_ESCAPED.search(value) is None:
            parts.append(f'"{value}"')
        else:
            return _encode_key_general(values)
    try:
        return ("[" + ",".join(parts) + "]").encode("utf-8")
    except UnicodeEncodeError as exc:
        raise KeyEncodeError(f"primary-key string is not valid Unicode (lone surrogate?): {exc}") from exc


def _encode_key_general(values: Sequence[Value]) -> bytes:
    items = [_json_item(position, value) for position, value in enumerate(values)]
    text = json.dumps(items, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise KeyEncodeError(f"primary-key string is not valid Unicode (lone surrogate?): {exc}") from exc


def record_key(record: ChangeRecord) -> bytes:
    """Key of the row a change record touched."""
    try:
        return encode_key([value for _, value in record.primary_key])
    except KeyEncodeError as exc:
        raise KeyEncodeError(f"table {record.table!r}: {exc}") from exc


def decode_key(data: bytes) -> list[PrimaryKeyValue]:
    """Primary-key values of a key written by :func:`encode_key`; anything else raises KeyDecodeError."""
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KeyDecodeError(f"key {data[:80]!r} is not a UTF-8 JSON array: {exc}") from exc
    if not isinstance(parsed, list) or not parsed:
        raise KeyDecodeError(f"key {data[:80]!r} is not a non-empty JSON array of primary-key values")
    values: list[PrimaryKeyValue] = [_decoded_item(data, item) for item in parsed]
    if encode_key(values) != data:
        raise KeyDecodeError(f"key {data[:80]!r} is not in canonical form (whitespace, escapes or base64 differ)")
    return values


def _json_item(position: int, value: object) -> object:
    # bool is an int subclass: test it first so True never becomes the key of row 1.
    if isinstance(value, bool) or not isinstance(value, int | str | bytes | bytearray):
        raise KeyEncodeError(
            f"primary-key value #{position} is {type(value).__name__} {value!r:.60}; "
            "Tablestore primary keys are INTEGER (int), STRING (str) or BINARY (bytes)"
        )
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise KeyEncodeError(f"primary-key value #{position} = {value} does not fit a Tablestore INTEGER (int64)")
    if isinstance(value, bytes | bytearray):
        return {_BINARY_TAG: base64.b64encode(value).decode("ascii")}
    return value


def _decoded_item(data: bytes, item: object) -> PrimaryKeyValue:
    if isinstance(item, str) or (isinstance(item, int) and not isinstance(item, bool)):
        return item
    if isinstance(item, dict) and set(item) == {_BINARY_TAG} and isinstance(item[_BINARY_TAG], str):
        try:
            return base64.b64decode(item[_BINARY_TAG], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise KeyDecodeError(f"key {data[:80]!r} holds invalid base64 {item[_BINARY_TAG]!r:.40}") from exc
    raise KeyDecodeError(f"key {data[:80]!r} holds {item!r:.40}, which is not an integer, string or binary value")


# --- partitioning --------------------------------------------------------------------------------------------

_MURMUR2_SEED = 0x9747B28C
_MURMUR2_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (MurmurHash2, seed 0x9747b28c) as a signed 32-bit int, like Java returns it.

    librdkafka's ``murmur2_random`` partitioner uses the same hash, so this predicts where a key lands.
    """
    length = len(data)
    h = (_MURMUR2_SEED ^ length) & _MASK32
    body_end = length - length % 4
    for (k,) in struct.iter_unpack("<I", data[:body_end]):
        k = (k * _MURMUR2_M) & _MASK32
        k ^= k >> 24
        k = (k * _MURMUR2_M) & _MASK32
        h = ((h * _MURMUR2_M) & _MASK32) ^ k
    tail = length - body_end
    if tail == 3:
        h ^= data[body_end + 2] << 16
    if tail >= 2:
        h ^= data[body_end + 1] << 8
    if tail >= 1:
        h ^= data[body_end]
        h = (h * _MURMUR2_M) & _MASK32
    h ^= h >> 13
    h = (h * _MURMUR2_M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, num_partitions: int) -> int:
    """Partition of a non-null key as the Java producer and librdkafka ``murmur2_random`` choose it:
    ``toPositive(murmur2(key)) % num_partitions``."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
