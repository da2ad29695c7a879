"""Primary keys and range bounds as they are stored in the status table: JSON text, typed, sentinels included.

A range bound may hold the SDK's ``INF_MIN`` / ``INF_MAX`` in any column; values keep their type (an INTEGER key
never comes back as a string), bytes travel as base64. One format for the begin, end and resume keys of a range.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from tablestore import INF_MAX, INF_MIN

from cdcbridge.snapshot.errors import SnapshotStateError

#: A primary key or range bound in SDK form: [(column, value)], value an int/str/bytes/bool or INF_MIN/INF_MAX.
KeyBound = list[tuple[str, Any]]


def lowest_bound(columns: list[str]) -> KeyBound:
    return [(name, INF_MIN) for name in columns]


def highest_bound(columns: list[str]) -> KeyBound:
    return [(name, INF_MAX) for name in columns]


def _encode_value(value: Any) -> list[Any]:
    if value is INF_MIN:
        return ["min"]
    if value is INF_MAX:
        return ["max"]
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int):
        return ["int", value]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, bytes | bytearray):
        return ["b64", base64.b64encode(bytes(value)).decode("ascii")]
    raise SnapshotStateError(f"primary-key value {value!r:.60} of type {type(value).__name__} cannot be stored")


def _decode_value(item: list[Any]) -> Any:
    kind = item[0]
    if kind == "min":
        return INF_MIN
    if kind == "max":
        return INF_MAX
    if kind == "b64":
        return base64.b64decode(item[1])
    if kind in ("int", "str", "bool"):
        return item[1]
    raise ValueError(f"unknown value kind {kind!r}")


def encode_bound(bound: KeyBound) -> str:
    """JSON text of `bound`: ``[["id", "int", 5], ["region", "min"]]``."""
    return json.dumps([[name, *_encode_value(value)] for name, value in bound], separators=(",", ":"))


def decode_bound(text: str) -> KeyBound:
    """Inverse of :func:`encode_bound`; a malformed text raises SnapshotStateError naming it."""
    try:
        return [(item[0], _decode_value(item[1:])) for item in json.loads(text)]
    except (ValueError, TypeError, IndexError) as error:
        raise SnapshotStateError(
            f"stored key bound {text[:80]!r} is malformed ({error}); delete the table's snapshot rows from the "
            "status table and run the snapshot again"
        ) from None


def describe_bound(bound: KeyBound) -> str:
    """Short human form for logs: ``(eu, 42)``, ``(-inf, -inf)``."""
    shown = ["-inf" if v is INF_MIN else "+inf" if v is INF_MAX else repr(v) for _, v in bound]
    return "(" + ", ".join(shown) + ")"


def _compare_value(value: Any, bound: Any) -> int:
    if bound is INF_MIN:
        return 1
    if bound is INF_MAX:
        return -1
    if value == bound:
        return 0
    return -1 if value < bound else 1


def compare_key(key: KeyBound, bound: KeyBound) -> int:
    """-1, 0 or 1 as `key` sorts before, at or after `bound` in Tablestore's row order (column by column; integers
    numerically, strings by code point = UTF-8 bytes, binaries bytewise; a sentinel decides at its column)."""
    for (_, value), (_, limit) in zip(key, bound, strict=True):
        order = _compare_value(value, limit)
        if order:
            return order
    return 0


def key_in_range(key: KeyBound, begin: KeyBound, end: KeyBound) -> bool:
    """Whether `begin` <= `key` < `end` (a GetRange's half-open range)."""
    return compare_key(key, begin) >= 0 and compare_key(key, end) < 0
