"""Bridge workers run requested incremental snapshots themselves (`snapshot.incremental.run_in_workers`), on the
real stack: a signal row written with the Tablestore SDK is claimed by one of two running `cdcbridge run` workers;
that worker is killed with SIGKILL part-way, and the other one takes the snapshot over once its heartbeat is dead
and runs it to DONE while writes go on. Kafka then holds the source: the pre-filled rows were trimmed from the
stream, so the untouched ones reach Kafka only through the snapshot."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from tablestore import Condition, Row, RowExistenceExpectation

from cdcbridge.config import parse_config
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.snapshot.incremental_state import IncrementalSnapshotStore, IncrementalState
from cdcbridge.tablestore import StreamClient
from tests.integration.bridge.workers import CHECKOUT, write_config
from tests.integration.bridge_helpers import create_stream_table, ots_client

from .kafka_checks import all_messages, assert_last_images_are_the_source, assert_seq_never_regresses
from .test_incremental_snapshot import INCREMENTAL, caught_up
from .traffic import Writer, prefill, source_rows, wait_until

TABLE = "requested"
PREFILLED = 400


def test_a_signal_row_is_run_by_a_worker_and_taken_over_after_a_kill(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, TABLE, [("region", "STRING"), ("id", "INTEGER")])
    prefill(ots, TABLE, PREFILLED)
    emulator.backend.call("trim_stream", TABLE, int(time.time() * 1000) + 1)  # only the snapshot has them now
    (parent,) = StreamClient(ots).list_all_shards(stream_id)
    emulator.backend.call("split_shard", TABLE, parent.shard_id)
    config_path = tmp_path / "cdcbridge.yaml"
    data = write_config(config_path, stack, emulator.url,
                        [{"name": TABLE, "formats": ["RECORD_IMAGE", "MUTATE_LOG"], "partitions": 3,
                          "on_trimmed": "continue"}])  # fmt: skip
    data["snapshot"] = {"incremental": {**INCREMENTAL, "chunk_rows": 40, "run_in_workers": True,
                                        "worker_poll_seconds": 1.0}}  # fmt: skip
    config_path.write_text(yaml.safe_dump(data))
    config = parse_config(data, environ={})
    store = IncrementalSnapshotStore(ots, config.coordination.status_table)
    prefix = config.kafka.topic_prefix

    workers = {name: BridgeWorkerProcess(config_path, name, tmp_path / f"{name}.log", cwd=CHECKOUT).start()
               for name in ("w1", "w2")}  # fmt: skip
    writer = Writer(ots, TABLE, keys=PREFILLED + 40, pause=0.01).start()
    try:
        wait_until(lambda: caught_up(config, ots, max_lag=100), 90, "the workers to stream the table")
        # What any tool writes to ask for a snapshot (README "Signal row"): no CLI, no run-pending.
        signal_key = [("StreamId", stream_id), ("StatusType", "IncrementalSnapshot"), ("StatusValue", "ask-1")]
        ots.put_row(config.coordination.status_table, Row(signal_key, [("Table", TABLE), ("State", "PENDING")]),
                    Condition(RowExistenceExpectation.EXPECT_NOT_EXIST))  # fmt: skip

        def snapshot():  # type: ignore[no-untyped-def]
            return store.read(stream_id, "ask-1")

        wait_until(lambda: snapshot().chunks >= 2, 90, "a worker to claim the signal row and emit two chunks")
        running = snapshot()
        assert running.state is IncrementalState.RUNNING and running.rows < PREFILLED
        runner = running.exporter_id.rsplit("-", 1)[0]
        assert runner in workers, running.exporter_id
        survivor = next(name for name in workers if name != runner)
        workers[runner].kill()

        done = wait_until(lambda: (s := snapshot()).state is IncrementalState.DONE and s, 180,
                          "the surviving worker to take the snapshot over and finish it")  # fmt: skip
        assert done.exporter_id.rsplit("-", 1)[0] == survivor
        assert "its exporter was dead" in workers[survivor].log()
        assert done.range_done and not done.pending_keys
        writes = writer.stop()
        assert writes > 50
        wait_until(lambda: caught_up(config, ots), 90, "the survivor to produce the last writes")
    finally:
        writer.stop()
        for worker in workers.values():
            worker.stop()

    source = source_rows(ots, TABLE)
    assert len(source) > PREFILLED / 2
    images = all_messages(stack, f"{prefix}.{TABLE}.image")
    assert any(m.value and m.value["source"]["shard_id"] == "snapshot" for m in images)
    assert_last_images_are_the_source(images, source)
    assert_seq_never_regresses(images)
    assert_seq_never_regresses(all_messages(stack, f"{prefix}.{TABLE}.mutation"))


def test_a_worker_stopped_with_sigterm_releases_its_snapshot_and_another_takes_it_over_at_once(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    """The exporter timeout is long (30 s): a takeover well before it shows the stopped worker released the claim
    (its heartbeat cleared) instead of leaving it to die."""
    table = "released"
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, table, [("region", "STRING"), ("id", "INTEGER")])
    prefill(ots, table, 300)
    config_path = tmp_path / "cdcbridge.yaml"
    data = write_config(config_path, stack, emulator.url,
                        [{"name": table, "formats": ["RECORD_IMAGE"], "partitions": 2}])  # fmt: skip
    data["snapshot"] = {"incremental": {**INCREMENTAL, "chunk_rows": 30, "exporter_timeout_seconds": 30.0,
                                        "run_in_workers": True, "worker_poll_seconds": 1.0}}  # fmt: skip
    config_path.write_text(yaml.safe_dump(data))
    config = parse_config(data, environ={})
    store = IncrementalSnapshotStore(ots, config.coordination.status_table)
    workers = {name: BridgeWorkerProcess(config_path, name, tmp_path / f"{name}.log", cwd=CHECKOUT).start()
               for name in ("w1", "w2")}  # fmt: skip
    try:
        wait_until(lambda: caught_up(config, ots), 90, "the workers to stream the table")
        signal_key = [("StreamId", stream_id), ("StatusType", "IncrementalSnapshot"), ("StatusValue", "ask-2")]
        ots.put_row(config.coordination.status_table, Row(signal_key, [("Table", table), ("State", "PENDING")]),
                    Condition(RowExistenceExpectation.EXPECT_NOT_EXIST))  # fmt: skip
        wait_until(lambda: store.read(stream_id, "ask-2").chunks >= 2, 90, "two chunks run by a worker")
        runner = store.read(stream_id, "ask-2").exporter_id.rsplit("-", 1)[0]
        survivor = next(name for name in workers if name != runner)
        assert workers[runner].stop() == 0, workers[runner].log()[-4000:]
        stopped_at = time.monotonic()
        assert "released at the worker's stop" in workers[runner].log()
        taken = wait_until(lambda: (s := store.read(stream_id, "ask-2")).exporter_id.startswith(survivor) and s, 60,
                           "the other worker to take the released snapshot over")  # fmt: skip
        assert time.monotonic() - stopped_at < 15, "taken over only after the exporter timeout: not released"
        assert taken.state is IncrementalState.RUNNING
        done = wait_until(lambda: (s := store.read(stream_id, "ask-2")).state is IncrementalState.DONE and s, 180,
                          "the snapshot to finish on the other worker")  # fmt: skip
        assert done.rows >= 300 - 30 and done.range_done
    finally:
        for worker in workers.values():
            worker.stop()
    images = all_messages(stack, f"{config.kafka.topic_prefix}.{table}.image")
    assert_last_images_are_the_source(images, source_rows(ots, table))
