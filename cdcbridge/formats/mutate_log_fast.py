"""The C fast path of MUTATE_LOG: one change record straight to its Confluent-framed Avro message values.

It gives exactly ``b"\\x00" + schema_id (4 bytes big-endian) + schemaless_writer(value)`` for each message of
:func:`cdcbridge.formats.mutate_log.build_mutate_log`, in op_index order, at a fraction of the cost of building
the dicts and having fastavro walk them. It covers only the plain case (exact types, in-range numbers, valid
Unicode); for anything else :func:`encode_mutate_log` returns None and the caller takes the Python path, which
raises the proper errors. The encoder is written for one exact schema: if schemas/mutate_log.avsc ever differs
from it (or SEQ_KEY_FORMAT does), the fast path turns itself off rather than write wrong bytes.

Like the PlainBuffer accelerator, the C module is optional (built only where a compiler was found), and
CDCBRIDGE_PURE_PYTHON=1 turns it off, e.g. to rule it out when debugging.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import fastavro

from cdcbridge.changes import SEQ_KEY_FORMAT, Cell, CellOp, ChangeRecord, RecordAction, Sequence
from cdcbridge.formats.common import _SEQ_LIMITS, BRIDGE_VERSION
from cdcbridge.formats.errors import SchemaNotFoundError
from cdcbridge.formats.schemas import schema_dict
from cdcbridge.formats.table_format import MessageFormat

logger = logging.getLogger(__name__)

FORCE_PURE_PYTHON_ENV = "CDCBRIDGE_PURE_PYTHON"

#: The attributes of a parsed schema that decide the bytes a writer produces: Parsing Canonical Form's
#: (full names, types, field order, union branch order, enum symbols, sizes) plus logicalType, which decides
#: how fastavro converts a value. Docs, defaults and aliases change no written byte.
_WRITER_ATTRIBUTES = ("type", "name", "fields", "items", "values", "symbols", "size", "logicalType")

#: sha256 of :func:`writer_form` of the schema _mutate_log_speedups.c was written for.
ENCODER_SCHEMA_FINGERPRINT = "46ed2aeb9b5b6c3697df62f91cfed4878bb12e8d8f40f53b408165336a03f659"

#: The seq_key layout and limits the C encoder writes (fixed widths 10, 20, 10, 6).
ENCODER_SEQ_KEY_FORMAT = "{:010d}{:020d}{:010d}{:06d}"
_SEQ_LIMIT_NAMES = ("epoch", "timestamp_us", "row_index", "op_index")
ENCODER_SEQ_LIMITS = {"epoch": 10**10, "timestamp_us": 2**63, "row_index": 10**10, "op_index": 10**6}


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


def schema_matches_encoder(schema: Mapping[str, Any]) -> bool:
    """Whether the C encoder writes exactly what fastavro writes for `schema` (the drift guard)."""
    return schema_fingerprint(schema) == ENCODER_SCHEMA_FINGERPRINT


def load_encoder(
    environ: Mapping[str, str] | None = None, schema: Mapping[str, Any] | None = None
) -> tuple[ModuleType | None, str]:
    """The configured C encoder and "", or None and why the fast path is off.

    `environ` defaults to os.environ and `schema` to schemas/mutate_log.avsc; tests pass their own."""
    environ = os.environ if environ is None else environ
    if environ.get(FORCE_PURE_PYTHON_ENV, "") not in ("", "0"):
        return None, f"{FORCE_PURE_PYTHON_ENV} is set"
    try:
        from cdcbridge.formats import _mutate_log_speedups  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"the C module is not built ({exc})"
    if schema is None:
        try:
            schema = schema_dict(MessageFormat.MUTATE_LOG)
        except SchemaNotFoundError as exc:
            return None, str(exc)
    if not schema_matches_encoder(schema):
        return None, (
            "schemas/mutate_log.avsc differs from the schema the C encoder was written for "
            f"(fingerprint {schema_fingerprint(schema)}, encoder {ENCODER_SCHEMA_FINGERPRINT}); "
            "update _mutate_log_speedups.c and ENCODER_SCHEMA_FINGERPRINT together"
        )
    seq_limits = {name: _SEQ_LIMITS[name] for name in _SEQ_LIMIT_NAMES}
    if SEQ_KEY_FORMAT != ENCODER_SEQ_KEY_FORMAT or seq_limits != ENCODER_SEQ_LIMITS:
        return None, f"SEQ_KEY_FORMAT {SEQ_KEY_FORMAT!r} is not the {ENCODER_SEQ_KEY_FORMAT!r} the C encoder writes"
    _mutate_log_speedups.configure(
        ChangeRecord,
        Cell,
        Sequence,
        (RecordAction.PUT, RecordAction.UPDATE, RecordAction.DELETE),
        (CellOp.PUT, CellOp.DELETE_ONE_VERSION, CellOp.DELETE_ALL_VERSION, CellOp.INCREMENT),
        BRIDGE_VERSION,
        tuple(seq_limits[name] for name in _SEQ_LIMIT_NAMES),
    )
    return _mutate_log_speedups, ""


_encoder, DISABLED_REASON = load_encoder()
#: "c" when encode_mutate_log runs the C encoder, "none" when it always returns None.
IMPLEMENTATION = "c" if _encoder is not None else "none"
if _encoder is None:
    logger.info("MUTATE_LOG fast path disabled: %s", DISABLED_REASON)


def fast_path_available() -> bool:
    """Whether :func:`encode_mutate_log` can return messages (else it always returns None)."""
    return _encoder is not None


def encode_mutate_log(record: ChangeRecord, instance: str, schema_id: int) -> list[bytes] | None:
    """The framed MUTATE_LOG values of `record` in op_index order, or None when the record is not the plain
    case or the fast path is off: then build_mutate_log + the Avro serializer give the messages (or the error)."""
    if _encoder is None:
        return None
    return _encoder.encode(record, instance, schema_id)
