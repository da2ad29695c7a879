"""Decoded Kafka envelopes → validated :class:`Operation` objects, the only input the fold understands.

Input is the dict a decoder gives for one message value (confluent-kafka ``AvroDeserializer`` / fastavro, or a
Spark row turned into a dict) with the DESIGN §6 field names, plus optional extra keys the apply job may add:

- ``_topic``, ``_partition``, ``_offset``: where the message was read, named in every error and dead letter.
- ``_format``: ``"RECORD_IMAGE"`` or ``"MUTATE_LOG"``. When absent it is inferred: ``type`` or ``cells`` →
  MUTATE_LOG, otherwise RECORD_IMAGE.
- ``_tombstone``: True for a RECORD_IMAGE Kafka tombstone (null value). Its key is not in the value, so build it
  with :func:`tombstone_message` from the decoded Kafka key.

Decisions where decoders differ or DESIGN is silent:

- Values may be plain (what a deserializer returns) or in fastavro tuple notation ``("long", 5)`` (what the
  builders in cdcbridge.formats produce before serialization). Spark's ``struct<member0..>`` union form must be
  flattened by the job first.
- ``timestamp`` may be int ms or a ``datetime`` (``timestamp-millis`` is decoded to one); a naive datetime is
  taken as UTC, so run Spark with ``spark.sql.session.timeZone=UTC``.
- Required: ``source.table``, ``seq.seq_key``, ``timestamp``, ``pk`` and, for MUTATE_LOG, ``type``. Fields with an
  Avro default (``row_deleted``, ``replace_row``, ``cells``, ``columns``, ``partial``) take it when absent.
- ``seq.seq_key`` must be the 46-digit key of :data:`cdcbridge.contract.SEQ_KEY_FORMAT`, and must match the seq
  numbers when they are present: the guard compares keys as text, which is only sound for equal-width keys.
- Contradictions are refused rather than guessed: ``type`` DELETE without ``row_deleted`` (or the reverse), a
  delete carrying cells or columns, ``replace_row`` on a non-PUT, a PUT cell without value, DELETE_ONE_VERSION
  without version, INCREMENT without amount and value, a non-integer amount/value for INCREMENT, a null column
  value in a full (non-partial) image, unknown ``type`` / cell ``op`` (e.g. the schema's ``UNKNOWN`` default).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from cdcbridge.apply.core.model import PkValue, PrimaryKey, RowKey
from cdcbridge.apply.core.policy import BadInputPolicy, DeadLetter
from cdcbridge.apply.errors import BadInputError, IncrementError, InvalidMessageError, MessageLocation
from cdcbridge.changes import Value
from cdcbridge.contract import SEQ_KEY_FORMAT, SEQ_KEY_LENGTH, SEQ_NUMBERS, CellOp, MessageFormat, MutationType

_AVRO_BRANCHES = frozenset({"null", "boolean", "int", "long", "float", "double", "string", "bytes"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class CellChange:
    """One cell operation of a MUTATE_LOG message (INCREMENT: ``value`` is the result when known, else
    ``amount`` is added)."""

    name: str
    op: CellOp
    value: Value | None = None
    version: int | None = None
    amount: int | None = None


@dataclass(frozen=True, slots=True)
class ImageCell:
    """One column of a RECORD_IMAGE; ``value`` None only in partial images (the record deleted the column:
    with ``version`` only that version was deleted)."""

    value: Value | None
    version: int | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    """One validated message: a change to one target row at one position (``seq_key``) of its history.

    ``seq_key`` is None only for a tombstone that carries no seq (see :mod:`cdcbridge.apply.core.tombstones`);
    ``message`` is the raw envelope, kept for dead letters.
    """

    message_format: MessageFormat
    table: str
    pk: PrimaryKey
    seq_key: str | None
    timestamp_ms: int | None
    row_deleted: bool = False
    mutation_type: MutationType | None = None
    replace_row: bool = False
    cells: tuple[CellChange, ...] = ()
    columns: Mapping[str, ImageCell] = field(default_factory=dict)
    partial: bool = False
    tombstone: bool = False
    location: MessageLocation | None = None
    message: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def row_key(self) -> RowKey:
        return (self.table, self.pk)


def tombstone_message(
    table: str,
    pk: Iterable[tuple[str, PkValue]] | Iterable[Mapping[str, Any]],
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
    seq_key: str | None = None,
    timestamp_ms: int | None = None,
) -> dict[str, Any]:
    """The message dict for a RECORD_IMAGE Kafka tombstone: the job decodes the Kafka key into `pk` and passes the
    delete's `seq_key` if it has one (e.g. from a header); without it the tombstone is not applied
    (:mod:`cdcbridge.apply.core.tombstones` says why)."""
    pk_list = [item if isinstance(item, Mapping) else {"name": item[0], "value": item[1]} for item in pk]
    return {
        "_format": MessageFormat.RECORD_IMAGE.value,
        "_tombstone": True,
        "_topic": topic,
        "_partition": partition,
        "_offset": offset,
        "source": {"table": table},
        "seq": {"seq_key": seq_key} if seq_key is not None else None,
        "timestamp": timestamp_ms,
        "pk": pk_list,
        "row_deleted": True,
    }


def decode_message(
    message: Mapping[str, Any] | None, *, message_format: MessageFormat | str | None = None
) -> Operation:
    """Validate one decoded envelope; raises :class:`InvalidMessageError` / :class:`IncrementError` naming the
    field and the message's topic/partition/offset."""
    if message is None:
        raise InvalidMessageError(
            "got a null message value",
            fix="pass a Kafka tombstone as tombstone_message(table, pk, topic=…, partition=…, offset=…)",
        )
    if not isinstance(message, Mapping):
        raise InvalidMessageError(f"a message must be a dict of envelope fields, got {type(message).__name__}")
    reader = _EnvelopeReader(message, _resolve_format(message, message_format))
    return reader.operation()


