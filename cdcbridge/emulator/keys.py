"""Primary keys: the typed schema of a table, validation of incoming keys, their order and their shard hash.

A stored key is a tuple of plain values in schema order. Tuples of one schema sort exactly as Tablestore orders
rows (integers numerically, strings by UTF-8 bytes, which is code-point order, binaries bytewise), so the model can
keep keys in a sorted list and bisect it. Range bounds may hold INF_MIN / INF_MAX; they become `LOWEST` / `HIGHEST`,
objects that compare below / above every value.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache, total_ordering
from typing import Any

from cdcbridge.emulator.errors import InvalidPK, ParameterInvalid
from cdcbridge.emulator.limits import (
    MAX_NAME_BYTES,
    MAX_PK_VALUE_BYTES,
    check_primary_key_count,
    check_primary_key_value,
)
from cdcbridge.tablestore.plainbuffer import AUTO_INCREMENT, INF_MAX, INF_MIN

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
#: Hash space that shards divide into ranges: [0, HASH_SPACE).
HASH_SPACE = 1 << 64

Key = tuple[Any, ...]


class PkType(StrEnum):
    """Primary-key column types (the protobuf `PrimaryKeyType`, by name)."""

    INTEGER = "INTEGER"
    STRING = "STRING"
    BINARY = "BINARY"
    BOOLEAN = "BOOLEAN"


@dataclass(frozen=True, slots=True)
class PrimaryKeyColumn:
    name: str
    type: PkType
    auto_increment: bool = False


@total_ordering
class _Extreme:
    """A bound below (`sign=-1`) or above (`sign=+1`) every primary-key value, for range scans."""

    __slots__ = ("sign",)

    def __init__(self, sign: int) -> None:
        self.sign = sign

    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return self.sign

    def __lt__(self, other: object) -> bool:
        return other is not self and self.sign < 0

    def __gt__(self, other: object) -> bool:
        return other is not self and self.sign > 0

    def __repr__(self) -> str:
        return "LOWEST" if self.sign < 0 else "HIGHEST"

    def __reduce__(self) -> str:
        return "LOWEST" if self.sign < 0 else "HIGHEST"


LOWEST = _Extreme(-1)
HIGHEST = _Extreme(+1)


class KeySchema:
    """The primary-key schema of one table and the checks every incoming key passes."""

    def __init__(self, columns: Sequence[PrimaryKeyColumn]) -> None:
        self.columns = tuple(columns)
        self.names = tuple(c.name for c in self.columns)
        _validate_schema(self.columns)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeySchema) and other.columns == self.columns

    def __hash__(self) -> int:
        return hash(self.columns)

    def __repr__(self) -> str:
        return f"KeySchema({list(self.columns)!r})"

    def _check_shape(self, pairs: Sequence[tuple[str, Any]]) -> None:
        if len(pairs) != len(self.columns):
            raise InvalidPK(
                f"Primary key schema from request is not match with table meta: "
                f"{len(pairs)} column(s) given, the table has {len(self.columns)} ({', '.join(self.names)})."
            )
        for (name, _), column in zip(pairs, self.columns, strict=True):
            if name != column.name:
                raise InvalidPK(
                    f"Primary key schema from request is not match with table meta: "
                    f"column {name!r} given where {column.name!r} is expected."
                )

    def write_key(self, pairs: Sequence[tuple[str, Any]], *, allow_auto_increment: bool) -> Key:
        """A key to write: every value typed; AUTO_INCREMENT kept (only where allowed and declared)."""
        self._check_shape(pairs)
        values = []
        for (name, value), column in zip(pairs, self.columns, strict=True):
            if value is AUTO_INCREMENT:
                if not (allow_auto_increment and column.auto_increment):
                    where = "this column" if column.auto_increment else "a column without the auto-increment option"
                    raise ParameterInvalid(f"AUTO_INCREMENT for primary key {name!r} is not allowed on {where} here.")
                values.append(AUTO_INCREMENT)
                continue
            if value is INF_MIN or value is INF_MAX:
                raise ParameterInvalid(f"INF_MIN / INF_MAX for primary key {name!r} is allowed in range bounds only.")
            values.append(_typed_value(column, value))
        return tuple(values)

    def read_key(self, pairs: Sequence[tuple[str, Any]]) -> Key:
        """A key to look up: every value typed, no sentinels."""
        return self.write_key(pairs, allow_auto_increment=False)

    def bound_key(self, pairs: Sequence[tuple[str, Any]]) -> Key:
        """A range bound: values typed, INF_MIN / INF_MAX become LOWEST / HIGHEST."""
        self._check_shape(pairs)
        values: list[Any] = []
        for (_name, value), column in zip(pairs, self.columns, strict=True):
            if value is INF_MIN:
                values.append(LOWEST)
            elif value is INF_MAX:
                values.append(HIGHEST)
            else:
                values.append(_typed_value(column, value))
        return tuple(values)

    def pairs(self, key: Key) -> list[tuple[str, Any]]:
        """The (name, value) list the wire format carries."""
        return list(zip(self.names, key, strict=True))


def _validate_schema(columns: Sequence[PrimaryKeyColumn]) -> None:
    check_primary_key_count(len(columns))
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise ParameterInvalid(f"Duplicated primary key name in {names}.")
    for index, column in enumerate(columns):
        validate_column_name(column.name)
        if column.auto_increment:
            if column.type is not PkType.INTEGER:
                raise ParameterInvalid(f"Auto-increment primary key {column.name!r} must be INTEGER.")
            if index == 0:
                raise ParameterInvalid(f"The partition key {column.name!r} cannot be auto-increment.")


_NAME_PATTERN = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{MAX_NAME_BYTES - 1}}}")


@lru_cache(maxsize=65536)
def validate_column_name(name: str, kind: str = "column") -> None:
    """Column and table names (`kind` "column" or "table"): a letter or underscore, then letters, digits and
    underscores, at most 255 bytes. Cached: only valid names are remembered, as a raise is never cached."""
    if not isinstance(name, str) or _NAME_PATTERN.fullmatch(name) is None:
        raise ParameterInvalid(f"Invalid {kind} name: '{name}'.")


def _typed_value(column: PrimaryKeyColumn, value: Any) -> Any:
    kind = column.type
    if kind is PkType.INTEGER:
        if type(value) is not int:
            raise InvalidPK(f"Validate PK type fail: {column.name!r} is INTEGER, got {type(value).__name__}.")
        if not INT64_MIN <= value <= INT64_MAX:
            raise ParameterInvalid(f"Primary key {column.name!r} is out of the int64 range.")
        return value
    if kind is PkType.STRING:
        if not isinstance(value, str):
            raise InvalidPK(f"Validate PK type fail: {column.name!r} is STRING, got {type(value).__name__}.")
        if len(value) > MAX_PK_VALUE_BYTES // 4:  # shorter strings cannot exceed the limit in UTF-8
            check_primary_key_value(column.name, value)
        return value
    if kind is PkType.BINARY:
        if not isinstance(value, bytes | bytearray):
            raise InvalidPK(f"Validate PK type fail: {column.name!r} is BINARY, got {type(value).__name__}.")
        check_primary_key_value(column.name, value)
        return bytes(value)
    if type(value) is not bool:
        raise InvalidPK(f"Validate PK type fail: {column.name!r} is BOOLEAN, got {type(value).__name__}.")
    return value


def key_hash(key: Key) -> int:
    """Stable 64-bit hash of a key (independent of PYTHONHASHSEED), which decides the key's stream shard."""
    return int.from_bytes(hashlib.blake2b(repr(key).encode("utf-8"), digest_size=8).digest(), "big")
