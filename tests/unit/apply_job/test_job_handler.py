"""The job's batch handler around the applier: periodic purge with an injected clock, and the summary."""

from __future__ import annotations

from cdcbridge.apply.job import ApplySummary, _BatchHandler
from cdcbridge.apply.routing import TopicRouting
from cdcbridge.apply.target import SparkFoldTarget
from cdcbridge.config import parse_config

from .memory_target import MemoryTarget


class PurgingTarget(MemoryTarget):
    def __init__(self) -> None:
        super().__init__()
        self.purges: list[tuple[str, int]] = []

    def purge_deleted(self, table: str, horizon_ms: int) -> int:
        self.purges.append((table, horizon_ms))
        return 2


def test_soft_deleted_rows_are_purged_every_interval_behind_the_retention() -> None:
    config = parse_config(
        {
            "source": {"tables": [{"name": "a"}, {"name": "b"}]},
            "apply": {"purge_deleted_after_hours": 24, "purge_interval_seconds": 60},
        },
        environ={},
    )
    target = PurgingTarget()
    now = [1000.0]
    summary = ApplySummary()
    handler = _BatchHandler(config, target, TopicRouting.from_config(config), summary, clock=lambda: now[0],
                            wall_clock_ms=lambda: 100_000_000_000)  # fmt: skip
    handler._maybe_purge()
    horizon = 100_000_000_000 - 24 * 3_600_000
    assert target.purges == [("a", horizon), ("b", horizon)]
    now[0] += 59
    handler._maybe_purge()
    assert len(target.purges) == 2
    now[0] += 1
    handler._maybe_purge()
    assert len(target.purges) == 4 and summary.purged_rows == 8
    assert "purged 8" in summary.lines()[-1]


def test_without_a_retention_nothing_is_purged() -> None:
    config = parse_config({"source": {"tables": [{"name": "a"}]}}, environ={})
    target = PurgingTarget()
    handler = _BatchHandler(config, target, TopicRouting.from_config(config), ApplySummary())
    handler._maybe_purge()
    assert target.purges == []


class FakeFrame:
    """Stands in for the decoded DataFrame: rows as decode_frame selects them."""

    def __init__(self, rows) -> None:
        self.rows = rows

    def toLocalIterator(self, prefetchPartitions: bool = False):
        return iter(self.rows)


def test_a_schema_id_not_loaded_yet_interrupts_the_stream() -> None:
    import pytest

    from cdcbridge.apply.spark.decode import UnknownSchemaId, iter_records
    from cdcbridge.apply.writer_schemas import WriterSchema
    from cdcbridge.contract import MessageFormat

    known = {1: WriterSchema(1, "{}", MessageFormat.MUTATE_LOG)}
    rows = [
        ("t", 0, 0, b"[1]", 20, 0, 1, "MUTATE_LOG", "{}", None, None),
        ("t", 0, 1, b"[1]", None, None, None, None, None, None, None),
        ("t", 0, 2, b"[1]", 20, 0, 7, None, None, b"x", None),
    ]
    stream = iter_records(FakeFrame(rows), known)
    first, tombstone = next(stream), next(stream)
    assert first.body == "{}" and tombstone.tombstone
    with pytest.raises(UnknownSchemaId) as unknown:
        next(stream)
    assert unknown.value.schema_id == 7


def test_the_handler_fetches_a_new_schema_id_and_decodes_the_batch_again(monkeypatch) -> None:
    from cdcbridge.apply import job
    from cdcbridge.apply.batch_report import BatchReport
    from cdcbridge.apply.spark.decode import UnknownSchemaId

    config = parse_config({"source": {"tables": [{"name": "a"}]}}, environ={})
    handler = _BatchHandler(config, MemoryTarget(), TopicRouting.from_config(config), ApplySummary())
    resolved: list[list[int]] = []
    monkeypatch.setattr(handler.schemas, "resolve", lambda ids: resolved.append(list(ids)) or {})
    attempts = []

    def decoded(batch, schemas, at_once=False):
        attempts.append(batch)
        if len(attempts) == 1:
            raise UnknownSchemaId(9)
        return []

    monkeypatch.setattr(job, "decoded_records", decoded)
    handler.start("app")
    report = handler._apply("frame", 4)
    assert isinstance(report, BatchReport) and attempts == ["frame", "frame"] and resolved == [[9]]


