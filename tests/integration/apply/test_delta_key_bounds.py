"""The Delta target looks up a small batch's keys against its files' key bounds, kept on the driver and brought
forward commit by commit: new keys cost no Spark job, stored ones are still read, and the bounds follow every
writer's commits (appends by others, deletion-vector deletes, compaction) exactly as Delta's own file list."""

from __future__ import annotations

import pytest

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.model import ColumnValue, TargetRow
from cdcbridge.apply.target import TargetBatch
from cdcbridge.apply.targets.delta import DeltaTarget


def _rows(keys: list) -> list[TargetRow]:
    return [TargetRow("t", (("id", key),), {"n": ColumnValue(7)}, seq=f"{n:020d}") for n, key in enumerate(keys)]


def _jobs_while(spark, action):
    group = f"key-bounds-{id(action)}"
    spark.sparkContext.setJobGroup(group, group)
    try:
        return action(), len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)


def _delta_files(target: DeltaTarget) -> dict[str, int]:
    """Delta's own file list: path → size."""
    from pyspark.sql import DataFrame

    snapshot = target._snapshot(target.path("t"))
    files = DataFrame(snapshot.allFiles().toDF(), target.spark).select("path", "size").collect()
    return {row[0]: row[1] for row in files}


def _bounded_files(target: DeltaTarget) -> dict[str, int]:
    """The key bounds' file list, as it follows the log: path → size."""
    snapshot = target._snapshot(target.path("t"))
    files = target._key_bounds.files(target.path("t"), snapshot, ["id"])
    assert set(files.files) == set(files.sizes)
    return files.sizes


def test_new_keys_are_looked_up_without_a_spark_job_and_stored_ones_are_read(spark, tmp_path):
    target = DeltaTarget(spark, str(tmp_path))
    target.write(TargetBatch(BatchMarker("app", 0), {"t": _rows(list(range(100)))}, []))
    target.read_rows("t", [(("id", 0),)])  # the first lookup builds the file list
    target.write(TargetBatch(BatchMarker("app", 1), {"t": _rows(list(range(100, 110)))}, []))

    found, jobs = _jobs_while(spark, lambda: target.read_rows("t", [(("id", n),) for n in range(200, 205)]))
    assert (found, jobs) == ({}, 0)
    found, jobs = _jobs_while(spark, lambda: target.read_rows("t", [(("id", 105),), (("id", 300),)]))
    assert list(found) == [(("id", 105),)] and jobs > 0

    # another writer's commit is followed: its key is found, and the cached files are Delta's
    other = spark.createDataFrame(
        [(400, 1, {}, "9", False, 0)],
        "id bigint, n bigint, _versions map<string,bigint>, _seq string, _deleted boolean, _source_ts bigint",
    )
    other.write.format("delta").mode("append").save(target.path("t"))
    assert list(target.read_rows("t", [(("id", 400),)])) == [(("id", 400),)]
    assert _bounded_files(target) == _delta_files(target)


@pytest.mark.parametrize(
    "change", ["DELETE FROM {t} WHERE id < 50", "OPTIMIZE {t}", "UPDATE {t} SET n = 8 WHERE id = 7"]
)
def test_the_file_list_follows_deletes_updates_and_compaction(spark, tmp_path, change):
    target = DeltaTarget(spark, str(tmp_path))
    for batch in range(3):
        keys = list(range(batch * 40, batch * 40 + 40))
        target.write(TargetBatch(BatchMarker("app", batch), {"t": _rows(keys)}, []))
        target.read_rows("t", [(("id", keys[0]),)])
    spark.sql(change.format(t=f"delta.`{target.path('t')}`"))
    assert _bounded_files(target) == _delta_files(target)
    assert list(target.read_rows("t", [(("id", 60),), (("id", 500),)])) == [(("id", 60),)]


def test_long_string_keys_are_read_despite_truncated_statistics(spark, tmp_path):
    target = DeltaTarget(spark, str(tmp_path))
    prefix = "k" * 40
    target.write(TargetBatch(BatchMarker("app", 0), {"t": _rows([prefix + "a", prefix + "m"])}, []))
    assert list(target.read_rows("t", [(("id", prefix + "m"),)])) == [(("id", prefix + "m"),)]
    target.write(TargetBatch(BatchMarker("app", 1), {"t": _rows([prefix + "z"])}, []))
    found = target.read_rows("t", [(("id", prefix + "z"),), (("id", "a"),)])
    assert list(found) == [(("id", prefix + "z"),)]
