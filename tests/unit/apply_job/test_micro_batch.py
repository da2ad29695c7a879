"""The driver-side batch logic against an in-memory target: exact results under redelivery and any batching,
re-run batches, bad input (stop and dead letter), tombstones and refused rows."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcbridge.apply.batch_report import BatchReport
from cdcbridge.apply.core.policy import BadInputPolicy
from cdcbridge.apply.driver.kafka_records import KafkaRecord
from cdcbridge.apply.driver.micro_batch import MicroBatchApplier
from cdcbridge.apply.errors import BadInputError, TargetRejectedError, UndecodableMessageError, UnmappedTableError
from cdcbridge.apply.routing import TopicRouting
from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.config import parse_config
from cdcbridge.contract import CellOp, MessageFormat
from cdcbridge.formats import BridgeTableFormat
from cdcbridge.harness.bench.apply_workload import bridge_messages, generate_records, with_redeliveries

from .compact import batches, kafka_records
from .memory_target import MemoryTarget

PREFIX = "t"


def routing(formats: tuple[str, ...] = ("MUTATE_LOG",), prefer: str = "MUTATE_LOG", pattern: str | None = None):
    config = parse_config(
        {
            "source": {"tables": [{"name": "users", "formats": list(formats)}]},
            "kafka": {"topic_prefix": PREFIX},
            "apply": {"prefer_format": prefer, "topic_pattern": pattern},
        },
        environ={},
    )
    return TopicRouting.from_config(config)


def applier(target: MemoryTarget, formats=("MUTATE_LOG",), policy: str = "stop", **kwargs) -> MicroBatchApplier:
    return MicroBatchApplier(target, routing(formats, **kwargs), "app-1", BadInputPolicy(policy))


def stream(message_format: str, *, records: int = 150, keys: int = 12, seed: int = 0):
    recs = generate_records("users", keys=keys, records=records, seed=seed)
    messages, source = bridge_messages(recs, BridgeTableFormat(formats=(message_format,)), topic_prefix=PREFIX)
    return messages, source


def run_batches(app: MicroBatchApplier, parts: list[list[KafkaRecord]], first_batch: int = 0) -> BatchReport:
    total = BatchReport()
    for batch_id, part in enumerate(parts, start=first_batch):
        total += app.apply(batch_id, part)
    return total


@settings(max_examples=25, deadline=None)
@given(
    message_format=st.sampled_from(["MUTATE_LOG", "RECORD_IMAGE"]),
    seed=st.integers(0, 10_000),
    cuts=st.lists(st.integers(0, 400), max_size=6),
)
def test_any_batching_of_a_redelivered_stream_gives_the_source_table(message_format, seed, cuts) -> None:
    messages, source = stream(message_format, seed=seed)
    records = kafka_records(with_redeliveries(messages, seed=seed, fraction=0.5))
    target = MemoryTarget()
    report = run_batches(applier(target, (message_format,)), batches(records, cuts))
    assert target.live("users") == source.live_values()
    assert report.stats.messages == len(records)
    assert not target.dead_letters


def _increment_stream() -> tuple[list[KafkaRecord], int]:
    pk = [("region", "r0"), ("id", 1)]
    put = ChangeRecord("users", RecordAction.PUT, pk, [Cell("visits", CellOp.PUT, 10, 1)], Sequence(1, 1000, 0))
    bump = ChangeRecord("users", RecordAction.UPDATE, pk, [Cell("visits", CellOp.INCREMENT, 5)], Sequence(1, 2000, 0))
    messages, _ = bridge_messages([put, bump], BridgeTableFormat(), topic_prefix=PREFIX)
    return kafka_records(messages), 15


def test_a_redelivered_increment_counts_once_whatever_batch_it_lands_in() -> None:
    (put, bump), expected = _increment_stream()
    target = MemoryTarget()
    app = applier(target)
    run_batches(app, [[put, bump, bump], [bump], [put, bump]])
    assert target.live("users") == {("r0", 1): {"visits": expected}}


def test_a_rerun_batch_is_a_noop_even_with_other_content() -> None:
    (put, bump), _ = _increment_stream()
    target = MemoryTarget()
    app = applier(target)
    app.apply(0, [put])
    app.apply(1, [bump])
    rerun = app.apply(1, [bump])
    assert rerun.batches_skipped == 1 and rerun.tables_skipped == 1 and rerun.rows_written == 0
    assert target.writes == 2
    assert target.live("users") == {("r0", 1): {"visits": 15}}


def _broken(offset: int = 5) -> KafkaRecord:
    return KafkaRecord(
        f"{PREFIX}.users.mutation", 3, offset, b'["r0",1]', problem="magic byte 7 is not 0", raw=b"\x07ab"
    )


def test_an_undecodable_message_stops_the_batch_naming_its_position() -> None:
    (put, _), _ = _increment_stream()
    target = MemoryTarget()
    with pytest.raises(UndecodableMessageError, match=r"magic byte 7.*topic 't.users.mutation' partition 3 offset 5"):
        applier(target).apply(0, [put, _broken()])
    assert target.writes == 0


def test_under_the_dead_letter_policy_a_bad_message_is_set_aside_and_the_rest_applies() -> None:
    (put, bump), _ = _increment_stream()
    target = MemoryTarget()
    report = applier(target, policy="dead_letter").apply(0, [put, _broken(), bump])
    assert target.live("users") == {("r0", 1): {"visits": 15}}
    (letter,) = target.dead_letters
    assert (letter.location.topic, letter.location.partition, letter.location.offset) == (
        f"{PREFIX}.users.mutation",
        3,
        5,
    )
    assert letter.message["value_base64"] == "B2Fi"
    assert report.stats.dead_lettered == 1


def test_a_message_of_an_unconfigured_table_is_bad_input() -> None:
    pk = [("id", 1)]
    record = ChangeRecord("other", RecordAction.PUT, pk, [Cell("a", CellOp.PUT, 1, 1)], Sequence(1, 1000, 0))
    messages, _ = bridge_messages([record], BridgeTableFormat(), topic_prefix=PREFIX)
    (foreign,) = kafka_records(messages)
    with pytest.raises(UnmappedTableError, match=r"'other', which is not in source\.tables"):
        applier(MemoryTarget(), pattern="t\\..*").apply(0, [foreign])
    moved = KafkaRecord(f"{PREFIX}.users.mutation", 0, 9, foreign.key, body=foreign.body,
                        message_format=MessageFormat.MUTATE_LOG)  # fmt: skip
    with pytest.raises(UnmappedTableError, match="carries table 'users'"):
        applier(MemoryTarget()).apply(0, [moved])


def test_tombstones_delete_only_with_their_seq_header_and_are_skipped_for_tables_the_target_lacks() -> None:
    messages, source = stream("RECORD_IMAGE", records=60, keys=4, seed=3)
    records = kafka_records(messages)
    tombstones = [r for r in records if r.tombstone]
    assert tombstones and all(r.seq_key_header for r in tombstones)
    lone = MemoryTarget()
    report = applier(lone, ("RECORD_IMAGE",)).apply(0, tombstones[:1])
    assert report.tombstones_unknown_table == 1 and lone.writes == 0

    target = MemoryTarget()
    app = applier(target, ("RECORD_IMAGE",))
    images = [r for r in records if not r.tombstone]
    run_batches(app, [images])
    assert target.live("users") == source.live_values()
    deleted_key = tombstones[-1].key
    revived = [r for r in images if r.key == deleted_key][-1]
    headerless = KafkaRecord(tombstones[-1].topic, 0, 999, deleted_key, tombstone=True)
    report = app.apply(1, [headerless])
    assert report.stats.tombstones_without_seq == 1
    report = app.apply(2, [tombstones[-1], revived])  # an old tombstone and image re-sent: stale, nothing moves
    assert report.stats.stale == 2 and target.live("users") == source.live_values()


def test_rows_the_target_refuses_become_dead_letters_of_all_their_operations() -> None:
    messages, source = stream("MUTATE_LOG", records=40, keys=3, seed=5)
    records = kafka_records(messages)
    target = MemoryTarget(refuse=lambda row: "type conflict" if row.pk == (("region", "r1"), ("id", 1)) else None)
    app = applier(target, policy="dead_letter")
    app.apply(0, records)
    expected = {pk: row for pk, row in source.live_values().items() if pk != ("r1", 1)}
    assert target.live("users") == expected
    refused = [r for r in records if r.key == b'["r1",1]']
    assert [d.location.offset for d in target.dead_letters] == [r.offset for r in refused]
    assert all(isinstance(d.error, TargetRejectedError) for d in target.dead_letters)
    with pytest.raises(TargetRejectedError, match=r"cannot store row .* type conflict"):
        applier(MemoryTarget(refuse=lambda row: "type conflict")).apply(0, records)


def test_with_a_pattern_the_other_format_of_a_table_is_skipped_and_counted() -> None:
    recs = generate_records("users", keys=3, records=20, seed=1)
    messages, source = bridge_messages(
        recs, BridgeTableFormat(formats=("RECORD_IMAGE", "MUTATE_LOG")), topic_prefix=PREFIX
    )
    records = kafka_records(messages)
    target = MemoryTarget()
    app = applier(target, ("RECORD_IMAGE", "MUTATE_LOG"), prefer="MUTATE_LOG", pattern="t\\..*")
    report = app.apply(0, records)
    images = [r for r in records if r.topic.endswith(".image")]
    assert report.other_format == len(images)
    assert target.live("users") == source.live_values()


def test_bad_input_errors_are_the_core_family() -> None:
    assert issubclass(UndecodableMessageError, BadInputError)
    assert issubclass(UnmappedTableError, BadInputError)


def test_reports_add_up_rows_per_table_and_keep_each_batch_freshness_sample_apart() -> None:
    from cdcbridge.apply.batch_report import quantiles

    total = BatchReport(rows_by_table={"a": 2}, source_ts_sample=(1,))
    total += BatchReport(batches=1, rows_by_table={"a": 3, "b": 1}, source_ts_sample=(5, 6))
    assert total.rows_by_table == {"a": 5, "b": 1} and total.batches == 1
    assert total.source_ts_sample == (1,)
    assert "rows_by_table" not in total.as_dict() and "source_ts_sample" not in total.as_dict()
    assert quantiles([]) == () and quantiles([5, 1, 3, 2, 4]) == (1, 2, 3, 4, 5)


def test_the_reference_path_reports_rows_per_table_and_the_freshness_sample() -> None:
    messages, _ = stream("MUTATE_LOG", records=40, keys=5, seed=2)
    report = applier(MemoryTarget()).apply(0, kafka_records(messages))
    assert report.rows_by_table == {"users": report.rows_written} and report.rows_written > 0
    assert len(report.source_ts_sample) == 5 and list(report.source_ts_sample) == sorted(report.source_ts_sample)
