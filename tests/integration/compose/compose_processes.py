"""docker-compose.yml run without a Docker engine: each service built from our image becomes a local process of its
command (the image's entrypoint is `cdcbridge`), with the service's environment; image services (Kafka, the
registry) are mapped to endpoints the tests already run. What a container would see is mapped too:

- host names `service:port` (and a service's own `localhost:port`) become 127.0.0.1 and a free port per service;
- volume mounts become folders under a work folder, and a mounted file is copied there with the container paths it
  names rewritten (the bridge configuration names /data/...);
- a container's own port namespace is lost, so every process gets a metrics port of its own.

Services start in depends_on order and their conditions are honoured: service_healthy runs the service's
healthcheck command (remapped) until it passes, service_completed_successfully waits for exit code 0.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cdcbridge.harness.processes import ChildProcess, free_port

#: `${NAME}` / `${NAME:-default}` as compose interpolates them from the environment.
_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")
_HOST_PORT = re.compile(r"\b(?P<host>[a-z][a-z0-9-]*):(?P<port>\d{2,5})\b")


def load_compose(path: Path) -> dict[str, Any]:
    """The file as compose reads it: YAML with merge keys (PyYAML resolves `<<`), anchors and `x-` extensions."""
    return yaml.safe_load(path.read_text())


def active_services(compose: Mapping[str, Any], profiles: set[str]) -> dict[str, dict[str, Any]]:
    """Services without profiles, and those of the given profiles."""
    return {
        name: spec for name, spec in compose["services"].items()
        if not spec.get("profiles") or profiles & set(spec["profiles"])
    }  # fmt: skip


def start_order(services: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every service after those it depends on (compose's order); a cycle is an error."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise AssertionError(f"depends_on cycle through {name}")
        visiting.add(name)
        for dependency in dependencies(services[name]):
            visit(dependency)
        visiting.discard(name)
        order.append(name)

    for name in services:
        visit(name)
    return order


def dependencies(spec: Mapping[str, Any]) -> dict[str, str]:
    """depends_on as {service: condition} (the short list form means service_started)."""
    depends = spec.get("depends_on") or {}
    if isinstance(depends, list):
        return dict.fromkeys(depends, "service_started")
    return {name: (cond or {}).get("condition", "service_started") for name, cond in depends.items()}


def interpolate(text: str, environ: Mapping[str, str]) -> str:
    return _INTERPOLATION.sub(lambda m: environ.get(m.group("name"), m.group("default") or ""), text)


@dataclass
class ComposeRun:
    """Runs the services of a compose file as processes under `work`; `external` maps an image service's
    `host:port` (as the other services name it) to the endpoint standing in for it."""

    compose_file: Path
    work: Path
    external: dict[str, str]
    profiles: set[str] = field(default_factory=set)
    environ: dict[str, str] = field(default_factory=dict)
    processes: dict[str, ChildProcess] = field(default_factory=dict)
    #: `service:port` → `127.0.0.1:free port`, for every port our services listen on.
    ports: dict[str, str] = field(default_factory=dict)
    #: container path → host path (volume mounts).
    mounts: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = self.compose_file.parent
        self.services = active_services(load_compose(self.compose_file), self.profiles)
        self.ours = {name for name, spec in self.services.items() if "build" in spec}
        for name in self.ours:
            for port in _container_ports(self.services[name]):
                self.ports[f"{name}:{port}"] = f"127.0.0.1:{free_port()}"
            for volume in self.services[name].get("volumes", []):
                source, target = volume.split(":")[:2]
                self.mounts.setdefault(target, self.work / "mounts" / target.strip("/"))
                self._mount(self.root / source, self.mounts[target])

    def _mount(self, source: Path, target: Path) -> None:
        if target.exists():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_file():
            target.write_text(source.read_text())
        else:
            target.mkdir(parents=True, exist_ok=True)

    def rewrite_mounted_files(self) -> None:
        """Container paths named inside mounted files (e.g. /data/delta in the configuration) → host paths."""
        for path in self.mounts.values():
            if path.is_file():
                path.write_text(self._map_paths(path.read_text()))

    def map_text(self, text: str, *, service: str | None) -> str:
        """Host names, ports and container paths of `text` as seen by `service`, mapped to this machine."""
        text = interpolate(text, self.environ)

        def host_port(match: re.Match[str]) -> str:
            host, port = match.group("host"), match.group("port")
            if host == "localhost" and service is not None:
                host = service
            key = f"{host}:{port}"
            return self.external.get(key) or self.ports.get(key) or match.group(0)

        return self._map_paths(_HOST_PORT.sub(host_port, text))

    def _map_paths(self, text: str) -> str:
        """Container paths (volume targets) → the host folders standing in for them; nothing else is touched (a
        mounted file's `${VAR}` references are the program's to resolve, as in a container)."""
        for container, host in sorted(self.mounts.items(), key=lambda item: -len(item[0])):
            text = re.sub(rf"(?<![\w/]){re.escape(container)}(?=/|\b|$)", str(host), text)
        return text

    def command(self, name: str) -> list[str]:
        """The service's command for the `cdcbridge` entrypoint, its own listen address and port mapped."""
        args = [self.map_text(str(arg), service=name) for arg in self.services[name]["command"]]
        for index, arg in enumerate(args[:-1]):
            if arg == "--host":
                args[index + 1] = "127.0.0.1"
            if arg == "--port" and f"{name}:{args[index + 1]}" in self.ports:
                args[index + 1] = self.ports[f"{name}:{args[index + 1]}"].rsplit(":", 1)[1]
        return [sys.executable, "-m", "cdcbridge", *args]

    def environment(self, name: str) -> dict[str, str]:
        env = {key: self.map_text(str(value), service=name) for key, value in
               (self.services[name].get("environment") or {}).items()}  # fmt: skip
        env["CDCBRIDGE__OBSERVABILITY__METRICS_PORT"] = str(free_port())
        env["CDCBRIDGE__OBSERVABILITY__METRICS_HOST"] = "127.0.0.1"
        return env

    def up(self, timeout: float = 300) -> None:
        """Start our services in depends_on order, honouring each dependency's condition."""
        self.rewrite_mounted_files()
        for name in start_order(self.services):
            if name not in self.ours:
                continue  # an image service: its stand-in already runs
            for dependency, condition in dependencies(self.services[name]).items():
                if dependency in self.ours:
                    self._await(dependency, condition, timeout)
            self.processes[name] = ChildProcess(
                name, self.command(name), self.work / "logs" / f"{name}.log", env=self.environment(name),
                cwd=self.work,
            ).start()  # fmt: skip

    def _await(self, name: str, condition: str, timeout: float) -> None:
        process = self.processes[name]
        deadline = time.monotonic() + timeout
        if condition == "service_completed_successfully":
            code = process.wait(timeout)
            assert code == 0, f"{name} exited with {code}: {process.log_tail()}"
        elif condition == "service_healthy":
            check = self.services[name]["healthcheck"]["test"]
            assert check[0] == "CMD-SHELL", f"{name}: only CMD-SHELL healthchecks are mapped"
            shell = self.map_text(check[1], service=name)
            while subprocess.run(shell, shell=True, capture_output=True, timeout=30).returncode != 0:
                assert process.alive, f"{name} exited before it was healthy: {process.log_tail()}"
                assert time.monotonic() < deadline, f"{name} not healthy within {timeout}s: {process.log_tail()}"
                time.sleep(0.5)

    def down(self) -> dict[str, int | None]:
        """SIGTERM every process, last started first (compose's order); their exit codes."""
        codes = {}
        for name in reversed(list(self.processes)):
            codes[name] = self.processes[name].stop(timeout=60)
        return codes

    def host_path(self, container_path: str) -> Path:
        return Path(self.map_text(container_path, service=None))


def _container_ports(spec: Mapping[str, Any]) -> list[str]:
    """The container ports a service publishes or probes (`ports` targets, `localhost:PORT` in its healthcheck)."""
    ports = [str(port).rsplit(":", 1)[-1] for port in spec.get("ports", [])]
    check = " ".join(map(str, (spec.get("healthcheck") or {}).get("test", [])))
    ports += re.findall(r"localhost:(\d+)", check)
    return sorted(set(ports))


def require_curl() -> None:
    assert shutil.which("curl"), "the healthchecks run curl: install it (Debian package curl)"
