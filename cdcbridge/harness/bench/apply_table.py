"""A large target table for the apply benchmark, written directly by Spark rather than applied from Kafka.

Filling 10 million rows through the apply job would take the benchmark's whole budget, and what is measured is the
cost of later batches against a table of that size. So the table is created by the Delta target itself (its layout,
properties and column types, :meth:`~cdcbridge.apply.targets.delta.DeltaTarget.create_table`) and filled from
``spark.range`` with the rows :func:`~cdcbridge.harness.bench.apply_workload.generate_records` would leave for keys
``0 … rows-1`` (same key columns, column types and versions), in files of at most the target's bound, each row with a
seq older than every generated record's, so the benchmark's updates apply to them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from cdcbridge.apply.targets.column_types import BINARY, BOOLEAN, DOUBLE, LONG, STRING
from cdcbridge.apply.targets.delta import MAX_RECORDS_PER_FILE, DeltaTarget
from cdcbridge.apply.targets.delta_versions import COMMON_VERSION_KEY
from cdcbridge.contract import SEQ_KEY_FORMAT
from cdcbridge.harness.bench.apply_workload import START_US

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: The workload's key and attribute columns with their stored types (see ``generate_records``).
PK_COLUMNS = {"region": STRING, "id": LONG}
ATTRIBUTE_COLUMNS = {"name": STRING, "score": DOUBLE, "visits": LONG, "active": BOOLEAN, "blob": BINARY}
#: Stored rows were written this long (µs) before the first generated record.
STORED_AGE_US = 10**9


def stored_rows(target: DeltaTarget, rows: int, partitions: int) -> DataFrame:
    """Rows ``0 … rows-1`` in the stored shape: typed key and attribute columns plus ``_versions``, ``_seq`` (one
    distinct seq_key per row, all older than the workload's), ``_deleted`` and ``_source_ts``."""
    from pyspark.sql import functions as F

    written_us = START_US - STORED_AGE_US
    ts = F.lit(written_us // 1000)
    key = F.col("id")
    has_blob = key % 2 == 0
    versions = F.create_map(F.lit(COMMON_VERSION_KEY), ts)  # every cell of the row at the same version
    return target.spark.range(0, rows, 1, partitions).select(
        F.concat(F.lit("r"), (key % 3).cast("string")).alias("region"),
        key.alias("id"),
        F.concat(F.lit("n"), (key % 10_000).cast("string")).alias("name"),
        ((key * 7919) % 10_000 / 100.0).alias("score"),
        (key % 100).alias("visits"),
        F.lit(None).cast(BOOLEAN).alias("active"),
        F.when(has_blob, F.unhex(F.lpad(F.hex(key), 16, "0"))).alias("blob"),
        versions.alias("_versions"),
        F.format_string(SEQ_KEY_FORMAT, F.lit(1), F.lit(written_us) + key, F.lit(0), F.lit(0)).alias("_seq"),
        F.lit(False).alias("_deleted"),
        ts.alias("_source_ts"),
    )


def fill_table(target: DeltaTarget, table: str, rows: int) -> int:
    """Create `table` in `target` and append `rows` rows in files of at most the target's bound (at least one
    file per core); returns the number of files written."""
    path = target.create_table(table, PK_COLUMNS, ATTRIBUTE_COLUMNS)
    spark = target.spark
    partitions = max(spark.sparkContext.defaultParallelism, math.ceil(rows / MAX_RECORDS_PER_FILE))
    columns = spark.read.format("delta").load(path).columns
    (
        stored_rows(target, rows, partitions)
        .select(*columns)
        .write.format("delta")
        .mode("append")
        .option("maxRecordsPerFile", MAX_RECORDS_PER_FILE)
        .save(path)
    )
    return len(spark.read.format("delta").load(path).inputFiles())
