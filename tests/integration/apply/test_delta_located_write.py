"""A batch whose stored rows the fold located (a table that takes deletion vectors, still at the version the fold
read) is one commit: the stored rows marked deleted where the fold found them, all changed rows written as new
files, and the batch's marker. The rows, counts and marker equal the reference path's
(:class:`~tests.integration.apply.test_delta_write_modes.Paths` compares both after every batch), files are never
rewritten, and a marker already committed or a table that moved on writes nothing. The driver's path (small
batches) writes the rows it read with ``read_rows`` the same way."""

from __future__ import annotations

from typing import Any

import pytest

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.model import ColumnValue, TargetRow
from cdcbridge.apply.target import TargetBatch
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.apply.targets.delta_located_write import MATCHED_ACTION, append_known, commit_located, overwrite_known
from tests.unit.apply.envelopes import TABLE, mutation

from .helpers import operation_label, spark_jobs_of
from .kafka_frames import with_pk
from .test_delta_write_modes import Paths, _bump, _put


def _keys(numbers: range) -> list[tuple]:
    return [(("id", n),) for n in numbers]


def _filled(spark: Any, tmp_path: Any) -> Paths:
    """Paths into a table above the overwrite bound (so no batch replaces it), filled with keys 0-39."""
    paths = Paths(spark, tmp_path, overwrite_max_bytes=0)
    paths.apply([_put(10, key, n) for n, key in enumerate(_keys(range(40)))])
    return paths


def _stored(paths: Paths) -> Any:
    return paths.spark.read.format("delta").load(paths.target.path(TABLE))


def _version(paths: Paths) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(paths.spark, paths.target.path(TABLE)).history(1).first()["version"])


def test_a_mixed_batch_is_one_commit_that_marks_its_stored_rows_and_writes_every_changed_row(spark, tmp_path):
    paths = _filled(spark, tmp_path)
    files = set(paths.keys_by_file())
    before = _version(paths)
    new = [_put(30, key, 7) for key in _keys(range(40, 50))]
    updates = [_bump(31, key) for key in _keys(range(0, 40, 5))]
    deleted = with_pk(mutation(32, "DELETE"), (("id", 3),))
    assert paths.apply([*new, *updates, deleted, new[0], updates[0]]) == "MERGE by position"

    assert _version(paths) == before + 1, "one commit for the batch"
    metrics = paths.last_commit()["operationMetrics"]
    assert (int(metrics["numTargetRowsUpdated"]), int(metrics["numTargetRowsInserted"])) == (9, 10)
    assert int(metrics["numTargetFilesRemoved"]) == 0  # no file rewritten
    assert set(paths.keys_by_file()) >= files
    assert _stored(paths).count() == 50, "each key once: the replaced rows are gone from the old files"
    everything = _keys(range(50))
    assert paths.target.read_rows(TABLE, everything) == paths.reference.read_rows(TABLE, everything)


def test_rows_marked_again_in_a_file_that_has_a_deletion_vector_keep_the_earlier_marks(spark, tmp_path):
    paths = _filled(spark, tmp_path)
    assert paths.apply([_bump(20, key) for key in _keys(range(0, 40, 2))]) == "MERGE by position"
    assert paths.apply([_bump(21, key) for key in _keys(range(0, 40, 3))]) == "MERGE by position"
    metrics = paths.last_commit()["operationMetrics"]
    assert int(metrics["numTargetDeletionVectorsUpdated"]) >= 1, "a file marked by the first batch is marked again"
    assert _stored(paths).count() == 40
    counts = {row["id"]: row["count"] for row in _stored(paths).select("id", "count").collect()}
    assert counts == {n: n + 5 * ((n % 2 == 0) + (n % 3 == 0)) for n in range(40)}


def _everything_located(paths: Paths) -> tuple[Any, set[str]]:
    """Every stored row's position (``file``, ``file_row``) and the files."""
    stored = _stored(paths).select("*", "_metadata.file_path", "_metadata.row_index")
    return stored.select(stored["file_path"].alias("file"), stored["row_index"].alias("file_row")), set(
        paths.keys_by_file()
    )


