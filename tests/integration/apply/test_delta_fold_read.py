"""The fold's read of a Delta table's stored rows: a batch of few keys filters the read by its key values, so Delta
reads only the files whose statistics may hold them (a trickle's table grows a file per batch); a batch of more keys
reads every file. The driver's read of a small batch's stored rows filters likewise. Either way the rows equal the
reference path's (:class:`.test_delta_write_modes.Paths`)."""

from __future__ import annotations

from typing import Any

import pytest

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.policy import BadInputPolicy
from cdcbridge.apply.driver.micro_batch import MicroBatchApplier
from cdcbridge.apply.spark.batch import SparkBatchApplier
from cdcbridge.apply.spark.decode import decoded_records
from cdcbridge.apply.spark.operations import PK_TYPE
from cdcbridge.apply.targets import delta
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.contract import MessageFormat
from tests.unit.apply.envelopes import TABLE, mutation, put

from .kafka_frames import SCHEMAS, batch_frame, routing, with_pk
from .test_delta_write_modes import Paths, _bump, _put


def _grown_by_small_batches(paths: Paths, batches: int) -> None:
    """The table grown as a trickle grows it: each batch two new keys, appended as files of their own."""
    for batch in range(batches):
        paths.apply([_put(10 + batch, (("id", 2 * batch + n),), n) for n in range(2)])


def _grouped(spark: Any, ids: list[int]) -> Any:
    """A batch's keys as the fold's grouping holds them (``table``, ``pk``), plus a message that is no operation."""
    rows = [(TABLE, [("id", (n, None, None))]) for n in ids] + [(None, None)]
    return spark.createDataFrame(rows, f"table string, pk {PK_TYPE}")


def _files_scanned(frame: Any) -> int:
    """The files the frame's scans read (their ``numFiles`` metric), after computing it."""
    frame.collect()
    scanned = 0
    pending = [frame._jdf.queryExecution().executedPlan()]
    while pending:
        node = pending.pop()
        kind = node.getClass().getSimpleName()
        if kind == "AdaptiveSparkPlanExec":
            pending.append(node.executedPlan())
        elif kind.endswith("QueryStageExec"):
            pending.append(node.plan())
        children = node.children()
        pending.extend(children.apply(index) for index in range(children.size()))
        metrics = node.metrics()
        if metrics.contains("numFiles"):
            scanned += int(metrics.apply("numFiles").value())
    return scanned


def test_a_batch_of_few_keys_reads_only_the_files_that_may_hold_them(spark, tmp_path, monkeypatch):
    paths = Paths(spark, tmp_path)
    _grown_by_small_batches(paths, 8)
    files = paths.keys_by_file()
    assert len(files) >= 8, "the test needs a file per batch"

    by_id = {key[0][1]: file for file, keys in files.items() for key in keys}
    assert len({by_id[n] for n in range(5, 13)}) == 8, "the test needs each id in a file of its own"

    current = paths.target.current_rows([TABLE], _grouped(spark, [5, 12]))
    assert _files_scanned(current) == 2  # each key's equality: the files of ids 5 and 12
    assert sorted(row["pk"][0]["v"]["l"] for row in current.collect()) == [5, 12]

    more = delta.KEY_FILTER_MAX + 1  # a batch of more messages than the filter takes: its keys are not collected
    collected = []
    monkeypatch.setattr(delta, "_few_batch_keys", lambda shapes, grouped: collected.append(grouped))
    current = paths.target.current_rows([TABLE], _grouped(spark, [5, 12]), keys_at_most=more)
    assert collected == [] and _files_scanned(current) == len(files)
    assert sorted(row["pk"][0]["v"]["l"] for row in current.collect()) == [5, 12]
    monkeypatch.undo()

    monkeypatch.setattr(delta, "KEY_EQUALITIES_MAX", 1)  # an IN list, which Delta prunes by its range: ids 5 … 12
    current = paths.target.current_rows([TABLE], _grouped(spark, [5, 12]), keys_at_most=2)
    assert _files_scanned(current) == 8
    assert sorted(row["pk"][0]["v"]["l"] for row in current.collect()) == [5, 12]

    monkeypatch.setattr(delta, "KEY_FILTER_MAX", 1)  # more keys than the filter takes: every file is read
    current = paths.target.current_rows([TABLE], _grouped(spark, [5, 12]))
    assert _files_scanned(current) == len(files)
    assert sorted(row["pk"][0]["v"]["l"] for row in current.collect()) == [5, 12]


