"""The new-key path (:mod:`cdcbridge.apply.spark.new_keys`): a batch whose keys each have one operation and none of
which the target holds is folded message by message; any repeated or stored key sends the whole batch to the grouped
fold. Checked against the reference path on random batches (in memory), and on Delta: a first load equals what the
grouped fold writes, bookkeeping columns included; a stored key falls back; batches of updates stop the tries."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcbridge.apply.core.fold import fold_row
from cdcbridge.apply.core.operations import decode_message
from cdcbridge.apply.core.policy import BadInputPolicy
from cdcbridge.apply.driver.micro_batch import MicroBatchApplier
from cdcbridge.apply.spark.batch import SparkBatchApplier
from cdcbridge.apply.spark.decode import decoded_records
from cdcbridge.apply.spark.new_keys import NewKeyPlanner
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.apply.targets.delta_key_hashes import KEY_HASHES_MAX
from cdcbridge.contract import MessageFormat
from tests.unit.apply.envelopes import TABLE, image, increment, mutation, put

from .helpers import spark_jobs_of
from .kafka_frames import SCHEMAS, batch_frame, routing, with_pk
from .spark_memory_target import MemorySparkTarget
from .test_delta_write_modes import Paths, _bump, _put

MUTATIONS = routing(MessageFormat.MUTATE_LOG)


class GroupedOnly(NewKeyPlanner):
    """A planner that never tries the new-key path: every batch takes the grouped fold."""

    def worth_trying(self, tables: Any) -> bool:
        return False


def _key(n: int) -> tuple:
    return (("id", n),)


@st.composite
def batches(draw: st.DrawFn) -> dict[str, Any]:
    """Keys with one operation each (a PUT, an UPDATE, an increment, a DELETE, an image, a partial image); some keys
    stored with an older or newer seq, some with a second operation or a redelivery."""
    message_format = draw(st.sampled_from([MessageFormat.MUTATE_LOG, MessageFormat.RECORD_IMAGE]))
    messages: list[dict[str, Any]] = []
    stored: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 8))):
        seq = 100 + n * 10
        value = draw(st.one_of(st.integers(-5, 5), st.text(max_size=3), st.floats(allow_nan=False)))
        version = draw(st.one_of(st.none(), st.integers(1, 50)))
        if message_format is MessageFormat.MUTATE_LOG:
            kind = draw(st.sampled_from(["PUT", "PUT", "UPDATE", "INCREMENT", "DELETE"]))
            if kind == "INCREMENT":
                message = with_pk(mutation(seq, "UPDATE", [increment("c", n)]), _key(n))
            else:
                cells = [] if kind == "DELETE" else [put("a", value, version), put("b", n)]
                message = with_pk(mutation(seq, kind, cells), _key(n))
        else:
            message = image(seq, {"a": (value, version or seq), "b": (n, seq)}, partial=draw(st.booleans()),
                            pk=_key(n))  # fmt: skip
        messages.append(message)
        extra = draw(st.sampled_from(["none", "none", "none", "stored older", "stored newer", "second", "redelivered"]))
        if extra.startswith("stored"):
            stored_seq = seq - 5 if extra == "stored older" else seq + 5
            stored.append(with_pk(mutation(stored_seq, "PUT", [put("a", "stored", 1), put("c", 7)]), _key(n)))
        elif extra == "second":
            messages.append(with_pk(mutation(seq + 1, "UPDATE", [put("b", -n)]), _key(n)))
        elif extra == "redelivered":
            messages.append(message)
    return {"format": message_format, "messages": draw(st.permutations(messages)), "stored": stored}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=batches())
def test_the_new_key_path_gives_the_reference_rows_and_counts_and_is_taken_only_when_it_may(spark, batch) -> None:
    message_format = batch["format"]
    seeded = [row for m in batch["stored"] if (row := fold_row(None, [decode_message(m)]).row) is not None]
    frame = batch_frame(spark, message_format, list(enumerate(batch["messages"])))
    reference = MemorySparkTarget(spark)
    reference.seed(seeded)
    expected = MicroBatchApplier(reference, routing(message_format), "app", BadInputPolicy()).apply(
        0, decoded_records(frame, SCHEMAS)
    )
    candidate = MemorySparkTarget(spark)
    candidate.seed(seeded)
    actual = SparkBatchApplier(candidate, routing(message_format), "app").apply(0, frame, SCHEMAS)
    assert candidate.tables == reference.tables
    assert (actual.stats, actual.rows_written) == (expected.stats, expected.rows_written)
    keys = [str(message["pk"]) for message in batch["messages"]]
    one_each_and_new = len(set(keys)) == len(keys) and not batch["stored"]
    assert actual.new_key_batches == int(one_each_and_new)


def test_a_first_load_takes_the_new_key_path_and_equals_the_grouped_fold(spark, tmp_path) -> None:
    paths = Paths(spark, tmp_path)
    grouped = DeltaTarget(spark, str(tmp_path / "grouped"))
    grouped_path = SparkBatchApplier(grouped, MUTATIONS, "app")
    grouped_path.new_keys = GroupedOnly()
    for batch_id, start in enumerate((0, 10, 20)):
        messages = [_put(10 + n, _key(n), n) for n in range(start, start + 10)]
        messages.append(with_pk(mutation(50 + start, "UPDATE", [increment("count", 3)]), _key(100 + start)))
        assert paths.apply(messages) == "WRITE Append"
        assert paths.last_report.new_key_batches == 1
        frame = batch_frame(spark, MessageFormat.MUTATE_LOG, list(enumerate(messages)))
        assert grouped_path.apply(batch_id, frame, SCHEMAS).new_key_batches == 0
    # the whole rows, bookkeeping included (_versions, _seq, _deleted, _source_ts), as the grouped fold wrote them
    loaded = spark.read.format("delta").load(paths.target.path(TABLE)).orderBy("id").collect()
    folded = spark.read.format("delta").load(grouped.path(TABLE)).orderBy("id").collect()
    assert len(loaded) == 33
    assert [row.asDict() for row in loaded] == [row.asDict() for row in folded]


def test_a_stored_or_repeated_key_sends_the_batch_to_the_grouped_fold(spark, tmp_path) -> None:
    paths = Paths(spark, tmp_path)
    paths.apply([_put(10 + n, _key(n), n) for n in range(10)])
    assert paths.last_report.new_key_batches == 1
    paths.apply([_put(30 + n, _key(n), 1) for n in range(10, 20)] + [_put(40, _key(3), 2)])  # key 3 is stored
    assert paths.last_report.new_key_batches == 0
    assert paths.last_report.rows_written == 11
    paths.apply([_put(50, _key(30), 1), _bump(51, _key(30))])  # a new key with two operations
    assert paths.last_report.new_key_batches == 0
    assert paths.rows(paths.target)[_key(30)][1]["count"] == 6


def test_a_rerun_new_key_batch_writes_nothing(spark, tmp_path) -> None:
    paths = Paths(spark, tmp_path)
    messages = [_put(10 + n, _key(n), n) for n in range(8)]
    paths.apply(messages)
    frame = batch_frame(spark, MessageFormat.MUTATE_LOG, list(enumerate(messages)))
    again = paths.spark_path.apply(0, frame, SCHEMAS)
    assert (again.batches_skipped, again.rows_written) == (1, 0)
    # the same messages under a new batch id: the keys are stored now, so the grouped fold finds nothing newer
    later = paths.spark_path.apply(1, frame, SCHEMAS)
    assert (later.new_key_batches, later.rows_written) == (0, 0)
    assert spark.read.format("delta").load(paths.target.path(TABLE)).count() == 8


def test_batches_of_updates_stop_the_tries_and_new_rows_resume_them(spark, tmp_path) -> None:
    paths = Paths(spark, tmp_path)
    paths.apply([_put(10 + n, _key(n), n) for n in range(10)])
    paths.spark_path.new_keys.clean.clear()  # as after a restart: nothing learned yet
    paths.apply([_bump(30 + n, _key(n)) for n in range(10)])  # tried (nothing learned), stored: grouped
    assert paths.last_report.new_key_batches == 0
    assert not paths.spark_path.new_keys.worth_trying([TABLE])
    paths.apply([_put(50 + n, _key(n), 5) for n in range(10, 14)])  # new keys, grouped: learned
    assert paths.last_report.new_key_batches == 0
    assert paths.spark_path.new_keys.worth_trying([TABLE])
    paths.apply([_put(70 + n, _key(n), 5) for n in range(14, 18)])
    assert paths.last_report.new_key_batches == 1


def _data_files(paths: Paths) -> tuple[set[str], set[str]]:
    """The table's Parquet files on disk and those its latest version names (both as file names)."""
    from pathlib import Path

    table = Path(paths.target.path(TABLE))
    on_disk = {file.name for file in table.glob("*.parquet")}
    named = {Path(name).name for name in paths.spark.read.format("delta").load(str(table)).inputFiles()}
    return on_disk, named


