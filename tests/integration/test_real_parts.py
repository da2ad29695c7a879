"""The real parts work together: Kafka + Apicurio through confluent-kafka's Avro serde, Spark's Kafka source
with spark-avro decoding Confluent-framed values, and delta-spark MERGE."""

from __future__ import annotations

import json
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from cdcbridge.harness.stack.stack import StackEndpoints

ORDER_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "io.cdcbridge.test",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {"name": "amount", "type": ["null", "double"], "default": None},
        ],
    }
)


def _create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


def _produce_orders(stack: StackEndpoints, topic: str, orders: list[dict]) -> int:
    registry = SchemaRegistryClient({"url": stack.registry_url, "timeout": 10})
    serializer = AvroSerializer(registry, ORDER_SCHEMA)
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap, "enable.idempotence": True, "acks": "all"})
    delivered: list[str] = []
    for order in orders:
        value = serializer(order, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, key=str(order["id"]), value=value,
                         on_delivery=lambda err, msg: delivered.append("ok" if err is None else str(err)))  # fmt: skip
    assert producer.flush(30) == 0
    assert delivered == ["ok"] * len(orders)
    return registry.get_latest_version(f"{topic}-value").schema_id


def test_avro_round_trip_through_registry_and_kafka(stack: StackEndpoints) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    _create_topic(stack.kafka_bootstrap, topic)
    orders = [{"id": i, "item": f"item-{i}", "amount": (i * 1.5 if i % 2 else None)} for i in range(20)]
    schema_id = _produce_orders(stack, topic, orders)

    registry = SchemaRegistryClient({"url": stack.registry_url, "timeout": 10})
    registered = registry.get_schema(schema_id)
    assert json.loads(registered.schema_str)["name"] == "Order"
    deserializer = AvroDeserializer(registry)
    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    received = []
    try:
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is None:
                if len(received) == len(orders):
                    break
                continue
            assert msg.error() is None, msg.error()
            # Confluent wire format: magic byte 0, then the 4-byte schema id the registry gave.
            assert msg.value()[0] == 0
            assert int.from_bytes(msg.value()[1:5], "big") == schema_id
            received.append(deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE)))
            if len(received) == len(orders):
                break
    finally:
        consumer.close()
    assert received == orders


def test_spark_reads_kafka_and_decodes_confluent_avro(stack: StackEndpoints, spark) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    topic = f"spark-orders-{uuid.uuid4().hex[:8]}"
    _create_topic(stack.kafka_bootstrap, topic, partitions=2)
    orders = [{"id": i, "item": f"item-{i}", "amount": float(i)} for i in range(50)]
    schema_id = _produce_orders(stack, topic, orders)
    writer_schema = SchemaRegistryClient({"url": stack.registry_url, "timeout": 10}).get_schema(schema_id).schema_str

    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", stack.kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    # from_avro does not understand Confluent framing: check the magic byte and id, then strip the 5 bytes.
    decoded = raw.select(
        F.expr("substring(value, 1, 1)").alias("magic"),
        F.expr("conv(hex(substring(value, 2, 4)), 16, 10)").cast("int").alias("schema_id"),
        from_avro(F.expr("substring(value, 6, length(value) - 5)"), writer_schema).alias("order"),
    ).select("magic", "schema_id", "order.*")
    query = decoded.writeStream.format("memory").queryName(topic.replace("-", "_")).trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None
    rows = spark.sql(f"select * from {topic.replace('-', '_')} order by id").collect()
    assert [(r.id, r.item, r.amount) for r in rows] == [(o["id"], o["item"], o["amount"]) for o in orders]
    assert {bytes(r.magic) for r in rows} == {b"\x00"}
    assert {r.schema_id for r in rows} == {schema_id}


def test_delta_table_create_and_merge(spark, tmp_path) -> None:
    from delta.tables import DeltaTable

    path = str(tmp_path / "accounts")
    spark.createDataFrame([(1, "alice", 10), (2, "bob", 20)], "id long, name string, balance long").write.format(
        "delta"
    ).save(path)
    updates = spark.createDataFrame([(2, "bob", 25), (3, "carol", 30)], "id long, name string, balance long")
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(updates.alias("u"), "t.id = u.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    rows = spark.read.format("delta").load(path).orderBy("id").collect()
    assert [(r.id, r.name, r.balance) for r in rows] == [(1, "alice", 10), (2, "bob", 25), (3, "carol", 30)]
    history = DeltaTable.forPath(spark, path).history().select("operation").collect()
    assert [h.operation for h in history] == ["MERGE", "WRITE"]
