"""`cdcbridge stack up | down | status`: the services of docker-compose.yml as local processes."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cdcbridge.harness.emulator_admin import EmulatorAdmin
from cdcbridge.harness.processes import ProcessRecord, free_port, require_free_port, start_service
from cdcbridge.harness.stack.errors import StackError
from cdcbridge.harness.stack.kafka import start_kafka
from cdcbridge.harness.stack.registry import start_registry

SERVICES = ("kafka", "registry", "emulator")


@dataclass
class StackPorts:
    """Ports of the services; 0 picks a free one (what tests do, so parallel runs never collide)."""

    kafka: int = 9092
    kafka_controller: int = 9093
    registry: int = 8081
    emulator: int = 8900

    def resolved(self, host: str) -> StackPorts:
        return StackPorts(*(port or free_port(host) for port in (
            self.kafka, self.kafka_controller, self.registry, self.emulator)))  # fmt: skip


@dataclass
class StackEndpoints:
    kafka_bootstrap: str
    registry_url: str
    emulator_url: str | None
    pids: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {"kafka_bootstrap": self.kafka_bootstrap, "registry_url": self.registry_url,
                "emulator_url": self.emulator_url, "pids": self.pids}  # fmt: skip


def _emulator_answers(url: str) -> bool:
    return EmulatorAdmin(url, timeout=1).health()["status"] == "ok"


def start_emulator(
    state_dir: Path, host: str, port: int, data_dir: Path | None = None, *, increments_as_deltas: bool = False
) -> ProcessRecord:
    require_free_port("Tablestore emulator", host, port)
    url = f"http://{host}:{port}"
    argv = emulator_argv(host, port, data_dir, increments_as_deltas=increments_as_deltas)
    return start_service("emulator", argv, state_dir=state_dir, endpoint=url, ready=lambda: _emulator_answers(url))


def emulator_argv(
    host: str, port: int, data_dir: Path | None = None, *, increments_as_deltas: bool = False
) -> list[str]:
    """The emulator's command line; it binds `host` only. Its credentials stay at their defaults (or come from
    EMULATOR_ACCESS_KEY_ID / EMULATOR_ACCESS_KEY_SECRET in the environment), never on the command line."""
    argv = [sys.executable, "-m", "cdcbridge", "emulator", "--host", host, "--port", str(port)]
    if data_dir is not None:
        argv += ["--data-dir", str(data_dir)]
    if increments_as_deltas:
        argv.append("--increments-as-deltas")
    return argv


class LocalStack:
    """Starts, finds and stops the services recorded in one state folder."""

    def __init__(self, state_dir: Path, host: str = "127.0.0.1", advertised_host: str | None = None) -> None:
        """`host`: the address every service binds (loopback unless told otherwise); `advertised_host`: what Kafka
        tells clients to connect to when `host` is a wildcard such as 0.0.0.0 (default 127.0.0.1)."""
        self.state_dir = state_dir
        self.host = host
        self.advertised_host = advertised_host

    def up(
        self, ports: StackPorts | None = None, services: tuple[str, ...] = SERVICES, *,
        increments_as_deltas: bool = False,
    ) -> StackEndpoints:  # fmt: skip
        """Start what is not running yet; on any failure stop what this call started and re-raise."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ports = (ports or StackPorts()).resolved(self.host)
        started: list[ProcessRecord] = []
        try:
            for name in services:
                record = ProcessRecord.load(self.state_dir, name)
                if record is not None and record.is_running():
                    continue
                if name == "kafka":
                    started.append(start_kafka(self.state_dir, self.host, ports.kafka, ports.kafka_controller,
                                               advertised_host=self.advertised_host))  # fmt: skip
                elif name == "registry":
                    started.append(start_registry(self.state_dir, self.host, ports.registry))
                elif name == "emulator":
                    started.append(start_emulator(self.state_dir, self.host, ports.emulator,
                                                  self.state_dir / "emulator-data",
                                                  increments_as_deltas=increments_as_deltas))  # fmt: skip
                else:
                    raise StackError(f"unknown service {name!r}; known: {', '.join(SERVICES)}")
        except BaseException:
            for record in started:
                record.stop(self.state_dir)
            raise
        endpoints = self.endpoints()
        (self.state_dir / "stack.json").write_text(json.dumps(endpoints.as_dict(), indent=2))
        return endpoints

    def records(self) -> dict[str, ProcessRecord]:
        found = {}
        for name in SERVICES:
            record = ProcessRecord.load(self.state_dir, name)
            if record is not None:
                found[name] = record
        return found

    def endpoints(self) -> StackEndpoints:
        records = self.records()
        missing = [name for name in ("kafka", "registry") if name not in records]
        if missing:
            raise StackError(f"{', '.join(missing)} not started in {self.state_dir}; run `cdcbridge stack up`")
        emulator = records.get("emulator")
        return StackEndpoints(
            kafka_bootstrap=records["kafka"].endpoint,
            registry_url=records["registry"].endpoint,
            emulator_url=emulator.endpoint if emulator else None,
            pids={name: record.pid for name, record in records.items()},
        )

    def status(self) -> dict[str, dict[str, object]]:
        return {name: {"running": record.is_running(), "pid": record.pid, "endpoint": record.endpoint,
                       "log": record.log} for name, record in self.records().items()}  # fmt: skip

    def down(self) -> list[str]:
        """Stop only the processes this state folder recorded (by pid and start time); return their names."""
        stopped = []
        for name, record in reversed(list(self.records().items())):
            if record.stop(self.state_dir):
                stopped.append(name)
        (self.state_dir / "stack.json").unlink(missing_ok=True)
        return stopped
