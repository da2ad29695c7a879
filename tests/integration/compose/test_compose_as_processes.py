"""docker-compose.yml's documented outcome, without a Docker engine: its services (traffic profile on) run as local
processes with their own commands and environments, Kafka and the registry mapped to the session's, and within
minutes the demo table exists with its stream, the two workers hold its leases, its changes are on Kafka and the
apply job has written them to the Delta table under ./data (here: the work folder's data mount)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from cdcbridge.config import load_config
from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.publish.tables import source_client
from cdcbridge.tablestore import StreamClient
from tests.integration.bridge_helpers import read_topic
from tests.integration.compose.compose_processes import ComposeRun, require_curl

ROOT = Path(__file__).resolve().parents[3]
TABLE = "accounts"


def _eventually(what: str, check: Callable[[], object], run: ComposeRun, timeout: float = 300) -> object:
    """`check()`'s first truthy answer; fails naming `what` (with the services' log tails) after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {name}: {p.log_tail(8)}" for name, p in run.processes.items())
            raise AssertionError(f"{what} within {timeout:.0f}s\n{tails}")
        time.sleep(1)


def _delta_rows_added(table_dir: Path) -> int:
    """Rows the Delta log records as added (numRecords of every add action), 0 before the first commit."""
    rows = 0
    for commit in sorted((table_dir / "_delta_log").glob("*.json")) if table_dir.exists() else []:
        for line in commit.read_text().splitlines():
            add = json.loads(line).get("add")
            if add and add.get("stats"):
                rows += json.loads(add["stats"]).get("numRecords", 0)
    return rows


def test_docker_compose_up_replicates_the_demo_table(stack: StackEndpoints, tmp_path: Path) -> None:
    require_curl()
    registry = urlsplit(stack.registry_url)
    run = ComposeRun(
        ROOT / "docker-compose.yml", tmp_path, profiles={"traffic"},
        external={"kafka:19092": stack.kafka_bootstrap, "registry:8080": registry.netloc},
    )  # fmt: skip
    assert {"emulator", "create-tables", "bridge-1", "bridge-2", "apply", "traffic"} <= run.ours
    try:
        run.up()
        # The one-shot created the table with its stream and exited 0 (up() waited for it before the workers).
        assert run.processes["create-tables"].returncode == 0
        config = load_config(run.host_path("/config/cdcbridge.yaml"), environ=run.environment("bridge-1"))
        ots = source_client(config)
        streams = StreamClient(ots)
        stream_id = streams.describe_table_stream(TABLE).stream_id
        assert stream_id is not None

        messages = read_topic(stack, f"cdc.{TABLE}.mutation", until=lambda got: len(got) >= 50, timeout=300)
        assert {m.value["source"]["table"] for m in messages if m.value} == {TABLE}

        store = TablestoreLeaseStore.from_settings(ots, config.coordination)
        owners = _eventually(
            "no lease of the table is held by a compose worker",
            lambda: {lease.owner for lease in store.list_leases(stream_id)} & {"bridge-1", "bridge-2"}, run,
        )  # fmt: skip
        assert owners

        delta_table = run.host_path("/data/delta") / TABLE
        _eventually("the apply job wrote no row to the Delta table", lambda: _delta_rows_added(delta_table), run,
                    timeout=600)  # fmt: skip
        for name in ("emulator", "bridge-1", "bridge-2", "apply", "traffic"):
            assert run.processes[name].alive, f"{name} exited: {run.processes[name].log_tail()}"
    finally:
        codes = run.down()
    # SIGTERM: the workers drain and release their leases, the apply job stops between batches, all exit 0.
    assert all(code == 0 for name, code in codes.items() if name != "create-tables"), codes
