"""The Spark path's bulk case: when none of a batch's changed rows is stored (a new or emptied table, new keys only),
the Delta target appends them instead of MERGEing, and the rows, counts and marker equal the reference path's
(:class:`~tests.integration.apply.test_delta_write_modes.Paths` compares both after every batch). A batch that
changes a stored row is written by position (:mod:`.test_delta_located_write`), one into a table another writer
committed to after the fold read it is MERGEd, and a re-run batch writes nothing."""

from __future__ import annotations

from typing import Any

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.contract import MessageFormat
from tests.unit.apply.envelopes import TABLE, mutation, put

from .kafka_frames import batch_frame, with_pk
from .test_delta_write_modes import SCHEMAS, Paths, _bump, _put


def _keys(numbers: range) -> list[tuple]:
    return [(("id", n),) for n in numbers]


def test_a_first_batch_with_redeliveries_and_stale_operations_is_appended(spark, tmp_path):
    paths = Paths(spark, tmp_path)
    keys = _keys(range(10))
    first = [_put(10 + n, key, n) for n, key in enumerate(keys)]
    later = [_bump(40 + n, key) for n, key in enumerate(keys[:4])]
    deleted = with_pk(mutation(60, "DELETE"), keys[5])
    # redeliveries (dropped as duplicates) and a put that arrives after a newer operation of its row
    assert paths.apply([*first, *later, first[0], later[1], deleted, _put(9, keys[5], 99)]) == "WRITE Append"


def test_new_keys_into_a_filled_table_are_appended_and_a_mixed_batch_is_written_by_position(spark, tmp_path):
    paths = Paths(spark, tmp_path)
    paths.apply([_put(10, key, n) for n, key in enumerate(_keys(range(0, 40, 2)))])
    assert paths.apply([_put(20, key, 1) for key in _keys(range(1, 40, 4))]) == "WRITE Append"
    mixed = [_put(30, key, 2) for key in _keys(range(3, 40, 4))] + [_bump(31, (("id", 0),))]
    assert paths.apply(mixed) == "MERGE by position"  # the stored row marked where the fold found it
    assert len(paths.rows(paths.target)) == 40


def test_an_emptied_table_is_appended_to(spark, tmp_path):
    paths = Paths(spark, tmp_path)
    keys = _keys(range(8))
    paths.apply([_put(10, key, n) for n, key in enumerate(keys)])
    spark.sql(f"DELETE FROM delta.`{paths.target.path(TABLE)}`")
    spark.sql(f"DELETE FROM delta.`{paths.reference.path(TABLE)}`")
    assert paths.apply([_put(20, key, 3) for key in keys]) == "WRITE Append"
    assert len(paths.rows(paths.target)) == len(keys)


def test_a_commit_after_the_fold_read_the_table_makes_new_keys_merge(spark, tmp_path):
    paths = Paths(spark, tmp_path)
    paths.apply([_put(10, key, n) for n, key in enumerate(_keys(range(4)))])
    path = paths.target.path(TABLE)
    write_folded = paths.target.write_folded

    def another_writer_first(marker: BatchMarker, tables: Any) -> dict[str, int]:
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('owner.note' = 'another writer')")
        return write_folded(marker, tables)

    paths.target.write_folded = another_writer_first  # type: ignore[method-assign]
    paths.spark_path.new_keys.clean.clear()  # as after a restart: checked before it is written, not written first
    assert paths.apply([_put(20, key, 1) for key in _keys(range(4, 8))]) == "MERGE"


def test_an_appended_batch_run_again_writes_nothing(spark, tmp_path):
    paths = Paths(spark, tmp_path)
    messages = [_put(10, key, n) for n, key in enumerate(_keys(range(6)))]
    assert paths.apply(messages) == "WRITE Append"
    frame = batch_frame(spark, MessageFormat.MUTATE_LOG, list(enumerate(messages)))
    again = paths.spark_path.apply(0, frame, SCHEMAS)
    assert (again.batches_skipped, again.rows_written) == (1, 0)
    assert paths.target._snapshot(paths.target.path(TABLE)).version() == 0  # the table, made by its first rows, only
    # the same rows under a new batch id are stored already: nothing changes, nothing is written
    assert paths.spark_path.apply(1, frame, SCHEMAS).rows_written == 0
    stored = spark.read.format("delta").load(paths.target.path(TABLE))
    assert stored.count() == 6


def test_a_put_of_a_new_key_is_appended_with_its_columns(spark, tmp_path):
    paths = Paths(spark, tmp_path)
    paths.apply([_put(10, key, n) for n, key in enumerate(_keys(range(3)))])
    extra = with_pk(mutation(20, "PUT", [put("count", 1, 20), put("note", "new column", 20)]), (("id", 9),))
    # a new column is added by an ALTER first: the table moved past the version the fold read, so this MERGEs
    assert paths.apply([extra]) == "MERGE"
    assert paths.apply([_put(30, key, 4) for key in _keys(range(10, 12))]) == "WRITE Append"
