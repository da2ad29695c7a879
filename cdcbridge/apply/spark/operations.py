"""Kafka records → normalized operations, in the JVM: the Spark twin of :mod:`..core.operations` for the common case.

Per message, Spark decodes the value with ``from_avro`` (:mod:`.decode`), routes it by topic, checks every
rule :func:`~cdcbridge.apply.core.operations.decode_message` checks, and classifies it. The checks and the operation
are one call of compiled code per message (``MutationOp.java``, ``ImageOp.java`` in deploy/spark/src, registered
as :data:`MUTATION_OP` / :data:`IMAGE_OP`) rather than Spark SQL higher-order functions, which Spark interprets
lambda by lambda. :mod:`tests.integration.apply.test_spark_envelope_checks` checks that they accept exactly what
the reference path accepts.

- ``op``: a valid operation of a table applied from this format; it carries ``table``, ``pk`` and ``op`` (below).
- ``other``: valid, but its table is applied from the other format (counted, skipped: ``other_format``).
- ``unknown_sid``: framed with a schema id the driver has not fetched yet (fetch it, normalize again).
- ``python``: anything the reference path must judge: undecodable or invalid values, unmapped tables, tombstones
  whose key is not plain canonical JSON or whose table the target does not hold yet. One such message sends the
  whole batch to :class:`~cdcbridge.apply.driver.micro_batch.MicroBatchApplier`, which raises or dead-letters exactly
  as before; being strict here costs speed on rare batches, never correctness.

``pk`` is ``array<struct<n: name, v: struct<l: bigint, s: string, b: binary>>>`` (one branch set), the row's
identity in the fold. ``op`` is the struct :mod:`.fold` folds::

    q  seq_key (null for a tombstone without seq)   t  tombstone (Kafka null value)
    p, o  Kafka partition and offset (tie-break)     ts  timestamp ms (null for a tombstone)
    d  row_deleted   i  RECORD_IMAGE   r  replace_row   pa  partial image   w  writes a value (PUT/INCREMENT cell)
    c  cells: array<struct<n, o: PUT | DELETE_ONE_VERSION | DELETE_ALL_VERSION | INCREMENT, v: value union,
       e: effective version, a: increment amount>>

An image's columns become cells (a value: PUT; null without version: DELETE_ALL_VERSION; null with version:
DELETE_ONE_VERSION), and ``e`` is already the version the fold compares (a MUTATE_LOG PUT/INCREMENT without
version takes the message timestamp, as :mod:`..core.fold` does), so the fold treats both formats alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdcbridge.apply.routing import TopicRouting
from cdcbridge.apply.spark.columns import ColumnCache
from cdcbridge.apply.spark.decode import framing_columns, reader_schema
from cdcbridge.apply.spark.kernel import KernelFunction
from cdcbridge.apply.writer_schemas import WriterSchema
from cdcbridge.contract import SEQ_KEY_LENGTH, TOMBSTONE_SEQ_KEY_HEADER, MessageFormat

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: A cell or column value: one of the five Tablestore types set, the others null.
VALUE_UNION = "struct<z:boolean,l:bigint,d:double,s:string,b:binary>"
#: A primary-key value: INTEGER, STRING or BINARY.
PK_UNION = "struct<l:bigint,s:string,b:binary>"
PK_TYPE = f"array<struct<n:string,v:{PK_UNION}>>"
CELL_TYPE = f"struct<n:string,o:string,v:{VALUE_UNION},e:bigint,a:bigint>"
OP_TYPE = (
    f"struct<q:string,t:boolean,p:int,o:bigint,ts:bigint,d:boolean,i:boolean,r:boolean,pa:boolean,w:boolean,"
    f"c:array<{CELL_TYPE}>>"
)
#: What the compiled envelope functions return per valid message: its row's key and its operation.
ENVELOPE_OP_TYPE = f"struct<pk:{PK_TYPE},op:{OP_TYPE}>"
#: A MUTATE_LOG / RECORD_IMAGE envelope checked and made an operation, compiled:
#: deploy/spark/src/main/java/io/cdcbridge/spark/MutationOp.java and ImageOp.java.
MUTATION_OP = KernelFunction("cdcbridge_mutation_op", "io.cdcbridge.spark.MutationOp", ENVELOPE_OP_TYPE)
IMAGE_OP = KernelFunction("cdcbridge_image_op", "io.cdcbridge.spark.ImageOp", ENVELOPE_OP_TYPE)

OP, OTHER, UNKNOWN_SID, PYTHON = "op", "other", "unknown_sid", "python"

_SEQ_KEY_PATTERN = f"^[0-9]{{{SEQ_KEY_LENGTH}}}$"

# Plain canonical key tokens (what cdcbridge.formats.keys.encode_key writes without any escape); a key with any
# other token goes to the reference path, which accepts or refuses it exactly.
_KEY_INTEGER = r"0|-?[1-9][0-9]{0,18}"
_KEY_STRING = r'"[^"\\\x00-\x1f]*"'
#: Base64 with padding whose unused bits are zero (what b64encode writes).
_KEY_BINARY = r'\{"b64":"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?"\}'
_KEY_TOKEN = f"(?:{_KEY_INTEGER}|{_KEY_STRING}|{_KEY_BINARY})"
_KEY_PATTERN = rf"^\[{_KEY_TOKEN}(?:,{_KEY_TOKEN})*\]$"
_B64_PREFIX = len('{"b64":"')


_TOMBSTONE_OP = (
    "named_struct('q', _seq_header, 't', true, 'p', partition, 'o', offset, 'ts', cast(NULL AS bigint), "
    "'d', true, 'i', true, 'r', false, 'pa', false, 'w', false, "
    f"'c', cast(array() AS array<{CELL_TYPE}>))"
)


def _string_map(entries: Mapping[str, str]) -> Column:
    from pyspark.sql import functions as F

    if not entries:
        return F.lit(None).cast("map<string,string>")
    pairs = [item for key, value in entries.items() for item in (F.lit(key), F.lit(value))]
    return F.create_map(*pairs)


def _names_map(names: Mapping[str, Sequence[str]]) -> Column:
    from pyspark.sql import functions as F

    if not names:
        return F.lit(None).cast("map<string,array<string>>")
    pairs = [item for table, cols in names.items() for item in (F.lit(table), F.array(*[F.lit(c) for c in cols]))]
    return F.create_map(*pairs)


def _decoded(schemas: Mapping[int, WriterSchema], message_format: MessageFormat) -> Column:
    """The envelope struct for every schema id of `message_format` (null elsewhere); a typed null if none."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from cdcbridge.apply.spark.decode import decoded_struct

    column = decoded_struct(schemas, message_format)
    if column is None:  # the reader schema's struct type, always null
        schema = reader_schema(message_format)
        options = {"mode": "PERMISSIVE", "avroSchema": schema, "enableStableIdentifiersForUnionType": "true"}
        return from_avro(F.lit(None).cast("binary"), schema, options)
    return column


