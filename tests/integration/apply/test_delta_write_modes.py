"""How the Delta target commits a folded batch: it appends when none of the changed rows is stored
(:mod:`.test_delta_new_rows`), replaces a small table when the batch changes a row in every file
of the version the fold read, marks the stored rows where the fold found them otherwise (a batch that leaves some
file alone, a table above the size bound; :mod:`.test_delta_located_write`), and MERGEs a table keeping a change
data feed or one another writer committed to after the fold read it; a MERGE too marks the replaced rows with
deletion vectors instead of rewriting their files. Either way the rows equal the reference path's."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.policy import BadInputPolicy
from cdcbridge.apply.driver.micro_batch import MicroBatchApplier
from cdcbridge.apply.spark.batch import SparkBatchApplier
from cdcbridge.apply.spark.decode import decoded_records
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.contract import MessageFormat
from tests.unit.apply.envelopes import TABLE, increment, mutation, put

from .helpers import operation_label, spark_jobs_of
from .kafka_frames import SCHEMAS, batch_frame, routing, with_pk

KEYS = [(("id", n),) for n in range(40)]


def _put(seq: int, key: tuple, amount: int) -> dict[str, Any]:
    return with_pk(mutation(seq, "PUT", [put("count", amount, seq), put("label", f"row {seq}", seq)]), key)


def _bump(seq: int, key: tuple) -> dict[str, Any]:
    return with_pk(mutation(seq, "UPDATE", [increment("count", 5)]), key)


class Paths:
    """The Spark path into one Delta target and the reference path into another, fed the same batches."""

    def __init__(self, spark: Any, root: Any, **target: Any) -> None:
        self.spark = spark
        self.target = DeltaTarget(spark, str(root / "spark"), **target)
        self.reference = DeltaTarget(spark, str(root / "reference"))
        mutations = routing(MessageFormat.MUTATE_LOG)
        self.spark_path = SparkBatchApplier(self.target, mutations, "app")
        self.reference_path = MicroBatchApplier(self.reference, mutations, "app", BadInputPolicy())
        self.batches = 0
        self.last_report: Any = None

    def apply(self, messages: list[dict[str, Any]]) -> str:
        """Apply one batch on both paths; returns the Delta operation that committed it on the Spark path."""
        frame = batch_frame(self.spark, MessageFormat.MUTATE_LOG, list(enumerate(messages)))
        expected = self.reference_path.apply(self.batches, decoded_records(frame, SCHEMAS))
        actual = self.spark_path.apply(self.batches, frame, SCHEMAS)
        self.last_report = actual
        assert (actual.stats, actual.rows_written) == (expected.stats, expected.rows_written)
        assert self.rows(self.target) == self.rows(self.reference)
        assert self.target.read_marker(TABLE, "app") == BatchMarker("app", self.batches)
        self.batches += 1
        return self.last_operation()

    @staticmethod
    def rows(target: DeltaTarget) -> dict:
        return {pk: (row.seq, {n: c.value for n, c in row.columns.items()}) for pk, row in
                target.read_rows(TABLE, KEYS).items()}  # fmt: skip

    def last_operation(self) -> str:
        """The last commit's operation; a WRITE is told apart by its mode (``WRITE Append``, ``WRITE Overwrite``),
        a MERGE of rows the fold located by its matched clause (``MERGE by position``)."""
        return operation_label(self.last_commit())

    def last_commit(self) -> Any:
        from delta.tables import DeltaTable

        return DeltaTable.forPath(self.spark, self.target.path(TABLE)).history(1).first()

    def keys_by_file(self) -> dict[str, list[tuple]]:
        stored = self.spark.read.format("delta").load(self.target.path(TABLE))
        files: dict[str, list[tuple]] = {}
        for row in stored.select("id", "_metadata.file_path").collect():
            files.setdefault(row["file_path"], []).append((("id", row["id"]),))
        return files


def test_a_batch_changing_every_file_replaces_the_table_and_one_leaving_a_file_alone_merges(spark, tmp_path):
    paths = Paths(spark, tmp_path)
    assert paths.apply([_put(10, key, n) for n, key in enumerate(KEYS)]) == "WRITE Append"  # the table is new
    by_file = paths.keys_by_file()
    assert len(by_file) >= 2, "the test needs a table of several files"
    one_per_file = [keys[0] for keys in by_file.values()]
    assert paths.apply([_bump(20, key) for key in one_per_file]) == "WRITE Overwrite"  # replaced: the others are kept
    assert paths.rows(paths.target)[one_per_file[0]][1]["count"] == KEYS.index(one_per_file[0]) + 5
    by_file = paths.keys_by_file()
    assert len(by_file) >= 2
    assert paths.apply([_bump(30, next(iter(by_file.values()))[0])]) == "MERGE by position"
    assert len(paths.rows(paths.target)) == len(KEYS)


def test_a_table_keeping_a_change_data_feed_is_always_merged(spark, tmp_path):
    paths = Paths(spark, tmp_path)
    paths.apply([_put(10, key, n) for n, key in enumerate(KEYS)])
    path = paths.target.path(TABLE)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    assert paths.apply([_bump(20, key) for key in KEYS]) == "MERGE"


def test_a_commit_after_the_fold_read_the_table_makes_the_batch_merge(spark, tmp_path):
    paths = Paths(spark, tmp_path)
    paths.apply([_put(10, key, n) for n, key in enumerate(KEYS)])
    path = paths.target.path(TABLE)
    write_folded = paths.target.write_folded

    def another_writer_first(marker: BatchMarker, tables: Any) -> dict[str, int]:
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('owner.note' = 'another writer')")
        return write_folded(marker, tables)

    paths.target.write_folded = another_writer_first  # type: ignore[method-assign]
    assert paths.apply([_bump(20, key) for key in KEYS]) == "MERGE"


def test_an_overwrite_under_a_committed_marker_writes_nothing(spark, tmp_path):
    paths = Paths(spark, tmp_path)
    paths.apply([_put(10, key, n) for n, key in enumerate(KEYS)])
    assert paths.apply([_bump(20, key) for key in KEYS]) == "WRITE Overwrite"
    before = paths.rows(paths.target)
    from pyspark.sql import functions as F

    changed = spark.read.format("delta").load(paths.target.path(TABLE)).withColumn("count", F.lit(999))
    paths.target._overwrite(TABLE, changed, ["id"], BatchMarker("app", 1))
    assert paths.rows(paths.target) == before
    paths.target._overwrite(TABLE, changed, ["id"], BatchMarker("app", 2))  # the same call, a new batch: written
    assert {columns["count"] for _, columns in paths.rows(paths.target).values()} == {999}


def test_an_overwrite_of_named_files_after_another_writers_commit_merges_with_the_guard(spark, tmp_path):
    from pyspark.sql import functions as F

    paths = Paths(spark, tmp_path)
    paths.apply([_put(10, key, n) for n, key in enumerate(KEYS)])
    target, path = paths.target, paths.target.path(TABLE)
    read = target._note_fold_read(TABLE, target._shape(TABLE))
    assert read.adds, "the fold's read names the files"
    before = paths.rows(target)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('owner.note' = 'another writer')")
    stale = spark.read.format("delta").load(path).withColumn("count", F.lit(999))  # the stored seq: not newer
    target._overwrite(TABLE, stale, ["id"], BatchMarker("app", 1), read)
    assert paths.last_operation() == "MERGE"
    assert paths.rows(target) == before
    assert target.read_marker(TABLE, "app") == BatchMarker("app", 1)


def test_a_table_above_the_size_bound_is_written_by_position_even_when_every_file_changes(spark, tmp_path):
    from delta.tables import DeltaTable

    paths = Paths(spark, tmp_path, overwrite_max_bytes=0)
    paths.apply([_put(10, key, n) for n, key in enumerate(KEYS)])
    properties = DeltaTable.forPath(spark, paths.target.path(TABLE)).detail().first()["properties"]
    assert properties["delta.enableDeletionVectors"] == "true"
    files = paths.keys_by_file()
    assert len(files) >= 2, "the test needs a table of several files"
    one_per_file = [keys[0] for keys in files.values()]
    assert paths.apply([_bump(20, key) for key in one_per_file]) == "MERGE by position"
    metrics = paths.last_commit()["operationMetrics"]
    assert int(metrics["numTargetFilesRemoved"]) == 0  # no file rewritten: the replaced rows are marked
    assert int(metrics["numTargetDeletionVectorsAdded"]) == len(files)
    assert int(metrics["numTargetRowsUpdated"]) == len(one_per_file)
    assert set(paths.keys_by_file()) >= set(files)
    assert len(paths.rows(paths.target)) == len(KEYS)


def test_a_table_created_without_deletion_vectors_keeps_its_protocol(spark, tmp_path):
    from delta.tables import DeltaTable

    paths = Paths(spark, tmp_path, overwrite_max_bytes=0)
    path = paths.target.path(TABLE)
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id bigint NOT NULL, `_versions` map<string,bigint>, `_seq` string, "
        "`_deleted` boolean, `_source_ts` bigint) USING DELTA TBLPROPERTIES ('cdcbridge.primaryKey' = '[\"id\"]')"
    )
    paths.apply([_put(10, key, n) for n, key in enumerate(KEYS)])
    paths.apply([_bump(20, key) for key in KEYS[::7]])
    detail = DeltaTable.forPath(spark, path).detail().first()
    assert "delta.enableDeletionVectors" not in detail["properties"]
    assert detail["minReaderVersion"] == 1


@pytest.mark.parametrize(("bound", "operation"), [(None, "WRITE Overwrite"), (0, "MERGE by position")])
def test_a_batch_names_the_tables_files_from_the_log_instead_of_rebuilding_its_state(
    spark, tmp_path, monkeypatch, bound, operation
):
    """After the job's own commit, the fold's read and the write take the version's files from the log
    (:data:`~cdcbridge.apply.targets.delta.FILES_NAMED_MAX`): the same batch runs fewer Spark jobs than when they
    rebuild the table's state, and writes the same rows (Paths.apply compares them with the reference path)."""
    import cdcbridge.apply.targets.delta as delta

    options = {} if bound is None else {"overwrite_max_bytes": bound}
    jobs = {}
    for named in (True, False):
        monkeypatch.setattr(delta, "FILES_NAMED_MAX", delta.FILES_NAMED_MAX if named else -1)
        paths = Paths(spark, tmp_path / str(named), **options)
        paths.apply([_put(10, key, n) for n, key in enumerate(KEYS)])
        label, jobs[named] = spark_jobs_of(spark, f"named-{named}", partial(paths.apply, [_bump(20, k) for k in KEYS]))
        assert label == operation
    assert jobs[True] < jobs[False], jobs
