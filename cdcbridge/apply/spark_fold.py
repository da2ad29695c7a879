"""The fold of :mod:`.fold` as one Spark SQL expression, so a batch's operations are folded in the JVM.

Per row key (one shuffle): collect the row's operations (:mod:`.spark_operations`), drop seq-less tombstones, sort
by (seq_key, tombstone, partition, offset) and drop redeliveries (the first of each seq_key; a message before a
tombstone of the same seq, as the reference path keeps it), keep the operations newer than the row's ``_seq``
(the guard; the rest are stale), and ``aggregate`` them in seq order onto the row's current state with the rules
of :mod:`.fold` (soft delete, replace, revival, version-aware PUT and DELETE_ONE_VERSION, INCREMENT by value or
by amount). The result per key is the final row plus the counts :class:`~cdcbridge.apply.fold.ApplyStats` keeps.

An INCREMENT by amount of a column that holds no integer is bad input in the reference fold, and one past int64
is a Python int there; either sets ``error`` here, and the job hands the batch to the reference path, which
judges it (raises, dead-letters, or writes what it computes).

The current rows come from the target as ``pk`` + ``cur``: :data:`STATE_TYPE` (an absent row is a deleted row
without ``_seq``). :mod:`tests.integration.apply.test_spark_fold` checks this expression against
:func:`~cdcbridge.apply.fold.fold_row` on random histories with redeliveries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdcbridge.apply.spark_operations import PK_TYPE, VALUE_UNION

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

COLUMNS_TYPE = f"map<string,struct<v:{VALUE_UNION},e:bigint>>"
#: A target row's state in the fold: attribute columns (value, version), ``_deleted``, ``_seq``, ``_source_ts``.
STATE_TYPE = f"struct<cols:{COLUMNS_TYPE},del:boolean,seq:string,ts:bigint>"
#: Columns of a target's current-rows frame.
CURRENT_COLUMNS = (("pk", PK_TYPE), ("cur", STATE_TYPE))

_EMPTY = f"cast(map() AS {COLUMNS_TYPE})"


def _state(cols: str, deleted: str, seq: str, ts: str, applied: str, redundant: str, error: str) -> str:
    return (
        f"named_struct('cols', {cols}, 'del', {deleted}, 'seq', {seq}, 'ts', {ts}, 'applied', {applied}, "
        f"'redundant', {redundant}, 'err', {error})"
    )


def _put(columns: str, name: str, value: str, version: str) -> str:
    entry = f"named_struct('v', {value}, 'e', {version})"
    return f"map_concat(map_filter({columns}, (k, v) -> k != {name}), map({name}, {entry}))"


def _cell_step() -> str:
    """(acc, cell) → acc: one cell onto the columns (fold._apply_cell / _put / _delete_version)."""
    held = "try_element_at(acc.cols, cell.n)"
    amount_result = f"try_add(coalesce({held}.v.l, 0), cell.a)"
    incremented = (
        f"named_struct('z', cast(NULL AS boolean), 'l', {amount_result}, 'd', cast(NULL AS double), "
        "'s', cast(NULL AS string), 'b', cast(NULL AS binary))"
    )
    removed = "map_filter(acc.cols, (k, v) -> k != cell.n)"
    columns = (
        "CASE cell.o "
        f"WHEN 'PUT' THEN CASE WHEN {held} IS NULL OR {held}.e IS NULL OR cell.e IS NULL OR cell.e >= {held}.e "
        f"THEN {_put('acc.cols', 'cell.n', 'cell.v', 'cell.e')} ELSE acc.cols END "
        f"WHEN 'DELETE_ALL_VERSION' THEN {removed} "
        f"WHEN 'DELETE_ONE_VERSION' THEN CASE WHEN {held}.e = cell.e THEN {removed} ELSE acc.cols END "
        f"WHEN 'INCREMENT' THEN CASE WHEN cell.v IS NOT NULL THEN {_put('acc.cols', 'cell.n', 'cell.v', 'cell.e')} "
        f"ELSE {_put('acc.cols', 'cell.n', incremented, 'cell.e')} END "
        "ELSE acc.cols END"
    )
    error = (
        f"acc.err OR (cell.o = 'INCREMENT' AND cell.v IS NULL "
        f"AND (({held} IS NOT NULL AND {held}.v.l IS NULL) OR {amount_result} IS NULL))"
    )
    return _state(columns, "acc.del", "acc.seq", "acc.ts", "acc.applied", "acc.redundant", error)


def _operation_step() -> str:
    """(st, x) → st: one operation newer than the row (fold._apply + _mark_applied)."""
    seq, ts, applied = "x.q", "coalesce(x.ts, st.ts)", "st.applied + 1"
    redundant_tombstone = _state("st.cols", "st.del", "st.seq", "st.ts", "st.applied", "st.redundant + 1", "st.err")
    row_delete = _state(_EMPTY, "true", seq, ts, applied, "st.redundant", "st.err")
    full_image = _state(
        "map_from_entries(transform(x.c, cell -> struct(cell.n, named_struct('v', cell.v, 'e', cell.e))))",
        "false",
        seq,
        ts,
        applied,
        "st.redundant",
        "st.err",
    )
    # A deleted row stays deleted (cells not applied) unless the operation replaces it or writes a value.
    skip = "st.del AND NOT x.r AND NOT x.w"
    revive = "x.r OR (st.del AND x.w)"
    unchanged = _state("st.cols", "st.del", seq, ts, applied, "st.redundant", "st.err")
    start = _state(f"CASE WHEN {revive} THEN {_EMPTY} ELSE st.cols END", "false", seq, ts, applied, "st.redundant",
                   "st.err")  # fmt: skip
    cells = f"aggregate(x.c, {start}, (acc, cell) -> {_cell_step()})"
    return (
        f"CASE WHEN x.d AND x.t AND st.del THEN {redundant_tombstone} "
        f"WHEN x.d THEN {row_delete} "
        f"WHEN x.i AND NOT x.pa THEN {full_image} "
        f"WHEN {skip} THEN {unchanged} "
        f"ELSE {cells} END"
    )


def fold_expression() -> str:
    """SQL over ``ops`` (the row's operations after dedup, guard and sort) and ``cur`` (its current state or null):
    the final state with ``applied``, ``redundant`` (tombstones that changed nothing) and ``err``."""
    start = _state(
        f"coalesce(cur.cols, {_EMPTY})",
        "CASE WHEN cur IS NULL THEN true ELSE coalesce(cur.del, false) END",
        "cur.seq",
        "cur.ts",
        "0",
        "0",
        "false",
    )
    return f"aggregate(ops_new, {start}, (st, x) -> {_operation_step()})"


def grouped_operations(normalized: DataFrame) -> DataFrame:
    """One row per target row (``table``, ``pk``) with its operations (``ops``) and what was set aside: counts
    of ``messages``, ``python`` and ``other`` messages and the ``unknown_sids``. Messages that are no operation
    have a null table and key, so they all land in one row (with no operations)."""
    from pyspark.sql import functions as F

    from cdcbridge.apply.spark_operations import OTHER, PYTHON, UNKNOWN_SID

    kind = F.col("_class")
    return normalized.groupBy("table", "pk").agg(
        F.collect_list("op").alias("ops"),
        F.count(F.lit(1)).alias("messages"),
        F.count_if(kind == PYTHON).alias("python"),
        F.count_if(kind == OTHER).alias("other"),
        F.collect_set(F.when(kind == UNKNOWN_SID, F.col("_sid"))).alias("unknown_sids"),
    )


def fold_rows(grouped: DataFrame, current: DataFrame | None) -> DataFrame:
    """Fold each row's operations (:func:`grouped_operations`) onto its current state (``table``, ``pk``,
    ``cur``; None: the target holds none of the tables). Keeps ``table``, ``pk`` and ``messages`` and adds
    ``tombstones_without_seq``, ``duplicates``, ``stale``, ``applied``, ``tombstones_redundant``, ``error`` and
    ``row`` (:data:`STATE_TYPE`, the state after the fold)."""
    from pyspark.sql import functions as F

    if current is None:
        joined = grouped.withColumn("cur", F.lit(None).cast(STATE_TYPE))
    else:
        # Only the target rows of the batch's keys: a semi-join with the keys broadcast, which Spark pushes below
        # the target's conversion into `cur`, so a large table is scanned once and neither converted nor shuffled
        # (`grouped` should be persisted, or the keys are computed from Kafka a second time).
        keys = F.broadcast(grouped.select("table", "pk").where(F.col("table").isNotNull()))
        wanted = current.join(keys, on=["table", "pk"], how="left_semi").select("table", "pk", "cur")
        joined = grouped.join(wanted, on=["table", "pk"], how="left")
    steps = (
        joined.withColumn("ops_seq", F.expr("array_sort(filter(ops, x -> x.q IS NOT NULL))"))
        .withColumn(
            "ops_unique",
            F.expr("filter(ops_seq, (x, n) -> CASE WHEN n = 0 THEN true ELSE ops_seq[n - 1].q != x.q END)"),
        )
        .withColumn("ops_new", F.expr("filter(ops_unique, x -> cur.seq IS NULL OR x.q > cur.seq)"))
        .withColumn("folded", F.expr(fold_expression()))
    )
    return steps.select(
        "table",
        "pk",
        "messages",
        (F.size("ops") - F.size("ops_seq")).alias("tombstones_without_seq"),
        (F.size("ops_seq") - F.size("ops_unique")).alias("duplicates"),
        (F.size("ops_unique") - F.size("ops_new")).alias("stale"),
        F.col("folded.applied").alias("applied"),
        F.col("folded.redundant").alias("tombstones_redundant"),
        F.col("folded.err").alias("error"),
        F.expr("named_struct('cols', folded.cols, 'del', folded.del, 'seq', folded.seq, 'ts', folded.ts)").alias("row"),
    )
