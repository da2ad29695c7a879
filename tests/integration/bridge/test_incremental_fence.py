"""A bridge worker as the shard owner of an incremental snapshot's chunk, on the real stack (emulator, Kafka,
Apicurio), the chunk driven by hand through the protocol store (no exporter): the worker reports the dirty key of the
window once it passed the fence, holds an in-range record committed after the fence (and the out-of-range record
behind it) while the chunk is OPEN, and produces both, in order, once the chunk is marked EMITTED."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
import yaml
from tablestore import Condition, Row, RowExistenceExpectation

from cdcbridge.changes import Sequence
from cdcbridge.config import IncrementalSnapshotSettings, SnapshotConfig
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.snapshot.incremental_state import ChunkState, IncrementalChunk, IncrementalSnapshotStore
from tests.integration.bridge.workers import leases, wait_until, write_config
from tests.integration.bridge_helpers import BridgeThread, bridge_config, create_stream_table, ots_client, read_topic

IGNORE = Condition(RowExistenceExpectation.IGNORE)
REFRESH, MARGIN = 0.5, 0.2


def _now_us() -> int:
    return int(time.time() * 1_000_000)


def test_a_worker_holds_in_range_records_after_the_fence_until_the_chunk_is_emitted(
    stack: StackEndpoints, emulator: EmulatorServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cdcbridge.bridge.chunk_watch")
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, "fenced", [("id", "INTEGER")])
    config = bridge_config(stack, emulator.url, [{"name": "fenced", "formats": ["MUTATE_LOG"], "partitions": 1}])
    incremental = IncrementalSnapshotSettings(fence_refresh_seconds=REFRESH, clock_skew_margin_seconds=MARGIN,
                                              exporter_timeout_seconds=30.0, run_in_workers=False)  # fmt: skip
    config = config.model_copy(update={"snapshot": SnapshotConfig(incremental=incremental)})
    topic = f"{config.kafka.topic_prefix}.fenced.mutation"

    def put(key: int) -> None:
        ots.put_row("fenced", Row([("id", key)], [("v", f"value-{key}")]), IGNORE)

    def keys(messages) -> list[int]:  # type: ignore[no-untyped-def]
        return [m.value["pk"][0]["value"] for m in messages]

    worker = BridgeThread(config, "fence-1").start()
    stop_heartbeat = threading.Event()
    try:
        put(1)
        read_topic(stack, topic, until=lambda read: keys(read) == [1], timeout=120)

        # The exporter's part, by hand: claim, announce [10, +inf), wait R + 2m, "read", set the fence.
        store = IncrementalSnapshotStore(ots, config.coordination.status_table)
        snapshot = store.claim(store.request(stream_id, "fenced", now_ms=int(time.time() * 1000)), "by-hand",
                               int(time.time() * 1000))  # fmt: skip

        def heartbeat() -> None:
            current = snapshot
            while not stop_heartbeat.wait(0.5):
                current = store.heartbeat(current, int(time.time() * 1000))

        threading.Thread(target=heartbeat, daemon=True).start()
        announced = IncrementalChunk(stream_id, snapshot.snapshot_id, 1, _now_us() - int(MARGIN * 1e6), None,
                                     begin=[("id", 10)], opened_ms=int(time.time() * 1000))  # fmt: skip
        store.open_chunk(snapshot, announced)
        time.sleep(REFRESH + 2 * MARGIN)
        fence = _now_us() + int((REFRESH + MARGIN) * 1e6)
        chunk = store.set_fence(announced, fence, [("id", 20)])
        put(12)  # in the window: dirty
        time.sleep(max(0.0, (fence - _now_us()) / 1e6) + 0.3)
        put(15)  # in range, after the fence: held
        put(2)  # out of range, but behind the held record in the shard: held too

        reports = wait_until(lambda: store.read_reports(stream_id, snapshot.snapshot_id, 1), 30,
                             "the worker's report on the chunk")  # fmt: skip
        (report,) = reports
        assert report.passed and report.dirty_keys == ([("id", 12)],)
        time.sleep(2 * REFRESH)
        held = read_topic(stack, topic, until=lambda read: len(read) >= 2, timeout=30)
        assert keys(held) == [1, 12], "15 and 2 wait for the chunk"

        store.close_chunk(chunk, ChunkState.EMITTED, int(time.time() * 1000))
        assert store.read_reports(stream_id, snapshot.snapshot_id, 1) == [], "reports go with the chunk"
        released = read_topic(stack, topic, until=lambda read: len(read) >= 4, timeout=60)
        assert keys(released) == [1, 12, 15, 2], "released in shard order"
        logged = [r.getMessage() for r in caplog.records if r.name == "cdcbridge.bridge.chunk_watch"]
        assert any(f"holds its records until chunk 1 of incremental snapshot {snapshot.snapshot_id}" in m
                   for m in logged), logged  # fmt: skip
        assert any("no longer holds its records" in m for m in logged), logged
    finally:
        stop_heartbeat.set()
        worker.close()


def test_a_worker_killed_inside_a_chunk_leaves_its_dirty_keys_to_the_next_owner(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    """The dirty keys live in the owner's memory until it reports: its checkpoint stays before the record that made
    a key dirty, so the owner after a kill -9 reads that record again and reports the key."""
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, "killed", [("id", "INTEGER")])
    config_path = tmp_path / "bridge.yaml"
    data = write_config(config_path, stack, emulator.url, [{"name": "killed", "formats": ["MUTATE_LOG"],
                                                           "partitions": 1}])  # fmt: skip
    data["snapshot"] = {"incremental": {"fence_refresh_seconds": REFRESH, "clock_skew_margin_seconds": MARGIN,
                                        "exporter_timeout_seconds": 60.0, "run_in_workers": False}}  # fmt: skip
    config_path.write_text(yaml.safe_dump(data))
    status_table, topic = data["coordination"]["status_table"], f"{data['kafka']['topic_prefix']}.killed.mutation"

    def put(key: int) -> None:
        ots.put_row("killed", Row([("id", key)], [("v", f"value-{key}")]), IGNORE)

    def seq_of(key: int) -> Sequence:
        read = read_topic(stack, topic, until=lambda got: any(m.value["pk"][0]["value"] == key for m in got))
        seq = next(m.value["seq"] for m in read if m.value["pk"][0]["value"] == key)
        return Sequence(seq["epoch"], seq["timestamp_us"], seq["row_index"])

    first = BridgeWorkerProcess(config_path, "w1", tmp_path / "first.log")
    second = BridgeWorkerProcess(config_path, "w1", tmp_path / "second.log")
    stop_heartbeat = threading.Event()
    try:
        first.start()
        put(1)
        seq_of(1)
        store = IncrementalSnapshotStore(ots, status_table)
        snapshot = store.claim(store.request(stream_id, "killed", now_ms=int(time.time() * 1000)), "by-hand",
                               int(time.time() * 1000))  # fmt: skip

        def heartbeat() -> None:
            current = snapshot
            while not stop_heartbeat.wait(0.5):
                current = store.heartbeat(current, int(time.time() * 1000))

        threading.Thread(target=heartbeat, daemon=True).start()
        announced = IncrementalChunk(stream_id, snapshot.snapshot_id, 1, _now_us() - int(MARGIN * 1e6), None,
                                     begin=[("id", 10)])  # fmt: skip
        store.open_chunk(snapshot, announced)
        time.sleep(REFRESH + 2 * MARGIN)
        store.set_fence(announced, _now_us() + 12_000_000, [("id", 20)])  # far enough to kill before the pass
        put(12)  # dirty
        put(2)  # outside the range
        dirty_seq, later_seq = seq_of(12), seq_of(2)
        time.sleep(2.5)  # the checkpoint pump runs every second: all three records are acknowledged by now
        (lease,) = leases(ots, status_table, stream_id)
        assert lease.checkpoint_seq is not None and lease.checkpoint_seq.sequence < dirty_seq < later_seq, (
            "the checkpoint stays before the dirty record while the shard has not reported"
        )
        assert store.read_reports(stream_id, snapshot.snapshot_id, 1) == []
        first.kill()

        second.start()
        (report,) = wait_until(lambda: store.read_reports(stream_id, snapshot.snapshot_id, 1), 90,
                               "the next owner's report", second.log)  # fmt: skip
        assert report.passed and report.dirty_keys == ([("id", 12)],), "read again, so known to the next owner"
    finally:
        stop_heartbeat.set()
        first.kill()
        second.stop()
