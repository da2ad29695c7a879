"""The Spark path (validation, dedup, guard and fold in the JVM) against the reference path (the Python fold) on
the same Kafka batch: random row histories of both formats, redeliveries in any order, operations the target
already holds, tombstones with and without seq; and the shapes the Spark path must leave to the reference path."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcbridge.apply.core.fold import fold_row
from cdcbridge.apply.core.model import ColumnValue, TargetRow
from cdcbridge.apply.core.operations import decode_message
from cdcbridge.apply.core.policy import BadInputPolicy
from cdcbridge.apply.driver.micro_batch import MicroBatchApplier
from cdcbridge.apply.errors import BadInputError
from cdcbridge.apply.spark.batch import ReferencePathNeeded, SparkBatchApplier
from cdcbridge.apply.spark.decode import decoded_records
from cdcbridge.apply.spark.operations import OP, OTHER, PYTHON, UNKNOWN_SID, normalized_operations
from cdcbridge.contract import TOMBSTONE_SEQ_KEY_HEADER, MessageFormat
from tests.unit.apply.envelopes import TABLE, increment, mutation, put, seq_key
from tests.unit.apply.source_model import image_messages, mutation_messages, run_history
from tests.unit.apply.strategies import histories, lookup_points

from .kafka_frames import KAFKA_SCHEMA, SCHEMAS, batch_frame, framed, routing, with_pk
from .spark_memory_target import MemorySparkTarget


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """Several rows' histories as one batch: each row's target state is a random prefix of its own history, the
    batch carries the whole history (the prefix becomes stale) with each message 1-3 times, in any order. On an
    image topic some tombstones carry their delete's seq and some lost their row_deleted image to compaction."""
    message_format = draw(st.sampled_from([MessageFormat.MUTATE_LOG, MessageFormat.RECORD_IMAGE]))
    rows: list[tuple[tuple, list[dict[str, Any]], int]] = []
    for index in range(draw(st.integers(1, 6))):
        pk = (("region", draw(st.sampled_from(["eu", "us"]))), ("id", index), ("tag", bytes([index, 0xFF])))
        records, states = run_history(draw(histories))
        if message_format is MessageFormat.MUTATE_LOG:
            messages = mutation_messages(records)
        else:
            messages = image_messages(records, states, draw(lookup_points(len(records))))
            compacted = []
            for position, message in enumerate(messages):  # some tombstones carry their delete's seq
                if message.get("_tombstone") and draw(st.booleans()):
                    messages[position] = {**message, "seq": {"seq_key": messages[position - 1]["seq"]["seq_key"]}}
                    if draw(st.integers(0, 3)) == 0:  # log compaction removed the row_deleted image
                        compacted.append(position - 1)
            messages = [m for position, m in enumerate(messages) if position not in compacted]
        rows.append((pk, [with_pk(m, pk) for m in messages], draw(st.integers(0, len(messages)))))
    copies = st.integers(1, 3)
    deliveries = [(index, m) for index, (_, ms, _) in enumerate(rows) for m in ms for _ in range(draw(copies))]
    return {"format": message_format, "rows": rows, "deliveries": draw(st.permutations(deliveries))}


def seed_rows(rows: list[tuple[tuple, list[dict[str, Any]], int]]) -> list[TargetRow]:
    seeded = []
    for _, messages, applied in rows:
        result = fold_row(None, [decode_message(m) for m in messages[:applied]])
        if result.row is not None:
            seeded.append(result.row)
    return seeded


def run_both(spark: Any, message_format: MessageFormat, seeded: list[TargetRow], frame: Any, batch_id: int = 0):
    """(reference target, report or bad-input error), (spark target, report or ReferencePathNeeded)."""
    reference = MemorySparkTarget(spark)
    reference.seed(seeded)
    applier = MicroBatchApplier(reference, routing(message_format), "app", BadInputPolicy())
    try:
        expected: Any = applier.apply(batch_id, decoded_records(frame, SCHEMAS))
    except BadInputError as error:
        expected = error
    candidate = MemorySparkTarget(spark)
    candidate.seed(seeded)
    try:
        actual: Any = SparkBatchApplier(candidate, routing(message_format), "app").apply(batch_id, frame, SCHEMAS)
    except ReferencePathNeeded as reason:
        actual = reason
    return (reference, expected), (candidate, actual)


