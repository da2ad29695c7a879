"""`cdcbridge table create / enable-stream / describe` as a user runs them: the CLI in its own process, through the
official SDK, against the emulator running as a process, with the connection settings of a configuration file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cdcbridge.harness.processes import EmulatorProcess, free_port


def _config(path: Path, endpoint: str) -> Path:
    path.write_text(yaml.safe_dump({"source": {"endpoint": endpoint, "tables": [{"name": "accounts"}]}}))
    return path


@pytest.fixture
def config(tmp_path: Path, emulator_process: EmulatorProcess) -> Path:
    return _config(tmp_path / "cdcbridge.yaml", emulator_process.url)


def cdcbridge(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cdcbridge", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def describe(name: str, config: Path) -> dict:
    result = cdcbridge("table", "describe", name, "--config", config, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_create_with_stream_then_describe(config: Path) -> None:
    result = cdcbridge("table", "create", "orders", "--config", config, "--pk", "region:string,id:integer",
                       "--stream", "--expiration-hours", "12")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("created table orders")
    table = describe("orders", config)
    assert table["primary_key"] == [{"name": "region", "type": "string"}, {"name": "id", "type": "integer"}]
    assert table["stream"]["enabled"] is True
    assert table["stream"]["expiration_hours"] == 12
    assert len(table["stream"]["shards"]) == 1


def test_create_twice_fails_unless_if_not_exists(config: Path) -> None:
    assert cdcbridge("table", "create", "twice", "--config", config, "--pk", "id:string").returncode == 0

    again = cdcbridge("table", "create", "twice", "--config", config, "--pk", "id:string")
    assert again.returncode == 1
    assert "table twice already exists" in again.stderr and "--if-not-exists" in again.stderr

    # The compose one-shot runs on every start: the second run turns the stream on and succeeds.
    tolerated = cdcbridge("table", "create", "twice", "--config", config, "--pk", "id:string", "--stream",
                          "--if-not-exists")  # fmt: skip
    assert tolerated.returncode == 0, tolerated.stderr
    assert describe("twice", config)["stream"]["enabled"] is True

    other_key = cdcbridge("table", "create", "twice", "--config", config, "--pk", "id:integer", "--if-not-exists")
    assert other_key.returncode == 1
    assert "primary key id:string, not id:integer" in other_key.stderr


def test_enable_stream_on_a_table_without_one(config: Path) -> None:
    assert cdcbridge("table", "create", "plain", "--config", config, "--pk", "id:binary").returncode == 0
    assert describe("plain", config)["stream"]["enabled"] is False

    enabled = cdcbridge("table", "enable-stream", "plain", "--config", config, "--expiration-hours", "48")
    assert enabled.returncode == 0, enabled.stderr
    assert describe("plain", config)["stream"]["expiration_hours"] == 48

    again = cdcbridge("table", "enable-stream", "plain", "--config", config)
    assert again.returncode == 1
    assert "already has its stream enabled" in again.stderr


@pytest.mark.parametrize(
    ("pk", "says"),
    [
        ("id:float", "use one of string, integer, binary"),
        ("id", "is not NAME:TYPE"),
        ("a:string,a:string", "listed twice"),
        ("a:string,b:string,c:string,d:string,e:string", "1 to 4 columns"),
    ],
)
def test_bad_primary_key_is_refused_with_the_fix(config: Path, pk: str, says: str) -> None:
    result = cdcbridge("table", "create", "bad", "--config", config, "--pk", pk)
    assert result.returncode == 1
    assert says in result.stderr


def test_missing_table_names_the_create_command(config: Path) -> None:
    for command in ("describe", "enable-stream"):
        result = cdcbridge("table", command, "absent", "--config", config)
        assert result.returncode == 1
        assert "table absent does not exist" in result.stderr
        assert "cdcbridge table create absent --pk" in result.stderr


def test_unreachable_endpoint_names_the_setting(tmp_path: Path) -> None:
    config = _config(tmp_path / "down.yaml", f"http://127.0.0.1:{free_port()}")
    result = cdcbridge("table", "create", "t", "--config", config, "--pk", "id:string")
    assert result.returncode == 1
    assert "cannot reach Tablestore" in result.stderr and "check source.endpoint" in result.stderr
    assert "emulator-secret" not in result.stderr
