"""Column selection and masking per table (`source.tables[].columns`), applied to a change before it is encoded.

One transformation of a record's attribute cells (and of the row read back for RECORD_IMAGE), ahead of both formats
and of both encoders (C and Python), for the stream and the snapshot alike, so no excluded or plain masked value can
reach Kafka by any path. Primary-key columns are never touched: the Kafka key and partitioning stay as they were.

- ``include`` / ``exclude``: which attribute columns are published (one or the other, not both).
- ``mask: {column: hash}``: the value becomes the lowercase hex HMAC-SHA256 (64 characters) of its text form under
  `source.column_hash_key`: STRING as UTF-8, BINARY as its bytes, INTEGER as decimal digits, DOUBLE as Python's
  shortest round-trip text (``repr``), BOOLEAN as ``true``/``false``. Equal values hash equally in every table and
  column, so masked columns still join. The masked value is always a STRING (the Avro ``string`` branch of the
  envelopes' value union: the schemas do not change, so registry compatibility is untouched).
- ``mask: {column: redact}``: the value is dropped: in a row PUT (and a row image) the column is left out, which
  already means null there; in an UPDATE a PUT of it becomes a DELETE_ALL_VERSION cell (value null), the one
  null-valued cell every existing consumer and the apply job accept (the target column becomes null). Every message
  of the table carries the header :data:`~cdcbridge.contract.REDACTED_COLUMNS_HEADER` naming the redacted columns,
  so a consumer tells a redaction from a column the source deleted.
- An INCREMENT of a masked column is redacted in both modes: its delta would reveal the change, and a hash cannot be
  incremented (sources that log increments as the resulting value, the real service, hash normally).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from enum import Enum, StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Value
from cdcbridge.contract import CellOp

if TYPE_CHECKING:
    from cdcbridge.formats.record_image import CurrentRow


#: Column names whose treatment is remembered per table (a bound, should a source invent names without end).
_MAX_REMEMBERED_COLUMNS = 10_000


class _Kind(Enum):
    """What the policy does to one column."""

    KEEP = 1
    DROP = 2
    HASH = 3
    REDACT = 4


class MaskMethod(StrEnum):
    """How a masked column's values are replaced."""

    HASH = "hash"
    REDACT = "redact"


class ColumnPolicyError(Exception):
    """A column setting cannot be applied to the table as it is (e.g. it names a primary-key column)."""


class ColumnSettings(BaseModel):
    """Which attribute columns of a table are published, and which are masked (`source.tables[].columns`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    include: tuple[str, ...] | None = Field(
        None, description="publish only these attribute columns (primary-key columns are always published)"
    )
    exclude: tuple[str, ...] = Field((), description="publish every attribute column but these")
    mask: dict[str, MaskMethod] = Field(
        default_factory=dict,
        description="column → hash (HMAC-SHA256 hex string under source.column_hash_key, joins still work) or "
        "redact (null, named in the cdcbridge-redacted-columns header)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ColumnSettings:
        if self.include is not None and self.exclude:
            raise ValueError(
                "include and exclude are both set; keep one: include lists the columns to publish, exclude the "
                "columns to leave out"
            )
        for names, what in ((self.include or (), "include"), (self.exclude, "exclude")):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"{what} lists {', '.join(duplicates)} twice")
        excluded_masks = sorted(set(self.mask) & set(self.exclude))
        if excluded_masks:
            raise ValueError(
                f"column(s) {', '.join(excluded_masks)} are both excluded and masked; an excluded column is never "
                "published, so remove it from mask (or from exclude to publish it masked)"
            )
        if self.include is not None:
            not_included = sorted(set(self.mask) - set(self.include))
            if not_included:
                raise ValueError(
                    f"column(s) {', '.join(not_included)} are masked but not in include, so they are never "
                    "published; add them to include or remove them from mask"
                )
        return self

    @property
    def hashes(self) -> bool:
        """Whether a column is masked with `hash` (which needs `source.column_hash_key`)."""
        return MaskMethod.HASH in self.mask.values()

    def named_columns(self) -> set[str]:
        """Every column these settings name as excluded or masked (checked against the primary key)."""
        return set(self.exclude) | set(self.mask)


def hash_value(key: bytes, value: Value) -> str:
    """The masked form of one value: hex HMAC-SHA256 of its text form (module docstring), the same in every column."""
    return hmac.new(key, _text_bytes(value), hashlib.sha256).hexdigest()


class _Hasher:
    """:func:`hash_value` with the key folded in once: HMAC as RFC 2104 builds it from two keyed SHA-256 states, which
    copying costs a third of what copying an ``hmac.HMAC`` does (it is most of the cost of masking a record)."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        block = hashlib.sha256().block_size
        padded = (hashlib.sha256(key).digest() if len(key) > block else key).ljust(block, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in padded))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in padded))

    def __repr__(self) -> str:
        return "_Hasher()"

    def __call__(self, value: Value) -> str:
        inner = self._inner.copy()
        inner.update(_text_bytes(value))
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()