def test_a_batch_updates_the_apply_metrics_once(monkeypatch) -> None:
    from cdcbridge.apply import job
    from cdcbridge.formats import BridgeTableFormat
    from cdcbridge.harness.bench.apply_workload import bridge_messages, generate_records, with_redeliveries
    from cdcbridge.observability.metrics import ApplyMetrics

    from .compact import kafka_records

    config = parse_config({"source": {"tables": [{"name": "users"}]}, "kafka": {"topic_prefix": "t"}}, environ={})
    messages, _ = bridge_messages(generate_records("users", keys=4, records=30, seed=1), BridgeTableFormat(),
                                  topic_prefix="t")  # fmt: skip
    records = kafka_records(with_redeliveries(messages, seed=1, fraction=0.5))
    monkeypatch.setattr(job, "decoded_records", lambda batch, schemas, at_once=False: iter(records))
    metrics = ApplyMetrics(include_process_metrics=False)
    now_ms = 1_750_000_000_000 + 60_000  # a minute after the workload's first commit
    summary = ApplySummary()
    handler = _BatchHandler(config, MemoryTarget(), TopicRouting.from_config(config), summary,
                            wall_clock_ms=lambda: now_ms, metrics=metrics)  # fmt: skip
    handler.start("app")
    handler("frame", 0)
    stats, sample = summary.report.stats, metrics.registry.get_sample_value

    def outcome(name: str) -> float | None:
        return sample("cdcbridge_apply_messages_total", {"outcome": name})

    assert sample("cdcbridge_apply_batches_total") == 1
    assert (outcome("applied"), outcome("duplicate"), outcome("stale")) == (stats.applied, stats.duplicates, 0)
    assert stats.applied > 0 and stats.duplicates > 0
    assert sample("cdcbridge_apply_rows_written_total", {"table": "users"}) == summary.report.rows_written > 0
    assert sample("cdcbridge_apply_batch_seconds_count") == 1
    assert sample("cdcbridge_apply_freshness_seconds_count") == 5  # a few quantiles per batch, not per message
    assert sample("cdcbridge_apply_freshness_seconds_sum") > 0


def test_without_metrics_the_handler_counts_nothing_and_still_applies(monkeypatch) -> None:
    from cdcbridge.apply import job

    config = parse_config({"source": {"tables": [{"name": "users"}]}}, environ={})
    monkeypatch.setattr(job, "decoded_records", lambda batch, schemas, at_once=False: iter([]))
    summary = ApplySummary()
    handler = _BatchHandler(config, MemoryTarget(), TopicRouting.from_config(config), summary)
    handler.start("app")
    handler("frame", 0)
    assert summary.report.batches == 1 and handler.metrics is None


class SparkMemoryTarget(MemoryTarget, SparkFoldTarget):
    """A memory target the handler takes for a Spark one (the Spark path itself is replaced in the test)."""

    def current_rows(self, tables, grouped, keys_at_most=None):
        raise AssertionError("not called: the Spark applier is replaced")

    def refusal(self, folded):
        return None

    def write_folded(self, marker, tables):
        raise AssertionError("not called: the Spark applier is replaced")


class FakeReader:
    """Stands in for the driver's Kafka reader: the messages of a batch's ranges, or a failure."""

    def __init__(self, messages=(), error: str | None = None) -> None:
        self.messages, self.error = list(messages), error
        self.reads: list[list] = []
        self.closed = False

    def read(self, ranges):
        from cdcbridge.apply.driver.kafka_fetch import KafkaFetchError

        self.reads.append(list(ranges))
        if self.error is not None:
            raise KafkaFetchError(self.error)
        return self.messages

    def close(self) -> None:
        self.closed = True


def _small_batch_handler(monkeypatch, apply: dict | None = None):
    """A Spark-target handler whose batches "five", "six" and "unknown" have 5, 6 and unknown messages (the
    threshold is 5); returns the handler, the Spark collects and the batches sent to the Spark path with the
    message counts it was given."""
    from cdcbridge.apply import job
    from cdcbridge.apply.batch_report import BatchReport
    from cdcbridge.apply.driver.kafka_fetch import OffsetRange

    settings = {"source": {"tables": [{"name": "a", "formats": ["RECORD_IMAGE"]}]},
                "apply": {"small_batch_max_messages": 5, **(apply or {})}}  # fmt: skip
    config = parse_config(settings, environ={})
    ranges = {"five": [OffsetRange("t", 0, 10, 12), OffsetRange("t", 1, 0, 3)], "six": [OffsetRange("t", 0, 0, 6)],
              "unknown": None}  # fmt: skip
    monkeypatch.setattr(job, "kafka_offset_ranges", lambda batch: ranges[batch])
    collected: list[tuple[str, bool]] = []

    def decoded(batch, schemas, at_once=False):
        collected.append((batch, at_once))
        return iter([])

    monkeypatch.setattr(job, "decoded_records", decoded)
    handler = _BatchHandler(config, SparkMemoryTarget(), TopicRouting.from_config(config), ApplySummary())
    handler.start("app")
    on_spark: list[tuple[str, int | None]] = []
    assert handler.spark_applier is not None

    def on_spark_path(batch_id, batch, schemas, messages_at_most=None):
        on_spark.append((batch, messages_at_most))
        return BatchReport(spark_batches=1)

    monkeypatch.setattr(handler.spark_applier, "apply", on_spark_path)
    return handler, collected, on_spark


