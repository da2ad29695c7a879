"""Incremental snapshot on the real stack: Kafka, Apicurio, the emulator, two `cdcbridge run` workers streaming the
whole time, a writer changing keys inside the snapshot's range the whole time, and `cdcbridge snapshot --table`
as a process — killed with SIGKILL part-way (the workers must stop holding once its heartbeat is dead) and run again
to the end.

The pre-filled rows are trimmed from the stream first, so the untouched ones reach Kafka only through the snapshot.
Then: the last RECORD_IMAGE per key equals the source row for every key; per key, the seq of the messages never goes
back in partition order (redeliveries aside); folding the MUTATE_LOG messages with the apply core's guard gives the
source."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from cdcbridge.apply.core.fold import fold_row
from cdcbridge.apply.core.operations import decode_message
from cdcbridge.bridge.status import collect_status
from cdcbridge.config import parse_config
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.formats.keys import decode_key
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.snapshot.incremental_state import ChunkState, IncrementalSnapshotStore, IncrementalState
from cdcbridge.tablestore import StreamClient
from tests.integration.bridge.workers import CHECKOUT, write_config
from tests.integration.bridge_helpers import create_stream_table, ots_client

from .kafka_checks import all_messages, assert_last_images_are_the_source, assert_seq_never_regresses
from .traffic import Writer, prefill, source_rows, wait_until

TABLE = "ledger"
PREFILLED = 600
INCREMENTAL = {"chunk_rows": 100, "clock_skew_margin_seconds": 0.2, "fence_refresh_seconds": 0.5,
               "exporter_timeout_seconds": 4.0, "max_key_retries": 8,
               "run_in_workers": False}  # these tests run the exporter as a process themselves  # fmt: skip


def exporter_process(config_path: Path, log_path: Path, *args: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "cdcbridge", "snapshot", *(args or ("--table", TABLE)), "--config", str(config_path)]
    with log_path.open("ab") as log:
        return subprocess.Popen(argv, cwd=CHECKOUT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip


def tail(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def caught_up(config: Any, ots: Any, max_lag: int = 0) -> bool:
    """Every unfinished shard is owned and has produced (and checkpointed) all but `max_lag` records of its stream."""
    if config.coordination.status_table not in ots.list_table():
        return False  # the workers are still starting
    shards = collect_status(config, with_lag=True).shards
    live = [s for s in shards if not s.finished]
    return bool(live) and all(s.owner and s.lag_records is not None and s.lag_records <= max_lag for s in live)


def test_an_incremental_snapshot_during_writes_and_streaming_ends_with_kafka_equal_to_the_source(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, TABLE, [("region", "STRING"), ("id", "INTEGER")])
    prefill(ots, TABLE, PREFILLED)
    emulator.backend.call("trim_stream", TABLE, int(time.time() * 1000) + 1)  # only the snapshot has them now
    (parent,) = StreamClient(ots).list_all_shards(stream_id)
    emulator.backend.call("split_shard", TABLE, parent.shard_id)  # two shards to stream, one per worker
    config_path = tmp_path / "cdcbridge.yaml"
    data = write_config(config_path, stack, emulator.url,
                        [{"name": TABLE, "formats": ["RECORD_IMAGE", "MUTATE_LOG"], "partitions": 3}])  # fmt: skip
    data["snapshot"] = {"incremental": INCREMENTAL}
    config_path.write_text(yaml.safe_dump(data))
    config = parse_config(data, environ={})
    store = IncrementalSnapshotStore(ots, config.coordination.status_table)
    prefix = config.kafka.topic_prefix

    workers = [BridgeWorkerProcess(config_path, f"w{i}", tmp_path / f"w{i}.log", cwd=CHECKOUT).start()
               for i in (1, 2)]  # fmt: skip
    writer = Writer(ots, TABLE, keys=PREFILLED + 60, pause=0.004).start()
    try:
        wait_until(lambda: caught_up(config, ots, max_lag=100), 60, "the workers to stream the table")

        # 1. The exporter runs while the writes go on, and is killed with SIGKILL inside an open, fenced chunk.
        first = exporter_process(config_path, tmp_path / "exporter-1.log")

        def inside_a_fenced_chunk_after_one_emitted() -> bool:
            snapshots = store.list_snapshots(stream_id, TABLE)
            if not snapshots or snapshots[0].chunks < 1:
                return False
            chunk = store.read_chunk(stream_id, snapshots[0].snapshot_id)
            return chunk is not None and chunk.state is ChunkState.OPEN and chunk.fence_us is not None

        wait_until(lambda: inside_a_fenced_chunk_after_one_emitted() or first.poll() is not None, 90,
                   "the first exporter to emit a chunk and fence the next")  # fmt: skip
        assert first.poll() is None, tail(tmp_path / "exporter-1.log")
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        killed_at = time.monotonic()
        (killed,) = store.list_snapshots(stream_id, TABLE)
        assert killed.state is IncrementalState.RUNNING and 0 < killed.rows < PREFILLED
        left_open = store.read_chunk(stream_id, killed.snapshot_id)
        assert left_open.state is ChunkState.OPEN

        # 2. Writes after its fence are held; once the exporter's heartbeat is dead the workers stop holding and
        # catch up, while its chunk is still OPEN.
        time.sleep(2.0)
        writer.stop()
        hold = f"chunk {left_open.number} of incremental snapshot {killed.snapshot_id} is emitted"
        wait_until(lambda: any(hold in worker.log() for worker in workers), 10, "a hold of the chunk left open")
        wait_until(lambda: caught_up(config, ots), INCREMENTAL["exporter_timeout_seconds"] + 30,
                   "the workers to release their holds and catch up after the exporter died")  # fmt: skip
        assert store.read_chunk(stream_id, killed.snapshot_id).number == left_open.number
        assert store.read_chunk(stream_id, killed.snapshot_id).state is ChunkState.OPEN
        time.sleep(max(0.0, killed_at + INCREMENTAL["exporter_timeout_seconds"] + 0.5 - time.monotonic()))

        # 3. A second run takes the snapshot over and finishes it while writes go on again.
        writer = Writer(ots, TABLE, keys=PREFILLED + 60, pause=0.004, seed=11).start()
        second = exporter_process(config_path, tmp_path / "exporter-2.log")
        assert second.wait(150) == 0, tail(tmp_path / "exporter-2.log")
        second_log = (tmp_path / "exporter-2.log").read_text(errors="replace")  # whole: the take-over is its start
        assert "taking over incremental snapshot" in second_log, tail(tmp_path / "exporter-2.log")
        writes = writer.stop()
        assert writes > 100
        (done,) = store.list_snapshots(stream_id, TABLE)
        assert done.state is IncrementalState.DONE and done.snapshot_id == killed.snapshot_id
        assert done.range_done and not done.pending_keys
        wait_until(lambda: caught_up(config, ots), 60, "the workers to produce the last writes")
    finally:
        writer.stop()
        for worker in workers:
            worker.stop()
    held = [w.log() for w in workers]
    assert any("holds its records until" in log for log in held), "no worker ever held a record of a chunk"
    assert any("no longer holds its records" in log for log in held)

    source = source_rows(ots, TABLE)
    assert len(source) > PREFILLED / 2
    images = all_messages(stack, f"{prefix}.{TABLE}.image")
    mutations = all_messages(stack, f"{prefix}.{TABLE}.mutation")
    assert any(m.value and m.value["source"]["shard_id"] == "snapshot" for m in images)

    # The last image per key is the source row; per key, in partition order, the seq never goes back.
    assert_last_images_are_the_source(images, source)
    for topic_messages in (images, mutations):
        assert_seq_never_regresses(topic_messages)

    # Folding the MUTATE_LOG messages through the apply guard gives the source.
    operations: dict[bytes, list[Any]] = defaultdict(list)
    for message in mutations:
        if message.value is not None:
            operations[message.key].append(decode_message(message.value))
    folded = {}
    for key, ops in operations.items():
        row = fold_row(None, ops).row
        if row is not None and not row.deleted:
            folded[tuple(decode_key(key))] = {name: column.value for name, column in row.columns.items()}
    wrong = [pk for pk in set(source) | set(folded) if source.get(pk) != folded.get(pk)]
    assert not wrong, [(pk, source.get(pk), folded.get(pk)) for pk in sorted(wrong)[:5]]


def cli(config_path: Path, *args: str) -> str:
    """Run one `cdcbridge` command to its end; its output (it must exit 0)."""
    done = subprocess.run([sys.executable, "-m", "cdcbridge", *args, "--config", str(config_path)], cwd=CHECKOUT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_signal_row_is_run_by_run_pending_and_obeys_pause_resume_and_cancel_from_the_cli(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    from tablestore import Condition, Row, RowExistenceExpectation

    table = "signalled"
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, table, [("region", "STRING"), ("id", "INTEGER")])
    prefill(ots, table, 400)
    config_path = tmp_path / "cdcbridge.yaml"
    data = write_config(config_path, stack, emulator.url, [{"name": table, "partitions": 2}])
    data["snapshot"] = {"incremental": {**INCREMENTAL, "chunk_rows": 40}}
    config_path.write_text(yaml.safe_dump(data))
    config = parse_config(data, environ={})
    store = IncrementalSnapshotStore(ots, config.coordination.status_table)
    worker = BridgeWorkerProcess(config_path, "w1", tmp_path / "w1.log", cwd=CHECKOUT).start()
    exporter = None
    try:
        wait_until(lambda: caught_up(config, ots), 60, "the worker to stream the table")
        # What any tool writes to ask for a snapshot of the whole table (README "Signal row").
        signal_key = [("StreamId", stream_id), ("StatusType", "IncrementalSnapshot"), ("StatusValue", "ask-1")]
        ots.put_row(config.coordination.status_table, Row(signal_key, [("Table", table), ("State", "PENDING")]),
                    Condition(RowExistenceExpectation.EXPECT_NOT_EXIST))  # fmt: skip
        exporter = exporter_process(config_path, tmp_path / "exporter.log", "run-pending")

        def snapshot() -> Any:
            return store.read(stream_id, "ask-1")

        wait_until(lambda: snapshot().chunks >= 2, 60, "two chunks of the requested snapshot")
        assert snapshot().requested_by.value == "signal" and snapshot().state is IncrementalState.RUNNING
        assert "RUNNING -> PAUSED" in cli(config_path, "snapshot", "pause", "--table", table)
        wait_until(lambda: store.read_chunk(stream_id, "ask-1").state is not ChunkState.OPEN, 15,
                   "the paused snapshot to close its chunk (no holds while paused)")  # fmt: skip
        paused_at = snapshot().chunks
        time.sleep(3)
        assert snapshot().chunks == paused_at and store.read_chunk(stream_id, "ask-1").state is not ChunkState.OPEN
        status = cli(config_path, "status", "--no-lag")
        assert "ask-1" in status and "PAUSED" in status and "requested by" not in status
        assert "PAUSED -> RUNNING" in cli(config_path, "snapshot", "resume", "--table", table, "--id", "ask-1")
        wait_until(lambda: snapshot().chunks > paused_at + 1, 30, "chunks after the resume")
        assert "RUNNING -> CANCELLED" in cli(config_path, "snapshot", "cancel", "--table", table)
        assert exporter.wait(30) == 1, tail(tmp_path / "exporter.log")
        assert "incremental snapshot ask-1 cancelled" in tail(tmp_path / "exporter.log")
        assert store.read_chunk(stream_id, "ask-1").state is not ChunkState.OPEN
        assert 0 < snapshot().rows < 400 and snapshot().state is IncrementalState.CANCELLED
    finally:
        if exporter is not None and exporter.poll() is None:
            exporter.kill()
        worker.stop()
