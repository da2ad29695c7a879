"""A batch into a Delta table above the overwrite bound that holds both new and stored keys, when the table takes
no deletion vectors (created before, or by others; one that takes them is written by position,
:mod:`.test_delta_located_write`): the new rows are appended, then the stored ones MERGEd with an update clause only
under the batch's marker (the MERGE that also inserts shuffles the whole table). The rows, counts and marker equal
the reference path's (:class:`~tests.integration.apply.test_delta_write_modes.Paths` compares both after every
batch), and a batch cut short between the two commits, run again, ends with the same rows."""

from __future__ import annotations

from typing import Any

import pytest

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.contract import MessageFormat
from tests.unit.apply.envelopes import TABLE

from .kafka_frames import batch_frame
from .test_delta_write_modes import SCHEMAS, Paths, _bump, _put


def _keys(numbers: range) -> list[tuple]:
    return [(("id", n),) for n in numbers]


def _without_deletion_vectors(spark: Any, tmp_path: Any) -> Paths:
    """Paths into a table above the overwrite bound created without deletion vectors, filled with keys 0-39."""
    paths = Paths(spark, tmp_path, overwrite_max_bytes=0)
    spark.sql(
        f"CREATE TABLE delta.`{paths.target.path(TABLE)}` (id bigint NOT NULL, `_versions` map<string,bigint>, "
        "`_seq` string, `_deleted` boolean, `_source_ts` bigint) USING DELTA "
        "TBLPROPERTIES ('cdcbridge.primaryKey' = '[\"id\"]')"
    )
    paths.apply([_put(10, key, n) for n, key in enumerate(_keys(range(40)))])
    return paths


def _operations(paths: Paths, commits: int) -> list[str]:
    """The last `commits` operations of the Spark path's table, oldest first."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(paths.spark, paths.target.path(TABLE)).history(commits).collect()
    return [row["operation"] for row in reversed(history)]


def _mixed_batch() -> list[dict[str, Any]]:
    """New keys 40-49, an update of every fifth stored key and a redelivery."""
    new = [_put(30, key, 7) for key in _keys(range(40, 50))]
    updates = [_bump(31, key) for key in _keys(range(0, 40, 5))]
    return [*new, *updates, new[0], updates[0]]


def test_a_mixed_batch_into_a_large_table_appends_its_new_rows_and_merges_only_its_stored_ones(spark, tmp_path):
    paths = _without_deletion_vectors(spark, tmp_path)
    assert paths.apply(_mixed_batch()) == "MERGE"
    assert _operations(paths, 2) == ["WRITE", "MERGE"]
    metrics = paths.last_commit()["operationMetrics"]
    assert (int(metrics["numTargetRowsUpdated"]), int(metrics["numTargetRowsInserted"])) == (8, 0)
    assert len(paths.rows(paths.target)) == 40  # Paths.rows reads the keys 0-39; the new ones are compared too:
    assert (
        paths.target.read_rows(TABLE, _keys(range(40, 50))).keys()
        == paths.reference.read_rows(TABLE, _keys(range(40, 50))).keys()
    )


def test_a_batch_cut_short_after_its_append_writes_the_stored_rows_when_run_again(spark, tmp_path):
    paths = _without_deletion_vectors(spark, tmp_path)
    merge = paths.target._guarded_merge

    def stop_before_the_merge(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the job stopped between the append and the MERGE")

    paths.target._guarded_merge = stop_before_the_merge  # type: ignore[method-assign]
    frame = batch_frame(spark, MessageFormat.MUTATE_LOG, list(enumerate(_mixed_batch())))
    with pytest.raises(RuntimeError):
        paths.spark_path.apply(1, frame, SCHEMAS)
    assert _operations(paths, 1) == ["WRITE"]  # the new rows are in, the batch's marker is not
    assert paths.target.read_marker(TABLE, "app") == BatchMarker("app", 0)

    paths.target._guarded_merge = merge  # type: ignore[method-assign]
    again = paths.spark_path.apply(1, frame, SCHEMAS)
    assert (again.stats.applied, again.rows_written) == (8, 8)  # the appended rows' operations are stale now
    paths.reference_path.apply(1, _reference_records(frame))
    everything = _keys(range(50))
    assert _values(paths.target.read_rows(TABLE, everything)) == _values(paths.reference.read_rows(TABLE, everything))
    assert paths.target.read_marker(TABLE, "app") == BatchMarker("app", 1)


def _reference_records(frame: Any) -> Any:
    from cdcbridge.apply.spark.decode import decoded_records

    return decoded_records(frame, SCHEMAS)


def _values(rows: dict) -> dict:
    return {pk: (row.seq, {n: c.value for n, c in row.columns.items()}) for pk, row in rows.items()}
