"""One micro-batch on Spark: decode, validate, dedup, fold and write in the JVM; the driver handles counts only.

Steps per batch (see :mod:`.operations` and :mod:`.fold` for what runs in Spark):

1. The batch is planned: Kafka → decoded and validated operations grouped by target row (persisted: the target
   and the fold both read it), and the target's current rows of the tables (lazy where the target allows).
2. One Spark job joins the rows the target holds for the batch's keys and folds, materialized once; one small
   collect then reads, per table, the counts of :class:`~cdcbridge.apply.core.fold.ApplyStats` and what the
   changed rows look like (column names and types, primary-key signatures, the target files holding them), so
   the target can add columns or see a row it would refuse before anything is written, together with the
   counts of what was set aside while decoding (no job of its own: a small batch pays for each job it runs).
3. The target writes each table's changed rows with the guard and the batch marker (Delta: one MERGE per
   table, or an append when no changed row is stored yet; PostgreSQL: one transaction).

A batch whose keys each have one operation and are not stored skips the grouping in steps 1 and 2: it is folded
message by message, and its checks run in the summary's job (:mod:`.new_keys`); where the target takes a pending
append, it is written in the job that decodes it, with its summary observed in that job, and checked after.

The batch goes to the reference path, :class:`~cdcbridge.apply.driver.micro_batch.MicroBatchApplier`, instead, before
anything is written, when it holds anything the reference path must judge message by message: bad input (it
raises or dead-letters as configured), an INCREMENT the fold cannot apply, a row the target would refuse, or a
bare tombstone of a table the target does not hold yet. Schema ids met for the first time are fetched and the
batch is read again, as on the reference path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, partial
from typing import TYPE_CHECKING, Any

import numpy as np

from cdcbridge.apply.batch_report import FRESHNESS_QUANTILES, BatchReport
from cdcbridge.apply.core.fold import ApplyStats
from cdcbridge.apply.core.marker import BatchMarker, batch_already_applied
from cdcbridge.apply.routing import TopicRouting
from cdcbridge.apply.spark.columns import ColumnCache
from cdcbridge.apply.spark.fold import fold_rows, grouped_operations, message_key_hash
from cdcbridge.apply.spark.kernel import KernelFunction
from cdcbridge.apply.spark.new_keys import REPEATED_KEYS, STORED_KEYS, NewKeyPlanner, key_checks, per_message_groups
from cdcbridge.apply.spark.operations import normalized_operations
from cdcbridge.apply.target import FoldedTable, SparkFoldTarget
from cdcbridge.apply.writer_schemas import WriterSchema
from cdcbridge.contract import MessageFormat

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation

_NAMED_TYPES = "array<struct<n:string,t:string>>"
#: A changed row's shape: its attribute columns and primary key as (name, Spark type name), and whether two column
#: names differ only in case.
SHAPE_TYPE = f"struct<cols:{_NAMED_TYPES},pk:{_NAMED_TYPES},case_conflict:boolean>"
#: The shape, compiled (deploy/spark/src/main/java/io/cdcbridge/spark/RowShape.java) rather than ``transform``
#: over each row's map entries and key, which Spark interprets lambda by lambda.
ROW_SHAPE = KernelFunction("cdcbridge_row_shape", "io.cdcbridge.spark.RowShape", SHAPE_TYPE)
_STAT_COLUMNS = ("tombstones_without_seq", "duplicates", "stale", "applied", "tombstones_redundant")
#: The summary's aggregates that are lists.
_LISTS = frozenset({"unknown_sids", "column_sets", "pk_sets", "files", "ts_quantiles", "key_hashes"})
#: A changed row's columns as the target writes them (:attr:`FoldedTable.rows`).
_ROW_COLUMNS = ("pk", "row", "file", "file_row")
#: Messages whose shape names the columns of a table a batch written first creates (:func:`_sampled_shape`).
SHAPE_SAMPLE = 1000
#: The summary's columns, built once (:mod:`.columns`).
_SUMMARY_COLUMNS: ColumnCache[tuple[Column, list[Column]]] = ColumnCache()


@dataclass(frozen=True)
class _BatchHead:
    messages: int
    other: int


class ReferencePathNeeded(Exception):
    """The batch holds something the Spark path leaves to the reference path (the reason says what)."""


class SchemaIdsNeeded(Exception):
    """The batch holds schema ids the driver has not fetched yet."""

    def __init__(self, schema_ids: set[int]) -> None:
        super().__init__(f"schema ids {sorted(schema_ids)} are not loaded yet")
        self.schema_ids = schema_ids


class SparkBatchApplier:
    """Applies micro-batches on Spark to a :class:`~cdcbridge.apply.target.SparkFoldTarget`."""

    def __init__(self, target: SparkFoldTarget, routing: TopicRouting, app_id: str) -> None:
        self.target = target
        self.routing = routing
        self.app_id = app_id
        self.new_keys = NewKeyPlanner()

    def apply(
        self,
        batch_id: int,
        batch: DataFrame,
        schemas: Mapping[int, WriterSchema],
        messages_at_most: int | None = None,
    ) -> BatchReport:
        """Apply one batch; raises :class:`ReferencePathNeeded` or :class:`SchemaIdsNeeded` before writing
        anything when the batch must take the reference path or needs schemas fetched first.
        `messages_at_most`: the batch's messages when known (its Kafka offset ranges), a bound on its keys."""
        report = BatchReport(batches=1, spark_batches=1)
        started = time.perf_counter()
        image_tables = [t for t, f in self.routing.applied_formats.items() if f is MessageFormat.RECORD_IMAGE]
        pk_names = {table: names for table in image_tables if (names := self.target.pk_names(table)) is not None}
        normalized = normalized_operations(batch, schemas, self.routing, pk_names)
        if not self.new_keys.worth_trying(self.routing.applied_formats):
            return self._apply_grouped(batch_id, normalized, report, started, messages_at_most)
        if self._apply_written_first(batch_id, normalized, report, started):
            report.new_key_batches = 1
            return report
        with _persisted(normalized) as decoded:
            if self._apply_new_keys(batch_id, decoded, report, time.perf_counter()):
                report.new_key_batches = 1
                return report
            return self._apply_grouped(batch_id, decoded, report, time.perf_counter(), messages_at_most)

    def _apply_written_first(self, batch_id: int, normalized: DataFrame, report: BatchReport, started: float) -> bool:
        """The new-key path in one Spark job, for a job of one table whose last batch passed the checks, into a
        target that takes a pending append, or whose table does not exist yet (its shape then sampled first, and
        made by the commit): the batch folded message by message and written as it is decoded, its
        summary observed during that write, its keys checked from the written rows; committed if all of it passes
        (:func:`_fits_written_first`), else dropped (False: nothing written)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        if len(self.routing.applied_formats) != 1:
            return False
        (table,) = self.routing.applied_formats
        clean = self.new_keys.known_clean(table)
        creates = not clean and self.target.creates_when_written_first(table)
        if not (clean or creates):
            return False
        if batch_already_applied(self.target.read_marker(table, self.app_id), self.app_id, batch_id):
            return False
        ROW_SHAPE.register(normalized.sparkSession)
        sample = _sampled_shape(normalized, table) if creates else None
        if creates and sample is None:
            return False
        shape, aggregates = _SUMMARY_COLUMNS.get(normalized.sparkSession, "observed", _observed_columns)
        observation = Observation()
        folded = fold_rows(per_message_groups(normalized), None).withColumn("_shape", shape)
        observed = folded.observe(observation, *aggregates)
        rows = observed.where((F.col("table") == F.lit(table)) & _changed()).select(*_ROW_COLUMNS)
        report.seconds_decode = time.perf_counter() - started
        started = time.perf_counter()
        summary_of = cache(partial(_observed_summary, observation))
        key_hashes = partial(_message_key_hashes, summary_of)
        pending = (
            self.target.pending_create(table, rows, key_hashes, *sample)
            if sample
            else self.target.pending_append(table, rows, key_hashes)
        )
        if pending is None:
            return False
        report.seconds_write = time.perf_counter() - started
        started = time.perf_counter()
        try:
            summary = summary_of()
            folded_table = _folded_table(table, summary, rows)
            passed = (
                _fits_written_first(summary, folded_table)
                and pending.written_in_full(folded_table)
                and not pending.stored_keys()
            )
        except BaseException:
            pending.drop()
            raise
        if not passed:
            pending.drop()
            return False
        report.seconds_read = time.perf_counter() - started
        started = time.perf_counter()
        pending.commit(BatchMarker(self.app_id, batch_id))  # never dropped once tried: the commit may have landed
        report.seconds_write += time.perf_counter() - started
        report.stats.messages, report.other_format = int(summary["messages"] or 0), int(summary["other"] or 0)
        report.stats += folded_table.stats
        report.rows_by_table = {table: folded_table.rows_changed}
        report.rows_written = folded_table.rows_changed
        report.source_ts_sample = folded_table.source_ts_quantiles
        self.new_keys.learn({table: True})
        return True

    def _apply_new_keys(self, batch_id: int, decoded: DataFrame, report: BatchReport, started: float) -> bool:
        """The new-key path (:mod:`.new_keys`): the batch folded message by message and written, if no key of it
        repeats or is stored; False (nothing written) if one does."""
        from pyspark.sql import functions as F

        report.seconds_decode = time.perf_counter() - started
        started = time.perf_counter()
        keys = decoded.where(F.col("table").isNotNull()).select("table", "pk")
        stored = self.target.stored_among(list(self.routing.applied_formats), keys)
        report.seconds_read = time.perf_counter() - started
        started = time.perf_counter()
        folded = fold_rows(per_message_groups(decoded), None)
        head, tables, checks = self._summarize(folded, key_checks(decoded, stored))
        if any(checks.values()):
            report.seconds_fold = time.perf_counter() - started
            return False
        self._write(batch_id, head, tables, report, started)
        return True

    def _apply_grouped(
        self, batch_id: int, normalized: DataFrame, report: BatchReport, started: float, keys_at_most: int | None
    ) -> BatchReport:
        """The grouped path: each row's operations grouped (one shuffle), joined with its stored row and folded."""
        with _persisted(grouped_operations(normalized)) as grouped:
            report.seconds_decode += time.perf_counter() - started
            started = time.perf_counter()
            current = self.target.current_rows(list(self.routing.applied_formats), grouped, keys_at_most)
            report.seconds_read += time.perf_counter() - started
            started = time.perf_counter()
            with _materialized(fold_rows(grouped, current)) as folded:
                head, tables, _ = self._summarize(folded)
                self._write(batch_id, head, tables, report, started)
        return report

    def _write(
        self, batch_id: int, head: _BatchHead, tables: Mapping[str, FoldedTable], report: BatchReport, started: float
    ) -> None:
        """Write the folded tables the batch has not written yet; `started`: when the fold began."""
        report.stats.messages, report.other_format = head.messages, head.other
        to_write = self._tables_to_write(tables, batch_id, report)
        report.seconds_fold += time.perf_counter() - started
        if to_write:
            started = time.perf_counter()
            report.rows_by_table = self.target.write_folded(BatchMarker(self.app_id, batch_id), to_write)
            report.rows_written = sum(report.rows_by_table.values())
            report.seconds_write = time.perf_counter() - started
            report.source_ts_sample = tuple(ts for t in to_write.values() for ts in t.source_ts_quantiles)
        self.new_keys.learn({table: folded.only_new_keys for table, folded in tables.items()})

    def _tables_to_write(
        self, tables: Mapping[str, FoldedTable], batch_id: int, report: BatchReport
    ) -> dict[str, FoldedTable]:
        """The tables with changed rows this batch has not written yet (their counts go into `report`); raises
        :class:`ReferencePathNeeded` if one of them holds a row the fold or the target cannot take."""
        to_write: dict[str, FoldedTable] = {}
        for table in sorted(tables):
            if batch_already_applied(self.target.read_marker(table, self.app_id), self.app_id, batch_id):
                report.tables_skipped += 1
                continue
            folded = tables[table]
            if folded.errors:
                raise ReferencePathNeeded(f"table {table!r}: an INCREMENT the fold cannot apply")
            report.stats += folded.stats
            if folded.rows_changed:
                to_write[table] = folded
        if tables and report.tables_skipped == len(tables):
            report.batches_skipped = 1
        for table, folded in to_write.items():
            refusal = self.target.refusal(folded)
            if refusal is not None:
                raise ReferencePathNeeded(f"table {table!r}: {refusal}")
        return to_write

    def _summarize(
        self, folded: DataFrame, checks: DataFrame | None = None
    ) -> tuple[_BatchHead, dict[str, FoldedTable], dict[str, int]]:
        """The counts of what was set aside while normalizing and, per table, the counts and the shape of the
        changed rows, with the per-table counts of `checks` (:func:`.new_keys.key_checks`) added up: one small
        collect. Raises when the batch cannot be applied on Spark (nothing is written yet)."""
        from pyspark.sql import functions as F

        ROW_SHAPE.register(folded.sparkSession)
        shape, aggregates = _SUMMARY_COLUMNS.get(folded.sparkSession, "summary", _grouped_columns)
        summary = folded.withColumn("_shape", shape).groupBy("table").agg(*aggregates)
        if checks is not None:
            summary = summary.join(checks, on="table", how="left")
        rows = summary.collect()
        check_names = (REPEATED_KEYS, STORED_KEYS) if checks is not None else ()
        counts = {name: sum(int(row[name] or 0) for row in rows) for name in check_names}
        unknown = {int(sid) for row in rows for sid in row["unknown_sids"] or ()}
        if unknown:
            raise SchemaIdsNeeded(unknown)
        python = sum(int(row["python"] or 0) for row in rows)
        if python:
            raise ReferencePathNeeded(f"{python} message(s) need the reference path")
        head = _BatchHead(sum(int(row["messages"] or 0) for row in rows), sum(int(row["other"] or 0) for row in rows))
        changed = _changed()
        tables = {
            row["table"]: _folded_table(
                row["table"], row, folded.where((F.col("table") == row["table"]) & changed).select(*_ROW_COLUMNS)
            )
            for row in rows
            if row["table"] is not None  # the null table: the messages that are no operation
        }
        return head, tables, counts