def _kept_pending_appends(target: DeltaTarget, monkeypatch: Any) -> list[Any]:
    """The pending appends `target` will make, kept as they are made."""
    pending: list[Any] = []
    pending_append = target.pending_append

    def kept(*args: Any) -> Any:
        pending.append(pending_append(*args))
        return pending[-1]

    monkeypatch.setattr(target, "pending_append", kept)
    return pending


@pytest.mark.parametrize("key_hashes_max", [0, KEY_HASHES_MAX])
def test_new_keys_into_an_existing_table_are_written_by_the_job_that_decodes_them(
    spark, tmp_path, monkeypatch, key_hashes_max
):
    paths = Paths(spark, tmp_path, key_hashes_max=key_hashes_max)
    paths.apply([_put(10 + n, _key(n), n) for n in range(10)])  # creates the table: the job knows all its keys
    hashed = key_hashes_max > 0  # else the check reads the table's key columns
    pending = _kept_pending_appends(paths.target, monkeypatch)
    new_rows = [_put(30 + n, _key(n), n) for n in range(10, 20)]
    written_first, jobs = spark_jobs_of(spark, "first", lambda: paths.apply(new_rows))
    assert (written_first, paths.last_report.new_key_batches) == ("WRITE Append", 1)
    assert pending[0].stored is None  # keys 10-19 lie above every stored file's bounds: no stored key is read
    assert (pending[0].known is not None) == hashed
    paths.apply([_put(40, _key(35), 1), _put(41, _key(5), 1)])  # 5 is stored: the check reads the files 0-19
    assert (pending[1].stored is not None, pending[1].known is not None) == (not hashed, hashed)
    assert paths.last_report.new_key_batches == 0  # dropped: found stored, by hash or by the table's keys
    paths.spark_path.new_keys.clean[TABLE] = True
    paths.apply([_put(45, _key(36), 1)])  # the stored key's batch was a MERGE: the hashes are behind the table
    assert (pending[2].known, paths.last_report.new_key_batches) == (None, 1)
    paths.spark_path.new_keys.clean.clear()
    monkeypatch.setattr(paths.target, "pending_append", lambda *args: None)  # the summary, then the append
    more_rows = [_put(50 + n, _key(n), n) for n in range(20, 30)]
    _, jobs_before = spark_jobs_of(spark, "before", lambda: paths.apply(more_rows))
    assert paths.last_report.new_key_batches == 1
    assert jobs < jobs_before
    assert len(paths.rows(paths.target)) == 32


