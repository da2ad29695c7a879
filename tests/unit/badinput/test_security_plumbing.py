"""Kafka and registry TLS/SASL settings travel from the config into the real clients: librdkafka (topic admin and
producer, as the bridge builds them), confluent-kafka's SchemaRegistryClient (the bridge's and the apply job's) and
the Spark Kafka source options. Each test makes the client *act* on a setting, so a dropped key would fail it."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.schema_registry import SchemaRegistryClient

from cdcbridge.apply.kafka_source import kafka_source_options
from cdcbridge.apply.routing import TopicRouting
from cdcbridge.apply.writer_schemas import WriterSchemas
from cdcbridge.config import BridgeConfig, parse_config
from cdcbridge.contract import MessageFormat
from cdcbridge.formats import schema_text
from cdcbridge.kafka.errors import RegistryUnreachableError
from cdcbridge.kafka.schemas import RegistryRefusedError, TopicValueSerializers
from cdcbridge.kafka.sink import KafkaSink
from cdcbridge.kafka.topics import KafkaClientConfigError, TopicAdmin

from .fake_registry import FakeRegistry, self_signed_ca

SASL_PASSWORD = "sasl-pw-Zq81"
REGISTRY_PASSWORD = "reg-pw-Mx42"
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"


def config_with(security: dict[str, Any], registry: dict[str, Any] | None = None) -> BridgeConfig:
    return parse_config(
        {
            "source": {"tables": [{"name": "orders"}]},
            "kafka": {
                "bootstrap_servers": "127.0.0.1:1",
                "topic_prefix": "sec",
                "security": security,
                "schema_registry": registry or {},
            },
        },
        environ={},
    )


SASL_SSL = {
    "protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_username": "bridge",
    "sasl_password": SASL_PASSWORD,
    "ssl_ca_location": SYSTEM_CA,
}


def _bridge_sink(config: BridgeConfig) -> KafkaSink:
    """The producer exactly as `cdcbridge run` builds it (bridge/app.py)."""
    return KafkaSink({**config.kafka.client_config(), "client.id": "cdcbridge-test", **config.kafka.producer})


def test_a_complete_sasl_ssl_config_is_accepted_by_librdkafka() -> None:
    config = config_with(SASL_SSL)
    assert config.kafka.client_config()["sasl.password"] == SASL_PASSWORD
    TopicAdmin(config.kafka.client_config(), timeout=1)
    _bridge_sink(config).close(1)


@pytest.mark.parametrize(
    ("change", "librdkafka_says"),
    [
        ({"sasl_mechanism": "NOT-A-MECHANISM"}, "Unsupported SASL mechanism: NOT-A-MECHANISM"),
        ({"ssl_ca_location": "/nonexistent/ca.pem"}, "ssl.ca.location failed"),
        ({"ssl_certificate_location": "/nonexistent/client.pem"}, "ssl.certificate.location failed"),
        ({"sasl_password": None}, "sasl.username and sasl.password must be set"),  # the secret is missing
    ],
)
def test_security_settings_reach_the_topic_admin_and_the_producer(
    change: dict[str, str | None], librdkafka_says: str
) -> None:
    """librdkafka acts on these at construction, so its refusal proves the value arrived."""
    security = {name: value for name, value in {**SASL_SSL, **change}.items() if value is not None}
    config = config_with(security)
    with pytest.raises(KafkaClientConfigError) as refused:
        TopicAdmin(config.kafka.client_config(), timeout=1)
    assert librdkafka_says in str(refused.value) and "kafka.security" in str(refused.value)
    with pytest.raises(KafkaException, match=librdkafka_says):
        _bridge_sink(config)


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    server = FakeRegistry().start()
    yield server
    server.stop()


def _register(config: BridgeConfig) -> dict[str, int]:
    """Schema registration exactly as `cdcbridge run` does it (bridge/app.py)."""
    client = SchemaRegistryClient(config.kafka.schema_registry.client_config())
    return TopicValueSerializers(client, {"sec.orders.mutation": schema_text(MessageFormat.MUTATE_LOG)}).register_all()


def _basic(user_info: str) -> str:
    return "Basic " + base64.b64encode(user_info.encode()).decode()


def test_registry_basic_auth_reaches_the_bridge_and_the_apply_job_clients(registry: FakeRegistry) -> None:
    config = config_with({}, {"url": registry.url, "basic_auth_user_info": f"bridge:{REGISTRY_PASSWORD}"})
    assert _register(config) == {"sec.orders.mutation": 1}
    WriterSchemas(config.kafka.schema_registry.client_config()).preload(["sec.orders.mutation-value"])
    methods = [(seen.method, seen.authorization) for seen in registry.seen]
    assert {method for method, _ in methods} == {"PUT", "POST", "GET"}
    assert {auth for _, auth in methods} == {_basic(f"bridge:{REGISTRY_PASSWORD}")}


def test_the_registry_ca_setting_is_what_makes_tls_work(tmp_path: Path) -> None:
    ca, certificate, key = self_signed_ca(tmp_path)
    server = FakeRegistry(tls=(certificate, key)).start()
    try:
        trusted = config_with({}, {"url": server.url, "ssl_ca_location": str(ca)})
        assert _register(trusted) == {"sec.orders.mutation": 1}
        WriterSchemas(trusted.kafka.schema_registry.client_config()).preload(["sec.orders.mutation-value"])
        untrusted = config_with({}, {"url": server.url})
        with pytest.raises(RegistryUnreachableError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            _register(untrusted)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("status", "fix"),
    [
        (401, "check kafka.schema_registry.basic_auth_user_info"),
        (403, "grant this user write access"),
        (404, "check kafka.schema_registry.url: it must be the Confluent-compatible API base"),
    ],
)
def test_a_registry_refusal_is_final_and_names_the_setting(registry: FakeRegistry, status: int, fix: str) -> None:
    registry.status = status
    config = config_with({}, {"url": registry.url, "basic_auth_user_info": f"bridge:{REGISTRY_PASSWORD}"})
    with pytest.raises(RegistryRefusedError) as refused:  # not "unreachable": the bridge would retry it forever
        _register(config)
    message = str(refused.value)
    assert f"HTTP {status}" in message and "sec.orders.mutation-value" in message and fix in message
    assert REGISTRY_PASSWORD not in message


def test_a_registry_server_error_is_retried_as_unreachable(registry: FakeRegistry) -> None:
    registry.status = 503
    with pytest.raises(RegistryUnreachableError):
        _register(config_with({}, {"url": registry.url, "timeout_seconds": 2}))


def test_spark_kafka_source_gets_the_security_settings_kafka_prefixed() -> None:
    config = config_with({**SASL_SSL, "ssl_certificate_location": "/tls/client.pem",
                          "ssl_key_location": "/tls/client.pem", "ssl_key_password": "key-pw-77"})  # fmt: skip
    options = kafka_source_options(config, TopicRouting.from_config(config))
    assert options["kafka.bootstrap.servers"] == "127.0.0.1:1"
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert f'username="bridge" password="{SASL_PASSWORD}"' in options["kafka.sasl.jaas.config"]
    assert (options["kafka.ssl.truststore.type"], options["kafka.ssl.truststore.location"]) == ("PEM", SYSTEM_CA)
    assert (options["kafka.ssl.keystore.type"], options["kafka.ssl.keystore.location"]) == ("PEM", "/tls/client.pem")
    assert options["kafka.ssl.key.password"] == "key-pw-77"
    assert all(key.startswith("kafka.") for key in options if "ssl" in key or "sasl" in key or "security" in key)
    assert json.dumps(options)  # plain strings, as DataStreamReader.option wants