def test_a_marker_already_committed_or_a_file_the_table_does_not_name_writes_nothing(spark, tmp_path):
    paths = _filled(spark, tmp_path)
    located, files = _everything_located(paths)
    version = _version(paths)
    path = paths.target.path(TABLE)
    rows = _stored(paths)
    assert commit_located(spark, path, version, rows, located, BatchMarker("app", 0), files=files, inserted=0)
    unknown = {*files, "file:/nowhere/part-0.parquet"}
    assert not commit_located(spark, path, version, rows, located, BatchMarker("app", 1), files=unknown, inserted=0)
    assert _version(paths) == version
    assert _stored(paths).count() == 40


def test_a_table_that_moved_on_after_the_rows_were_located_is_left_to_the_merge(spark, tmp_path):
    paths = _filled(spark, tmp_path)
    located, files = _everything_located(paths)
    version = _version(paths)
    path = paths.target.path(TABLE)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('owner.note' = 'another writer')")
    rows = _stored(paths)
    assert not commit_located(spark, path, version, rows, located, BatchMarker("app", 5), files=files, inserted=0)
    assert _version(paths) == version + 1  # the other writer's commit only
    assert paths.target.read_marker(TABLE, "app") == BatchMarker("app", 0)


# --- an append under a known marker ------------------------------------------------------------------------------


def _shifted(paths: Paths) -> Any:
    """The stored rows with keys 100 higher (new keys)."""
    stored = _stored(paths)
    return stored.withColumn("id", stored["id"] + 100)


def test_an_append_under_a_known_marker_writes_its_rows_and_marker_in_one_job(spark, tmp_path):
    paths = _filled(spark, tmp_path)
    path = paths.target.path(TABLE)
    version = _version(paths)
    new_rows = _shifted(paths).localCheckpoint()
    marker = BatchMarker("app", 1)
    written, jobs = spark_jobs_of(spark, "known", lambda: append_known(spark, path, version, new_rows, marker, 0))
    assert written == version + 1
    assert jobs == 1, "the write alone: the table's state is not rebuilt to look the marker up"
    assert _version(paths) == version + 1
    commit = paths.last_commit()
    assert operation_label(commit) == "WRITE Append"
    assert int(commit["operationMetrics"]["numOutputRows"]) == 40
    assert _stored(paths).count() == 80
    assert DeltaTarget(spark, str(tmp_path / "spark")).read_marker(TABLE, "app") == BatchMarker("app", 1)


def test_an_append_whose_table_moved_on_or_whose_marker_is_committed_writes_nothing(spark, tmp_path):
    paths = _filled(spark, tmp_path)
    path = paths.target.path(TABLE)
    version = _version(paths)
    rows = _shifted(paths)
    assert append_known(spark, path, version, rows, BatchMarker("app", 0), 0) == version  # committed already
    assert append_known(spark, path, version - 1, rows, BatchMarker("app", 1), 0) is None
    assert _version(paths) == version
    assert _stored(paths).count() == 40


# --- a small table replaced, its files named --------------------------------------------------------------------


def _adds(paths: Paths) -> list[str]:
    """The add actions (JSON) of the table's files, kept from the log as the target keeps them."""
    path = paths.target.path(TABLE)
    return list(paths.target._key_bounds.files(path, paths.target._snapshot(path), ["id"]).adds.values())


def test_an_overwrite_of_named_files_replaces_them_in_one_job_under_its_marker(spark, tmp_path):
    paths = _filled(spark, tmp_path)
    path = paths.target.path(TABLE)
    version, adds = _version(paths), _adds(paths)
    replacement = _shifted(paths).localCheckpoint()
    marker = BatchMarker("app", 1)

    def overwrite() -> int | None:
        return overwrite_known(spark, path, version, replacement, marker, adds=adds, committed_batch=0)

    written, jobs = spark_jobs_of(spark, "overwrite", overwrite)
    assert written == version + 1
    assert jobs == 1, "the write alone: the table's state is not rebuilt to list the files or look the marker up"
    commit = paths.last_commit()
    assert operation_label(commit) == "WRITE Overwrite"
    assert sorted(row["id"] for row in _stored(paths).select("id").collect()) == list(range(100, 140))
    assert DeltaTarget(spark, str(tmp_path / "spark")).read_marker(TABLE, "app") == marker