def decode_messages(
    messages: Iterable[Mapping[str, Any] | None],
    *,
    policy: BadInputPolicy | None = None,
    message_format: MessageFormat | str | None = None,
) -> tuple[list[Operation], list[DeadLetter]]:
    """Decode many messages; bad ones raise or become dead letters per `policy`."""
    policy = policy or BadInputPolicy()
    operations: list[Operation] = []
    dead_letters: list[DeadLetter] = []
    for message in messages:
        try:
            operations.append(decode_message(message, message_format=message_format))
        except BadInputError as error:
            dead_letters.append(policy.handle(error, message))
    return operations, dead_letters


def _resolve_format(message: Mapping[str, Any], given: MessageFormat | str | None) -> MessageFormat:
    declared = given if given is not None else message.get("_format")
    if declared is None:
        is_mutation = "type" in message or "cells" in message
        return MessageFormat.MUTATE_LOG if is_mutation else MessageFormat.RECORD_IMAGE
    try:
        return MessageFormat(str(declared))
    except ValueError:
        raise InvalidMessageError(
            f"unknown message format {declared!r}; expected RECORD_IMAGE or MUTATE_LOG",
            location=MessageLocation.of(message),
        ) from None


class _EnvelopeReader:
    """Reads the fields of one envelope; every failure names the field and the message."""

    def __init__(self, message: Mapping[str, Any], message_format: MessageFormat) -> None:
        self.message = message
        self.format = message_format
        self.location = MessageLocation.of(message)

    def fail(self, problem: str, error: type[BadInputError] = InvalidMessageError) -> NoReturn:
        raise error(f"{self.format.value} message: {problem}", location=self.location)

    def operation(self) -> Operation:
        tombstone = self.message.get("_tombstone") is True
        if tombstone and self.format is not MessageFormat.RECORD_IMAGE:
            self.fail("a tombstone (null value) is only meaningful on a RECORD_IMAGE topic")
        seq = self.message.get("seq")
        common: dict[str, Any] = {
            "message_format": self.format,
            "table": self.table(),
            "pk": self.pk(),
            "seq_key": None if tombstone and seq is None else self.seq_key(seq),
            "timestamp_ms": self.timestamp_ms(required=not tombstone),
            "location": self.location,
            "message": self.message,
        }
        if tombstone:
            return Operation(**common, row_deleted=True, tombstone=True)
        row_deleted = self.flag("row_deleted")
        if self.format is MessageFormat.RECORD_IMAGE:
            return self.image(common, row_deleted)
        return self.mutation(common, row_deleted)

    # --- common fields -------------------------------------------------------------------------------------------

    def table(self) -> str:
        source = self.message.get("source")
        table = source.get("table") if isinstance(source, Mapping) else None
        if not isinstance(table, str) or not table:
            self.fail("field 'source.table' is missing or empty")
        return table

    def pk(self) -> PrimaryKey:
        raw = self.message.get("pk")
        if not isinstance(raw, list | tuple) or not raw:
            self.fail("field 'pk' is missing or empty; it must list the primary-key columns")
        columns: list[tuple[str, PkValue]] = []
        for position, item in enumerate(raw):
            name, value = (item.get("name"), item.get("value")) if isinstance(item, Mapping) else (None, None)
            if not isinstance(name, str) or not name:
                self.fail(f"pk[{position}] has no column name")
            value = _untagged(value)
            if isinstance(value, bytearray):
                value = bytes(value)
            if isinstance(value, bool) or not isinstance(value, int | str | bytes):
                self.fail(f"pk column {name!r} holds {type(value).__name__} {value!r:.60}; expected int, str or bytes")
            columns.append((name, value))
        names = [name for name, _ in columns]
        if len(set(names)) != len(names):
            self.fail(f"pk names a column twice: {names}")
        return tuple(columns)

    def seq_key(self, seq: Any) -> str:
        if not isinstance(seq, Mapping):
            self.fail("field 'seq' is missing or not a record")
        key = seq.get("seq_key")
        if not (isinstance(key, str) and len(key) == SEQ_KEY_LENGTH and key.isascii() and key.isdigit()):
            self.fail(f"seq.seq_key {key!r:.80} is not a {SEQ_KEY_LENGTH}-digit zero-padded key")
        numbers = [seq.get(name) for name in SEQ_NUMBERS]
        for name, number in zip(SEQ_NUMBERS, numbers, strict=True):
            if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 0):
                self.fail(f"seq.{name} is {number!r}; expected a non-negative integer")
        if all(number is not None for number in numbers) and SEQ_KEY_FORMAT % tuple(numbers) != key:
            self.fail(f"seq.seq_key {key} does not match seq numbers {dict(zip(SEQ_NUMBERS, numbers, strict=True))}")
        return key

    def timestamp_ms(self, *, required: bool) -> int | None:
        value = self.message.get("timestamp")
        if value is None:
            if required:
                self.fail("field 'timestamp' is missing")
            return None
        if isinstance(value, datetime):
            aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
            return (aware - _EPOCH) // timedelta(milliseconds=1)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"field 'timestamp' is {type(value).__name__} {value!r:.60}; expected ms or a datetime")
        return value

    def flag(self, name: str) -> bool:
        value = self.message.get(name, False)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.fail(f"field {name!r} is {value!r:.60}; expected a boolean")
        return value

    def version(self, value: Any, where: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{where}.version is {value!r:.60}; expected ms or null")
        return value

    def value(self, value: Any, where: str) -> Value | None:
        value = _untagged(value)
        if isinstance(value, bytearray):
            return bytes(value)
        if value is not None and not isinstance(value, bool | int | float | str | bytes):
            self.fail(f"{where}.value is {type(value).__name__} {value!r:.60}; expected bool, int, float, str or bytes")
        return value

    # --- RECORD_IMAGE --------------------------------------------------------------------------------------------

    def image(self, common: dict[str, Any], row_deleted: bool) -> Operation:
        partial = self.flag("partial")
        raw = self.message.get("columns") or {}
        if isinstance(raw, Mapping):
            items = list(raw.items())
        elif isinstance(raw, list | tuple) and all(isinstance(i, list | tuple) and len(i) == 2 for i in raw):
            items = list(raw)
        else:
            self.fail("field 'columns' is not a map of column name to {value, version}")
        columns: dict[str, ImageCell] = {}
        for name, cell in items:
            if not isinstance(name, str) or not name:
                self.fail("a column of 'columns' has an empty name")
            if not isinstance(cell, Mapping):
                self.fail(f"columns[{name!r}] is not a record {{value, version}}")
            where = f"columns[{name!r}]"
            image_cell = ImageCell(self.value(cell.get("value"), where), self.version(cell.get("version"), where))
            if image_cell.value is None and not partial:
                self.fail(f"{where}.value is null in a full image; only a partial image may mark a deleted column")
            columns[name] = image_cell
        if row_deleted and (columns or partial):
            self.fail("row_deleted image must carry the pk only (no columns, not partial)")
        return Operation(**common, row_deleted=row_deleted, columns=columns, partial=partial)

    # --- MUTATE_LOG ----------------------------------------------------------------------------------------------

    def mutation(self, common: dict[str, Any], row_deleted: bool) -> Operation:
        raw_type = self.message.get("type")
        if raw_type is None:
            self.fail("field 'type' is missing")
        try:
            mutation_type = MutationType(str(raw_type))
        except ValueError:
            self.fail(
                f"unknown mutation type {raw_type!r}; known: PUT, UPDATE, DELETE, INCREMENT "
                "(written by a newer bridge? upgrade the apply job)"
            )
        replace_row = self.flag("replace_row")
        raw_cells = self.message.get("cells") or []
        if not isinstance(raw_cells, list | tuple):
            self.fail("field 'cells' is not a list")
        cells = tuple(self.cell(position, cell) for position, cell in enumerate(raw_cells))
        if (mutation_type is MutationType.DELETE) != row_deleted:
            self.fail(f"type {mutation_type.value} contradicts row_deleted={row_deleted}")
        if row_deleted and cells:
            self.fail("a DELETE (row_deleted) message must not carry cells")
        if replace_row and mutation_type is not MutationType.PUT:
            self.fail(f"replace_row is set on a {mutation_type.value} message; only PUT replaces a row")
        return Operation(
            **common, row_deleted=row_deleted, mutation_type=mutation_type, replace_row=replace_row, cells=cells
        )

    def cell(self, position: int, raw: Any) -> CellChange:
        if not isinstance(raw, Mapping):
            self.fail(f"cells[{position}] is not a record")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            self.fail(f"cells[{position}] has no column name")
        where = f"cells[{position}] ({name!r})"
        try:
            op = CellOp(str(raw.get("op")))
        except ValueError:
            self.fail(
                f"{where} has unknown op {raw.get('op')!r}; known: PUT, DELETE_ONE_VERSION, DELETE_ALL_VERSION, "
                "INCREMENT (written by a newer bridge? upgrade the apply job)"
            )
        value = self.value(raw.get("value"), where)
        version = self.version(raw.get("version"), where)
        amount = raw.get("amount")
        if op is CellOp.PUT and value is None:
            self.fail(f"{where} is a PUT without a value")
        if op is CellOp.DELETE_ONE_VERSION and version is None:
            self.fail(f"{where} is a DELETE_ONE_VERSION without the version to delete")
        if op is CellOp.INCREMENT:
            if amount is None and value is None:
                self.fail(f"{where} is an INCREMENT with neither amount nor resulting value")
            if amount is not None and (isinstance(amount, bool) or not isinstance(amount, int)):
                self.fail(f"{where} has non-integer increment amount {amount!r:.60}", IncrementError)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                self.fail(f"{where} has non-integer increment result {value!r:.60}", IncrementError)
        elif amount is not None:
            self.fail(f"{where} is a {op.value} with an amount; only INCREMENT carries one")
        return CellChange(name=name, op=op, value=value, version=version, amount=amount)


def _untagged(value: Any) -> Any:
    """Unwrap fastavro tuple notation ``("long", 5)``; any other value is returned as is."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] in _AVRO_BRANCHES:
        return value[1]
    return value