def _folded_table(table: str, summary: Mapping[str, Any], rows: DataFrame) -> FoldedTable:
    """The :class:`FoldedTable` of `table` from its summary (a grouped summary row, or the observed one)."""
    counts = {name: int(summary[name] or 0) for name in _STAT_COLUMNS}
    stats = ApplyStats(**counts, rows_changed=summary["rows_changed"])
    return FoldedTable(
        table=table,
        stats=stats,
        columns=frozenset((c["n"], c["t"]) for cells in summary["column_sets"] or () for c in cells),
        pk_signatures=frozenset(tuple((p["n"], p["t"]) for p in pk) for pk in summary["pk_sets"] or ()),
        case_conflicts=summary["case_conflicts"],
        errors=summary["errors"],
        source_ts_quantiles=tuple(int(ts) for ts in summary["ts_quantiles"] or () if ts is not None),
        rows=rows,
        files=frozenset(summary["files"] or ()),
        rows_new=summary["rows_new"],
        keys_repeated=summary["keys_repeated"],
    )


def _sampled_shape(
    normalized: DataFrame, table: str
) -> tuple[frozenset[tuple[str, str]], frozenset[tuple[tuple[str, str], ...]]] | None:
    """The columns (name, type) and primary-key signatures of `table`'s changed rows among the batch's first
    :data:`SHAPE_SAMPLE` messages of it, to create the table in the shape the batch is written in; None when the
    sample holds a repeated key, a case conflict or no changed row, so the batch would not pass its checks."""
    from pyspark.sql import functions as F

    folded = fold_rows(per_message_groups(normalized.where(F.col("table") == F.lit(table))), None)
    shape = F.when(_changed(), ROW_SHAPE(F.col("pk"), F.col("row.cols")))
    sample = folded.select(F.xxhash64("pk").alias("key"), shape.alias("shape")).limit(SHAPE_SAMPLE).collect()
    shapes = [row["shape"] for row in sample if row["shape"] is not None]
    if len({row["key"] for row in sample}) < len(sample) or not shapes:
        return None
    if any(shape["case_conflict"] for shape in shapes):
        return None
    columns = frozenset((cell["n"], cell["t"]) for shape in shapes for cell in shape["cols"])
    return columns, frozenset(tuple((key["n"], key["t"]) for key in shape["pk"]) for shape in shapes)