def test_an_overwrite_whose_table_moved_on_or_whose_marker_is_committed_writes_nothing(spark, tmp_path):
    paths = _filled(spark, tmp_path)
    path = paths.target.path(TABLE)
    version, adds = _version(paths), _adds(paths)
    rows = _shifted(paths)
    assert overwrite_known(spark, path, version, rows, BatchMarker("app", 0), adds=adds, committed_batch=0) == version
    assert overwrite_known(spark, path, version, rows, BatchMarker("app", 0), adds=adds) == version  # looked up
    assert overwrite_known(spark, path, version - 1, rows, BatchMarker("app", 1), adds=adds) is None
    assert _version(paths) == version
    assert sorted(row["id"] for row in _stored(paths).select("id").collect()) == list(range(40))


def test_the_targets_appends_after_its_own_commits_rebuild_no_table_state(spark, tmp_path):
    target = DeltaTarget(spark, str(tmp_path))
    target.write(TargetBatch(BatchMarker("app", 0), {"t": _target_rows(list(range(10)), 1, 1)}, []))
    batch = TargetBatch(BatchMarker("app", 1), {"t": _target_rows(list(range(10, 20)), 1, 2)}, [])
    assert target.read_rows("t", [row.pk for row in batch.rows["t"]]) == {}
    _, jobs = spark_jobs_of(spark, "target-append", lambda: target.write(batch))
    assert jobs == 1
    assert _history(target)["operation"] == "WRITE"
    assert sorted(_table(target)) == list(range(20))
    assert DeltaTarget(spark, str(tmp_path)).read_marker("t", "app") == BatchMarker("app", 1)


# --- the driver's path: rows it read with read_rows, written by position ------------------------------------------


def _target_rows(keys: list[int], value: int, seq: int) -> list[TargetRow]:
    return [TargetRow("t", (("id", key),), {"n": ColumnValue(value)}, seq=f"{seq:010d}{key:010d}") for key in keys]


def _driver_target(spark: Any, tmp_path: Any) -> DeltaTarget:
    """A Delta target holding rows 0-99 (n = 1) in table ``t``."""
    target = DeltaTarget(spark, str(tmp_path))
    target.write(TargetBatch(BatchMarker("app", 0), {"t": _target_rows(list(range(100)), 1, 1)}, []))
    return target


def _history(target: DeltaTarget) -> Any:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(target.spark, target.path("t")).history(1).first()


def _table(target: DeltaTarget) -> dict[int, int]:
    stored = target.spark.read.format("delta").load(target.path("t")).select("id", "n").collect()
    assert len(stored) == len({row["id"] for row in stored}), "each key once"
    return {row["id"]: row["n"] for row in stored}


@pytest.mark.parametrize("looked_up", [[5, 50, 150], [*range(0, 100, 10), *range(1000, 2000)]], ids=["filter", "join"])
def test_rows_the_driver_read_are_written_by_position(spark, tmp_path, looked_up):
    target = _driver_target(spark, tmp_path)
    found = target.read_rows("t", [(("id", key),) for key in looked_up])
    changed = [key for key in looked_up if key < 100 or key in (150, 1000)]
    assert set(found) == {(("id", key),) for key in looked_up if key < 100}
    target.write(TargetBatch(BatchMarker("app", 1), {"t": _target_rows(changed, 2, 2)}, []))

    last = _history(target)
    assert last["operation"] == "MERGE" and MATCHED_ACTION in last["operationParameters"]["matchedPredicates"]
    metrics = last["operationMetrics"]
    stored = len([key for key in changed if key < 100])
    assert (int(metrics["numTargetRowsUpdated"]), int(metrics["numTargetRowsInserted"])) == (stored, 1)
    assert _table(target) == {**dict.fromkeys(range(100), 1), **dict.fromkeys(changed, 2)}
    assert target.read_marker("t", "app") == BatchMarker("app", 1)


def test_rows_read_before_another_writers_commit_are_merged(spark, tmp_path):
    target = _driver_target(spark, tmp_path)
    target.read_rows("t", [(("id", 5),)])
    path = target.path("t")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 7")  # another writer moves the table on
    target.write(TargetBatch(BatchMarker("app", 1), {"t": _target_rows([5], 2, 2)}, []))
    last = _history(target)
    assert last["operation"] == "MERGE" and MATCHED_ACTION not in last["operationParameters"]["matchedPredicates"]
    assert _table(target) == {**dict.fromkeys(set(range(100)) - {7}, 1), 5: 2}