def test_the_drivers_read_of_few_keys_reads_only_their_files(spark, tmp_path, monkeypatch):
    paths = Paths(spark, tmp_path)
    _grown_by_small_batches(paths, 8)
    target = paths.target
    shape = target._shape(TABLE)
    keys = [(("id", 5),), (("id", 12),), (("id", "12"),)]  # the last of another type: it matches no row

    def read(wanted: list) -> Any:
        return delta._with_keys(spark.read.format("delta").load(target.path(TABLE)), shape, wanted, target._json_frame)

    assert _files_scanned(read(keys)) == 2
    assert sorted(row["id"] for row in read(keys).collect()) == [5, 12]
    monkeypatch.setattr(delta, "KEY_EQUALITIES_MAX", 1)  # a one-column key's IN list: exact, pruned by its range
    assert _files_scanned(read(keys)) == 8
    assert sorted(row["id"] for row in read(keys).collect()) == [5, 12]
    assert set(target.read_rows(TABLE, keys)) == {(("id", 5),), (("id", 12),)}


def test_a_batch_naming_no_stored_table_reads_none(spark, tmp_path):
    paths = Paths(spark, tmp_path)
    _grown_by_small_batches(paths, 2)
    nothing = spark.createDataFrame([(None, None)], f"table string, pk {PK_TYPE}")
    assert paths.target.current_rows([TABLE], nothing) is None


def test_updates_into_a_grown_table_equal_the_reference_path(spark, tmp_path, monkeypatch):
    paths = Paths(spark, tmp_path)
    _grown_by_small_batches(paths, 6)
    # stored rows of two files and a new key
    assert paths.apply([_bump(30, (("id", 1),)), _bump(31, (("id", 8),)), _put(32, (("id", 20),), 3)]) == (
        "MERGE by position"
    )
    monkeypatch.setattr(delta, "KEY_FILTER_MAX", 2)  # the same kind of batch, read without the filter
    assert paths.apply([_bump(40, (("id", 2),)), _bump(41, (("id", 9),)), _put(42, (("id", 21),), 4)]) == (
        "MERGE by position"
    )
    assert paths.rows(paths.target)[(("id", 8),)][1]["count"] == 5  # put with 0 in batch 4, then bumped by 5


@pytest.mark.parametrize("equalities_max", [delta.KEY_EQUALITIES_MAX, 1], ids=["equalities", "in-lists"])
def test_string_and_binary_keys_are_filtered_as_their_columns_hold_them(spark, tmp_path, monkeypatch, equalities_max):
    monkeypatch.setattr(delta, "KEY_EQUALITIES_MAX", equalities_max)
    keys = [(("region", f"r{n % 3}"), ("tag", bytes([n, 255]))) for n in range(12)]

    def put_row(seq: int, key: tuple, amount: int) -> dict[str, Any]:
        return with_pk(mutation(seq, "PUT", [put("count", amount, seq)]), key)

    spark_target = DeltaTarget(spark, str(tmp_path / "spark"))
    reference = DeltaTarget(spark, str(tmp_path / "reference"))
    mutations = routing(MessageFormat.MUTATE_LOG)
    spark_path = SparkBatchApplier(spark_target, mutations, "app")
    reference_path = MicroBatchApplier(reference, mutations, "app", BadInputPolicy())
    batches = [
        [put_row(10 + n, key, n) for n, key in enumerate(keys[:6])],
        [put_row(20 + n, key, n) for n, key in enumerate(keys[6:])],
        [put_row(30, keys[1], 100), put_row(31, keys[7], 200)],  # stored rows of both files
    ]
    for batch_id, messages in enumerate(batches):
        frame = batch_frame(spark, MessageFormat.MUTATE_LOG, list(enumerate(messages)))
        expected = reference_path.apply(batch_id, decoded_records(frame, SCHEMAS))
        actual = spark_path.apply(batch_id, frame, SCHEMAS)
        assert (actual.stats, actual.rows_written) == (expected.stats, expected.rows_written)
        assert spark_target.read_marker(TABLE, "app") == BatchMarker("app", batch_id)
    stored = {pk: row.columns["count"].value for pk, row in spark_target.read_rows(TABLE, keys).items()}
    assert stored == {pk: row.columns["count"].value for pk, row in reference.read_rows(TABLE, keys).items()}
    assert (stored[keys[1]], stored[keys[7]], len(stored)) == (100, 200, 12)
    assert actual.stats.applied == 2
