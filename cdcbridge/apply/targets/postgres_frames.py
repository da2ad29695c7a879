"""How rows travel between Spark and PostgreSQL on the Spark path: as one text per table, never row by row in
Python (the driver has no Arrow here).

- Keys of a batch: Spark renders them as one JSON array of arrays (each pk value as text, binary in base64),
  PostgreSQL unpacks it with ``json_array_elements`` and joins the table.
- Current rows: PostgreSQL renders each as one JSON line in the fold's state shape (``table``, ``pk``, ``cur``:
  see :mod:`cdcbridge.apply.spark.fold`), the driver hands the lines to Spark in chunks of whole lines (so no task
  carries more than :data:`TASK_TEXT_CHARS` of them), and Spark parses them with ``from_json``. A row whose
  ``attrs`` the JSON shape cannot carry exactly (an integer beyond int64, an object the apply job never writes) is
  reported as not representable, and the batch takes the reference path.
- Folded rows: Spark renders them as CSV for ``COPY … (FORMAT csv)``, ``attrs`` in the layout of
  :mod:`.postgres` (a double in plain decimal notation with a fraction, so it reads back as a float; binary as
  ``{"$b64": …}``; a non-finite double as ``{"$double": "nan" | "inf" | "-inf"}``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from psycopg import sql

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

#: PostgreSQL type of a primary-key column → field of the fold's primary-key union.
PK_FIELD = {"bigint": "l", "text": "s", "bytea": "b"}
#: DecimalFormat pattern: plain notation, the shortest digits of the double, at least one fraction digit.
_PLAIN_DOUBLE = "0.0" + "#" * 340
_INT64 = (-(2**63), 2**63 - 1)
#: The most current-row text one Spark task carries: Spark warns about tasks over 1000 KiB, and one table's text
#: is tens of MiB at 100k-message batches (a task per table made the PostgreSQL benchmark warn every batch).
TASK_TEXT_CHARS = 512 * 1024


def _json_string(text: str) -> str:
    """SQL: `text` as a JSON string literal (quotes and escapes by Spark's JSON writer)."""
    return f"substring(to_json(array({text})), 2, length(to_json(array({text}))) - 2)"


def _value_json(v: str) -> str:
    """SQL: the fold's value union `v` as the JSON value ``attrs`` holds."""
    binary = f"to_json(named_struct('b', {v}.b))"
    return (
        f"CASE WHEN {v}.z IS NOT NULL THEN cast({v}.z AS string) "
        f"WHEN {v}.l IS NOT NULL THEN cast({v}.l AS string) "
        f'WHEN {v}.d IS NOT NULL THEN CASE WHEN isnan({v}.d) THEN \'{{"$double":"nan"}}\' '
        f"WHEN {v}.d = double('inf') THEN '{{\"$double\":\"inf\"}}' "
        f"WHEN {v}.d = double('-inf') THEN '{{\"$double\":\"-inf\"}}' "
        f"ELSE format_number({v}.d, '{_PLAIN_DOUBLE}') END "
        f"WHEN {v}.s IS NOT NULL THEN {_json_string(f'{v}.s')} "
        f"ELSE concat('{{\"$b64\":', substring({binary}, 6, length({binary}) - 6), '}}') END"
    )


def _csv(text: str) -> str:
    return f"concat('\"', replace({text}, '\"', '\"\"'), '\"')"


def keys_json(pk: list[tuple[str, str]]) -> Column:
    """An aggregate over rows of the batch: their primary keys as one JSON array of text arrays (a key of
    another shape gives nulls, which match no row)."""
    from pyspark.sql import functions as F

    values = []
    for index, (_, kind) in enumerate(pk):
        field = F.get(F.col("pk"), index)["v"][PK_FIELD[kind]]
        values.append(F.base64(field) if kind == "bytea" else field.cast("string"))
    return F.to_json(F.collect_list(F.array(*values)))


def csv_text(rows: DataFrame, pk: list[tuple[str, str]]) -> str:
    """Folded rows (``pk``, ``row``) as CSV lines in the column order of the target's COPY (keys, then
    bookkeeping: :meth:`~cdcbridge.apply.targets.postgres.PostgresTarget._upsert`), as one text."""
    from pyspark.sql import functions as F

    fields = []
    for index, (_, kind) in enumerate(pk):
        value = f"pk[{index}].v.{PK_FIELD[kind]}"
        if kind == "bigint":
            fields.append(f"cast({value} AS string)")
        elif kind == "text":
            fields.append(_csv(value))
        else:
            fields.append(f"concat('\\\\x', lower(hex({value})))")
    entry = f"concat({_json_string('e.key')}, ':', {_value_json('e.value.v')})"
    attrs = f"concat('{{', array_join(transform(map_entries(row.cols), e -> {entry}), ','), '}}')"
    versions = "to_json(map_filter(transform_values(row.cols, (k, v) -> v.e), (k, v) -> v IS NOT NULL))"
    fields += [
        _csv(attrs),
        _csv(versions),
        _csv("row.seq"),
        "CASE WHEN row.del THEN 'true' ELSE 'false' END",
        "coalesce(cast(row.ts AS string), '')",
    ]
    line = F.expr("concat_ws(',', " + ", ".join(fields) + ")")
    found = rows.agg(F.array_join(F.collect_list(line), "\n").alias("text")).first()
    return (found["text"] if found is not None else None) or ""


def current_rows_query(schema: str, table: str, pk: list[tuple[str, str]]) -> sql.Composed:
    """One row: the stored rows among the keys (parameter 1: :func:`keys_json`; parameter 2: the table name) as
    JSON lines, and whether every one is representable."""
    casts = []
    for index, (name, kind) in enumerate(pk):
        value = sql.SQL("(k ->> {})").format(sql.Literal(index))
        if kind == "bigint":
            value = sql.SQL("{}::bigint").format(value)
        elif kind == "bytea":
            value = sql.SQL("decode({}, 'base64')").format(value)
        casts.append(sql.SQL("{} AS {}").format(value, sql.Identifier(name)))
    pk_items = sql.SQL(", ").join(
        sql.SQL("json_build_object('n', {}::text, 'v', json_build_object({}, {}))").format(
            sql.Literal(name),
            sql.Literal(PK_FIELD[kind]),
            sql.SQL("translate(encode(t.{}, 'base64'), E'\\n', '')").format(sql.Identifier(name))
            if kind == "bytea"
            else sql.SQL("t.{}").format(sql.Identifier(name)),
        )
        for name, kind in pk
    )
    union = sql.SQL(
        "CASE jsonb_typeof(a.value) "
        "WHEN 'boolean' THEN json_build_object('z', a.value) "
        "WHEN 'string' THEN json_build_object('s', a.value) "
        "WHEN 'number' THEN CASE WHEN a.value::text ~ '[.eE]' THEN json_build_object('d', a.value) "
        "ELSE json_build_object('l', a.value) END "
        "WHEN 'object' THEN CASE WHEN a.value ? '$b64' THEN json_build_object('b', a.value -> '$b64') "
        "ELSE json_build_object('d', CASE lower(a.value ->> '$double') WHEN 'nan' THEN 'NaN' "
        "WHEN 'inf' THEN 'Infinity' WHEN '-inf' THEN '-Infinity' END) END END"
    )
    representable = sql.SQL(
        "NOT EXISTS (SELECT 1 FROM jsonb_each(t.attrs) AS a WHERE NOT coalesce(CASE jsonb_typeof(a.value) "
        "WHEN 'boolean' THEN true WHEN 'string' THEN true "
        "WHEN 'number' THEN a.value::text ~ '[.eE]' OR a.value::text::numeric BETWEEN {} AND {} "
        "WHEN 'object' THEN (SELECT array_agg(key) FROM jsonb_object_keys(a.value) AS key) IN "
        "(ARRAY['$b64'], ARRAY['$double']) AND (a.value ? '$b64' "
        "OR lower(a.value ->> '$double') IN ('nan', 'inf', '-inf')) "
        "ELSE false END, false))"
    ).format(sql.Literal(_INT64[0]), sql.Literal(_INT64[1]))
    row = sql.SQL(
        "json_build_object('table', %s::text, 'pk', json_build_array({pk_items}), 'cur', json_build_object("
        "'cols', coalesce((SELECT json_object_agg(a.key, json_build_object('v', {union}, "
        "'e', (t._versions ->> a.key)::bigint)) FROM jsonb_each(t.attrs) AS a), '{{}}'::json), "
        "'del', t._deleted, 'seq', t._seq, 'ts', t._source_ts))::text"
    ).format(pk_items=pk_items, union=union)
    return sql.SQL(
        "WITH keys AS (SELECT {casts} FROM json_array_elements(%s::json) AS k) "
        "SELECT coalesce(string_agg({row}, E'\\n'), ''), coalesce(bool_and({representable}), true) "
        "FROM {table} AS t JOIN keys USING ({names})"
    ).format(
        casts=sql.SQL(", ").join(casts),
        row=row,
        representable=representable,
        table=sql.Identifier(schema, table),
        names=sql.SQL(", ").join(sql.Identifier(name) for name, _ in pk),
    )


def text_chunks(texts: Iterable[str], limit: int = TASK_TEXT_CHARS) -> list[str]:
    """Each of `texts` (newline-separated lines) cut at line ends into texts of at most `limit` characters, or of
    one line when that line is longer. The cuts are found by searching back from each `limit`-th character, so
    the driver does not walk the lines one by one."""
    chunks: list[str] = []
    for text in texts:
        start = 0
        while len(text) - start > limit:
            cut = text.rfind("\n", start, start + limit + 1)
            if cut < 0:  # the line at `start` is longer than `limit`: it goes alone
                cut = text.find("\n", start + limit)
                if cut < 0:
                    break
            chunks.append(text[start:cut])
            start = cut + 1
        chunks.append(text[start:])
    return chunks


def current_row_lines(spark: SparkSession, texts: Iterable[str], limit: int = TASK_TEXT_CHARS) -> DataFrame:
    """The lines of `texts` as a frame (``line``), one Spark task per chunk of :func:`text_chunks` (handed to the
    JVM as a few strings: not row by row through Python)."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    chunks = text_chunks(texts, limit)
    rdd = spark.sparkContext._jsc.parallelize(chunks, max(1, len(chunks)))
    strings = spark._jvm.org.apache.spark.sql.Encoders.STRING()
    frame = DataFrame(spark._jsparkSession.createDataset(rdd.rdd(), strings).toDF(), spark)  # one column, "value"
    return frame.select(F.explode(F.split("value", "\n")).alias("line"))