def _tombstone_pk_layers() -> list[dict[str, Column]]:
    """Layers adding ``_tomb_pk``: a tombstone's primary key from its Kafka key and the table's pk names
    (``_tomb_names``); null unless the key is valid UTF-8, plain canonical JSON (no escapes) with one in-range
    value per pk column."""
    from pyspark.sql import functions as F

    text = F.col("key").cast("string")
    tokens = F.regexp_extract_all(text, F.lit(f"({_KEY_TOKEN})"), F.lit(1))
    plain = (
        F.col("value").isNull()
        & F.col("key").isNotNull()
        & F.col("_tomb_names").isNotNull()
        & F.expr("is_valid_utf8(cast(key AS string))")
        & text.rlike(_KEY_PATTERN)
    )
    token = "item._tomb_tokens"
    pk = F.expr(
        "transform(arrays_zip(_tomb_names, _tomb_tokens), item -> named_struct('n', item._tomb_names, "
        f"'v', named_struct("
        f"'l', CASE WHEN NOT startswith({token}, '\"') AND NOT startswith({token}, '{{') "
        f"THEN try_cast({token} AS bigint) END, "
        f"'s', CASE WHEN startswith({token}, '\"') THEN substring({token}, 2, length({token}) - 2) END, "
        f"'b', CASE WHEN startswith({token}, '{{') "
        f"THEN unbase64(substring({token}, {_B64_PREFIX + 1}, length({token}) - {_B64_PREFIX + 2})) END)))"
    )
    usable = F.expr(
        "size(_tomb_tokens) = size(_tomb_names) "
        "AND forall(_tomb_parsed, p -> p.v.l IS NOT NULL OR p.v.s IS NOT NULL OR p.v.b IS NOT NULL)"
    )
    return [
        {"_tomb_tokens": F.when(F.coalesce(plain, F.lit(False)), tokens)},
        {"_tomb_parsed": F.when(F.col("_tomb_tokens").isNotNull(), pk)},
        {"_tomb_pk": F.when(F.coalesce(usable, F.lit(False)), F.col("_tomb_parsed"))},
    ]


@dataclass(frozen=True)
class _Normalizing:
    """The columns :func:`normalized_operations` adds, layer by layer (a layer's columns read only the columns
    of the layers before it), and the output columns; built once per schema ids, routing and key names
    (:mod:`.columns`)."""

    layers: list[dict[str, Column]]
    output: list[Column]


_NORMALIZING: ColumnCache[_Normalizing] = ColumnCache()