def test_a_batch_of_at_most_the_threshold_is_read_by_the_driver_and_larger_ones_go_to_spark(monkeypatch) -> None:
    from cdcbridge.apply.driver.kafka_fetch import FetchedMessage, OffsetRange

    handler, collected, on_spark = _small_batch_handler(monkeypatch)
    assert handler.driver_fetch is not None  # no Java-only Kafka option: the driver reads
    tombstone = FetchedMessage("cdc.a.image", 0, 10, b"[1]", None)
    handler.driver_fetch = reader = FakeReader([tombstone])
    small = handler._apply("five", 0)
    assert (small.small_batches, small.driver_fetches, small.stats.messages) == (1, 1, 1)
    assert small.tombstones_unknown_table == 1  # the message read went through the applier
    assert reader.reads == [[OffsetRange("t", 0, 10, 12), OffsetRange("t", 1, 0, 3)]]
    assert handler._apply("six", 1).spark_batches == 1
    assert handler._apply("unknown", 2).spark_batches == 1
    assert collected == []  # no Spark job read the small batch
    # the Spark path is told a batch's messages where its plan names its offsets
    assert on_spark == [("six", 6), ("unknown", None)]
    handler.close()
    assert reader.closed


def test_a_small_batch_the_driver_cannot_read_is_collected_by_one_spark_job(monkeypatch, caplog) -> None:
    import logging

    handler, collected, _ = _small_batch_handler(monkeypatch)
    handler.driver_fetch = reader = FakeReader(error="read no end of t[0] offsets 10-11 (0 read) within 10s")
    with caplog.at_level(logging.INFO, logger="cdcbridge.apply.job"):
        reports = [handler._apply("five", batch_id) for batch_id in range(4)]
    assert [(r.small_batches, r.driver_fetches) for r in reports] == [(1, 0)] * 4
    assert collected == [("five", True)] * 4 and len(reader.reads) == 3  # three failures in a row: no more tries
    assert handler.driver_fetch is None and reader.closed
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "within 10s" in warnings[0] and "from now on" in warnings[1]


def test_java_only_kafka_options_leave_small_batches_to_a_spark_job(monkeypatch) -> None:
    handler, collected, _ = _small_batch_handler(monkeypatch, {"kafka_options": {"sasl.jaas.config": "x"}})
    assert handler.driver_fetch is None
    assert handler._apply("five", 0).small_batches == 1 and collected == [("five", True)]
    tuned, _, _ = _small_batch_handler(monkeypatch, {"kafka_options": {"kafka.max.poll.records": "50"}})
    assert tuned.driver_fetch is not None


def test_the_kafka_lag_is_the_largest_partition_lag_of_any_source() -> None:
    from cdcbridge.apply.job import kafka_lag

    assert kafka_lag(None) is None
    assert kafka_lag({"sources": [{"metrics": {}}]}) is None
    progress = {
        "sources": [
            {"metrics": {"maxOffsetsBehindLatest": "12", "avgOffsetsBehindLatest": "3.0"}},
            {"metrics": {"maxOffsetsBehindLatest": "40"}},
        ]
    }
    assert kafka_lag(progress) == 40.0


def test_a_failed_batch_is_counted_and_the_lag_reported() -> None:
    import pytest

    from cdcbridge.apply.job import _report_lag
    from cdcbridge.observability.metrics import ApplyMetrics

    config = parse_config({"source": {"tables": [{"name": "a"}]}}, environ={})
    metrics = ApplyMetrics()
    handler = _BatchHandler(config, MemoryTarget(), TopicRouting.from_config(config), ApplySummary(), metrics=metrics)
    handler.app_id_ready.set()  # no applier: the batch fails at once
    with pytest.raises(AssertionError):
        handler(FakeFrame([]), 0)
    assert metrics.registry.get_sample_value("cdcbridge_apply_batch_failures_total") == 1
    _report_lag(metrics, {"sources": [{"metrics": {"maxOffsetsBehindLatest": "7"}}]})
    assert metrics.registry.get_sample_value("cdcbridge_apply_kafka_lag_messages") == 7
