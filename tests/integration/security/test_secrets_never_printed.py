"""Secrets given through ${ENV} references never appear in anything a `cdcbridge` process prints: a real `run`
worker at DEBUG, `status` (text and JSON), and the failures that tend to print configuration (a wrong access key
secret, an unreachable endpoint, a broker that does not speak SASL, configuration and YAML errors). Every line of
every log, stderr and stdout is searched for each secret, its base64 and the HTTP Basic credentials.

Along the way the secrets are shown to reach their clients: the registry receives the Basic credentials (a recording
proxy sits in front of Apicurio), the broker is spoken to with SASL, and the worker's only listener is loopback.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient
from tablestore import Condition, Row, RowExistenceExpectation

from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.processes import BridgeWorkerProcess, free_port
from cdcbridge.harness.stack.stack import StackEndpoints
from tests.integration.bridge.workers import CHECKOUT, read_messages, wait_until
from tests.integration.bridge_helpers import FAST_COORDINATION, INSTANCE, create_stream_table
from tests.integration.security.registry_proxy import RecordingRegistryProxy
from tests.unit.badinput.sockets import listeners_of_pid

TAG = uuid.uuid4().hex[:12]
ACCESS_KEY_ID = "sec-access-id"
ACCESS_KEY_SECRET = f"akSecret{TAG}"
WRONG_ACCESS_KEY_SECRET = f"wrongAk{TAG}"
SASL_PASSWORD = f"saslPw{TAG}"
REGISTRY_PASSWORD = f"regPw{TAG}"
LITERAL_PASSWORD = f"literalPw{TAG}"
SECRETS = (ACCESS_KEY_SECRET, WRONG_ACCESS_KEY_SECRET, SASL_PASSWORD, REGISTRY_PASSWORD, LITERAL_PASSWORD)
IGNORE = Condition(RowExistenceExpectation.IGNORE)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def forbidden_forms() -> dict[str, str]:
    """Every text that would give a secret away → what it is."""
    forms: dict[str, str] = {}
    for secret in SECRETS:
        forms[secret] = "the secret"
        forms[_b64(secret)] = f"base64 of {secret[:6]}…"
        forms[_b64(f"bridge:{secret}")] = f"HTTP Basic credentials with {secret[:6]}…"
    return forms


class Outputs:
    """Everything the processes of this test printed, by name (also kept in `folder` to look at after a failure)."""

    def __init__(self, folder: Path) -> None:
        self.texts: dict[str, str] = {}
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def add(self, name: str, text: str) -> str:
        self.texts[name] = text
        (self.folder / f"{name.replace(' ', '_')}.txt").write_text(text)
        return text

    def assert_no_secret(self) -> None:
        leaks = [
            f"{name} line {number}: {what}: {line[:300]}"
            for name, text in self.texts.items()
            for number, line in enumerate(text.splitlines(), 1)
            for form, what in forbidden_forms().items()
            if form in line
        ]
        assert not leaks, "secrets printed:\n" + "\n".join(leaks)
        assert sum(len(text) for text in self.texts.values()) > 10_000  # DEBUG runs: there was plenty to search


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorServer]:
    """This module's own credentials (the secrets the test looks for), not the shared test ones."""
    server = EmulatorServer(host="127.0.0.1", port=0, credentials={ACCESS_KEY_ID: ACCESS_KEY_SECRET}).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def registry(stack: StackEndpoints) -> Iterator[RecordingRegistryProxy]:
    proxy = RecordingRegistryProxy(stack.registry_url).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def write_config(path: Path, stack: StackEndpoints, registry_url: str, **observability: Any) -> dict[str, Any]:
    """Secrets as ${ENV} references only; endpoint and protocol too, so each scenario changes just the environment."""
    data = {
        "source": {
            "endpoint": "${CDC_SEC_ENDPOINT}", "instance": INSTANCE, "access_key_id": ACCESS_KEY_ID,
            "access_key_secret": "${CDC_SEC_ACCESS_KEY_SECRET}", "tables": [{"name": "guarded", "partitions": 1}],
        },
        "coordination": {**FAST_COORDINATION, "status_table": f"status_{TAG}"},
        "kafka": {
            "bootstrap_servers": stack.kafka_bootstrap, "topic_prefix": f"sec{TAG}",
            "security": {"protocol": "${CDC_SEC_PROTOCOL:-PLAINTEXT}", "sasl_mechanism": "PLAIN",
                         "sasl_username": "bridge", "sasl_password": "${CDC_SEC_SASL_PASSWORD}"},
            "schema_registry": {"url": registry_url, "basic_auth_user_info": "bridge:${CDC_SEC_REGISTRY_PASSWORD}"},
        },
        "observability": {"log_level": "DEBUG", **observability},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(data))
    return data


