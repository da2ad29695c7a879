"""Base + incremental with real processes: Kafka, Apicurio, the emulator, `cdcbridge snapshot` (killed with SIGKILL
part-way and run again), a `cdcbridge run` worker with an end time, and the Spark apply job into Delta.

The pre-filled rows are trimmed from the stream before anything runs, so they reach the target only through the
snapshot; writes go on during the export and while the worker streams, and the target must equal the source row
by row."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcbridge.apply.job import run_apply
from cdcbridge.config import BridgeConfig, parse_config
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.formats.keys import decode_key
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.snapshot.state import SnapshotState, SnapshotStateStore
from cdcbridge.tablestore import StreamClient
from tests.integration.bridge.workers import CHECKOUT, end_offsets, read_messages, write_config
from tests.integration.bridge_helpers import BridgeThread, create_stream_table, ots_client

from .traffic import Writer, key, prefill, source_rows, wait_until

HERE = Path(__file__).parent
BOOKKEEPING = ("_versions", "_seq", "_deleted", "_source_ts")


def snapshot_process(config_path: Path, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen([sys.executable, str(HERE / "run_snapshot.py"), str(config_path)], cwd=CHECKOUT,
                                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip


def log_of(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:]


def configure(path: Path, data: dict[str, Any], **sections: dict[str, Any]) -> BridgeConfig:
    data = {**data, **sections}
    path.write_text(yaml.safe_dump(data))
    return parse_config(data, environ={})


def delta_rows(spark: Any, path: Path) -> dict[tuple, dict[str, Any]]:
    frame = spark.read.format("delta").load(str(path)).where("NOT _deleted")
    rows = {}
    for row in frame.collect():
        values = row.asDict()
        rows[(values["region"], values["id"])] = {
            name: value for name, value in values.items()
            if name not in ("region", "id", *BOOKKEEPING) and value is not None
        }  # fmt: skip
    return rows


def last_images(stack: StackEndpoints, topic: str) -> dict[tuple, dict[str, Any]]:
    """The compacted view of the image topic: per key the last image, deleted rows left out."""
    total = sum(end_offsets(stack.kafka_bootstrap, topic).values())
    messages = read_messages(stack, topic, until=lambda read: len(read) >= total, timeout=60)
    latest: dict[tuple, dict[str, Any] | None] = {}
    for message in messages:
        pk = tuple(decode_key(message.key))
        value = message.value
        if value is None or value["row_deleted"]:
            latest[pk] = None
        else:
            latest[pk] = {name: cell["value"] for name, cell in value["columns"].items()}
    return {pk: row for pk, row in latest.items() if row is not None}


def test_a_prefilled_table_ends_equal_to_the_source_with_writes_during_the_export_and_a_killed_snapshot(
    stack: StackEndpoints, emulator: EmulatorServer, spark: Any, tmp_path: Path
) -> None:
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, "accounts", [("region", "STRING"), ("id", "INTEGER")])
    prefill(ots, "accounts", 2000)
    emulator.backend.call("trim_stream", "accounts", int(time.time() * 1000) + 1)  # only the snapshot has them now
    config_path = tmp_path / "cdcbridge.yaml"
    base = write_config(config_path, stack, emulator.url,
                        [{"name": "accounts", "formats": ["RECORD_IMAGE", "MUTATE_LOG"], "partitions": 3}])  # fmt: skip
    sections = {
        "snapshot": {"parallelism": 4, "page_rows": 50, "split_size_bytes": 20_000, "clock_skew_margin_seconds": 0.2},
        "apply": {"delta_path": str(tmp_path / "delta"), "checkpoint_location": str(tmp_path / "apply-checkpoint"),
                  "app_id": "snapshot-test", "prefer_format": "MUTATE_LOG"},
        "bridge": {"end_time_grace_seconds": 1, "end_time_check_interval_seconds": 0.5},
    }  # fmt: skip
    config = configure(config_path, base, **sections)
    store = SnapshotStateStore(ots, config.coordination.status_table)

    writer = Writer(ots, "accounts", keys=2200).start()
    wait_until(lambda: writer.operations >= 20, 30, "writes before the snapshot (the workers skip them)")
    writes_before_export = writer.operations
    emulator.faults.configure({"rules": [{"api": "GetRange", "latency_ms": 250}]})  # a slow export, to kill it
    first = snapshot_process(config_path, tmp_path / "snapshot-1.log")

    def part_way() -> bool:
        if config.coordination.status_table not in ots.list_table():
            return False  # the snapshot process is still starting
        ranges = store.read_ranges(stream_id)
        return bool(ranges) and any(r.rows for r in ranges) and not all(r.done for r in ranges)

    wait_until(lambda: part_way() or first.poll() is not None, 90, "the first snapshot to export part of the table")
    first.kill()
    first.wait(30)
    emulator.faults.clear()
    interrupted = store.read(stream_id, "accounts")
    assert interrupted is not None and interrupted.state is SnapshotState.RUNNING, log_of(tmp_path / "snapshot-1.log")
    exported_before_kill = sum(r.rows for r in store.read_ranges(stream_id))
    assert 0 < exported_before_kill < 2000

    second = snapshot_process(config_path, tmp_path / "snapshot-2.log")
    assert second.wait(120) == 0, log_of(tmp_path / "snapshot-2.log")
    assert "resumed and finished" in log_of(tmp_path / "snapshot-2.log")
    assert writer.operations - writes_before_export > 20  # writes went on while the table was exported
    done = store.read(stream_id, "accounts")
    assert done.state is SnapshotState.DONE and done.start_us == interrupted.start_us and done.rows > 1600

    # The worker streams from the snapshot's start while the writes go on, until an end time it then stops at.
    end_time = datetime.now(UTC) + timedelta(seconds=4)
    configure(config_path, base, **{**sections, "bridge": {**sections["bridge"], "end_time": end_time.isoformat()}})
    worker = BridgeWorkerProcess(config_path, "snapshot-worker", tmp_path / "worker.log").start()
    try:
        wait_until(lambda: datetime.now(UTC) >= end_time - timedelta(seconds=0.3), 30, "the end time to come near")
        writer.stop()
        wait_until(lambda: datetime.now(UTC) > end_time, 5, "the end time")
        assert worker.wait(90) == 0, worker.log()[-4000:]
    finally:
        worker.stop()
    assert "skipping records committed before the snapshot start" in worker.log()

    source = source_rows(ots, "accounts")
    assert len(source) > 1600
    run_apply(config, once=True, spark=spark)
    target = delta_rows(spark, tmp_path / "delta" / "accounts")
    mismatches = [k for k in set(source) | set(target) if source.get(k) != target.get(k)]
    assert not mismatches, [(k, source.get(k), target.get(k)) for k in sorted(mismatches)[:5]]
    images = last_images(stack, f"{config.kafka.topic_prefix}.accounts.image")
    assert images == source  # the compacted image topic is a replica too


@pytest.mark.parametrize(
    ("table", "split_after", "end_after", "total"),
    [("events", 20, 40, 55), ("events_late", 30, 20, 45)],
    ids=["end-time-in-the-children", "parent-closes-after-the-end-time"],
)
def test_a_worker_with_an_end_time_produces_exactly_the_changes_up_to_it_and_exits_0(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path, table: str, split_after: int, end_after: int,
    total: int,
) -> None:  # fmt: skip
    """The table's one shard splits after `split_after` writes; the end time falls after `end_after` of `total`.
    When the parent closes after the end time it stays unfinished, held by its worker without restarts."""
    from tablestore import Condition, Row, RowExistenceExpectation

    ignore = Condition(RowExistenceExpectation.IGNORE)
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, table, [("region", "STRING"), ("id", "INTEGER")])
    streams = StreamClient(ots)
    written = 0

    def write_until(n: int) -> None:
        nonlocal written
        for i in range(written, n):
            row_key = key(i % 12)
            if i % 4 == 0:
                ots.put_row(table, Row(row_key, [("balance", i), ("owner", f"o{i}")]), ignore)
            elif i % 4 == 1:
                ots.update_row(table, Row(row_key, {"increment": [("balance", 3)]}), ignore)
            elif i % 4 == 2:
                ots.update_row(table, Row(row_key, {"put": [("note", f"n{i}")], "delete_all": ["owner"]}), ignore)
            else:
                ots.delete_row(table, Row(row_key), ignore)
        written = n

    parent = streams.list_all_shards(stream_id)[0].shard_id
    end_us = 0
    for event, after in sorted([("split", split_after), ("end", end_after)], key=lambda item: item[1]):
        write_until(after)
        if event == "split":
            emulator.backend.call("split_shard", table, parent)
        else:
            end_us = time.time_ns() // 1000  # after this write was acknowledged, before the next one commits
    write_until(total)
    records = []
    for shard in streams.list_all_shards(stream_id):
        iterator = streams.get_shard_iterator(stream_id, shard.shard_id)
        while iterator:
            page = streams.get_stream_record(iterator, 1000)
            records += page.records
            if not page.records:
                break
            iterator = page.next_shard_iterator
    up_to_end = {r.sequence.key() for r in records if r.sequence.timestamp_us <= end_us}
    assert len(records) == total and len(up_to_end) == end_after

    config_path = tmp_path / "cdcbridge.yaml"
    base = write_config(config_path, stack, emulator.url, [{"name": table, "partitions": 2}])
    end_time = datetime.fromtimestamp(0, UTC) + timedelta(microseconds=end_us)
    bridge = {"end_time": end_time.isoformat(), "end_time_grace_seconds": 1, "end_time_check_interval_seconds": 0.5}
    configure(config_path, base, bridge=bridge)
    worker = BridgeWorkerProcess(config_path, "until-end", tmp_path / "worker.log").start()
    try:
        assert worker.wait(90) == 0, worker.log()[-4000:]
    finally:
        worker.stop()
    assert "every shard (3) passed the end time" in worker.log()
    parent_held = f"shard {parent} stays unfinished at its end" in worker.log()
    assert parent_held == (split_after > end_after), worker.log()[-4000:]
    assert "restarting from its stored checkpoint" not in worker.log()
    topic = f"{base['kafka']['topic_prefix']}.{table}.mutation"
    assert sum(end_offsets(stack.kafka_bootstrap, topic).values()) == end_after
    produced = read_messages(stack, topic, until=lambda read: len(read) >= end_after)
    assert {m.value["seq"]["seq_key"][:-6] for m in produced} == {k[:-6] for k in up_to_end}

    # A later run without the end time continues exactly where the first one stopped.
    rest = BridgeThread(configure(config_path, base), "after-end").start()
    try:
        produced = read_messages(stack, topic, until=lambda read: len(read) >= total)
    finally:
        rest.close()
    assert sorted(m.value["seq"]["seq_key"] for m in produced) == sorted(r.sequence.key() for r in records)
