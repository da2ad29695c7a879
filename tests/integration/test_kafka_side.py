"""Topic admin, schema registration and the acknowledging sink against the real Kafka and Apicurio."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from confluent_kafka.schema_registry import SchemaRegistryClient

from cdcbridge.harness.processes import free_port
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.kafka.errors import (
    BrokerUnreachableError,
    MessageTooLargeError,
    RegistryUnreachableError,
    SchemaIncompatibleError,
    TopicPartitionMismatchError,
)
from cdcbridge.kafka.schemas import TopicValueSerializers, subject_for
from cdcbridge.kafka.sink import Delivery, KafkaSink
from cdcbridge.kafka.topics import TopicAdmin, TopicSpec

SCHEMA_V1 = {
    "type": "record",
    "name": "Thing",
    "namespace": "io.cdcbridge.test",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_topics_are_created_with_count_and_policy_then_a_changed_count_is_refused(stack: StackEndpoints) -> None:
    admin = TopicAdmin({"bootstrap.servers": stack.kafka_bootstrap})
    image, mutation = _topic() + ".image", _topic() + ".mutation"
    specs = [TopicSpec(image, 3, "compact"), TopicSpec(mutation, 2, "delete")]
    assert admin.ensure(specs, recorded={}) == {image: 3, mutation: 2}
    # Second start: nothing to create, counts agree.
    assert admin.ensure(specs, recorded={image: 3, mutation: 2}) == {image: 3, mutation: 2}

    raw = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    configs = raw.describe_configs([__import__("confluent_kafka.admin").admin.ConfigResource("topic", image)])
    described = next(iter(configs.values())).result(timeout=30)
    assert described["cleanup.policy"].value == "compact"

    raw.create_partitions([NewPartitions(image, 5)])[image].result(timeout=30)
    deadline = time.monotonic() + 30  # the broker's metadata view catches up with the controller shortly after
    while admin.partition_counts([image]) != {image: 5} and time.monotonic() < deadline:
        time.sleep(0.2)
    with pytest.raises(TopicPartitionMismatchError) as error:
        admin.ensure(specs, recorded={image: 3, mutation: 2})
    message = str(error.value)
    assert f"topic {image} has 5 partitions but 3 were recorded" in message
    assert "per-row order" in message


def test_unreachable_broker_is_named(stack: StackEndpoints) -> None:
    admin = TopicAdmin({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, timeout=2)
    with pytest.raises(BrokerUnreachableError, match=r"no Kafka broker answered at 127\.0\.0\.1:"):
        admin.ensure([TopicSpec(_topic(), 1)], recorded={})


def test_registration_sets_full_transitive_and_refuses_an_incompatible_schema(stack: StackEndpoints) -> None:
    topic = _topic()
    registry = SchemaRegistryClient({"url": stack.registry_url, "timeout": 10})
    serializers = TopicValueSerializers(registry, {topic: json.dumps(SCHEMA_V1)})
    ids = serializers.register_all()
    assert registry.get_compatibility(subject_for(topic)) == "FULL_TRANSITIVE"
    framed = serializers.serialize(topic, {"id": 7, "name": "seven"})
    assert framed[0] == 0 and int.from_bytes(framed[1:5], "big") == ids[topic]
    assert serializers.serialize(topic, None) is None

    # Adding a field with a default is a compatible evolution.
    v2 = {**SCHEMA_V1, "fields": [*SCHEMA_V1["fields"], {"name": "note", "type": "string", "default": ""}]}
    TopicValueSerializers(registry, {topic: json.dumps(v2)}).register_all()
    # A new required field (no default) is not.
    v3 = {**SCHEMA_V1, "fields": [*SCHEMA_V1["fields"], {"name": "size", "type": "long"}]}
    with pytest.raises(SchemaIncompatibleError, match=f"subject {topic}-value as incompatible under FULL_TRANSITIVE"):
        TopicValueSerializers(registry, {topic: json.dumps(v3)}).register_all()


def test_unreachable_registry_is_named() -> None:
    registry = SchemaRegistryClient({"url": f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"})
    with pytest.raises(RegistryUnreachableError, match="the schema registry did not answer"):
        TopicValueSerializers(registry, {"x": json.dumps(SCHEMA_V1)}).register_all()


def test_sink_acknowledges_every_message_and_reports_oversized_ones(stack: StackEndpoints) -> None:
    topic = _topic()
    TopicAdmin({"bootstrap.servers": stack.kafka_bootstrap}).ensure(
        [TopicSpec(topic, 2, config={"max.message.bytes": "20000"})], recorded={}
    )
    # Batches must fit the topic's limit too, or the broker rejects whole batches of innocent messages.
    sink = KafkaSink({"bootstrap.servers": stack.kafka_bootstrap, "batch.size": 16384})
    deliveries: list[Delivery] = []
    done = threading.Event()

    def on_ack(delivery: Delivery) -> None:
        deliveries.append(delivery)
        if len(deliveries) == 101:
            done.set()

    for i in range(100):
        sink.produce(topic, f"key-{i}".encode(), b"v" * 100, on_ack)
    sink.produce(topic, b"big-row", os.urandom(50_000), on_ack)  # incompressible, over the topic's 20000
    assert sink.close(30) == 0
    assert done.wait(10)
    ok = [d for d in deliveries if d.error is None]
    failed = [d for d in deliveries if d.error is not None]
    assert len(ok) == 100 and {d.partition for d in ok} == {0, 1}
    assert len(failed) == 1 and isinstance(failed[0].error, MessageTooLargeError)
    assert "key 'big-row'" in str(failed[0].error) and topic in str(failed[0].error)


def test_sink_refuses_locally_what_exceeds_the_producer_limit(stack: StackEndpoints) -> None:
    topic = _topic()
    TopicAdmin({"bootstrap.servers": stack.kafka_bootstrap}).ensure([TopicSpec(topic, 1)], recorded={})
    sink = KafkaSink({"bootstrap.servers": stack.kafka_bootstrap, "message.max.bytes": 10_000})
    deliveries: list[Delivery] = []
    sink.produce(topic, b"row-1", os.urandom(20_000), deliveries.append)
    sink.produce(topic, b"row-2", b"small", deliveries.append)
    assert sink.close(30) == 0
    assert [d.error is None for d in deliveries] == [False, True]
    assert isinstance(deliveries[0].error, MessageTooLargeError)
    assert "key 'row-1'" in str(deliveries[0].error)