def cdcbridge(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdcbridge", *args], cwd=CHECKOUT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


def both(result: subprocess.CompletedProcess[str]) -> str:
    return f"{result.stdout}\n{result.stderr}"


def test_no_secret_is_ever_printed(
    stack: StackEndpoints,
    emulator: EmulatorServer,
    registry: RecordingRegistryProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outputs = Outputs(tmp_path / "outputs")
    monkeypatch.setenv("CDC_SEC_ENDPOINT", emulator.url)
    monkeypatch.setenv("CDC_SEC_ACCESS_KEY_SECRET", ACCESS_KEY_SECRET)
    monkeypatch.setenv("CDC_SEC_SASL_PASSWORD", SASL_PASSWORD)
    monkeypatch.setenv("CDC_SEC_REGISTRY_PASSWORD", REGISTRY_PASSWORD)
    ots = emulator_client(emulator)
    create_stream_table(ots, "guarded", [("id", "INTEGER")])
    for i in range(5):
        ots.put_row("guarded", Row([("id", i)], [("v", f"value-{i}")]), IGNORE)
    metrics_port = free_port()
    config = tmp_path / "bridge.yaml"
    data = write_config(config, stack, registry.url, metrics_port=metrics_port)
    topic = f"{data['kafka']['topic_prefix']}.guarded.mutation"

    # 1. A healthy worker at DEBUG, then `status` in text and JSON.
    worker = BridgeWorkerProcess(config, "sec-w1", tmp_path / "w1.log").start()
    try:
        wait_for_topic(stack, topic, worker.log)
        read_messages(stack, topic, until=lambda m: len(m) >= 5)
        listening = listeners_of_pid(worker.pid)
        assert [listener.port for listener in listening] == [metrics_port]
        assert all(listener.is_loopback for listener in listening), [str(x) for x in listening]
        text = cdcbridge("status", "--config", str(config))
        assert text.returncode == 0 and "sec-w1" in text.stdout, both(text)
        as_json = cdcbridge("status", "--config", str(config), "--json")
        assert as_json.returncode == 0 and json.loads(as_json.stdout)["shards"], both(as_json)
        outputs.add("status", both(text))
        outputs.add("status --json", both(as_json))
    finally:
        worker.stop()
        outputs.add("healthy worker", worker.log())
    assert registry.authorizations and set(registry.authorizations) == {f"Basic {_b64(f'bridge:{REGISTRY_PASSWORD}')}"}

    # 2. A wrong access key secret: the emulator refuses the signature.
    monkeypatch.setenv("CDC_SEC_ACCESS_KEY_SECRET", WRONG_ACCESS_KEY_SECRET)
    refused = cdcbridge("run", "--config", str(config), "--worker-id", "sec-wrong")
    assert refused.returncode == 1 and "OTSAuthFailed" in refused.stderr, both(refused)
    assert refused.stderr.strip().splitlines()[-1].startswith("error: ")
    outputs.add("run with a wrong secret", both(refused))
    status = cdcbridge("status", "--config", str(config), "--no-lag")
    outputs.add("status with a wrong secret", both(status))
    assert "OTSAuthFailed" in both(status) or "credentials" in both(status), both(status)
    monkeypatch.setenv("CDC_SEC_ACCESS_KEY_SECRET", ACCESS_KEY_SECRET)

    # 3. An endpoint nobody listens on.
    monkeypatch.setenv("CDC_SEC_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    unreachable = cdcbridge("run", "--config", str(config), "--worker-id", "sec-nowhere", timeout=300)
    assert unreachable.returncode == 1, both(unreachable)
    outputs.add("run against a closed endpoint", both(unreachable))
    monkeypatch.setenv("CDC_SEC_ENDPOINT", emulator.url)

    # 4. SASL towards a broker that only speaks PLAINTEXT: the worker keeps retrying, logging as JSON.
    monkeypatch.setenv("CDC_SEC_PROTOCOL", "SASL_PLAINTEXT")
    json_config = tmp_path / "bridge-json.yaml"
    write_config(json_config, stack, registry.url, log_format="json")
    sasl = BridgeWorkerProcess(json_config, "sec-sasl", tmp_path / "sasl.log").start()
    try:
        sasl.wait_for_log(r"no Kafka broker answered|got no answer from Kafka")
    finally:
        sasl.stop()
        outputs.add("worker speaking SASL to a PLAINTEXT broker", sasl.log())
    assert "SASL PLAIN mechanism handshake failed" in sasl.log()  # the security settings reached librdkafka
    monkeypatch.delenv("CDC_SEC_PROTOCOL")

    # 5. Configuration errors: an unknown key (run and apply), and a YAML error on a line holding a literal secret.
    bad = yaml.safe_load(config.read_text())
    bad["kafka"]["security"]["sasl_pasword"] = "${CDC_SEC_SASL_PASSWORD}"
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(bad))
    for command in ("run", "apply"):
        typo = cdcbridge(command, "--config", str(tmp_path / "typo.yaml"))
        assert typo.returncode == 1 and "kafka.security.sasl_pasword: unknown key" in typo.stderr, both(typo)
        outputs.add(f"{command} with an unknown key", both(typo))
    broken = config.read_text().replace("${CDC_SEC_SASL_PASSWORD}", f"'{LITERAL_PASSWORD}")  # unclosed quote
    (tmp_path / "broken.yaml").write_text(broken)
    invalid = cdcbridge("run", "--config", str(tmp_path / "broken.yaml"))
    assert invalid.returncode == 1 and "is not valid YAML" in invalid.stderr, both(invalid)
    outputs.add("run with invalid YAML", both(invalid))

    outputs.assert_no_secret()


def emulator_client(emulator: EmulatorServer) -> Any:
    from cdcbridge.tablestore import build_ots_client

    return build_ots_client(emulator.url, INSTANCE, ACCESS_KEY_ID, ACCESS_KEY_SECRET)


def wait_for_topic(stack: StackEndpoints, topic: str, log: Any) -> None:
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})

    def exists() -> bool:
        metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
        return metadata is not None and metadata.error is None and bool(metadata.partitions)

    wait_until(exists, 120, f"topic {topic}", log)
