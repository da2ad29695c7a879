"""A real `cdcbridge run` process with metrics on and JSON logs: its /metrics endpoint, scraped over HTTP, counts
exactly the flow it moved (records in, messages produced and acknowledged, produce latency, checkpoints, lag)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families
from tablestore import Condition, Row, RowExistenceExpectation

from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from tests.integration.bridge.workers import wait_until, write_config
from tests.integration.bridge_helpers import create_stream_table, ots_client

IGNORE = Condition(RowExistenceExpectation.IGNORE)
TABLE = "metered"
ROWS = 40

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode("utf-8")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of every series of `name` whose labels include `labels`."""
    wanted = labels.items()
    return sum(value for (sample, series), value in samples.items() if sample == name and wanted <= set(series))


def _series(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {series: value for (sample, series), value in samples.items() if sample == name}


def _json_log_lines(log: str) -> list[dict]:
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def test_a_running_worker_serves_metrics_that_count_its_flow(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    ots = ots_client(emulator.url)
    create_stream_table(ots, TABLE, [("id", "INTEGER")])
    config_path = tmp_path / "bridge.yaml"
    data = write_config(config_path, stack, emulator.url, [{"name": TABLE, "formats": ["MUTATE_LOG", "RECORD_IMAGE"]}])
    data["observability"] = {"metrics_port": 0, "metrics_host": "127.0.0.1", "log_format": "json"}
    config_path.write_text(yaml.safe_dump(data))
    prefix = data["kafka"]["topic_prefix"]
    topics = {f"{prefix}.{TABLE}.mutation", f"{prefix}.{TABLE}.image"}

    worker = BridgeWorkerProcess(config_path, "metered-1", tmp_path / "worker.log").start()
    try:
        # Port 0: the worker logs where it serves, as a JSON line (log_format: json reaches the process).
        worker.wait_for_log(r'"message": "metrics at http://')
        url = next(
            line["message"].removeprefix("metrics at ")
            for line in _json_log_lines(worker.log())
            if line["message"].startswith("metrics at ")
        )
        for i in range(ROWS):
            ots.put_row(TABLE, Row([("id", i)], [("name", f"n{i}"), ("qty", i)]), IGNORE)

        def settled() -> Samples | None:
            samples = _scrape(url)
            acked = _total(samples, "cdcbridge_messages_acked_total")
            lag_records = _series(samples, "cdcbridge_lag_records")
            lag_seconds = _series(samples, "cdcbridge_lag_seconds")
            done = (
                acked == 2 * ROWS
                and lag_records
                and all(value == 0 for value in lag_records.values())
                and lag_seconds
                and all(value == 0 for value in lag_seconds.values())
            )
            return samples if done else None

        samples = wait_until(settled, 120, f"{2 * ROWS} acks and no lag on {url}", worker.log)
    finally:
        worker.stop()
    assert worker.returncode == 0, worker.log()[-4000:]

    # Records in: one stream record per put, read from the table's shard(s).
    fetched = _series(samples, "cdcbridge_records_fetched_total")
    assert sum(fetched.values()) == ROWS
    assert {dict(series)["table"] for series in fetched} == {TABLE}
    shards = {dict(series)["shard"] for series in fetched}
    # Messages out: one MUTATE_LOG and one RECORD_IMAGE message per record; every one produced is acknowledged.
    for topic in topics:
        assert _total(samples, "cdcbridge_messages_produced_total", table=TABLE, topic=topic) == ROWS
        assert _total(samples, "cdcbridge_messages_acked_total", topic=topic) == ROWS
    assert _total(samples, "cdcbridge_produce_errors_total") == 0
    # Produce → ack latency: one observation per ack, each a plausible time for a local broker.
    count = _total(samples, "cdcbridge_produce_latency_seconds_count")
    assert count == 2 * ROWS
    assert 0 < _total(samples, "cdcbridge_produce_latency_seconds_sum") / count < 30
    assert _total(samples, "cdcbridge_produce_latency_seconds_bucket", le="+Inf") == count
    # Checkpoints per shard (acks moved them), none failed; lag per shard is 0 once everything is confirmed.
    for shard in shards:
        assert _total(samples, "cdcbridge_checkpoints_total", table=TABLE, shard=shard) >= 1
        assert _total(samples, "cdcbridge_lag_records", table=TABLE, shard=shard) == 0
    assert _total(samples, "cdcbridge_checkpoint_failures_total") == 0
    assert _total(samples, "cdcbridge_trimmed_data_events_total") == 0
    # Coordination: this worker took and holds the table's lease(s).
    assert _total(samples, "cdcbridge_leases_held", worker="metered-1") == len(shards)
    assert _total(samples, "cdcbridge_lease_events_total", event="taken") >= 1

    # Every line the process wrote is a JSON object with the structured fields (no text-format lines).
    log = worker.log()
    lines = _json_log_lines(log)
    assert len(lines) >= 3
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    assert not re.search(r"^\d{4}-\d\d-\d\dT\S+ (INFO|WARNING|ERROR)", log, re.MULTILINE)
