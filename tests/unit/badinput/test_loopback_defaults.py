"""Everything we start listens on 127.0.0.1 unless told otherwise, and the option to change it works: the emulator,
the metrics endpoint, and the local stack's Kafka listeners, Apicurio and PostgreSQL settings."""

from __future__ import annotations

import inspect
from pathlib import Path

import click
import pytest
from prometheus_client import CollectorRegistry

from cdcbridge.cli import cli
from cdcbridge.config import ObservabilityConfig
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.stack.kafka import _server_properties, advertised_host_for
from cdcbridge.harness.stack.postgres import PostgresServer
from cdcbridge.harness.stack.registry import registry_argv
from cdcbridge.harness.stack.stack import LocalStack, emulator_argv
from cdcbridge.observability.metrics import start_metrics_server

from .sockets import listeners_on_port


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _option_default(command: click.Command, name: str) -> object:
    return next(p.default for p in command.params if p.name == name)


def test_command_line_defaults_are_loopback_and_can_be_changed() -> None:
    stack_up = cli.commands["stack"].commands["up"]  # type: ignore[attr-defined]
    assert _option_default(stack_up, "host") == "127.0.0.1"
    assert _option_default(cli.commands["emulator"], "host") == "127.0.0.1"
    assert inspect.signature(LocalStack).parameters["host"].default == "127.0.0.1"
    assert inspect.signature(EmulatorServer).parameters["host"].default == "127.0.0.1"
    assert inspect.signature(start_metrics_server).parameters["host"].default == "127.0.0.1"
    assert ObservabilityConfig().metrics_host == "127.0.0.1"
    assert PostgresServer.__dataclass_fields__["host"].default == "127.0.0.1"


def test_kafka_listens_and_advertises_loopback_by_default() -> None:
    props = _properties(_server_properties("127.0.0.1", 9092, 9093, Path("/data")))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"


def test_kafka_on_every_interface_advertises_a_connectable_address() -> None:
    """Kafka refuses to advertise 0.0.0.0 (clients could not connect to it): loopback, or the name given."""
    wildcard = _properties(_server_properties("0.0.0.0", 9092, 9093, Path("/data")))
    assert wildcard["listeners"] == "PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093"
    assert wildcard["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    named = _properties(_server_properties("0.0.0.0", 9092, 9093, Path("/data"), "kafka-1.example"))
    assert named["advertised.listeners"] == "PLAINTEXT://kafka-1.example:9092"
    assert named["controller.quorum.voters"] == "1@kafka-1.example:9093"
    assert advertised_host_for("10.0.0.5") == "10.0.0.5"


def test_apicurio_binds_its_api_and_management_port_to_the_host() -> None:
    argv = registry_argv(Path("/jdk/bin/java"), Path("/apicurio/quarkus-run.jar"), "127.0.0.1", 8081, 9000, 512)
    assert "-Dquarkus.http.host=127.0.0.1" in argv and "-Dquarkus.management.host=127.0.0.1" in argv
    other = registry_argv(Path("java"), Path("run.jar"), "0.0.0.0", 8081, 9000, 512)
    assert "-Dquarkus.http.host=0.0.0.0" in other and "-Dquarkus.management.host=0.0.0.0" in other


def test_the_stack_starts_the_emulator_on_the_host_without_credentials_on_its_command_line() -> None:
    argv = emulator_argv("127.0.0.1", 8900)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert not any("secret" in part for part in argv)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])  # another address, never exposed in a test
def test_the_emulator_binds_exactly_the_host_it_is_given(host: str) -> None:
    server = EmulatorServer(host=host).start()
    try:
        (listener,) = listeners_on_port(server.port)
        assert str(listener.address) == host
    finally:
        server.stop()


def test_the_metrics_endpoint_binds_loopback_by_default() -> None:
    server = start_metrics_server(0, registry=CollectorRegistry())
    try:
        (listener,) = listeners_on_port(server.port)
        assert listener.is_loopback and str(listener.address) == "127.0.0.1"
    finally:
        server.stop()
