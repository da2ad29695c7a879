"""Typed attribute columns: which logical type a value has, and which rows a typed table cannot take.

A typed target (Delta) gives each attribute column the type of the first value it sees; new columns are added
as they appear (schema evolution). Tablestore itself is schemaless per row, so a later value of another type
in the same column is possible at the source, but a typed table cannot hold it: the row is refused (bad input,
stop or dead letter) rather than coerced. Names are compared case-insensitively, as Spark and Delta resolve them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cdcbridge.apply.core.model import PrimaryKey, TargetRow
from cdcbridge.changes import Value

#: Bookkeeping columns every target table has besides the primary key and the attributes.
RESERVED_COLUMNS = ("_versions", "_seq", "_deleted", "_source_ts")


def quote(name: str) -> str:
    """A Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


#: Logical column types (named as Spark SQL names them).
BOOLEAN, LONG, DOUBLE, STRING, BINARY = "boolean", "bigint", "double", "string", "binary"


def value_type(value: Value) -> str:
    """The logical type of a Tablestore value."""
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return LONG
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, str):
        return STRING
    if isinstance(value, bytes | bytearray):
        return BINARY
    raise TypeError(f"not a Tablestore value: {type(value).__name__}")


@dataclass
class TypeCheck:
    """Outcome of checking rows against a typed table: rows refused (with the reason) and columns to add."""

    refused: dict[PrimaryKey, str] = field(default_factory=dict)
    new_columns: dict[str, str] = field(default_factory=dict)


def check_rows(
    rows: Iterable[TargetRow], columns: Mapping[str, str], pk_columns: Mapping[str, str] | None
) -> TypeCheck:
    """Check `rows` against the table's attribute `columns` (name → type) and primary key (name → type; None
    when the table does not exist yet and the first row decides it)."""
    check = TypeCheck()
    known = {name.lower(): (name, kind) for name, kind in columns.items()}
    pk_types = dict(pk_columns) if pk_columns is not None else None
    reserved = {name.lower() for name in RESERVED_COLUMNS}
    for row in rows:
        reason = _pk_problem(row, pk_types)
        if reason is None:
            pk_types = pk_types if pk_types is not None else {name: value_type(v) for name, v in row.pk}
            reason = _column_problem(row, known, reserved | {name.lower() for name in pk_types})
        if reason is not None:
            check.refused[row.pk] = reason
            continue
        for name, cell in row.columns.items():
            if name.lower() not in known:
                kind = value_type(cell.value)
                known[name.lower()] = (name, kind)
                check.new_columns[name] = kind
    return check


def _pk_problem(row: TargetRow, pk_types: Mapping[str, str] | None) -> str | None:
    if pk_types is None:
        return None
    names = [name for name, _ in row.pk]
    if names != list(pk_types):
        return f"primary key columns {names} differ from the table's {list(pk_types)}"
    for name, value in row.pk:
        if value_type(value) != pk_types[name]:
            kind = value_type(value)
            return f"primary key column {name!r} holds a {kind} value; the table's column is {pk_types[name]}"
    return None


def _column_problem(row: TargetRow, known: Mapping[str, tuple[str, str]], reserved: set[str]) -> str | None:
    seen: dict[str, str] = {}
    for name, cell in row.columns.items():
        lowered = name.lower()
        if lowered in reserved:
            return f"attribute column {name!r} collides with a primary-key or bookkeeping column"
        if lowered in seen:
            return f"attribute columns {seen[lowered]!r} and {name!r} differ only in case"
        seen[lowered] = name
        kind = value_type(cell.value)
        if lowered in known:
            existing_name, existing_kind = known[lowered]
            if existing_name != name:
                return f"attribute column {name!r} differs only in case from the table's column {existing_name!r}"
            if existing_kind != kind:
                return f"column {name!r} holds a {kind} value; the table's column is {existing_kind}"
    return None


def check_column_set(
    pairs: Iterable[tuple[str, str]],
    columns: Mapping[str, str],
    pk_columns: Mapping[str, str] | None,
    pk_signatures: Iterable[tuple[tuple[str, str], ...]],
) -> TypeCheck | str:
    """:func:`check_rows` for a batch known only by the distinct (column, type) pairs and primary-key signatures
    (name, type per pk column) of its rows, as the Spark path sees it: the columns to add, or why some row might
    be refused (then the reference path judges the rows one by one). Rows whose own columns differ only in case
    must have been ruled out by the caller."""
    signatures = set(pk_signatures)
    if pk_columns is None:
        if len(signatures) > 1:
            return f"rows of the batch disagree on the primary key: {sorted(signatures)}"
        pk_columns = dict(next(iter(signatures))) if signatures else {}
    elif signatures - {tuple(pk_columns.items())}:
        return f"primary keys {sorted(signatures)} differ from the table's {list(pk_columns.items())}"
    reserved = {name.lower() for name in RESERVED_COLUMNS} | {name.lower() for name in pk_columns}
    known = {name.lower(): (name, kind) for name, kind in columns.items()}
    by_lower: dict[str, set[tuple[str, str]]] = {}
    for name, kind in pairs:
        by_lower.setdefault(name.lower(), set()).add((name, kind))
    check = TypeCheck()
    for lowered, seen in sorted(by_lower.items()):
        if lowered in reserved:
            return f"attribute column {sorted(seen)[0][0]!r} collides with a primary-key or bookkeeping column"
        if len(seen) > 1:
            return f"values of column {lowered!r} differ in spelling or type: {sorted(seen)}"
        ((name, kind),) = seen
        if lowered in known:
            if known[lowered] != (name, kind):
                return f"column {name!r} ({kind}) does not match the table's column {known[lowered]}"
        else:
            check.new_columns[name] = kind
    return check
