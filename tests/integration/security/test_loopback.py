"""The local stack as the test session runs it (Kafka and Apicurio started by `LocalStack` with its defaults) and
a `cdcbridge emulator` process: every socket they listen on is bound to loopback, read from /proc."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cdcbridge.harness.processes import free_port
from cdcbridge.harness.stack.stack import StackEndpoints
from tests.integration.bridge.workers import CHECKOUT, wait_until
from tests.unit.badinput.sockets import listeners_of_pid


def _properties(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def test_kafka_and_the_registry_listen_on_loopback_only(stack: StackEndpoints) -> None:
    for service in ("kafka", "registry"):
        listening = listeners_of_pid(stack.pids[service])
        assert listening, f"{service} listens on nothing?"
        assert all(listener.is_loopback for listener in listening), (service, [str(x) for x in listening])
    command = Path(f"/proc/{stack.pids['kafka']}/cmdline").read_bytes().split(b"\0")
    properties = _properties(Path(next(part for part in command if part.endswith(b"server.properties")).decode()))
    assert properties["listeners"].count("//127.0.0.1:") == 2
    assert properties["advertised.listeners"].startswith("PLAINTEXT://127.0.0.1:")


def test_the_emulator_command_listens_on_loopback_by_default(tmp_path: Path) -> None:
    port = free_port()
    with (tmp_path / "emulator.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cdcbridge", "emulator", "--port", str(port)], cwd=CHECKOUT, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        listening = wait_until(lambda: listeners_of_pid(process.pid), 60, "the emulator listening")
        assert [(str(x.address), x.port) for x in listening] == [("127.0.0.1", port)]
    finally:
        process.terminate()
        process.wait(30)
