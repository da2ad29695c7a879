"""A small batch's values decoded on the driver with fastavro, into the records the Spark side would yield.

A batch the driver read itself (:mod:`.kafka_fetch`) needs no Spark job at all: each value is checked for the
Confluent framing (:mod:`.framing`, worded as on Spark), decoded with its writer schema, resolved into our reader
schema (schemas/*.avsc: fields the writer lacks get their defaults, fields ours lacks are dropped, an enum symbol
ours lacks becomes the enum's default, as ``from_avro`` with our reader schema does) and handed over as the
envelope dict :func:`~.kafka_records.envelope` would build from Spark's compact JSON: the same fields and the
same values (bytes as bytes, doubles as floats including NaN, unions as plain values). Logical types are read as
their plain numbers, as Spark's ``unix_millis`` gives them back, and malformed UTF-8 is replaced, as Spark's
strings do.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import fastavro

from cdcbridge.apply.driver.framing import HEADER_BYTES, UnknownSchemaId, problem_of
from cdcbridge.apply.driver.kafka_fetch import FetchedMessage
from cdcbridge.apply.driver.kafka_records import KafkaRecord
from cdcbridge.apply.writer_schemas import WriterSchema
from cdcbridge.contract import TOMBSTONE_SEQ_KEY_HEADER, MessageFormat
from cdcbridge.formats import schema_text


class EnvelopeDecoder:
    """Decodes values into envelope dicts, with every schema parsed once for the job's life (schema ids are
    immutable, and so are our reader schemas)."""

    def __init__(self) -> None:
        self._readers: dict[MessageFormat, dict[str, Any]] = {}
        self._writers: dict[int, Any] = {}

    def records(self, messages: Iterable[FetchedMessage], schemas: Mapping[int, WriterSchema]) -> Iterator[KafkaRecord]:
        """The records of `messages` in their order; raises :class:`UnknownSchemaId` at the first framed value
        whose schema id is not in `schemas` (the job fetches it and decodes the batch again)."""
        for message in messages:
            yield self.record(message, schemas)

    def record(self, message: FetchedMessage, schemas: Mapping[int, WriterSchema]) -> KafkaRecord:
        key = message.key
        value = message.value
        if value is None:
            return KafkaRecord(
                message.topic,
                message.partition,
                message.offset,
                key,
                tombstone=True,
                seq_key_header=message.header(TOMBSTONE_SEQ_KEY_HEADER),
            )
        magic = value[0] if len(value) >= HEADER_BYTES else None
        sid = int.from_bytes(value[1:HEADER_BYTES], "big") if magic is not None else None
        if magic == 0 and sid is not None and sid not in schemas:
            raise UnknownSchemaId(sid)
        schema = schemas.get(sid) if sid is not None else None
        decoded = self._decode(value, schema) if magic == 0 and schema is not None else None
        if decoded is None or schema is None or schema.message_format is None:
            problem = problem_of(len(value), magic, schema, sid)
            return KafkaRecord(
                message.topic, message.partition, message.offset, key, problem=problem, raw=value or None
            )
        return KafkaRecord(
            message.topic,
            message.partition,
            message.offset,
            key,
            message_format=schema.message_format,
            decoded=decoded,
        )

    def _decode(self, value: bytes, schema: WriterSchema) -> dict[str, Any] | None:
        """The envelope dict of a framed value, or None when it does not decode with its writer schema."""
        if schema.text is None or schema.message_format is None or schema.problem is not None:
            return None
        try:
            writer = self._writer(schema)
            reader = self._reader(schema.message_format)
            body = io.BytesIO(value)
            body.seek(HEADER_BYTES)
            written = fastavro.schemaless_reader(body, writer, None, handle_unicode_errors="replace")
            return _envelope(_resolved(written, reader, {}), schema.message_format)
        except Exception:  # any malformed body or schema mismatch: the value is undecodable, as on Spark
            return None

    def _writer(self, schema: WriterSchema) -> Any:
        parsed = self._writers.get(schema.schema_id)
        if parsed is None:
            assert schema.text is not None
            parsed = self._writers[schema.schema_id] = _parse(schema.text)
        return parsed

    def _reader(self, message_format: MessageFormat) -> dict[str, Any]:
        reader = self._readers.get(message_format)
        if reader is None:
            reader = self._readers[message_format] = json.loads(schema_text(message_format))
        return reader


def _parse(text: str) -> Any:
    return fastavro.parse_schema(_without_logical_types(json.loads(text)))


def _resolved(value: Any, reader: Any, named: dict[str, Any]) -> Any:
    """`value` (as its writer schema decoded it) in the shape of `reader`, by the Avro resolution rules that
    matter for an envelope evolved by adding fields with defaults.

    fastavro resolves a union by the first reader branch the writer's branch promotes to, which reads a
    ``bytes`` value into the reader's ``string`` branch that precedes it (Java's Avro, Spark's, takes the same
    type first); so the value is decoded with its writer schema alone, its union values kept as written, and
    the reader's shape applied here."""
    if isinstance(reader, str):
        reader = named.get(reader, reader)
    if not isinstance(reader, dict):
        return value  # a union of primitives, or a primitive: the value as written
    kind = reader["type"]
    if kind == "record":
        named[reader["name"]] = reader
        if "namespace" in reader:
            named[f"{reader['namespace']}.{reader['name']}"] = reader
        return {
            field["name"]: _resolved(value[field["name"]], field["type"], named)
            if field["name"] in value
            else field.get("default")
            for field in reader["fields"]
        }
    if kind == "enum":
        named[reader["name"]] = reader
        if value in reader["symbols"] or "default" not in reader:
            return value
        return reader["default"]
    if kind == "array":
        return [_resolved(item, reader["items"], named) for item in value]
    if kind == "map":
        return {name: _resolved(item, reader["values"], named) for name, item in value.items()}
    if isinstance(kind, dict | list):
        return _resolved(value, kind, named)
    return value


def _without_logical_types(schema: Any) -> Any:
    """The schema with every ``logicalType`` dropped: fastavro would turn ``timestamp-millis`` into a datetime,
    where the envelope holds the milliseconds."""
    if isinstance(schema, dict):
        return {name: _without_logical_types(item) for name, item in schema.items() if name != "logicalType"}
    if isinstance(schema, list):
        return [_without_logical_types(item) for item in schema]
    return schema


def _envelope(record: Mapping[str, Any], message_format: MessageFormat) -> dict[str, Any]:
    """The fields :func:`~.kafka_records.envelope` takes from Spark's compact JSON, from the decoded record."""
    message: dict[str, Any] = {
        "source": {"table": record["source"]["table"]},
        "timestamp": record["timestamp"],
        "pk": [{"name": item["name"], "value": item["value"]} for item in record["pk"]],
        "seq": dict(record["seq"]),
        "row_deleted": record["row_deleted"],
    }
    if message_format is MessageFormat.MUTATE_LOG:
        message["type"] = record["type"]
        message["replace_row"] = record["replace_row"]
        message["cells"] = [
            {
                "name": cell["name"],
                "op": cell["op"],
                "value": cell["value"],
                "version": cell["version"],
                "amount": cell["amount"],
            }
            for cell in record["cells"]
        ]
    else:
        message["partial"] = record["partial"]
        message["columns"] = {
            name: {"value": cell["value"], "version": cell["version"]} for name, cell in record["columns"].items()
        }
    return message
