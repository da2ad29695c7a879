"""Apicurio Registry (in-memory storage) with its Confluent-compatible API at /apis/ccompat/v7."""

from __future__ import annotations

from pathlib import Path

import requests

from cdcbridge.harness.processes import ProcessRecord, free_port, require_free_port, start_service
from cdcbridge.harness.stack.artifacts import ensure_component
from cdcbridge.harness.stack.errors import StackError
from cdcbridge.harness.stack.java import find_java

CCOMPAT_PATH = "/apis/ccompat/v7"


def _answers(url: str) -> bool:
    return requests.get(f"{url}/subjects", timeout=1).status_code == 200


def start_registry(state_dir: Path, host: str, port: int, heap_mb: int = 512) -> ProcessRecord:
    """Start Apicurio on the newest-API JDK it needs (3.2+ is built for Java 21); ready when /subjects answers."""
    require_free_port("Apicurio Registry", host, port)
    dist = ensure_component("apicurio")
    runner = next(iter(sorted(dist.rglob("quarkus-run.jar"))), None)
    if runner is None:
        raise StackError(f"no quarkus-run.jar under {dist}; delete that folder so the next run fetches it again")
    java = find_java(21, purpose="Apicurio Registry 3.3")
    url = f"http://{host}:{port}{CCOMPAT_PATH}"
    argv = registry_argv(java.java, runner, host, port, free_port(host), heap_mb)
    return start_service("registry", argv, state_dir=state_dir, endpoint=url, ready=lambda: _answers(url), timeout=180)


def registry_argv(java: Path, runner: Path, host: str, port: int, management_port: int, heap_mb: int) -> list[str]:
    """The Apicurio command line: both its HTTP API and its management endpoint bind to `host` only."""
    return [
        str(java), f"-Xmx{heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        f"-Dquarkus.http.host={host}", f"-Dquarkus.http.port={port}",
        f"-Dquarkus.management.host={host}", f"-Dquarkus.management.port={management_port}",
        "-Dquarkus.log.level=WARN",
        # Tests and `cdcbridge stack` reset subjects; deletion is off by default in Apicurio.
        "-Dapicurio.rest.deletion.group.enabled=true",
        "-Dapicurio.rest.deletion.artifact.enabled=true",
        "-Dapicurio.rest.deletion.artifact-version.enabled=true",
        "-jar", str(runner),
    ]  # fmt: skip
