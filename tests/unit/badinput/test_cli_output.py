"""What a user sees, checked on a real `python -m cdcbridge` process: one error line per failure naming the thing and
the fix, no knock-on errors, no warnings or notices from dependencies, no SDK log line beside our error."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml

from cdcbridge.cli import cli
from cdcbridge.emulator.server import EmulatorServer


def _cdcbridge(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCBRIDGE")}
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run([sys.executable, "-m", "cdcbridge", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _write(path: Path, data: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _command_paths(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in group.commands.items():
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from _command_paths(command, (*prefix, name))


def test_every_command_has_help_and_prints_no_warning(tmp_path: Path) -> None:
    paths = [(), *_command_paths()]
    assert ("run",) in paths and ("stack", "up") in paths and ("bench", "apply") in paths
    for path in paths:
        result = _cdcbridge(*path, "--help", cwd=tmp_path)
        assert result.returncode == 0, (path, result.stderr)
        assert result.stderr == "", (path, result.stderr)
        assert result.stdout.startswith("Usage: "), (path, result.stdout)


def test_importing_the_product_prints_nothing(tmp_path: Path) -> None:
    """The tablestore SDK's "Native C++ encoder not available" notice and authlib's httpx deprecation warning come
    with these imports; `import cdcbridge` silences exactly those."""
    modules = ("cdcbridge.tablestore.client", "cdcbridge.kafka.schemas", "cdcbridge.emulator.server",
               "cdcbridge.coordination.leases.tablestore_store", "cdcbridge.apply.writer_schemas")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", f"import {', '.join(modules)}"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120)  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@pytest.mark.parametrize("command", ["run", "status", "apply"])
def test_one_typo_in_a_nested_key_is_one_line_naming_the_key_and_the_fix(tmp_path: Path, command: str) -> None:
    """Not followed by `source.tables: Tuple should have at least 1 item` (pydantic counts the broken table as none)."""
    config = _write(tmp_path / "bad.yaml", {"source": {"tables": [{"name": "orders", "partitons": 3}]}})
    result = _cdcbridge(command, "--config", str(config), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"error: invalid configuration in {config}: source.tables.0.partitons: unknown key; did you mean "
        "'partitions'?\n"
    )


@pytest.mark.parametrize("command", ["run", "snapshot"])
def test_an_unreachable_endpoint_is_one_line_naming_the_url_and_the_setting(tmp_path: Path, command: str) -> None:
    port = _closed_port()
    config = _write(tmp_path / "bridge.yaml", {
        "source": {"endpoint": f"http://127.0.0.1:{port}", "tables": [{"name": "orders"}]},
        "kafka": {"bootstrap_servers": f"127.0.0.1:{_closed_port()}"},
    })  # fmt: skip
    result = _cdcbridge(command, "--config", str(config), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"error: cannot reach Tablestore at http://127.0.0.1:{port} (connection refused): check source.endpoint and "
        "that Tablestore runs there\n"
    )


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorServer]:
    server = EmulatorServer().start()
    yield server
    server.stop()


def test_a_refused_signature_is_our_one_line_without_the_sdks_own_error_line(
    tmp_path: Path, emulator: EmulatorServer
) -> None:
    config = _write(tmp_path / "bridge.yaml", {
        "source": {"endpoint": emulator.url, "access_key_secret": "not-the-secret", "tables": [{"name": "orders"}]},
        "kafka": {"bootstrap_servers": f"127.0.0.1:{_closed_port()}"},
    })  # fmt: skip
    result = _cdcbridge("run", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: could not describe the status table"), result.stderr
    assert "OTSAuthFailed" in lines[0] and "not-the-secret" not in lines[0]
