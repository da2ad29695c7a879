"""Kafka and the registry refusing the bridge's requests (against the real broker and Apicurio): each refusal names
the topic or subject and the setting to change, and is final instead of being retried as an outage."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient

from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.kafka.schemas import RegistryRefusedError, TopicValueSerializers
from cdcbridge.kafka.topics import TopicAdmin, TopicRefusedError, TopicSpec


def test_a_replication_factor_above_the_broker_count_names_the_setting(stack: StackEndpoints) -> None:
    topic = f"rf-{uuid.uuid4().hex[:10]}.mutation"
    admin = TopicAdmin({"bootstrap.servers": stack.kafka_bootstrap})
    with pytest.raises(TopicRefusedError) as refused:
        admin.ensure([TopicSpec(topic, 3, "delete", replication_factor=3)], recorded={})
    message = str(refused.value)
    assert f"Kafka refused creating topic {topic}: INVALID_REPLICATION_FACTOR" in message
    assert "set kafka.replication_factor to at most the number of brokers" in message
    assert "or create it yourself with 3 partitions and cleanup.policy=delete" in message
    assert topic not in AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=10).topics


def test_a_registry_url_without_the_compatibility_api_path_names_the_setting(stack: StackEndpoints) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from cdcbridge.contract import MessageFormat
    from cdcbridge.formats import schema_text

    base = stack.registry_url.removesuffix("/apis/ccompat/v7")  # a common mistake: the server's root URL
    registry = SchemaRegistryClient({"url": base, "timeout": 10})
    topic = f"url-{uuid.uuid4().hex[:10]}.mutation"
    with pytest.raises(RegistryRefusedError) as refused:
        TopicValueSerializers(registry, {topic: schema_text(MessageFormat.MUTATE_LOG)}).register_all()
    assert f"subject {topic}-value" in str(refused.value)
    assert "check kafka.schema_registry.url" in str(refused.value)