def test_keys_an_append_of_the_other_paths_wrote_are_found_stored_by_the_next_batch_written_first(
    spark, tmp_path, monkeypatch
):
    """The key hashes observed from a table's typed key columns (an append after the summary job) equal those of
    the messages' keys (a batch written first), for a key of a string and an integer."""
    paths = Paths(spark, tmp_path)

    def key(n: int) -> tuple:
        return (("region", f"r{n % 3}"), ("id", n))

    creates = _kept_pending_creates(paths.target, monkeypatch)
    paths.apply([_put(10 + n, key(n), n) for n in range(5)])
    assert len(creates) == 1 and creates[0] is not None  # the table made by the first batch: every key known
    paths.spark_path.new_keys.clean.clear()  # the next batch takes the summary job, then an append
    paths.apply([_put(30 + n, key(n), n) for n in range(5, 10)])
    assert paths.last_report.new_key_batches == 1
    pending = _kept_pending_appends(paths.target, monkeypatch)
    paths.spark_path.new_keys.clean[TABLE] = True
    paths.apply([_put(50, key(20), 1), _put(51, key(7), 1)])  # 7 came with the append
    assert pending[0].known is not None and pending[0].stored_keys() == 1
    assert paths.last_report.new_key_batches == 0  # dropped, then folded against the stored row
    table = spark.read.format("delta").load(paths.target.path(TABLE))
    counts = {(row["region"], row["id"]): row["count"] for row in table.collect()}
    assert table.count() == len(counts) == 11  # no key twice
    assert (counts[("r1", 7)], counts[("r2", 20)], counts[("r0", 3)]) == (1, 1, 3)


