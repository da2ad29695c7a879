"""`cdcbridge demo`: the main job on the embedded default, ending in a checked summary.

Today's flow (it grows as the bridge lands): bring the local stack up, produce keyed Avro change messages through
the schema registry into Kafka (updates and deletes of the same keys, some redelivered), run a Spark Structured
Streaming job that decodes them with spark-avro and MERGEs them into a Delta table keeping only newer versions,
then check the Delta table equals the expected final state row by row.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click

from cdcbridge.localstack.stack import LocalStack, StackEndpoints, StackPorts

CHANGE_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "DemoChange",
        "namespace": "io.cdcbridge.demo",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "version", "type": "long"},
            {"name": "deleted", "type": "boolean", "default": False},
            {"name": "balance", "type": ["null", "long"], "default": None},
        ],
    }
)


@dataclass
class DemoSummary:
    messages: int
    redelivered: int
    keys: int
    rows_in_target: int
    seconds: float
    check_passed: bool
    mismatches: list[str]

    def lines(self) -> list[str]:
        return [
            f"messages produced   {self.messages} ({self.redelivered} deliberate redeliveries)",
            f"keys touched        {self.keys}",
            f"rows in Delta       {self.rows_in_target}",
            f"apply throughput    {self.messages / self.seconds:,.0f} msg/s over {self.seconds:.1f}s",
            "check               " + ("PASSED: target equals expected state" if self.check_passed else "FAILED"),
            *(f"  mismatch: {m}" for m in self.mismatches[:10]),
        ]


def _generate_changes(keys: int, changes: int, seed: int) -> tuple[list[dict], dict[int, int]]:
    """Random balance updates and deletes per key, in version order, plus some redeliveries of earlier ones."""
    rng = random.Random(seed)
    versions = dict.fromkeys(range(keys), 0)
    state: dict[int, int] = {}
    messages: list[dict] = []
    for _ in range(changes):
        key = rng.randrange(keys)
        versions[key] += 1
        if key in state and rng.random() < 0.15:
            messages.append({"id": key, "version": versions[key], "deleted": True, "balance": None})
            del state[key]
        else:
            state[key] = rng.randrange(1_000_000)
            messages.append({"id": key, "version": versions[key], "deleted": False, "balance": state[key]})
    return messages, state


def _produce(endpoints: StackEndpoints, topic: str, messages: list[dict]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})  # must outlive the future below
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    serializer = AvroSerializer(SchemaRegistryClient({"url": endpoints.registry_url}), CHANGE_SCHEMA)
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "enable.idempotence": True, "acks": "all"})
    context = SerializationContext(topic, MessageField.VALUE)
    for message in messages:
        producer.produce(topic, key=str(message["id"]).encode(), value=serializer(message, context))
        producer.poll(0)
    if producer.flush(60) != 0:
        raise click.ClickException("Kafka did not acknowledge every demo message within 60s")


def _apply_with_spark(endpoints: StackEndpoints, topic: str, delta_path: str, checkpoint: str) -> list[tuple]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from cdcbridge.apply.spark_session import build_spark_session

    writer_schema = SchemaRegistryClient({"url": endpoints.registry_url}).get_latest_version(f"{topic}-value")
    spark = build_spark_session("cdcbridge-demo")
    try:
        spark.createDataFrame([], "id long, version long, deleted boolean, balance long").write.format("delta").save(
            delta_path
        )
        target = DeltaTable.forPath(spark, delta_path)

        def merge_batch(batch, batch_id: int) -> None:
            latest = (
                batch.withColumn("rn", F.row_number().over(Window.partitionBy("id").orderBy(F.desc("version"))))
                .where("rn = 1")
                .drop("rn")
            )
            (
                target.alias("t")
                .merge(latest.alias("s"), "t.id = s.id")
                .whenMatchedUpdateAll(condition="s.version > t.version")
                .whenNotMatchedInsertAll()
                .execute()
            )

        stream = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", endpoints.kafka_bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 2000)
            .load()
            .select(
                from_avro(F.expr("substring(value, 6, length(value) - 5)"), writer_schema.schema.schema_str).alias("c")
            )
            .select("c.*")
        )
        query = (
            stream.writeStream.foreachBatch(merge_batch)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        rows = spark.read.format("delta").load(delta_path).where("not deleted").collect()
        return [(r.id, r.balance) for r in rows]
    finally:
        spark.stop()


def run_demo(*, keys: int = 200, changes: int = 5000, seed: int = 7, keep_stack: bool = False) -> DemoSummary:
    work = Path(tempfile.mkdtemp(prefix="cdcbridge-demo-"))
    stack = LocalStack(work / "stack")
    click.echo(f"starting Kafka and Apicurio Registry (state in {work})")
    endpoints = stack.up(StackPorts(0, 0, 0, 0), services=("kafka", "registry"))
    try:
        messages, expected = _generate_changes(keys, changes, seed)
        rng = random.Random(seed + 1)
        redelivered = rng.sample(messages, k=len(messages) // 10)
        topic = "demo.accounts.changes"
        click.echo(f"producing {len(messages) + len(redelivered)} Avro messages to {topic}")
        _produce(endpoints, topic, messages + redelivered)
        click.echo("applying with Spark Structured Streaming into Delta Lake")
        started = time.monotonic()
        rows = _apply_with_spark(endpoints, topic, str(work / "delta" / "accounts"), str(work / "checkpoint"))
        seconds = time.monotonic() - started
        actual = dict(rows)
        mismatches = [
            f"id {k}: expected {expected.get(k)}, target has {actual.get(k)}"
            for k in sorted(set(expected) | set(actual))
            if expected.get(k) != actual.get(k)
        ]
        return DemoSummary(len(messages) + len(redelivered), len(redelivered), len(expected), len(rows), seconds,
                           not mismatches, mismatches)  # fmt: skip
    finally:
        if not keep_stack:
            stack.down()
