"""The fold of :mod:`..core.fold` in the JVM: each target row's operations are folded by compiled code, once per row.

Per row key (one shuffle): collect the row's operations (:mod:`.operations`), then one call of the compiled
fold (``FoldRow.java``, a Catalyst expression built by deploy/spark/pom.xml into the connector jars folder): drop
seq-less tombstones, sort by (seq_key, tombstone, partition, offset) and drop redeliveries (the first of each
seq_key; a message before a tombstone of the same seq, as the reference path keeps it), keep the operations newer
than the row's ``_seq`` (the guard; the rest are stale), and apply them in seq order onto the row's current state
with the rules of :mod:`..core.fold` (soft delete, replace, revival, version-aware PUT and DELETE_ONE_VERSION, INCREMENT
by value or by amount). The result per key is the final row plus the counts ``ApplyStats``
keeps. Compiled rather than Spark SQL higher-order functions, which Spark interprets lambda by lambda.

An INCREMENT by amount of a column that holds no integer is bad input in the reference fold, and one past int64
is a Python int there; either sets ``error`` here, and the job hands the batch to the reference path, which
judges it (raises, dead-letters, or writes what it computes).

The current rows come from the target as ``pk`` + ``cur``: :data:`STATE_TYPE` (an absent row is a deleted row
without ``_seq``). :mod:`tests.integration.apply.test_spark_fold` checks the compiled fold against
:func:`~cdcbridge.apply.core.fold.fold_row` on random histories with redeliveries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdcbridge.apply.spark.columns import ColumnCache
from cdcbridge.apply.spark.kernel import KernelFunction
from cdcbridge.apply.spark.operations import VALUE_UNION

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

COLUMNS_TYPE = f"map<string,struct<v:{VALUE_UNION},e:bigint>>"
#: A target row's state in the fold: attribute columns (value, version), ``_deleted``, ``_seq``, ``_source_ts``.
STATE_TYPE = f"struct<cols:{COLUMNS_TYPE},del:boolean,seq:string,ts:bigint>"

#: What the compiled fold returns per row: the state after the fold and the counts the job reports.
RESULT_TYPE = (
    f"struct<cols:{COLUMNS_TYPE},del:boolean,seq:string,ts:bigint,seqless:int,duplicates:int,stale:int,"
    "applied:int,redundant:int,err:boolean>"
)
#: The fold, compiled: deploy/spark/src/main/java/io/cdcbridge/spark/FoldRow.java, an expression on Spark's own values
#: (see :mod:`.kernel`).
FOLD = KernelFunction("cdcbridge_fold_row", "io.cdcbridge.spark.FoldRow", RESULT_TYPE)
#: The grouping's and the fold's columns, built once (:mod:`.columns`).
_COLUMNS: ColumnCache = ColumnCache()


def message_key_hash(table: Column, pk: Column) -> Column:
    """A row key's hash as the messages hold it (`table`, `pk`: list of name and value union): the grouping's lead
    key, and what a target that keeps the hashes of its keys stores, computed from its typed key columns in the
    same form (:meth:`~cdcbridge.apply.targets.delta.DeltaTarget.pending_append`)."""
    from pyspark.sql import functions as F

    return F.xxhash64(table, pk)


def grouped_operations(normalized: DataFrame) -> DataFrame:
    """One row per target row (``table``, ``pk``) with its operations (``ops``) and what was set aside: counts
    of ``messages``, ``python`` and ``other`` messages and the ``unknown_sids``. Messages that are no operation
    have a null table and key, so they all land in one row (with no operations).

    The key's hash leads the grouping key: with more than a few hundred rows per task Spark's aggregation of
    ``collect_list`` falls back to sorting by the grouping key, and comparing a long first leaves the generic
    comparison of ``pk`` (an array of structs) to hash collisions."""
    keys, aggregates = _COLUMNS.get(normalized.sparkSession, "grouping", _grouping_columns)
    return normalized.groupBy(*keys).agg(*aggregates).drop("_row_hash")


def _grouping_columns() -> tuple[list[Column], list[Column]]:
    from pyspark.sql import functions as F

    from cdcbridge.apply.spark.operations import OTHER, PYTHON, UNKNOWN_SID

    kind = F.col("_class")
    keys = [message_key_hash(F.col("table"), F.col("pk")).alias("_row_hash"), F.col("table"), F.col("pk")]
    aggregates = [
        F.collect_list("op").alias("ops"),
        F.count(F.lit(1)).alias("messages"),
        F.count_if(kind == PYTHON).alias("python"),
        F.count_if(kind == OTHER).alias("other"),
        F.collect_set(F.when(kind == UNKNOWN_SID, F.col("_sid"))).alias("unknown_sids"),
    ]
    return keys, aggregates


def fold_rows(grouped: DataFrame, current: DataFrame | None) -> DataFrame:
    """Fold each row's operations (:func:`grouped_operations`) onto its current state (``table``, ``pk``,
    ``cur``, optionally ``file`` and ``file_row``; None: the target holds none of the tables). Keeps ``table``, ``pk``,
    ``messages`` and what was set aside (``python``, ``other``, ``unknown_sids``) and adds
    ``tombstones_without_seq``, ``duplicates``, ``stale``, ``applied``, ``tombstones_redundant``, ``error``,
    ``row`` (:data:`STATE_TYPE`, the state after the fold), ``file`` (the target file holding the row, null
    for a new row or a target that names none) and ``file_row`` (the row's index in that file, likewise)."""
    from pyspark.sql import functions as F

    no_file = F.lit(None).cast("string").alias("file")
    no_file_row = F.lit(None).cast("bigint").alias("file_row")
    if current is None:
        joined = grouped.withColumn("cur", F.lit(None).cast(STATE_TYPE)).withColumn("file", no_file)
        joined = joined.withColumn("file_row", no_file_row)
    else:
        # Only the target rows of the batch's keys: a semi-join with the keys broadcast, so a large table is
        # scanned once and not shuffled. Spark converts each scanned row into `cur` before matching it (the key
        # it matches on is computed in the same projection), which is why Delta converts with compiled code
        # (`grouped` should be persisted, or the keys are computed from Kafka a second time).
        keys = F.broadcast(grouped.select("table", "pk").where(F.col("table").isNotNull()))
        file = F.col("file") if "file" in current.columns else no_file
        file_row = F.col("file_row") if "file_row" in current.columns else no_file_row
        wanted = current.join(keys, on=["table", "pk"], how="left_semi").select("table", "pk", "cur", file, file_row)
        joined = grouped.join(wanted, on=["table", "pk"], how="left")
    FOLD.register(grouped.sparkSession)  # a micro-batch's session is a clone of the job's
    folding, output = _COLUMNS.get(grouped.sparkSession, "folding", _folding_columns)
    return joined.withColumn("folded", folding).select(*output)


def _folding_columns() -> tuple[Column, list[Column]]:
    from pyspark.sql import functions as F

    output = [
        F.col("table"),
        F.col("pk"),
        F.col("messages"),
        F.col("folded.seqless").alias("tombstones_without_seq"),
        F.col("folded.duplicates").alias("duplicates"),
        F.col("folded.stale").alias("stale"),
        F.col("folded.applied").alias("applied"),
        F.col("folded.redundant").alias("tombstones_redundant"),
        F.col("folded.err").alias("error"),
        F.expr("named_struct('cols', folded.cols, 'del', folded.del, 'seq', folded.seq, 'ts', folded.ts)").alias("row"),
        F.col("file"),
        F.col("file_row"),
        F.col("python"),
        F.col("other"),
        F.col("unknown_sids"),
    ]
    return FOLD(F.col("ops"), F.col("cur")), output
