"""The Spark side of decoding one micro-batch: Confluent framing, ``from_avro`` per schema id, compact JSON out.

Per batch: with the writer schemas the driver holds (preloaded from the topics' subjects, see
:mod:`..writer_schemas`), decode every value with ``from_avro(payload, writer, {avroSchema: our reader schema})``:
each id with its own writer schema, all into the same reader columns, so ids of one format share one CASE.
Unions are flattened by renaming their members (``{"l": 5}``) and each envelope is rendered as compact JSON,
which the driver parses far faster than nested ``Row`` objects. The rows are streamed to the driver partition by
partition, so the driver validates while Spark renders the next partition.

Nothing fails inside Spark: ``from_avro`` runs in PERMISSIVE mode and a value that does not decode gets a null
body; the driver turns that into bad input naming topic/partition/offset (:mod:`cdcbridge.apply.driver.micro_batch`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdcbridge.apply.driver.framing import HEADER_BYTES, UnknownSchemaId, problem_of
from cdcbridge.apply.driver.kafka_records import KafkaRecord
from cdcbridge.apply.writer_schemas import WriterSchema
from cdcbridge.contract import TOMBSTONE_SEQ_KEY_HEADER, MessageFormat
from cdcbridge.formats import schema_text

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_VALUE_UNION = "struct<z:boolean,l:bigint,d:double,s:string,b:binary>"
_PK_UNION = "struct<l:bigint,s:string,b:binary>"
_PK = f"transform({{m}}.pk, p -> named_struct('n', p.name, 'v', cast(p.value as {_PK_UNION})))"
_COMMON = (
    "'t', {m}.source.table, 's', {m}.seq, 'ts', unix_millis({m}.timestamp), 'pk', " + _PK + ", 'd', {m}.row_deleted"
)
_COMPACT = {
    MessageFormat.MUTATE_LOG: (
        "to_json(named_struct(" + _COMMON + ", 'y', {m}.type, 'r', {m}.replace_row, 'c', transform({m}.cells, "
        f"c -> named_struct('n', c.name, 'o', c.op, 'v', cast(c.value as {_VALUE_UNION}), 'e', c.version, "
        "'a', c.amount))))"
    ),
    MessageFormat.RECORD_IMAGE: (
        "to_json(named_struct(" + _COMMON + ", 'p', {m}.partial, 'm', transform_values({m}.columns, "
        f"(k, c) -> named_struct('v', cast(c.value as {_VALUE_UNION}), 'e', c.version))))"
    ),
}
_STRUCT_COLUMN = {MessageFormat.MUTATE_LOG: "_mutation", MessageFormat.RECORD_IMAGE: "_image"}


def reader_schema(message_format: MessageFormat) -> str:
    return schema_text(message_format)


def framing_columns() -> dict[str, Column]:
    """``_vlen``, ``_magic`` and ``_sid`` (null where the value is null or too short), from ``value``."""
    from pyspark.sql import functions as F

    framed = F.col("value").isNotNull() & (F.length("value") >= HEADER_BYTES)
    return {
        "_vlen": F.length("value"),
        "_magic": F.when(framed, F.expr("ascii(substring(value, 1, 1))")),
        "_sid": F.when(framed, F.expr("cast(conv(hex(substring(value, 2, 4)), 16, 10) as bigint)")),
    }


def with_framing(batch: DataFrame) -> DataFrame:
    """Adds the :func:`framing_columns`."""
    return batch.withColumns(framing_columns())


def decoded_struct(schemas: Mapping[int, WriterSchema], message_format: MessageFormat) -> Column | None:
    """The envelope struct decoded with each message's own writer schema (by the `_magic`/`_sid` columns), for every
    loaded schema id of `message_format`; None when no schema of that format is loaded."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    options = {
        "mode": "PERMISSIVE",
        "avroSchema": reader_schema(message_format),
        "enableStableIdentifiersForUnionType": "true",
    }
    payload = F.expr(f"substring(value, {HEADER_BYTES + 1})")
    column: Column | None = None
    for schema in schemas.values():
        if schema.message_format is not message_format or schema.text is None:
            continue
        decoded = from_avro(payload, schema.text, options)
        condition = (F.col("_magic") == 0) & (F.col("_sid") == schema.schema_id)
        column = F.when(condition, decoded) if column is None else column.when(condition, decoded)
    return column


