"""A real `cdcbridge run` process whose checkpoints fall behind a trim of the emulator's streams (its HTTP trim
admin): the `stop` table's shard halts with the error naming shard, table, owner and fix and produces nothing after
the gap; the `continue` table's shard goes on from the oldest retained record and counts the trimmed read. The halted
shard is a stalled one: its share of retention used rises from scrape to scrape, the retention WARNING is logged once
(shares set tiny, the stream keeps 24 h), and `cdcbridge status` shows the trimmed checkpoint. The fix the error
names works: after `cdcbridge snapshot` the halted shard continues."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families
from tablestore import Condition, Row, RowExistenceExpectation

from cdcbridge.bridge.status import collect_status, render_text
from cdcbridge.config import load_config
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.emulator_admin import EmulatorAdmin
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.snapshot.runner import run_snapshot
from tests.integration.bridge.workers import wait_until, write_config
from tests.integration.bridge_helpers import create_stream_table, ots_client

IGNORE = Condition(RowExistenceExpectation.IGNORE)
STOP_TABLE, CONTINUE_TABLE = "trim_stop", "trim_continue"
BEFORE, LOST, AFTER = 5, 4, 3  # rows read before the workers stop, written and trimmed while down, written after


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode("utf-8")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _total(samples: dict, name: str, **labels: str) -> float:
    return sum(value for (sample, series), value in samples.items() if sample == name and labels.items() <= set(series))


def _metrics_url(worker: BridgeWorkerProcess) -> str:
    worker.wait_for_log(r'"message": "metrics at http://')
    lines = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
    prefix = "metrics at "
    return next(line["message"].removeprefix(prefix) for line in lines if line["message"].startswith(prefix))


def _write(ots: object, start: int, count: int) -> None:
    for table in (STOP_TABLE, CONTINUE_TABLE):
        for i in range(start, start + count):
            ots.put_row(table, Row([("id", i)], [("v", f"v{i}")]), IGNORE)  # type: ignore[attr-defined]


def test_stop_halts_continue_counts_and_the_stalled_share_rises(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    ots = ots_client(emulator.url)
    for table in (STOP_TABLE, CONTINUE_TABLE):
        create_stream_table(ots, table, [("id", "INTEGER")])
    config_path = tmp_path / "bridge.yaml"
    data = write_config(config_path, stack, emulator.url, [
        {"name": STOP_TABLE, "formats": ["MUTATE_LOG"], "partitions": 1, "on_trimmed": "stop"},
        {"name": CONTINUE_TABLE, "formats": ["MUTATE_LOG"], "partitions": 1, "on_trimmed": "continue"},
    ])  # fmt: skip
    # 24 h expiration: 0.00005 of it is 4.3 s, so a shard stalled for seconds crosses the WARNING share.
    data["observability"] = {"metrics_port": 0, "log_format": "json", "retention_warning_share": 0.00005,
                             "retention_error_share": 0.9}  # fmt: skip
    config_path.write_text(yaml.safe_dump(data))
    mutation = {t: f"{data['kafka']['topic_prefix']}.{t}.mutation" for t in (STOP_TABLE, CONTINUE_TABLE)}

    # 1. Read and confirm the first rows, then stop (SIGTERM checkpoints and releases).
    first = BridgeWorkerProcess(config_path, "retention-1", tmp_path / "first.log").start()
    try:
        url = _metrics_url(first)
        _write(ots, 0, BEFORE)
        wait_until(lambda: all(_total(_samples(url), "cdcbridge_messages_acked_total", topic=topic) == BEFORE
                               for topic in mutation.values()), 120, "the first rows acked", first.log)  # fmt: skip
    finally:
        first.stop()
    assert first.returncode == 0, first.log()[-4000:]

    # 2. While no worker runs, rows are written and trimmed before anyone reads them; then more rows.
    _write(ots, BEFORE, LOST)
    admin = EmulatorAdmin(emulator.url)
    for table in (STOP_TABLE, CONTINUE_TABLE):
        assert admin.trim(table, int(time.time() * 1000) + 1) == BEFORE + LOST
    _write(ots, BEFORE + LOST, AFTER)

    # 3. A worker resumes from the stored checkpoints, which now lie before the oldest retained record.
    second = BridgeWorkerProcess(config_path, "retention-2", tmp_path / "second.log").start()
    try:
        url = _metrics_url(second)

        def settled() -> dict | None:
            samples = _samples(url)
            halted = _total(samples, "cdcbridge_shard_halted", table=STOP_TABLE) == 1
            continued = _total(samples, "cdcbridge_messages_acked_total", topic=mutation[CONTINUE_TABLE]) == AFTER
            return samples if halted and continued else None

        samples = wait_until(settled, 120, "the stop shard halted and the continue shard caught up", second.log)
        # `continue`: the trimmed read is counted; `stop`: nothing counted as skipped, nothing produced after the gap.
        assert _total(samples, "cdcbridge_trimmed_data_events_total", table=CONTINUE_TABLE) == 1
        assert _total(samples, "cdcbridge_trimmed_data_events_total", table=STOP_TABLE) == 0
        assert _total(samples, "cdcbridge_messages_produced_total", topic=mutation[STOP_TABLE]) == 0
        assert _total(samples, "cdcbridge_shard_halted", table=CONTINUE_TABLE) == 0
        # The halted shard is stalled at its checkpoint: its share of retention used rises, the caught-up one is 0.
        ratio = _total(samples, "cdcbridge_shard_retention_used_ratio", table=STOP_TABLE)
        assert ratio > 0

        def stop_ratio() -> float:
            return _total(_samples(url), "cdcbridge_shard_retention_used_ratio", table=STOP_TABLE)

        rising = wait_until(lambda: (r := stop_ratio()) > ratio and r, 60, "a rising share", second.log)
        assert rising > ratio
        assert _total(_samples(url), "cdcbridge_shard_retention_used_ratio", table=CONTINUE_TABLE) == 0
        assert _total(samples, "cdcbridge_shard_oldest_unread_age_seconds", table=STOP_TABLE) > 0
        second.wait_for_log(r"oldest unread record is .* old, .*WARNING threshold", timeout=60)

        status = collect_status(load_config(config_path))
        text = render_text(status)
    finally:
        second.stop()
    assert second.returncode == 0, second.log()[-4000:]

    lines = [json.loads(line) for line in second.log().splitlines() if line.startswith("{")]
    halts = [line for line in lines if "DATA LOST BY TRIM, shard halted" in line["message"]]
    assert len(halts) == 1 and halts[0]["level"] == "ERROR"  # once, although the halted shard retried
    halt = halts[0]["message"]
    assert f"of table {STOP_TABLE} (owner retention-2)" in halt and "records after " in halt
    assert "cdcbridge snapshot" in halt and "on_trimmed: continue" in halt
    warnings = [line for line in lines if "WARNING threshold" in line["message"]]
    assert all(line["level"] == "WARNING" for line in warnings)
    assert any(f"table {STOP_TABLE} shard" in line["message"] and "(owner retention-2)" in line["message"]
               for line in warnings)  # fmt: skip
    assert len([w for w in warnings if STOP_TABLE in w["message"]]) == 1  # logged on crossing, not every poll
    assert any(line["level"] == "ERROR" and "DATA LOSS" in line["message"] for line in lines)  # continue, loudly
    # `cdcbridge status`: the stop table's checkpoint is trimmed; the continue table's shard uses 0 % of retention.
    by_table = {shard.table: shard for shard in status.shards}
    assert by_table[STOP_TABLE].trimmed and not by_table[CONTINUE_TABLE].trimmed
    assert by_table[CONTINUE_TABLE].retention_used == 0
    assert "TRIMMED" in text and "RETAIN" in text

    # 4. The fix the error names: with the workers stopped, a snapshot of the tables; the halted shard then continues
    # (the snapshot holds the lost changes) and later changes flow again.
    [done] = [r for r in run_snapshot(load_config(config_path)) if r.table == STOP_TABLE]
    assert done.rows == BEFORE + LOST + AFTER
    third = BridgeWorkerProcess(config_path, "retention-3", tmp_path / "third.log").start()
    try:
        url = _metrics_url(third)
        third.wait_for_log(f"table {STOP_TABLE} shard .*: records after its checkpoint were trimmed, but a snapshot")
        _write(ots, 100, 2)
        wait_until(lambda: _total(_samples(url), "cdcbridge_messages_acked_total", topic=mutation[STOP_TABLE]) == 2,
                   120, "the changes after the snapshot acked", third.log)  # fmt: skip
        assert _total(_samples(url), "cdcbridge_shard_halted", table=STOP_TABLE) == 0
    finally:
        third.stop()
    assert third.returncode == 0, third.log()[-4000:]
    assert "DATA LOST BY TRIM" not in third.log()
