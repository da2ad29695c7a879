"""PostgreSQL target (psycopg 3): one table per source table in ``apply.postgres_schema``, one transaction per batch.

Layout of a table: the primary-key columns (bigint / text / bytea, the table's PRIMARY KEY), ``attrs jsonb``
(column → value: JSON numbers keep int vs float apart, binary is ``{"$b64": …}``, a non-finite double
``{"$double": "NaN"}``), ``_versions jsonb`` (column → version ms), ``_seq text COLLATE "C"`` (byte order, so
text comparison is seq order), ``_deleted boolean``, ``_source_ts bigint``.

A batch is one transaction: lock this app's progress row and stop if it already holds the batch (a re-run batch
is a no-op), COPY each table's rows into a temp table and upsert them with
``INSERT … ON CONFLICT (pk) DO UPDATE … WHERE excluded._seq > t._seq``, insert the dead letters, move the
progress row to the batch id, commit. On the Spark path the rows come and go as text, not through Python one by
one (:mod:`.postgres_frames`).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.model import ColumnValue, PkValue, PrimaryKey, TargetRow
from cdcbridge.apply.errors import TargetError
from cdcbridge.apply.target import SparkFoldTarget, TargetBatch
from cdcbridge.apply.targets.dead_letters import DEAD_LETTER_COLUMNS, dead_letter_row
from cdcbridge.apply.targets.postgres_frames import csv_text, current_row_lines, current_rows_query, keys_json
from cdcbridge.changes import Value

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cdcbridge.apply.target import FoldedTable

PROGRESS_TABLE = "_apply_progress"
_BOOKKEEPING = ("attrs", "_versions", "_seq", "_deleted", "_source_ts")
#: Logical primary-key type (as the Spark path names it) → PostgreSQL column type.
_PG_PK_TYPE = {"bigint": "bigint", "string": "text", "binary": "bytea"}


def encode_attrs(row: TargetRow) -> tuple[str, str]:
    """(attrs, _versions) JSON texts of a row."""
    attrs = ", ".join(f"{json.dumps(name)}: {_json_text(cell.value)}" for name, cell in row.columns.items())
    versions = {name: cell.version for name, cell in row.columns.items() if cell.version is not None}
    return "{" + attrs + "}", json.dumps(versions)


def _json_text(value: Value) -> str:
    """A value as JSON text; a finite double in plain decimal notation with a fraction (``1e+16`` would be stored
    by jsonb as the integer 10000000000000000 and read back as an int)."""
    if isinstance(value, float) and math.isfinite(value):
        text = repr(value)
        if "e" in text:
            text = format(Decimal(text), "f")
        return text if "." in text else text + ".0"
    return json.dumps(_json_value(value), allow_nan=False)


def decode_attrs(attrs: Mapping[str, Any] | None, versions: Mapping[str, Any] | None) -> dict[str, ColumnValue]:
    versions = versions or {}
    return {name: ColumnValue(_value_of(value), versions.get(name)) for name, value in (attrs or {}).items()}


def _pk_type(value: PkValue) -> str:
    if isinstance(value, bytes):
        return "bytea"
    return "bigint" if isinstance(value, int) else "text"


def _json_value(value: Value) -> Any:
    if isinstance(value, bytes | bytearray):
        return {"$b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$double": repr(value)}
    return value


def _value_of(value: Any) -> Value:
    if isinstance(value, dict):
        if "$b64" in value:
            return base64.b64decode(value["$b64"])
        if "$double" in value:
            return float(value["$double"])
        raise TargetError(f"attrs value {value!r:.80} is not one the apply job writes")
    return value


class PostgresTarget(SparkFoldTarget):
    """Upserts folded rows into PostgreSQL (see the module docstring)."""

    name = "postgres"

    def __init__(self, dsn: str, schema: str = "public", dead_letter_table: str = "_dead_letters") -> None:
        self.dsn = dsn
        self.schema = schema
        self.dead_letter_table = dead_letter_table
        self._connection: psycopg.Connection | None = None
        self._pk_columns: dict[str, list[tuple[str, str]]] = {}

    # --- connection and DDL -------------------------------------------------------------------------------------

    @property
    def connection(self) -> psycopg.Connection:
        if self._connection is None or self._connection.closed or self._connection.broken:
            try:
                self._connection = psycopg.connect(self.dsn, autocommit=False)
            except psycopg.OperationalError as error:
                raise TargetError(f"cannot connect to PostgreSQL: {error}".strip()) from error
        return self._connection

    def _name(self, table: str) -> sql.Composed:
        return sql.Identifier(self.schema, table)

    def prepare(self, tables: Collection[str]) -> None:
        with self.connection.transaction():
            self.connection.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            self.connection.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (app_id text PRIMARY KEY, batch_id bigint NOT NULL, "
                    "updated_at timestamptz NOT NULL DEFAULT now())"
                ).format(self._name(PROGRESS_TABLE))
            )
            self.connection.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (app_id text NOT NULL, batch_id bigint NOT NULL, topic text, "
                    'partition integer, "offset" bigint, error_type text NOT NULL, error text NOT NULL, '
                    "message jsonb, recorded_at timestamptz NOT NULL DEFAULT now())"
                ).format(self._name(self.dead_letter_table))
            )

    def _ensure_table(self, table: str, pk: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The table's primary key (name, type), creating the table with `pk` if it does not exist."""
        columns = self._table_pk(table)
        if columns:
            return columns
        definition = sql.SQL(", ").join(
            [sql.SQL("{} {} NOT NULL").format(sql.Identifier(n), sql.SQL(k)) for n, k in pk]
            + [
                sql.SQL("attrs jsonb NOT NULL DEFAULT '{}'"),
                sql.SQL("_versions jsonb NOT NULL DEFAULT '{}'"),
                sql.SQL('_seq text COLLATE "C"'),
                sql.SQL("_deleted boolean NOT NULL DEFAULT false"),
                sql.SQL("_source_ts bigint"),
                sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(sql.Identifier(n) for n, _ in pk)),
            ]
        )
        self.connection.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(self._name(table), definition))
        self._pk_columns.pop(table, None)
        return self._table_pk(table)

    def _table_pk(self, table: str) -> list[tuple[str, str]]:
        """(name, type) of the table's primary-key columns in order; [] if the table does not exist."""
        if table in self._pk_columns:
            return self._pk_columns[table]
        rows = self.connection.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
            "ORDER BY array_position(i.indkey::int2[], a.attnum)",
            (sql.Identifier(self.schema, table).as_string(self.connection),),
        ).fetchall()
        columns = [(name, kind) for name, kind in rows]
        if columns:
            self._pk_columns[table] = columns
        return columns

    def pk_names(self, table: str) -> tuple[str, ...] | None:
        try:
            columns = self._table_pk(table)
        finally:
            self.connection.rollback()
        return tuple(name for name, _ in columns) or None

    # --- reading ------------------------------------------------------------------------------------------------

    def read_marker(self, table: str, app_id: str) -> BatchMarker | None:
        try:
            found = self.connection.execute(
                sql.SQL("SELECT batch_id FROM {} WHERE app_id = %s").format(self._name(PROGRESS_TABLE)), (app_id,)
            ).fetchone()
        finally:
            self.connection.rollback()
        return BatchMarker(app_id, int(found[0])) if found else None

    def read_rows(self, table: str, keys: Collection[PrimaryKey]) -> dict[PrimaryKey, TargetRow]:
        try:
            return self._read_rows(table, keys)
        finally:
            self.connection.rollback()

    def _read_rows(self, table: str, keys: Collection[PrimaryKey]) -> dict[PrimaryKey, TargetRow]:
        pk = self._table_pk(table)
        if not pk or not keys:
            return {}
        names = [name for name, _ in pk]
        arrays = [[dict(key)[name] for key in keys] for name in names]
        query = sql.SQL("SELECT t.* FROM {} t JOIN unnest({}) AS k({}) USING ({})").format(
            self._name(table),
            sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(kind)) for _, kind in pk),
            sql.SQL(", ").join(sql.Identifier(n) for n in names),
            sql.SQL(", ").join(sql.Identifier(n) for n in names),
        )
        cursor = self.connection.execute(query, arrays)
        columns = [column.name for column in cursor.description or ()]
        rows: dict[PrimaryKey, TargetRow] = {}
        for values in cursor:
            record = dict(zip(columns, values, strict=True))
            key: tuple[tuple[str, PkValue], ...] = tuple(
                (name, bytes(record[name]) if isinstance(record[name], memoryview) else record[name]) for name in names
            )
            rows[key] = TargetRow(
                table=table,
                pk=key,
                columns=decode_attrs(record["attrs"], record["_versions"]),
                seq=record["_seq"],
                deleted=record["_deleted"],
                source_ts=record["_source_ts"],
            )
        return rows

    # --- writing ------------------------------------------------------------------------------------------------

    def write(self, batch: TargetBatch) -> int:
        def body() -> int:
            written = 0
            for table, rows in batch.rows.items():
                if rows:
                    pk = [(name, _pk_type(value)) for name, value in rows[0].pk]
                    written += self._upsert(table, pk, lambda copy, rows=rows: _copy_rows(copy, rows))
            self._insert_dead_letters(batch)
            return written

        return self._commit(batch.marker, body, 0)

    @contextmanager
    def _batch_transaction(self, marker: BatchMarker) -> Iterator[bool]:
        """One transaction holding the progress row: yields whether the batch is already in (then the body
        must write nothing); the progress row moves to the batch when the body completes."""
        connection = self.connection
        try:
            with connection.transaction():
                applied = self._already_applied(marker)
                yield applied
                if not applied:
                    connection.execute(
                        sql.SQL(
                            "INSERT INTO {} (app_id, batch_id) VALUES (%s, %s) ON CONFLICT (app_id) DO UPDATE "
                            "SET batch_id = excluded.batch_id, updated_at = now()"
                        ).format(self._name(PROGRESS_TABLE)),
                        (marker.app_id, marker.batch_id),
                    )
        except psycopg.Error as error:
            self._pk_columns.clear()
            raise TargetError(f"PostgreSQL refused batch {marker.batch_id}: {error}".strip()) from error

    def _commit(self, marker: BatchMarker, body: Callable[[], Any], skipped: Any) -> Any:
        with self._batch_transaction(marker) as applied:
            return skipped if applied else body()

    def _already_applied(self, marker: BatchMarker) -> bool:
        self.connection.execute(
            sql.SQL("INSERT INTO {} (app_id, batch_id) VALUES (%s, -1) ON CONFLICT (app_id) DO NOTHING").format(
                self._name(PROGRESS_TABLE)
            ),
            (marker.app_id,),
        )
        stored = self.connection.execute(
            sql.SQL("SELECT batch_id FROM {} WHERE app_id = %s FOR UPDATE").format(self._name(PROGRESS_TABLE)),
            (marker.app_id,),
        ).fetchone()
        return stored is not None and stored[0] >= marker.batch_id

    def _upsert(self, table: str, pk: list[tuple[str, str]], fill: Callable[[Any], None], *, csv: bool = False) -> int:
        """Upsert what `fill` writes into a COPY (text format, or CSV) of the table's key and bookkeeping columns,
        through a temp table and the guard; returns the rows written."""
        pk = self._ensure_table(table, pk)
        names = [name for name, _ in pk]
        columns = [*names, *_BOOKKEEPING]
        staging = sql.Identifier(f"_staging_{table}")
        self.connection.execute(
            sql.SQL("CREATE TEMP TABLE {} (LIKE {}) ON COMMIT DROP").format(staging, self._name(table))
        )
        column_list = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN" + (" (FORMAT csv)" if csv else "")).format(staging, column_list)
        with self.connection.cursor().copy(copy_sql) as copy:
            fill(copy)
        updates = sql.SQL(", ").join(
            sql.SQL("{} = excluded.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in _BOOKKEEPING
        )
        cursor = self.connection.execute(
            sql.SQL(
                "INSERT INTO {target} AS t ({columns}) SELECT {columns} FROM {staging} "
                "ON CONFLICT ({keys}) DO UPDATE SET {updates} WHERE excluded._seq > t._seq OR t._seq IS NULL"
            ).format(
                target=self._name(table),
                columns=column_list,
                staging=staging,
                keys=sql.SQL(", ").join(sql.Identifier(n) for n in names),
                updates=updates,
            )
        )
        self.connection.execute(sql.SQL("DROP TABLE {}").format(staging))
        return max(cursor.rowcount, 0)

    # --- the Spark path -----------------------------------------------------------------------------------------

    def current_rows(
        self, tables: Collection[str], grouped: DataFrame, keys_at_most: int | None = None
    ) -> DataFrame | None:
        from pyspark.sql import functions as F

        from cdcbridge.apply.spark.batch import ReferencePathNeeded
        from cdcbridge.apply.spark.fold import STATE_TYPE
        from cdcbridge.apply.spark.operations import PK_TYPE

        texts = []
        try:
            for table in tables:
                pk = self._table_pk(table)
                if not pk:
                    continue
                found = grouped.where(F.col("table") == table).agg(keys_json(pk).alias("keys")).first()
                keys = found["keys"] if found is not None else None
                if not keys or keys == "[]":
                    continue
                query = current_rows_query(self.schema, table, pk)
                text, representable = self.connection.execute(query, (keys, table)).fetchone()
                if not representable:
                    raise ReferencePathNeeded(f"a stored row of table {table!r} holds a value the fold cannot carry")
                if text:
                    texts.append(text)
        except psycopg.Error as error:
            raise TargetError(f"cannot read the current rows from PostgreSQL: {error}".strip()) from error
        finally:
            self.connection.rollback()
        if not texts:
            return None
        lines = current_row_lines(grouped.sparkSession, texts)
        schema = f"table string, pk {PK_TYPE}, cur {STATE_TYPE}"
        parsed = lines.select(F.from_json("line", schema, {"mode": "FAILFAST"}).alias("r"))
        return parsed.select("r.table", "r.pk", "r.cur")

    def refusal(self, folded: FoldedTable) -> str | None:
        if len(folded.pk_signatures) != 1:
            return f"rows of the batch disagree on the primary key: {sorted(folded.pk_signatures)}"
        wanted = self._pk_of(folded)
        try:
            stored = self._table_pk(folded.table)
        finally:
            self.connection.rollback()
        if stored and stored != wanted:
            return f"primary key {wanted} differs from the table's {stored}"
        return None

    def write_folded(self, marker: BatchMarker, tables: Mapping[str, FoldedTable]) -> dict[str, int]:
        texts = {table: (self._pk_of(folded), csv_text(folded.rows, self._pk_of(folded)))
                 for table, folded in tables.items()}  # fmt: skip

        def body() -> dict[str, int]:
            return {
                table: self._upsert(table, pk, lambda copy, text=text: copy.write(text), csv=True)
                for table, (pk, text) in texts.items()
            }

        return self._commit(marker, body, {table: 0 for table in tables})

    @staticmethod
    def _pk_of(folded: FoldedTable) -> list[tuple[str, str]]:
        ((signature),) = folded.pk_signatures
        return [(name, _PG_PK_TYPE[kind]) for name, kind in signature]

    def _insert_dead_letters(self, batch: TargetBatch) -> None:
        if not batch.dead_letters:
            return
        columns = sql.SQL(", ").join(sql.Identifier(c) for c in DEAD_LETTER_COLUMNS)
        with self.connection.cursor().copy(
            sql.SQL("COPY {} ({}) FROM STDIN").format(self._name(self.dead_letter_table), columns)
        ) as copy:
            for letter in batch.dead_letters:
                record = dead_letter_row(letter, batch.marker)
                copy.write_row([record[c] for c in DEAD_LETTER_COLUMNS])

    def purge_deleted(self, table: str, horizon_ms: int) -> int:
        with self.connection.transaction():
            if not self._table_pk(table):
                return 0
            cursor = self.connection.execute(
                sql.SQL("DELETE FROM {} WHERE _deleted AND _source_ts < %s").format(self._name(table)), (horizon_ms,)
            )
        return max(cursor.rowcount, 0)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _copy_rows(copy: Any, rows: Sequence[TargetRow]) -> None:
    for row in rows:
        attrs, versions = encode_attrs(row)
        copy.write_row([*(value for _, value in row.pk), attrs, versions, row.seq, row.deleted, row.source_ts])