def test_a_batch_written_first_that_fails_its_checks_is_dropped_and_takes_the_other_paths(spark, tmp_path, monkeypatch):
    paths = Paths(spark, tmp_path)
    paths.apply([_put(10 + n, _key(n), n) for n in range(10)])
    pending = _kept_pending_appends(paths.target, monkeypatch)
    stored_key = [_put(30 + n, _key(n), 1) for n in range(10, 14)] + [_put(40, _key(3), 2)]
    repeated_key = [_put(50 + n, _key(n), 1) for n in range(20, 24)] + [_put(90, _key(20), 7)]
    new_column = [with_pk(mutation(70 + n, "PUT", [put("count", n), put("colour", "red")]), _key(n)) for n in (30, 31)]
    deleted_key = [_put(80 + n, _key(n), 1) for n in range(40, 44)] + [with_pk(mutation(95, "DELETE", []), _key(40))]
    for batch in (stored_key, repeated_key, new_column, deleted_key):
        paths.spark_path.new_keys.clean[TABLE] = True  # as after a batch that passed: written first
        paths.apply(batch)  # the rows and counts the reference path writes (Paths.apply checks them)
        on_disk, named = _data_files(paths)
        assert on_disk == named  # the dropped files are gone
    assert paths.rows(paths.target)[_key(20)][1]["count"] == 7
    assert paths.rows(paths.target)[_key(31)][1]["colour"] == "red"
    assert _key(40) not in paths.rows(paths.target)  # its PUT is not written: the DELETE after it is no row
    paths.spark_path.new_keys.clean[TABLE] = True
    empty = paths.spark_path.apply(paths.batches, batch_frame(spark, MessageFormat.MUTATE_LOG, []), SCHEMAS)
    assert (empty.stats.messages, empty.rows_written) == (0, 0)  # observed with nothing written, not awaited forever
    on_disk, named = _data_files(paths)
    table = paths.target.path(TABLE)
    # Delta leaves the empty file of an empty write on disk (its write returns no entry for it), as after a MERGE
    assert [spark.read.parquet(f"{table}/{name}").count() for name in on_disk - named] == [0]
    assert len(pending) == 5 and all(p is not None for p in pending)  # each batch was written first, then dropped


def _kept_pending_creates(target: DeltaTarget, monkeypatch: Any) -> list[Any]:
    """The pending appends into a table to create `target` will make, kept as they are made."""
    pending: list[Any] = []
    pending_create = target.pending_create

    def kept(*args: Any) -> Any:
        pending.append(pending_create(*args))
        return pending[-1]

    monkeypatch.setattr(target, "pending_create", kept)
    return pending


def _table_layout(spark: Any, path: str) -> tuple[Any, ...]:
    """What a table was created as: its columns (nullability included), properties and protocol."""
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, path).detail().first()
    schema = spark.read.format("delta").load(path).schema
    return (
        schema.jsonValue(),
        detail["properties"],
        detail["minReaderVersion"],
        detail["minWriterVersion"],
        sorted(detail["tableFeatures"]),
    )


