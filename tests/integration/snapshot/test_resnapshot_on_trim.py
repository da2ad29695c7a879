"""`on_trimmed: resnapshot` (the default) on the real stack: changes written while no worker runs are trimmed from
the stream before anyone reads them; the restarted workers meet the trim, request one incremental snapshot of the
table (not one per retry), continue from the oldest retained record, run the snapshot themselves, and Kafka ends up
holding the source: the last RECORD_IMAGE per key is the source row, although the trimmed changes never reached a
worker."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml
from tablestore import Condition, Row, RowExistenceExpectation

from cdcbridge.config import OnTrimmed, parse_config
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.snapshot.incremental_state import IncrementalSnapshotStore, IncrementalState, RequestedBy
from tests.integration.bridge.workers import CHECKOUT, write_config
from tests.integration.bridge_helpers import create_stream_table, ots_client

from .kafka_checks import all_messages, assert_last_images_are_the_source, assert_seq_never_regresses
from .test_incremental_snapshot import INCREMENTAL, caught_up
from .traffic import Writer, key, prefill, source_rows, wait_until

TABLE = "trimmed"
PREFILLED = 120
IGNORE = Condition(RowExistenceExpectation.IGNORE)


def test_trimmed_changes_reach_kafka_through_the_snapshot_the_workers_request_and_run(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, TABLE, [("region", "STRING"), ("id", "INTEGER")])
    config_path = tmp_path / "cdcbridge.yaml"
    data = write_config(config_path, stack, emulator.url,
                        [{"name": TABLE, "formats": ["RECORD_IMAGE", "MUTATE_LOG"], "partitions": 2}])  # fmt: skip
    data["snapshot"] = {"incremental": {**INCREMENTAL, "chunk_rows": 50, "run_in_workers": True,
                                        "worker_poll_seconds": 1.0}}  # fmt: skip
    data["observability"] = {"log_format": "json"}
    config_path.write_text(yaml.safe_dump(data))
    config = parse_config(data, environ={})
    assert config.source.tables[0].on_trimmed is OnTrimmed.RESNAPSHOT  # the default
    store = IncrementalSnapshotStore(ots, config.coordination.status_table)
    prefix = config.kafka.topic_prefix

    # 1. A worker streams the first rows and checkpoints them, then stops.
    first = BridgeWorkerProcess(config_path, "w1", tmp_path / "w1.log", cwd=CHECKOUT).start()
    try:
        prefill(ots, TABLE, PREFILLED)
        wait_until(lambda: caught_up(config, ots), 90, "the first worker to stream the pre-filled rows")
    finally:
        first.stop()
    assert first.returncode == 0, first.log()[-4000:]

    # 2. While no worker runs: changes (updates, deletes, new rows) that the trim removes before anyone reads them.
    lost = Writer(ots, TABLE, keys=PREFILLED + 30, seed=5, pause=0.002).start()
    time.sleep(1.5)
    assert lost.stop() > 100
    emulator.backend.call("trim_stream", TABLE, int(time.time() * 1000) + 1)
    ots.put_row(TABLE, Row(key(PREFILLED + 100), [("owner", "after-the-trim")]), IGNORE)

    # 3. The workers meet the trim, request a snapshot, continue, and run the snapshot while writes go on.
    workers = [BridgeWorkerProcess(config_path, f"w{i}", tmp_path / f"w{i}-again.log", cwd=CHECKOUT).start()
               for i in (2, 3)]  # fmt: skip
    writer = Writer(ots, TABLE, keys=PREFILLED + 30, seed=9, pause=0.01).start()
    try:

        def done() -> list | None:
            snapshots = store.list_snapshots(stream_id, TABLE)
            return snapshots if snapshots and all(s.state is IncrementalState.DONE for s in snapshots) else None

        snapshots = wait_until(done, 180, "the snapshot requested for the trim to be run to DONE")
        writer.stop()
        wait_until(lambda: caught_up(config, ots), 90, "the workers to produce the last writes")
        assert store.list_snapshots(stream_id, TABLE) == snapshots, "one request per trim, not one per retry"
    finally:
        writer.stop()
        for worker in workers:
            worker.stop()
    assert [s.requested_by for s in snapshots] == [RequestedBy.TRIM]
    (repair,) = snapshots
    assert repair.snapshot_id.split("-")[1] == "trim" and (repair.begin, repair.end) == (None, None)
    lines = [json.loads(line) for w in workers for line in w.log().splitlines() if line.startswith("{")]
    repaired = [line for line in lines if "DATA LOST BY TRIM, repaired by incremental snapshot" in line["message"]]
    assert repaired and all(line["level"] == "ERROR" for line in repaired)
    assert all(repair.snapshot_id in line["message"] and f"of table {TABLE}" in line["message"] for line in repaired)
    assert any("worker runs incremental snapshot " + repair.snapshot_id in line["message"] for line in lines)

    source = source_rows(ots, TABLE)
    images = all_messages(stack, f"{prefix}.{TABLE}.image")
    assert_last_images_are_the_source(images, source)
    assert_seq_never_regresses(images)
    assert_seq_never_regresses(all_messages(stack, f"{prefix}.{TABLE}.mutation"))
