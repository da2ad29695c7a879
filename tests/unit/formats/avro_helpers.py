"""Encode/decode helpers for tests: fastavro round trips and the plain values a reader returns."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import fastavro

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def encode(schema: Any, value: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, value, strict=True)
    return buffer.getvalue()


def decode(data: bytes, writer_schema: Any, reader_schema: Any = None) -> dict[str, Any]:
    return fastavro.schemaless_reader(io.BytesIO(data), writer_schema, reader_schema)


def as_read(value: Any) -> Any:
    """What a reader returns for a built value: union tags dropped, timestamp-millis as a UTC datetime."""
    if isinstance(value, dict):
        plain = {name: as_read(item) for name, item in value.items()}
        if "timestamp" in plain and "seq" in plain:
            plain["timestamp"] = EPOCH + timedelta(milliseconds=plain["timestamp"])
        return plain
    if isinstance(value, list):
        return [as_read(item) for item in value]
    if isinstance(value, tuple):
        return value[1]
    return value