def _commit_entries(path: str, version: int) -> tuple[list, list, dict]:
    """A commit's file entries, without what differs between two runs (vector file ids, times, file names of new
    data files): the re-added files (path, statistics, vector cardinality), the removed ones (path, had a vector)
    and the operation's metrics."""
    import json
    from pathlib import Path

    actions = [
        json.loads(line) for line in (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    ]
    removed = sorted((a["remove"]["path"], "deletionVector" in a["remove"]) for a in actions if "remove" in a)
    removed_paths = {file for file, _ in removed}
    readded = sorted(
        (
            a["add"]["path"],
            json.loads(a["add"]["stats"]),
            a["add"]["deletionVector"]["cardinality"],
            a["add"].get("tags"),
        )
        for a in actions
        if "add" in a and a["add"]["path"] in removed_paths
    )
    metrics = next(a["commitInfo"]["operationMetrics"] for a in actions if "commitInfo" in a)
    times = ("executionTimeMs", "scanTimeMs", "rewriteTimeMs", "materializeSourceTimeMs", "numTargetBytesAdded")
    return readded, removed, {name: value for name, value in metrics.items() if name not in times}


def test_the_entries_of_files_read_by_the_driver_equal_deltas_own(spark, tmp_path):
    """With the files' add actions from the log, the commit makes the marked files' entries itself; they equal
    those Delta's own step makes from the table's state: each file re-added with its vector (earlier marks kept)
    and its statistics, no longer tight. A file every row of which is marked is removed instead (Delta's own step,
    without the files' row counts, keeps it with every row marked)."""
    import shutil

    from pyspark.sql import functions as F

    from cdcbridge.apply.targets.delta_key_bounds import DeltaKeyBounds

    target = _driver_target(spark, tmp_path / "made")
    target.read_rows("t", [(("id", key),) for key in range(0, 100, 7)])  # a vector in each file, then copies
    target.write(TargetBatch(BatchMarker("app", 1), {"t": _target_rows(list(range(0, 100, 7)), 2, 2)}, []))
    version = int(target._snapshot(target.path("t")).version())
    ours, deltas = str(tmp_path / "ours"), str(tmp_path / "deltas")
    shutil.copytree(target.path("t"), ours)
    shutil.copytree(target.path("t"), deltas)

    def mark(path: str, version: int, which: Any, known: bool) -> None:
        stored = spark.read.format("delta").load(path).select("*", "_metadata.file_path", "_metadata.row_index")
        chosen = stored.where(which(stored))
        located = chosen.select(F.col("file_path").alias("file"), F.col("row_index").alias("file_row"))
        files = {row[0] for row in located.select("file").distinct().collect()}
        rows = chosen.drop("file_path", "row_index").withColumn("n", F.lit(3))
        adds = DeltaKeyBounds(spark).files(path, target._snapshot(path), ["id"]).adds.values() if known else None
        marker = BatchMarker("app", version)
        assert commit_located(spark, path, version, rows, located, marker, files=files, inserted=0, adds=adds)

    for path, known in ((ours, True), (deltas, False)):
        mark(path, version, lambda stored: stored["id"] % 5 == 1, known)
    assert _commit_entries(ours, version + 1) == _commit_entries(deltas, version + 1)
    readded, removed, metrics = _commit_entries(ours, version + 1)
    assert len(readded) == len(removed) >= 2 and any(had_vector for _, had_vector in removed)
    assert all(stats["tightBounds"] is False for _, stats, _, _ in readded)
    assert int(metrics["numTargetDeletionVectorsUpdated"]) >= 1

    whole = sorted(file for file, _, _, _ in readded)[0]  # every row of one file still live: all marked
    mark(ours, version + 1, lambda stored: stored["file_path"].endswith(whole), True)
    readded, removed, metrics = _commit_entries(ours, version + 2)
    assert (readded, removed, metrics["numTargetFilesRemoved"]) == ([], [(whole, True)], "1")
    ids = [row["id"] for row in spark.read.format("delta").load(ours).select("id").collect()]
    assert len(ids) == len(set(ids)) == 100