def _fits_written_first(summary: Mapping[str, Any], folded: FoldedTable) -> bool:
    """Whether an observed batch may be committed as written: no message left to the reference path or to a schema
    not loaded yet, no fold error, every changed row new and no key repeated, nothing stale, something written."""
    return (
        not summary["unknown_sids"]
        and not summary["python"]
        and not folded.errors
        and folded.only_new_keys
        and folded.rows_changed > 0
    )


def _summary_aggregates() -> tuple[Column, dict[str, Column]]:
    """The changed rows' shape (``_shape``) and the aggregates of :meth:`SparkBatchApplier._summarize` by name
    (per table; the null table: the messages that are no operation)."""
    from pyspark.sql import functions as F

    changed = _changed()
    shape = F.when(changed, ROW_SHAPE(F.col("pk"), F.col("row.cols")))
    aggregates = {
        "messages": F.sum("messages"),
        "python": F.sum("python"),
        "other": F.sum("other"),
        "unknown_sids": F.array_distinct(F.flatten(F.collect_list("unknown_sids"))),
        **{name: F.sum(name) for name in _STAT_COLUMNS},
        "errors": F.count_if("error"),
        "rows_changed": F.count_if(changed),
        "rows_new": F.count_if(changed & F.col("file").isNull()),
        "keys_repeated": F.count_if(F.col("messages") > 1),
        "column_sets": F.collect_set("_shape.cols"),
        "pk_sets": F.collect_set("_shape.pk"),
        "case_conflicts": F.count_if("_shape.case_conflict"),
        "files": F.collect_set(F.when(changed, F.col("file"))),
        "ts_quantiles": F.percentile_approx(F.when(changed, F.col("row.ts")), list(FRESHNESS_QUANTILES)),
    }
    return shape, aggregates


