"""Primary-key bounds as an operator writes them on the command line: ``region=eu,id=42``.

Columns are given in key order, as a prefix of the primary key; the columns left out are -inf, so ``--from
region=eu`` starts at the first eu row and ``--to region=us`` stops before the first us row. Values take the
column's type: INTEGER as a decimal number, STRING as written (no quoting; a comma cannot be written), BINARY as
base64.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from tablestore import INF_MIN

from cdcbridge.snapshot.errors import SnapshotError
from cdcbridge.snapshot.key_bounds import KeyBound


class KeyTextError(SnapshotError):
    """A --from/--to key does not match the table's primary key."""


def parse_key_text(option: str, text: str, schema: list[tuple[str, str]]) -> KeyBound:
    """`text` (``name=value,...``) → a bound over every primary-key column of `schema` ([(name, TYPE)])."""
    names = [name for name, _ in schema]
    example = ",".join(f"{name}=..." for name in names)
    given: list[tuple[str, str]] = []
    for part in text.split(","):
        name, equals, value = part.partition("=")
        if not equals or not name.strip():
            raise KeyTextError(f"{option} {text!r}: {part!r} is not NAME=VALUE; write e.g. {option} {example}")
        given.append((name.strip(), value))
    if [name for name, _ in given] != names[: len(given)]:
        raise KeyTextError(
            f"{option} {text!r}: give primary-key columns in key order, as a prefix of ({', '.join(names)}); "
            f"e.g. {option} {example}"
        )
    bound: KeyBound = []
    for (name, kind), (_, value) in zip(schema, given, strict=False):
        bound.append((name, _typed(option, name, kind.upper(), value)))
    return bound + [(name, INF_MIN) for name in names[len(given) :]]


def _typed(option: str, name: str, kind: str, value: str) -> Any:
    if kind == "INTEGER":
        try:
            return int(value)
        except ValueError:
            raise KeyTextError(f"{option}: column {name} is an INTEGER; {value!r} is not a number") from None
    if kind == "BINARY":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise KeyTextError(f"{option}: column {name} is BINARY; give its value as base64") from None
    return value