def decode_frame(framed: DataFrame, schemas: Mapping[int, WriterSchema]) -> DataFrame:
    """Columns the driver collects: topic, partition, offset, key, _vlen, _magic, _sid, _format, _body, _raw
    (value bytes of an undecodable message only) and _seq_header."""
    from pyspark.sql import functions as F

    decoded = framed
    bodies: list[Column] = []
    formats: list[Column] = []
    for message_format, column_name in _STRUCT_COLUMN.items():
        struct = decoded_struct(schemas, message_format)
        if struct is None:
            continue
        decoded = decoded.withColumn(column_name, struct)
        body = F.expr(_COMPACT[message_format].format(m=column_name))
        bodies.append(F.when(F.col(column_name).isNotNull(), body))
        formats.append(F.when(F.col(column_name).isNotNull(), F.lit(message_format.value)))
    body_column = F.coalesce(*bodies) if bodies else F.lit(None).cast("string")
    format_column = F.coalesce(*formats) if formats else F.lit(None).cast("string")
    header = F.expr(f"get(filter(headers, h -> h.key = '{TOMBSTONE_SEQ_KEY_HEADER}'), 0).value").cast("string")
    return decoded.select(
        "topic",
        "partition",
        "offset",
        "key",
        "_vlen",
        "_magic",
        "_sid",
        format_column.alias("_format"),
        body_column.alias("_body"),
        F.when(body_column.isNull() & F.col("value").isNotNull(), F.col("value")).alias("_raw"),
        header.alias("_seq_header"),
    )


def to_record(row: Sequence[Any], schemas: Mapping[int, WriterSchema]) -> KafkaRecord:
    """One collected row of :func:`decode_frame` as a KafkaRecord."""
    topic, partition, offset, key, vlen, magic, sid, fmt, body, raw, header = row
    key_bytes = bytes(key) if key is not None else None
    if vlen is None:
        return KafkaRecord(topic, partition, offset, key_bytes, tombstone=True, seq_key_header=header)
    if body is None:
        schema = schemas.get(sid) if sid is not None else None
        problem = problem_of(vlen, magic, schema, sid)
        return KafkaRecord(topic, partition, offset, key_bytes, problem=problem, raw=bytes(raw) if raw else None)
    return KafkaRecord(topic, partition, offset, key_bytes, body=body, message_format=MessageFormat(fmt))


def iter_records(
    decoded: DataFrame, schemas: Mapping[int, WriterSchema], at_once: bool = False
) -> Iterator[KafkaRecord]:
    """Stream the batch to the driver one Spark partition (= Kafka partition) at a time, each in offset order;
    with prefetching, Spark renders the next partition while the driver validates this one. With `at_once`, one
    collect instead (one Spark job, where streaming runs one per partition: for a small batch). Raises
    :class:`UnknownSchemaId` at the first framed value whose schema id is not in `schemas`."""
    rows = decoded.collect() if at_once else decoded.toLocalIterator(prefetchPartitions=True)
    for row in rows:
        sid = row[6]
        if row[5] == 0 and sid is not None and sid not in schemas:
            raise UnknownSchemaId(int(sid))
        yield to_record(row, schemas)


def decoded_records(
    batch: DataFrame, schemas: Mapping[int, WriterSchema], at_once: bool = False
) -> Iterator[KafkaRecord]:
    """The whole Spark side for one micro-batch: framing, ``from_avro`` with the known writer schemas, and the
    records streamed to the driver (or collected `at_once`; no caching: the batch is read from Kafka once, or
    twice when it holds an id met for the first time)."""
    return iter_records(decode_frame(with_framing(batch), schemas), schemas, at_once)