def _grouped_columns() -> tuple[Column, list[Column]]:
    shape, aggregates = _summary_aggregates()
    return shape, [column.alias(name) for name, column in aggregates.items()]


def _observed_columns() -> tuple[Column, list[Column]]:
    """The aggregates over the whole batch, observed during its write; the lists as JSON (an observation hands
    back JVM objects for them). Each row is one message here: the set of the messages' key hashes
    (``key_hashes``, :func:`~cdcbridge.apply.spark.fold.message_key_hash`) and their count (``keyed_messages``)
    give the messages beyond the first of each key (a collision only sends the batch to the other paths), and the
    set serves the target's stored-key check too (one set of a batch's keys, not one per check)."""
    from pyspark.sql import functions as F

    shape, aggregates = _summary_aggregates()
    del aggregates["keys_repeated"]
    key_hash = F.when(F.col("table").isNotNull(), message_key_hash(F.col("table"), F.col("pk")))
    aggregates["keyed_messages"] = F.count(key_hash)
    aggregates["key_hashes"] = F.collect_set(key_hash)
    return shape, [(F.to_json(column) if name in _LISTS else column).alias(name) for name, column in aggregates.items()]


def _observed_summary(observation: Observation) -> dict[str, Any]:
    """The observed summary (:func:`_observed_columns`) as the grouped one reads, with ``keys_repeated``; the
    lists decoded, the key hashes kept."""
    summary = {name: _from_json(name, value) for name, value in observation.get.items()}
    summary["keys_repeated"] = int(summary.pop("keyed_messages") or 0) - len(summary["key_hashes"] or ())
    return summary


