"""Small micro-batches (at most ``apply.small_batch_max_messages``) with real Kafka: the job reads a batch's offset
ranges from its plan, reads those offsets on the driver itself (no Spark job; or one collect where
``apply.kafka_options`` needs the Java client), applies the batch there (a read of only its stored rows, one write)
and leaves the target exact: redelivered increments across batches count once, a deleted row put again lives, a key
changed in consecutive tiny batches ends with the last change; new keys are appended, stored ones written by position
where the driver's read found them (one commit: deletion vectors and new files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cdcbridge.apply.batch_size import batch_messages, kafka_offset_ranges
from cdcbridge.apply.job import run_apply
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.formats.keys import encode_key
from cdcbridge.harness.bench.apply_workload import OutgoingMessage, ensure_topics
from tests.unit.apply.envelopes import increment, mutation, put

from .helpers import (
    delta_live,
    job_config,
    make_workload,
    operation_label,
    produce,
    produce_workload,
    unique_prefix,
)


def test_the_batch_size_comes_from_the_kafka_offsets(stack, spark, tmp_path: Path) -> None:
    prefix = unique_prefix()
    work = make_workload(prefix, records=60, tail=0)
    produce(stack, work.messages)
    sizes: list[tuple[int | None, int]] = []

    def record(batch: Any, batch_id: int) -> None:
        ranges = kafka_offset_ranges(batch)
        sizes.append((batch_messages(ranges) if ranges is not None else None, batch.count()))

    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", stack.kafka_bootstrap)
        .option("subscribe", f"{prefix}.users.mutation,{prefix}.items.image")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "25")
        .load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert len(sizes) >= 3
    assert all(size == count for size, count in sizes)
    assert sum(count for _, count in sizes) == len(work.messages)
    assert kafka_offset_ranges(spark.range(3)) is None  # not a Kafka micro-batch: unknown


def test_small_batches_leave_the_target_equal_to_the_source(stack, spark, tmp_path: Path) -> None:
    prefix = unique_prefix()
    work = make_workload(prefix, seed=31)
    produce_workload(stack, work)  # redeliveries, deletes, tombstones, both formats, a second schema id
    config = job_config(stack, prefix, tmp_path, small_batch_max_messages=1000)
    summary = run_apply(config, once=True, spark=spark).as_dict()
    assert summary["messages"] == len(work.messages) + len(work.evolved)
    assert summary["small_batches"] == summary["driver_fetches"] == summary["batches"] >= 4
    assert summary["spark_batches"] == 0 and summary["duplicates"] + summary["stale"] > 0
    for table in ("users", "items"):
        assert delta_live(spark, f"{tmp_path}/delta/{table}") == work.expected(table)


def test_small_batches_are_collected_by_spark_when_the_kafka_options_need_the_java_client(
    stack, spark, tmp_path: Path
) -> None:
    prefix = unique_prefix()
    work = make_workload(prefix, seed=32)
    produce_workload(stack, work)
    java_only = {"client.dns.lookup": "use_all_dns_ips"}  # no librdkafka equal: the driver does not read
    config = job_config(stack, prefix, tmp_path, small_batch_max_messages=1000, kafka_options=java_only)
    summary = run_apply(config, once=True, spark=spark).as_dict()
    assert summary["messages"] == len(work.messages) + len(work.evolved)
    assert summary["small_batches"] == summary["batches"] >= 2 and summary["driver_fetches"] == 0
    for table in ("users", "items"):
        assert delta_live(spark, f"{tmp_path}/delta/{table}") == work.expected(table)


class _TinyBatches:
    """Produces a few MUTATE_LOG messages of table ``users`` (key ``id``), then runs the job over them."""

    def __init__(self, stack: Any, spark: Any, work: Path) -> None:
        self.stack = stack
        self.spark = spark
        self.prefix = unique_prefix()
        self.config = job_config(stack, self.prefix, work, small_batch_max_messages=1000)
        self.path = f"{work}/delta/users"
        topics = {f"{self.prefix}.users.mutation", f"{self.prefix}.items.image"}
        ensure_topics({"bootstrap.servers": stack.kafka_bootstrap}, topics, 2)

    def message(self, n: int, kind: str, cells: list[dict[str, Any]], key: int) -> OutgoingMessage:
        value = mutation(n, kind, cells, pk=(("id", key),), table="users")
        return OutgoingMessage(f"{self.prefix}.users.mutation", encode_key([key]), value)

    def apply(self, *messages: OutgoingMessage) -> str:
        """One batch of `messages`; returns the Delta operation that committed it."""
        produce(self.stack, list(messages))
        summary = run_apply(self.config, once=True, spark=self.spark).as_dict()
        assert (summary["batches"], summary["small_batches"], summary["messages"]) == (1, 1, len(messages))
        assert summary["driver_fetches"] == 1
        return operation_label(self.spark.sql(f"DESCRIBE HISTORY delta.`{self.path}` LIMIT 1").first())

    def rows(self) -> dict[int, tuple[bool, Any]]:
        stored = DeltaTarget(self.spark, str(Path(self.path).parent)).read_rows("users", [(("id", k),) for k in
                                                                                         range(10)])  # fmt: skip
        return {pk[0][1]: (row.deleted, row.columns.get("count").value if "count" in row.columns else None)
                for pk, row in stored.items()}  # fmt: skip


def test_tiny_batches_fold_redeliveries_deletes_and_repeated_keys_exactly(stack, spark, tmp_path: Path) -> None:
    tiny = _TinyBatches(stack, spark, tmp_path)
    put_a, put_b = tiny.message(10, "PUT", [put("count", 1, 10)], 1), tiny.message(11, "PUT", [put("count", 2, 11)], 2)
    assert tiny.apply(put_a, put_b) == "WRITE Append"  # a new table
    bump_a = tiny.message(20, "UPDATE", [increment("count", 5)], 1)
    assert tiny.apply(bump_a, put_a, tiny.message(21, "PUT", [put("count", 3, 21)], 3)) == "MERGE by position"
    assert tiny.rows() == {1: (False, 6), 2: (False, 2), 3: (False, 3)}
    delete_b = tiny.message(31, "DELETE", [], 2)
    tiny.apply(bump_a, tiny.message(30, "UPDATE", [increment("count", 5)], 1), delete_b)  # bump_a redelivered
    assert tiny.rows() == {1: (False, 11), 2: (True, None), 3: (False, 3)}
    tiny.apply(tiny.message(40, "PUT", [put("count", 7, 40)], 2), delete_b)  # put again; the delete redelivered
    assert tiny.rows() == {1: (False, 11), 2: (False, 7), 3: (False, 3)}
    assert tiny.apply(tiny.message(50, "PUT", [put("count", 4, 50)], 9)) == "WRITE Append"  # a new key only
    assert tiny.apply(tiny.message(51, "UPDATE", [put("count", 8, 51)], 9)) == "MERGE by position"  # the key again
    assert tiny.rows() == {1: (False, 11), 2: (False, 7), 3: (False, 3), 9: (False, 8)}
