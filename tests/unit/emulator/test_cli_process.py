"""`serve_forever_cli` as its own process: it serves, keeps state across kill -9 and stops cleanly on SIGTERM."""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tablestore import CapacityUnit, OTSClient, ReservedThroughput, Row, TableMeta, TableOptions

_LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


@contextmanager
def emulator_process(data_dir: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    code = (
        "from cdcbridge.emulator.server import serve_forever_cli;"
        f"serve_forever_cli('127.0.0.1', 0, {str(data_dir)!r}, 'my-id', 'my-secret', False)"
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = _LISTENING.search(line)
        assert match, f"unexpected first line {line!r}"
        assert "my-secret" not in line  # the secret is never printed
        yield process, match.group(1)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def client_for(url: str) -> OTSClient:
    logging.getLogger("tablestore-cli-test").setLevel(logging.CRITICAL)
    return OTSClient(url, "my-id", "my-secret", "instance", logger_name="tablestore-cli-test")


def test_state_survives_kill_and_clean_stop(tmp_path: Path) -> None:
    with emulator_process(tmp_path) as (process, url):
        client = client_for(url)
        client.create_table(
            TableMeta("kept", [("id", "INTEGER")]), TableOptions(), ReservedThroughput(CapacityUnit(0, 0))
        )
        client.put_row("kept", Row([("id", 1)], [("v", "before kill")]))
        process.send_signal(signal.SIGKILL)
    with emulator_process(tmp_path) as (process, url):
        client = client_for(url)
        assert client.get_row("kept", [("id", 1)])[1].attribute_columns[0][1] == "before kill"
        client.put_row("kept", Row([("id", 2)], [("v", "before term")]))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    assert list(tmp_path.glob("snapshot-*.pickle"))
    with emulator_process(tmp_path) as (_, url):
        assert client_for(url).get_row("kept", [("id", 2)])[1] is not None