def normalized_operations(
    batch: DataFrame,
    schemas: Mapping[int, WriterSchema],
    routing: TopicRouting,
    tombstone_pk_names: Mapping[str, Sequence[str]],
) -> DataFrame:
    """Columns ``_class`` (op / other / unknown_sid / python, see the module docstring), ``_sid``, ``table``,
    ``pk`` and ``op`` (the last three set for class ``op``). `tombstone_pk_names` names the primary-key columns
    of the RECORD_IMAGE tables the target already holds (how a bare tombstone's key values are named)."""
    for function in (MUTATION_OP, IMAGE_OP):
        function.register(batch.sparkSession)  # a micro-batch's session is a clone of the job's
    key = (
        tuple(sorted(schemas.items())),
        tuple(sorted((topic, route.table, route.message_format) for topic, route in routing.routes.items())),
        tuple(sorted(routing.applied_formats.items())),
        tuple(sorted((table, tuple(names)) for table, names in tombstone_pk_names.items())),
    )
    built = _NORMALIZING.get(batch.sparkSession, key, lambda: _normalizing(schemas, routing, tombstone_pk_names))
    frame = batch
    for layer in built.layers:
        frame = frame.withColumns(layer)
    return frame.select(*built.output)


def _normalizing(
    schemas: Mapping[int, WriterSchema],
    routing: TopicRouting,
    tombstone_pk_names: Mapping[str, Sequence[str]],
) -> _Normalizing:
    from pyspark.sql import functions as F

    route_tables = {topic: route.table for topic, route in routing.routes.items()}
    route_formats = {topic: route.message_format.value for topic, route in routing.routes.items()}
    applied = {table: fmt.value for table, fmt in routing.applied_formats.items()}
    known_ids = F.expr(f"cast(array({', '.join(str(int(i)) for i in schemas)}) AS array<bigint>)")
    header = F.expr(f"get(filter(headers, h -> h.key = '{TOMBSTONE_SEQ_KEY_HEADER}'), 0).value").cast("string")
    position = (F.col("partition"), F.col("offset"))
    envelope_op = F.when(F.col("_mutation").isNotNull(), MUTATION_OP(F.col("_mutation"), *position)).when(
        F.col("_image").isNotNull(), IMAGE_OP(F.col("_image"), *position)
    )
    tombstone = _tombstone_pk_layers()
    layers = [
        {
            **framing_columns(),
            "_route_table": _string_map(route_tables)[F.col("topic")],
            "_route_format": _string_map(route_formats)[F.col("topic")],
            "_seq_header": header,
        },
        {
            "_mutation": _decoded(schemas, MessageFormat.MUTATE_LOG),
            "_image": _decoded(schemas, MessageFormat.RECORD_IMAGE),
            "_tomb_names": _names_map(tombstone_pk_names)[F.col("_route_table")],
        },
        {
            "_envelope_table": F.coalesce(F.col("_mutation.source.table"), F.col("_image.source.table")),
            "_envelope_format": F.when(F.col("_mutation").isNotNull(), F.lit(MessageFormat.MUTATE_LOG.value)).when(
                F.col("_image").isNotNull(), F.lit(MessageFormat.RECORD_IMAGE.value)
            ),
            "_eop": envelope_op,
            "_known_ids": known_ids,
            **tombstone[0],
        },
        {
            "table": F.when(F.col("value").isNull(), F.col("_route_table")).otherwise(F.col("_envelope_table")),
            **tombstone[1],
        },
        {"_applied_format": _string_map(applied)[F.col("table")], **tombstone[2]},
    ]
    classify = f"""
        CASE
          WHEN value IS NULL THEN CASE
            WHEN _route_table IS NULL OR _route_format != '{MessageFormat.RECORD_IMAGE.value}' THEN '{PYTHON}'
            WHEN coalesce(_applied_format, '') != '{MessageFormat.RECORD_IMAGE.value}' THEN '{OTHER}'
            WHEN _tomb_pk IS NULL THEN '{PYTHON}'
            WHEN _seq_header IS NOT NULL AND NOT coalesce(_seq_header RLIKE '{_SEQ_KEY_PATTERN}', false)
              THEN '{PYTHON}'
            ELSE '{OP}' END
          WHEN _magic = 0 AND _sid IS NOT NULL AND NOT array_contains(_known_ids, _sid) THEN '{UNKNOWN_SID}'
          WHEN _eop IS NULL THEN '{PYTHON}'
          WHEN _route_table IS NOT NULL AND (_route_table != table OR _route_format != _envelope_format)
            THEN '{PYTHON}'
          WHEN _applied_format IS NULL THEN '{PYTHON}'
          WHEN _applied_format != _envelope_format THEN '{OTHER}'
          ELSE '{OP}'
        END"""
    layers.append({"_class": F.expr(classify)})
    pk = "CASE WHEN value IS NULL THEN _tomb_pk ELSE _eop.pk END"
    op = f"CASE WHEN value IS NULL THEN {_TOMBSTONE_OP} ELSE _eop.op END"
    is_op = F.col("_class") == OP
    output = [
        F.col("_class"),
        F.col("_sid"),
        F.when(is_op, F.col("table")).alias("table"),
        F.when(is_op, F.expr(pk)).alias("pk"),
        F.when(is_op, F.expr(op)).alias("op"),
    ]
    return _Normalizing(layers, output)
