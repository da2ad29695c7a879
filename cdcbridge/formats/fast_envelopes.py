"""The C fast path of both envelopes: one change record straight to its Confluent-framed Avro message values.

:func:`encode_mutate_log` gives exactly ``b"\\x00" + schema_id (4 bytes big-endian) + schemaless_writer(value)``
for each message of :func:`cdcbridge.formats.mutate_log.build_mutate_log`, and :func:`encode_record_image` the
same for :func:`cdcbridge.formats.record_image.build_record_image` (a tombstone stays None), at a fraction of the
cost of building the dicts and having fastavro walk them. They cover only the plain case (exact types, in-range
numbers, valid Unicode); for anything else they return None and the caller takes the Python path, which raises the
proper errors. Each encoder is written for one exact schema: if schemas/mutate_log.avsc or
schemas/record_image.avsc ever differs from it, that encoder turns itself off rather than write wrong bytes. The C
source keeps its own copy of the seq_key widths and enum indexes; tests/unit/test_contract.py checks them against
cdcbridge.contract.

Besides what the builders refuse, RECORD_IMAGE declines: a current_row (read by UPDATE records only) that is not an
exact dict of exact str → exact (value, version) tuple with exact-typed values; ``tombstones`` that is not a bool;
and, when the cells are folded (PUT, UPDATE without current_row), any cell that is not a Cell with a CellOp, an
exact str name and a version that is None or an exact int64, even a cell the fold then ignores.

Like the PlainBuffer accelerator, the C module is optional (built only where a compiler was found), and
CDCBRIDGE_PURE_PYTHON=1 turns it off, e.g. to rule it out when debugging.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import fastavro

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import SEQ_LIMITS, SEQ_NUMBERS, CellOp, MessageFormat
from cdcbridge.formats.common import BRIDGE_VERSION
from cdcbridge.formats.errors import SchemaNotFoundError
from cdcbridge.formats.record_image import CurrentRow
from cdcbridge.formats.schemas import SCHEMA_FILE_NAMES, schema_dict

logger = logging.getLogger(__name__)

FORCE_PURE_PYTHON_ENV = "CDCBRIDGE_PURE_PYTHON"

#: The attributes of a parsed schema that decide the bytes a writer produces: Parsing Canonical Form's
#: (full names, types, field order, union branch order, enum symbols, sizes) plus logicalType, which decides
#: how fastavro converts a value. Docs, defaults and aliases change no written byte.
_WRITER_ATTRIBUTES = ("type", "name", "fields", "items", "values", "symbols", "size", "logicalType")

#: sha256 of :func:`writer_form` of each schema _envelope_speedups.c was written for.
ENCODER_SCHEMA_FINGERPRINTS: dict[MessageFormat, str] = {
    MessageFormat.MUTATE_LOG: "46ed2aeb9b5b6c3697df62f91cfed4878bb12e8d8f40f53b408165336a03f659",
    MessageFormat.RECORD_IMAGE: "32e751bc7ce6231627e83d9c837bdd88c90dc091b39d61a21c08b1eeedbe75f1",
}


def writer_form(schema: Mapping[str, Any]) -> str:
    """Canonical JSON of what in `schema` decides the written bytes (see _WRITER_ATTRIBUTES)."""

    def keep(node: Any) -> Any:
        if isinstance(node, list):
            return [keep(item) for item in node]
        if isinstance(node, dict):
            return {key: keep(node[key]) for key in _WRITER_ATTRIBUTES if key in node}
        return node

    return json.dumps(keep(fastavro.parse_schema(dict(schema))), sort_keys=True, separators=(",", ":"))


def schema_fingerprint(schema: Mapping[str, Any]) -> str:
    """sha256 (hex) of :func:`writer_form`."""
    return hashlib.sha256(writer_form(schema).encode("utf-8")).hexdigest()


def schema_matches_encoder(schema: Mapping[str, Any], message_format: MessageFormat) -> bool:
    """Whether the C encoder of `message_format` writes exactly what fastavro writes for `schema` (the drift guard)."""
    return schema_fingerprint(schema) == ENCODER_SCHEMA_FINGERPRINTS[message_format]


def _schema_drift(message_format: MessageFormat, schema: Mapping[str, Any] | None) -> str:
    """Why the encoder of `message_format` cannot be used with `schema` (default: the shipped one), or ""."""
    if schema is None:
        try:
            schema = schema_dict(message_format)
        except SchemaNotFoundError as exc:
            return str(exc)
    if schema_matches_encoder(schema, message_format):
        return ""
    return (
        f"schemas/{SCHEMA_FILE_NAMES[message_format]} differs from the schema the C encoder was written for "
        f"(fingerprint {schema_fingerprint(schema)}, encoder {ENCODER_SCHEMA_FINGERPRINTS[message_format]}); "
        "update _envelope_speedups.c and ENCODER_SCHEMA_FINGERPRINTS together"
    )


def load_encoder(
    environ: Mapping[str, str] | None = None, schemas: Mapping[MessageFormat, Mapping[str, Any]] | None = None
) -> tuple[ModuleType | None, dict[MessageFormat, str]]:
    """The configured C module (None when no encoder can be used) and, per format, why its encoder is off
    ("" = on).

    `environ` defaults to os.environ and `schemas` to the shipped schemas/*.avsc; tests pass their own (a format
    missing from `schemas` gets its shipped schema)."""
    environ = os.environ if environ is None else environ
    schemas = {} if schemas is None else schemas
    formats = tuple(ENCODER_SCHEMA_FINGERPRINTS)
    if environ.get(FORCE_PURE_PYTHON_ENV, "") not in ("", "0"):
        return None, dict.fromkeys(formats, f"{FORCE_PURE_PYTHON_ENV} is set")
    try:
        from cdcbridge.formats import _envelope_speedups  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, dict.fromkeys(formats, f"the C module is not built ({exc})")
    reasons = {message_format: _schema_drift(message_format, schemas.get(message_format)) for message_format in formats}
    if all(reasons.values()):
        return None, reasons
    _envelope_speedups.configure(
        ChangeRecord,
        Cell,
        Sequence,
        (RecordAction.PUT, RecordAction.UPDATE, RecordAction.DELETE),
        (CellOp.PUT, CellOp.DELETE_ONE_VERSION, CellOp.DELETE_ALL_VERSION, CellOp.INCREMENT),
        BRIDGE_VERSION,
        tuple(SEQ_LIMITS[name] for name in SEQ_NUMBERS),
    )
    return _envelope_speedups, reasons


_module, DISABLED_REASONS = load_encoder()
#: "c" when the C module runs at least one encoder, "none" when every encode_* function always returns None.
IMPLEMENTATION = "c" if _module is not None else "none"
for _format, _reason in DISABLED_REASONS.items():
    if _reason:
        logger.info("%s fast path disabled: %s", _format.value, _reason)

_encode_mutate_log: Callable[..., list[bytes] | None] | None = None
_encode_record_image: Callable[..., list[bytes | None] | None] | None = None
if _module is not None and not DISABLED_REASONS[MessageFormat.MUTATE_LOG]:
    _encode_mutate_log = _module.encode_mutate_log
if _module is not None and not DISABLED_REASONS[MessageFormat.RECORD_IMAGE]:
    _encode_record_image = _module.encode_record_image


def fast_path_available(message_format: MessageFormat) -> bool:
    """Whether the encode_* function of `message_format` can return messages (else it always returns None)."""
    if message_format is MessageFormat.MUTATE_LOG:
        return _encode_mutate_log is not None
    if message_format is MessageFormat.RECORD_IMAGE:
        return _encode_record_image is not None
    return False


def encode_mutate_log(record: ChangeRecord, instance: str, schema_id: int) -> list[bytes] | None:
    """The framed MUTATE_LOG values of `record` in op_index order, or None when the record is not the plain
    case or the fast path is off: then build_mutate_log + the Avro serializer give the messages (or the error)."""
    if _encode_mutate_log is None:
        return None
    return _encode_mutate_log(record, instance, schema_id)


def encode_record_image(
    record: ChangeRecord,
    instance: str,
    schema_id: int,
    current_row: CurrentRow | None = None,
    tombstones: bool = True,
) -> list[bytes | None] | None:
    """The framed RECORD_IMAGE values of build_record_image(record, instance=..., current_row=...,
    tombstones=...) in order, None where it puts a tombstone; or None when the record (or current_row, which must
    be an exact dict of str → (value, version) tuples) is not the plain case or the fast path is off."""
    if _encode_record_image is None:
        return None
    return _encode_record_image(record, instance, schema_id, current_row, tombstones)


_record_key: Callable[[ChangeRecord], bytes | None] | None = None
_encode_into: Callable[..., int] | None = None
if _module is not None:
    _record_key = _module.record_key
    _encode_into = _module.encode_into


def record_key(record: ChangeRecord) -> bytes | None:
    """keys.record_key(record) for a plain primary key (int64 ints, strs JSON writes unescaped), else None."""
    return None if _record_key is None else _record_key(record)


#: The C module's kind number of each format in an encode_into plan.
_PLAN_KINDS = {MessageFormat.MUTATE_LOG: 0, MessageFormat.RECORD_IMAGE: 1}


@dataclass(frozen=True)
class FastFormat:
    """One format of a table bound to its topic's registered schema id: called like the encode_* functions, and
    the unit of a :func:`page_plan` that encodes whole pages at once."""

    message_format: MessageFormat
    instance: str
    schema_id: int
    tombstones: bool = True

    def __call__(self, record: ChangeRecord, current_row: CurrentRow | None) -> list[bytes | None] | None:
        if self.message_format is MessageFormat.MUTATE_LOG:
            return encode_mutate_log(record, self.instance, self.schema_id)  # type: ignore[return-value]
        return encode_record_image(record, self.instance, self.schema_id, current_row, self.tombstones)


#: What encode_into takes per format: (kind, instance, schema_id, tombstones, topic).
PagePlan = tuple[tuple[int, str, int, bool, str], ...]


class PageLists(NamedTuple):
    """A page of records laid out for producing: per record its sequence, first sub-sequence produced and the end
    index of its messages; per message its topic, key and value (None: a tombstone)."""

    sequences: list[Sequence]
    first_subs: list[int]
    ends: list[int]
    topics: list[str]
    keys: list[bytes]
    values: list[bytes | None]

    @classmethod
    def empty(cls) -> PageLists:
        return cls([], [], [], [], [], [])


def page_plan(formats: list[tuple[FastFormat, str]]) -> PagePlan | None:
    """The encode_into plan of (format, topic) pairs in sub-sequence order, or None when any of them has no C
    encoder (then records go one by one)."""
    if _encode_into is None or not formats or not all(fast_path_available(f.message_format) for f, _ in formats):
        return None
    return tuple((_PLAN_KINDS[f.message_format], f.instance, f.schema_id, f.tombstones, topic) for f, topic in formats)


def encode_into(
    records: list[ChangeRecord],
    start: int,
    stop: int,
    plan: PagePlan,
    rows: dict[int, CurrentRow | None] | None,
    shard_id: str,
    start_us: int,
    page_lists: PageLists,
) -> int:
    """Lay records[start:stop] out in `page_lists` until the first one the C path leaves to the caller, whose index
    it returns: a record committed before `start_us` (>= 0), or one whose key or any message is not the plain case.
    `rows`: id(record) → the row read back for RECORD_IMAGE. An empty record.shard_id is set to `shard_id` first."""
    assert _encode_into is not None, "page_plan() returned a plan, so the C module is loaded"
    return _encode_into(records, start, stop, plan, rows, shard_id, start_us, page_lists)
