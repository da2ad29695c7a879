"""source.wait_for_tables end to end: a worker (`cdcbridge run`) started before its table exists waits and says how
to create it; the table is created with `cdcbridge table create`; the worker proceeds and the table's changes reach
Kafka."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import yaml
from tablestore import Row

from cdcbridge.harness.processes import BridgeWorkerProcess, EmulatorProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from tests.integration.bridge_helpers import FAST_COORDINATION, INSTANCE, ots_client, read_topic


def test_a_worker_waits_for_its_table_then_replicates_it(
    stack: StackEndpoints, emulator_process: EmulatorProcess, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    table, prefix = f"late_{suffix}", f"w{suffix}"
    config = tmp_path / "cdcbridge.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"endpoint": emulator_process.url, "instance": INSTANCE, "wait_for_tables": True,
                   "tables": [{"name": table, "partitions": 2}]},
        "coordination": {**FAST_COORDINATION, "status_table": f"status_{suffix}"},
        "kafka": {"bootstrap_servers": stack.kafka_bootstrap, "topic_prefix": prefix,
                  "schema_registry": {"url": stack.registry_url}},
        "observability": {"metrics_port": 0, "metrics_host": "127.0.0.1"},
    }))  # fmt: skip
    worker = BridgeWorkerProcess(config, "late-1", tmp_path / "worker.log").start()
    try:
        (waiting,) = worker.wait_for_log(rf"waiting for table {table}: (.*)", timeout=120)
        assert f"cdcbridge table create {table} --pk NAME:TYPE,... --stream" in waiting.group(1)
        assert worker.alive
        (metrics,) = worker.wait_for_log(r"metrics at (\S+)", timeout=30)
        with urllib.request.urlopen(metrics.group(1), timeout=10) as response:  # scraped while it waits
            assert response.status == 200
            assert b"cdcbridge_" in response.read()

        created = subprocess.run(
            [sys.executable, "-m", "cdcbridge", "table", "create", table, "--config", str(config), "--pk", "id:string",
             "--stream"], capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        worker.wait_for_log(rf"table {table} is ready \(stream \S+\); starting", timeout=120)

        ots = ots_client(emulator_process.url)
        for i in range(5):
            ots.put_row(table, Row([("id", f"k{i}")], [("n", i)]))
        messages = read_topic(stack, f"{prefix}.{table}.mutation", until=lambda got: len(got) >= 5, timeout=120)
        assert len({m.key for m in messages}) == 5
        assert all(any(f"k{i}".encode() in m.key for m in messages) for i in range(5))
        assert all(m.value is not None and m.value["type"] == "PUT" for m in messages)
    finally:
        assert worker.stop() == 0, worker.log_tail()