def test_a_first_batch_creates_the_table_in_the_commit_that_writes_it(spark, tmp_path) -> None:
    from delta.tables import DeltaTable

    paths = Paths(spark, tmp_path)
    assert paths.apply([_put(10 + n, _key(n), n) for n in range(10)]) == "WRITE Append"
    assert paths.last_report.new_key_batches == 1
    path = paths.target.path(TABLE)
    assert [entry["version"] for entry in DeltaTable.forPath(spark, path).history().collect()] == [0]
    # the table Delta's own CREATE TABLE makes of the same columns and properties
    spark.sql(
        f"CREATE TABLE delta.`{tmp_path}/sql` (id bigint NOT NULL, count bigint, label string, "
        "`_versions` map<string,bigint>, `_seq` string, `_deleted` boolean, `_source_ts` bigint) USING DELTA "
        "TBLPROPERTIES ('cdcbridge.primaryKey' = '[\"id\"]', 'delta.enableDeletionVectors' = 'true')"
    )
    assert _table_layout(spark, path) == _table_layout(spark, f"{tmp_path}/sql")
    assert "deletionVectors" in _table_layout(spark, path)[4]
    assert paths.target._key_hashes.at(path, 0) is not None  # the job knows every key
    paths.apply([_put(30 + n, _key(n), n) for n in range(10, 20)])
    assert (paths.last_operation(), paths.last_report.new_key_batches) == ("WRITE Append", 1)
    assert len(paths.rows(paths.target)) == 20


def test_a_first_batch_its_sample_misjudges_is_dropped_with_its_folder_and_creates_the_table_otherwise(
    spark, tmp_path, monkeypatch
) -> None:
    from delta.tables import DeltaTable

    monkeypatch.setattr("cdcbridge.apply.spark.batch.SHAPE_SAMPLE", 2)
    paths = Paths(spark, tmp_path)
    created = _kept_pending_creates(paths.target, monkeypatch)
    # one partition, in order: the sample sees the first two messages, not the colour of the third
    coloured = with_pk(mutation(30, "PUT", [put("count", 3), put("colour", "red")]), _key(3))
    paths.apply([_put(10, _key(1), 1), _put(20, _key(2), 2), coloured])
    assert len(created) == 1 and created[0] is not None  # written first, then dropped
    assert paths.last_report.new_key_batches == 1  # the summary and the append after it
    assert [
        entry["operation"] for entry in DeltaTable.forPath(spark, paths.target.path(TABLE)).history().collect()
    ] == [
        "WRITE",
        "CREATE TABLE",
    ]
    assert paths.rows(paths.target)[_key(3)][1]["colour"] == "red"
    on_disk, named = _data_files(paths)
    assert on_disk == named  # the dropped files went with the dropped table's folder

    other = Paths(spark, tmp_path / "other")
    other_created = _kept_pending_creates(other.target, monkeypatch)
    orphan = f"{other.target.path(TABLE)}/part-00000-of-a-job-stopped-before-its-commit.parquet"
    spark.range(3).write.parquet(orphan)  # a folder with files but no table: both ways of creating it take it
    other.apply([_put(10, _key(1), 1), _put(11, _key(1), 2), _put(12, _key(2), 1)])  # a key repeats in the sample
    assert other_created == []  # not written first: the other paths create the table
    assert other.rows(other.target)[_key(1)][1]["count"] == 2
    third = Paths(spark, tmp_path / "third")
    third_created = _kept_pending_creates(third.target, monkeypatch)
    spark.range(3).write.parquet(f"{third.target.path(TABLE)}/part-00000-of-a-job-stopped-before-its-commit.parquet")
    third.apply([_put(10 + n, _key(n), n) for n in range(4)])
    assert third_created[0] is not None and third.last_operation() == "WRITE Append"
    history = DeltaTable.forPath(spark, third.target.path(TABLE)).history().collect()
    assert [entry["version"] for entry in history] == [0]
