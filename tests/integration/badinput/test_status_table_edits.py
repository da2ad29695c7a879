"""A status table edited by hand, against real `cdcbridge run` workers: a lease row turned invalid stops only its shard,
the worker says once which row is wrong and how to fix it, other status rows are left alone, and once the row is
fixed the shard resumes from its checkpoint with nothing skipped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient
from tablestore import Condition, Row, RowExistenceExpectation

from cdcbridge.changes import Sequence
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.formats.keys import decode_key
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from tests.integration.bridge.workers import CHECKOUT, leases, read_messages, wait_until, write_config
from tests.integration.bridge_helpers import ReadMessage, create_stream_table, ots_client

IGNORE = Condition(RowExistenceExpectation.IGNORE)


def _ids(messages: list[ReadMessage]) -> set[int]:
    return {decode_key(m.key)[0] for m in messages}


def _seq(message: ReadMessage) -> ExtendedSequence:
    seq = message.value["seq"]  # type: ignore[index]
    return ExtendedSequence(Sequence(seq["epoch"], seq["timestamp_us"], seq["row_index"]))


def wait_for_topic(stack: StackEndpoints, topic: str, log: Callable[[], str]) -> None:
    """The worker creates its topics at start; reading one before it exists would see no partitions."""
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})

    def exists() -> bool:
        metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
        return metadata is not None and metadata.error is None and bool(metadata.partitions)

    wait_until(exists, 120, f"topic {topic}", log)


def test_an_invalid_lease_row_stops_its_shard_with_the_fix_and_resumes_once_fixed(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, "edited", [("id", "INTEGER")])
    config_path = tmp_path / "bridge.yaml"
    config = write_config(config_path, stack, emulator.url, [{"name": "edited", "partitions": 1}])
    status_table = config["coordination"]["status_table"]
    topic = f"{config['kafka']['topic_prefix']}.edited.mutation"

    def put(row_id: int) -> None:
        ots.put_row("edited", Row([("id", row_id)], [("v", row_id)]), IGNORE)

    for i in range(1, 4):
        put(i)
    first = BridgeWorkerProcess(config_path, "w1", tmp_path / "w1.log").start()
    try:
        wait_for_topic(stack, topic, first.log)
        read_messages(stack, topic, until=lambda m: _ids(m) >= {1, 2, 3})
        wait_until(lambda: leases(ots, status_table, stream_id)[0].checkpoint_seq is not None, 60, "a checkpoint")
    finally:
        first.stop()
    (lease,) = leases(ots, status_table, stream_id)
    confirmed = lease.checkpoint_seq
    shard = lease.shard_id

    # The edits: LeaseCounter typed as a STRING, plus rows of other status types (the table is shared).
    lease_pk = [("StreamId", stream_id), ("StatusType", "LeaseKey"), ("StatusValue", shard)]
    ots.update_row(status_table, Row(lease_pk, {"put": [("LeaseCounter", "seven")]}), IGNORE)
    datax_pk = [("StreamId", stream_id), ("StatusType", "CheckpointForDataxReader"), ("StatusValue", "job-1")]
    ots.put_row(status_table, Row(datax_pk, [("Checkpoint", "whatever")]), IGNORE)
    typo_pk = [("StreamId", stream_id), ("StatusType", "Leasekey"), ("StatusValue", shard)]
    ots.put_row(status_table, Row(typo_pk, [("LeaseCounter", "x")]), IGNORE)
    for i in range(4, 7):
        put(i)

    second = BridgeWorkerProcess(config_path, "w2", tmp_path / "w2.log").start()
    try:
        row = rf"lease row \(StreamId='{stream_id}', StatusType='LeaseKey', StatusValue='{shard}'\) is invalid"
        (match,) = second.wait_for_log(row + r".*")
        assert "LeaseCounter is STRING 'seven', not an INTEGER" in match.group(0)
        assert "Fix: set LeaseCounter to an INTEGER such as 0" in match.group(0) and "delete the row" in match.group(0)
        assert leases(ots, status_table, stream_id) == []  # nobody acts on the invalid row
        assert f"took lease {shard}" not in second.log()

        status = subprocess.run(
            [sys.executable, "-m", "cdcbridge", "status", "--config", str(config_path), "--no-lag"],
            cwd=CHECKOUT, capture_output=True, text=True, timeout=120, env={**os.environ},
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        assert "is invalid: LeaseCounter is STRING 'seven'" in status.stdout + status.stderr

        # The fix: an INTEGER counter. The worker takes the lease and resumes after the confirmed records.
        ots.update_row(status_table, Row(lease_pk, {"put": [("LeaseCounter", 7)]}), IGNORE)
        messages = read_messages(stack, topic, until=lambda m: _ids(m) >= set(range(1, 7)))
        wait_until(lambda: f"took lease {shard}" in second.log(), 60, "the lease taken after the fix", second.log)
        after = [m for m in messages if m.offset >= 3]
        assert _ids(after) == {4, 5, 6}  # resumed from the checkpoint: nothing confirmed is repeated or skipped
        assert all(_seq(m) > confirmed for m in after)  # type: ignore[operator]
        assert len(re.findall(row, second.log())) == 1  # said once, not at every take cycle
        assert second.alive
    finally:
        second.stop()
    datax = ots.get_row(status_table, datax_pk, max_version=1)[1]
    assert datax is not None and datax.attribute_columns[0][1] == "whatever"  # other status rows untouched