def comparable(report: Any) -> dict[str, Any]:
    figures = report.as_dict()
    for name in ("seconds_decode", "seconds_read", "seconds_fold", "seconds_write", "spark_batches", "new_key_batches"):
        figures.pop(name)
    return figures


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios())
def test_the_spark_fold_gives_the_reference_rows_and_counts(spark, scenario) -> None:
    message_format, rows = scenario["format"], scenario["rows"]
    seeded = seed_rows(rows)
    frame = batch_frame(spark, message_format, scenario["deliveries"])
    (reference, expected), (candidate, actual) = run_both(spark, message_format, seeded, frame)
    tombstones = any(m.get("_tombstone") for _, m in scenario["deliveries"])
    if isinstance(actual, ReferencePathNeeded):  # only a bare tombstone of a table the target does not hold
        assert tombstones and not seeded, actual
        return
    assert not isinstance(expected, BadInputError), expected
    assert candidate.tables == reference.tables
    assert comparable(actual) == comparable(expected)
    assert actual.spark_batches == 1


def _counter_row(value: Any) -> TargetRow:
    pk = (("region", "eu"), ("id", 1), ("tag", b"\x01"))
    return TargetRow(TABLE, pk, {"n": ColumnValue(value, 1)}, seq_key(1), False, 1)


@pytest.mark.parametrize(
    ("held", "cells"),
    [
        ("text", [increment("n", 2)]),  # an INCREMENT of a column holding no integer
        (9223372036854775807, [increment("n", 1)]),  # an INCREMENT beyond int64
        (1, [{"name": "n", "op": "UNKNOWN", "value": None, "version": None, "amount": None}]),  # bad input
        (1, [put("n", None)]),  # a PUT without value: bad input
    ],
)
def test_what_the_reference_path_must_judge_is_left_to_it(spark, held, cells) -> None:
    row = _counter_row(held)
    message = with_pk(mutation(5, "UPDATE", cells), row.pk)
    frame = batch_frame(spark, MessageFormat.MUTATE_LOG, [(1, message)])
    (reference, expected), (candidate, actual) = run_both(spark, MessageFormat.MUTATE_LOG, [row], frame)
    assert isinstance(actual, ReferencePathNeeded)
    assert candidate.writes == 0
    if held == 9223372036854775807:  # Python integers do not overflow: only the typed target refuses it later
        assert reference.tables[TABLE][row.pk].columns["n"].value == 2**63
    else:
        assert isinstance(expected, BadInputError)


def test_a_rerun_batch_changes_nothing_and_counts_as_skipped(spark) -> None:
    row = _counter_row(10)
    message = with_pk(mutation(5, "INCREMENT", [increment("n", 2)]), row.pk)
    frame = batch_frame(spark, MessageFormat.MUTATE_LOG, [(1, message)])
    target = MemorySparkTarget(spark)
    target.seed([row])
    applier = SparkBatchApplier(target, routing(MessageFormat.MUTATE_LOG), "app")
    first = applier.apply(3, frame, SCHEMAS)
    again = applier.apply(3, frame, SCHEMAS)
    assert (first.stats.applied, first.rows_written, first.rows_by_table) == (1, 1, {TABLE: 1})
    assert (again.batches_skipped, again.tables_skipped, again.rows_written, again.stats.applied) == (1, 1, 0, 0)
    assert target.tables[TABLE][row.pk].columns["n"].value == 12


def test_a_whole_row_put_with_two_versions_of_a_column_keeps_the_newer_on_both_paths(spark) -> None:
    # A whole-row PUT may carry two versions of one column: the older one, written last, must not win.
    row = _counter_row(10)
    replace = with_pk(mutation(5, "PUT", [put("n", "new", 5), put("n", "old", 3), put("m", 7, 5)]), row.pk)
    other_pk = (("region", "us"), ("id", 2), ("tag", b"\x02"))
    plain = with_pk(mutation(6, "PUT", [put("n", "plain", 6), put("m", 8, 6)]), other_pk)
    frame = batch_frame(spark, MessageFormat.MUTATE_LOG, [(1, replace), (2, plain)])
    (reference, expected), (candidate, actual) = run_both(spark, MessageFormat.MUTATE_LOG, [row], frame)
    assert comparable(actual) == comparable(expected)
    assert candidate.tables == reference.tables
    assert candidate.tables[TABLE][row.pk].columns == {"n": ColumnValue("new", 5), "m": ColumnValue(7, 5)}
    assert candidate.tables[TABLE][other_pk].columns == {"n": ColumnValue("plain", 6), "m": ColumnValue(8, 6)}