def _message_key_hashes(summary_of: Callable[[], Mapping[str, Any]]) -> np.ndarray:
    """The sorted hashes of the batch's message keys, from its observed summary (read once the batch was written)."""
    return np.sort(np.asarray(summary_of()["key_hashes"] or (), dtype=np.int64))


def _from_json(name: str, value: Any) -> Any:
    return json.loads(value) if name in _LISTS and value is not None else value


def _changed() -> Column:
    """Whether a folded row changed: the fold applied at least one of its operations."""
    from pyspark.sql import functions as F

    return F.col("applied") > 0


@contextmanager
def _persisted(frame: DataFrame) -> Iterator[DataFrame]:
    """The frame kept in memory (spilling to disk) while the block runs: a barrier Spark's optimizer does not
    push filters through (which would evaluate the decoding once per reference), and reused by later jobs."""
    from pyspark import StorageLevel

    kept = frame.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        yield kept
    finally:
        kept.unpersist()


@contextmanager
def _materialized(frame: DataFrame) -> Iterator[DataFrame]:
    """The frame computed once and kept while the block runs, cut off from its sources. Not `persist`: a Delta
    commit re-caches every cached plan that reads the table, so a persisted fold result would be recomputed
    against the table as the MERGE left it (every operation stale) the next time it is read, e.g. by the MERGE
    of a second table."""
    kept = frame.localCheckpoint(eager=True)
    try:
        yield kept
    finally:
        plan = kept._jdf.queryExecution().analyzed()  # PySpark has no API to drop a local checkpoint's blocks
        if plan.getClass().getSimpleName() == "LogicalRDD":
            rdd = plan.rdd()
            # Dropping them makes Spark warn that the RDD "cannot be recomputed", which is the point here.
            jvm = kept.sparkSession.sparkContext._jvm
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
                rdd.getClass().getName(), jvm.org.apache.logging.log4j.Level.ERROR
            )
            rdd.unpersist(False)