def _text_bytes(value: Value) -> bytes:
    if type(value) is str:  # the common case first
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, float):
        return repr(value).encode("ascii")
    return str(value).encode("ascii")


class ColumnPolicy:
    """One table's column settings, ready to apply to each change (built once per table)."""

    def __init__(self, table: str, settings: ColumnSettings, hash_key: bytes | None) -> None:
        if settings.hashes and not hash_key:
            raise ColumnPolicyError(
                f"table {table}: columns.mask hashes a column but source.column_hash_key is not set; set it to a "
                "secret reference such as ${CDCBRIDGE_COLUMN_HASH_KEY} or ${file:/run/secrets/column-hash-key}"
            )
        self.table = table
        self._include = frozenset(settings.include) if settings.include is not None else None
        self._exclude = frozenset(settings.exclude)
        self._hashed = frozenset(c for c, m in settings.mask.items() if m is MaskMethod.HASH)
        self._redacted = frozenset(c for c, m in settings.mask.items() if m is MaskMethod.REDACT)
        self._masked = self._hashed | self._redacted
        self._named = settings.named_columns()
        self._hash = _Hasher(hash_key or b"")
        #: What happens to each column name seen so far (the settings never change, so it is worked out once).
        self._kinds: dict[str, _Kind] = {}
        #: The header value naming the redacted columns (sorted, comma-separated), or None without redaction.
        self.redacted_header: bytes | None = ",".join(sorted(self._redacted)).encode() if self._redacted else None

    def __repr__(self) -> str:  # never the key
        return f"ColumnPolicy(table={self.table!r})"

    def check_primary_key(self, primary_key: Iterable[str]) -> None:
        """Refuse settings that name a primary-key column: it cannot be excluded or masked (the Kafka key and the
        partitioning are made of it)."""
        for column in primary_key:
            if column in self._named:
                what = "masked" if column in self._masked else "excluded"
                raise ColumnPolicyError(
                    f"table {self.table}: column {column} is part of the primary key and cannot be {what}; remove "
                    f"it from source.tables[{self.table}].columns (primary-key columns are always published as they "
                    "are, since the message key and its partition are made of them)"
                )

    def apply(self, record: ChangeRecord) -> ChangeRecord:
        """`record` with its cells selected and masked (a new record; the original is left as it was)."""
        replaces_row = record.action is RecordAction.PUT
        kinds = self._kinds
        cells = []
        for cell in record.cells:
            kind = kinds.get(cell.name) or self._kind(cell.name)
            if kind is _Kind.KEEP:
                cells.append(cell)
            elif kind is not _Kind.DROP:
                masked = self._masked_cell(cell, kind, replaces_row)
                if masked is not None:
                    cells.append(masked)
        return ChangeRecord(
            record.table, record.action, record.primary_key, cells, record.sequence, record.shard_id, record.extra
        )

    def apply_all(self, records: list[ChangeRecord]) -> list[ChangeRecord]:
        return [self.apply(record) for record in records]

    def apply_row(self, row: CurrentRow | None) -> CurrentRow | None:
        """A row read back for RECORD_IMAGE, selected and masked (redacted columns left out: null in a full image)."""
        if row is None:
            return None
        masked: dict[str, tuple[Value, int | None]] = {}
        for name, (value, version) in row.items():
            if not self._published(name) or name in self._redacted:
                continue
            masked[name] = (self._hash(value), version) if name in self._hashed else (value, version)
        return masked

    def _published(self, name: str) -> bool:
        return name not in self._exclude if self._include is None else name in self._include

    def _kind(self, name: str) -> _Kind:
        if not self._published(name):
            kind = _Kind.DROP
        elif name in self._hashed:
            kind = _Kind.HASH
        elif name in self._redacted:
            kind = _Kind.REDACT
        else:
            kind = _Kind.KEEP
        if len(self._kinds) < _MAX_REMEMBERED_COLUMNS:
            self._kinds[name] = kind
        return kind

    def _masked_cell(self, cell: Cell, kind: _Kind, replaces_row: bool) -> Cell | None:
        if cell.op is CellOp.INCREMENT or (kind is _Kind.REDACT and cell.op is CellOp.PUT):
            # A row put without the column already leaves it null; an update must clear what an earlier put set.
            return None if replaces_row else Cell(cell.name, CellOp.DELETE_ALL_VERSION, None, None)
        if cell.op is CellOp.PUT and cell.value is not None:
            return Cell(cell.name, CellOp.PUT, self._hash(cell.value), cell.timestamp_ms)
        return cell  # a delete carries no value