def test_a_tombstone_of_a_row_already_deleted_changes_nothing_on_both_paths(spark) -> None:
    pk = (("region", "eu"), ("id", 1), ("tag", b"\x01"))
    deleted = TargetRow(TABLE, pk, {}, seq_key(2), True, 2)
    tombstone = {"_tombstone": True, "pk": [{"name": n, "value": v} for n, v in pk], "seq": {"seq_key": seq_key(4)}}
    seqless = {**tombstone, "seq": None}
    frame = batch_frame(spark, MessageFormat.RECORD_IMAGE, [(1, tombstone), (1, seqless)])
    (reference, expected), (candidate, actual) = run_both(spark, MessageFormat.RECORD_IMAGE, [deleted], frame)
    assert (actual.stats.tombstones_redundant, actual.stats.tombstones_without_seq, actual.rows_written) == (1, 1, 0)
    assert comparable(actual) == comparable(expected)
    assert candidate.tables == reference.tables == {TABLE: {pk: deleted}}


KEYS = {
    b'["eu",1]': OP,
    b'["eu", 1]': PYTHON,  # whitespace: not the canonical key
    b'["e\\u0075",1]': PYTHON,  # an escape: left to the reference path's decoder
    b'["eu",-0]': PYTHON,
    b'["eu",9223372036854775808]': PYTHON,  # beyond int64
    b'["eu",{"b64":"AQ=="}]': OP,
    b'["eu",{"b64":"AR=="}]': PYTHON,  # padding bits set: not what b64encode writes
    b'["eu"]': PYTHON,  # one value for two pk columns
    b'["\xff",1]': PYTHON,  # not UTF-8
}


def test_tombstone_keys_and_framing_are_classified_strictly(spark) -> None:
    """Keys the JVM parses are exactly the plain canonical ones; every other value goes to the reference path."""
    image = routing(MessageFormat.RECORD_IMAGE)
    rows = []
    for offset, key in enumerate(KEYS):
        header = [(TOMBSTONE_SEQ_KEY_HEADER, bytearray(seq_key(2).encode()))]
        rows.append((bytearray(key), None, "t.orders.image", 0, offset, datetime(2026, 1, 1), 0, header))
    good = {"source": {"instance": "i", "table": TABLE}, "seq": {"epoch": 1, "timestamp_us": 1000, "row_index": 0,
            "op_index": 0, "seq_key": seq_key(1)}, "timestamp": 1, "pk": [{"name": "id", "value": 1}],
            "columns": {"a": {"value": 1, "version": 1}}}  # fmt: skip
    value = framed(MessageFormat.RECORD_IMAGE, good)
    odd = {
        "valid": value,
        "unknown schema id": value[:1] + (7).to_bytes(4, "big") + value[5:],
        "magic byte 1": b"\x01" + value[1:],
        "short": b"\x00\x00",
        "bad seq_key": framed(MessageFormat.RECORD_IMAGE, {**good, "seq": {**good["seq"], "seq_key": "1" * 46}}),
        "null in a full image": framed(MessageFormat.RECORD_IMAGE, {**good, "columns": {"a": {"value": None}}}),
        # 11 digits of epoch: the key holds its first 10, and the numbers still do not match the key.
        "epoch wider than its field": framed(
            MessageFormat.RECORD_IMAGE,
            {**good, "seq": {**good["seq"], "epoch": 10**10 + 5, "seq_key": "1000000000" + f"{1000:020d}" + "0" * 16}},
        ),
    }
    for offset, data in enumerate(odd.values(), start=len(rows)):
        rows.append((bytearray(b"[1]"), bytearray(data), "t.orders.image", 0, offset, datetime(2026, 1, 1), 0, []))
    frame = spark.createDataFrame(rows, KAFKA_SCHEMA)
    names = {TABLE: ["region", "id"]}
    classes = [r["_class"] for r in normalized_operations(frame, SCHEMAS, image, names).collect()]
    assert classes == [*KEYS.values(), OP, UNKNOWN_SID, PYTHON, PYTHON, PYTHON, PYTHON, PYTHON]
    tomb = normalized_operations(frame, SCHEMAS, image, names).where("_class = 'op'").first()
    assert [(p["n"], p["v"]["s"], p["v"]["l"]) for p in tomb["pk"]] == [("region", "eu", None), ("id", None, 1)]
    assert tomb["op"]["q"] == seq_key(2) and tomb["op"]["t"] and tomb["op"]["d"]
    mutation_topic = routing(MessageFormat.MUTATE_LOG)  # the same values on a table applied from MUTATE_LOG
    other = [r["_class"] for r in normalized_operations(frame, SCHEMAS, mutation_topic, {}).collect()]
    assert other[: len(KEYS)] == [PYTHON] * len(KEYS) and other[len(KEYS)] == OTHER  # unmapped topic; other format
