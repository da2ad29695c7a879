"""kill -9 a worker while messages are in Kafka but not yet checkpointed: after the restart every change is in
Kafka at least once, and the duplicates are exactly the messages after the checkpoint stored at kill time."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

from tablestore import (
    BatchWriteRowRequest,
    Condition,
    DeleteRowItem,
    PutRowItem,
    Row,
    RowExistenceExpectation,
    TableInBatchWriteRowItem,
    UpdateRowItem,
)

from cdcbridge.changes import ChangeRecord, Sequence
from cdcbridge.config import TableConfig
from cdcbridge.contract import TOMBSTONE_SEQ_KEY_HEADER
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.formats.table_messages import build_table_messages
from cdcbridge.harness.emulator_admin import EmulatorAdmin
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.tablestore import StreamClient
from tests.integration.bridge.workers import end_offsets, leases, read_messages, wait_until, write_config
from tests.integration.bridge_helpers import INSTANCE, ReadMessage, create_stream_table, ots_client

IGNORE = Condition(RowExistenceExpectation.IGNORE)
TABLE = "ledger"

#: Which message of which record: (topic, record sequence, part) with part "image", "tombstone" or the op_index.
MessageId = tuple[str, Sequence, str | int]


class Writer(threading.Thread):
    """Keeps writing batches of puts, updates (put + increment + delete: three unit operations) and deletes."""

    def __init__(self, emulator_url: str) -> None:
        super().__init__(name="source-writer", daemon=True)
        self._ots = ots_client(emulator_url)
        self._rng = random.Random(7)
        self.stop = threading.Event()
        self.batches = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                request = BatchWriteRowRequest()
                request.add(TableInBatchWriteRowItem(TABLE, [self._item(k) for k in self._rng.sample(range(24), 5)]))
                assert self._ots.batch_write_row(request).is_all_succeed()
                self.batches += 1
                time.sleep(0.02)
        except BaseException as error:  # surfaced by the test
            self.error = error

    def _item(self, key: int) -> PutRowItem | UpdateRowItem | DeleteRowItem:
        pk = [("k", f"key-{key:02d}")]
        n = self.batches
        draw = self._rng.random()
        if draw < 0.45:
            return PutRowItem(Row(pk, [("name", f"v{n}"), ("count", n), ("gone", "x")]), IGNORE)
        if draw < 0.8:
            changes = {"put": [("name", f"u{n}")], "increment": [("count", 1)], "delete_all": ["gone"]}
            return UpdateRowItem(Row(pk, changes), IGNORE)
        return DeleteRowItem(Row(pk), IGNORE)


def _stream_records(emulator: EmulatorServer, stream_id: str) -> list[ChangeRecord]:
    streams = StreamClient(ots_client(emulator.url))
    records: list[ChangeRecord] = []
    for shard in streams.list_all_shards(stream_id):
        iterator: str | None = streams.get_shard_iterator(stream_id, shard.shard_id)
        while iterator:
            page = streams.get_stream_record(iterator, 1000, table=TABLE, shard_id=shard.shard_id)
            records += page.records
            if not page.records:
                break
            iterator = page.next_shard_iterator
    return records


def _expected(records: list[ChangeRecord], table: TableConfig, prefix: str) -> dict[MessageId, ExtendedSequence]:
    """Every message the bridge must deliver, with the position (record, sub-sequence) it is checkpointed at."""
    expected = {}
    for record in records:
        for message in build_table_messages(record, table, instance=INSTANCE, topic_prefix=prefix):
            if message.value is None:
                part: str | int = "tombstone"
            elif "columns" in message.value:
                part = "image"
            else:
                part = message.value["seq"]["op_index"]
            expected[(message.topic, record.sequence, part)] = ExtendedSequence(record.sequence, message.sub_sequence)
    return expected


def _message_id(message: ReadMessage) -> MessageId:
    if message.value is None:
        key = message.headers[TOMBSTONE_SEQ_KEY_HEADER].decode()
        return message.topic, Sequence(int(key[:10]), int(key[10:30]), int(key[30:40])), "tombstone"
    seq = message.value["seq"]
    sequence = Sequence(seq["epoch"], seq["timestamp_us"], seq["row_index"])
    return message.topic, sequence, "image" if "columns" in message.value else seq["op_index"]


def test_kill_9_between_produce_and_checkpoint_repeats_exactly_the_unconfirmed_tail(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    ots = ots_client(emulator.url)
    stream_id = create_stream_table(ots, TABLE, [("k", "STRING")])
    table = {"name": TABLE, "formats": ["RECORD_IMAGE", "MUTATE_LOG"], "partitions": 3}
    config = write_config(tmp_path / "bridge.yaml", stack, emulator.url, [table])
    status_table, prefix = config["coordination"]["status_table"], config["kafka"]["topic_prefix"]
    topics = [f"{prefix}.{TABLE}.image", f"{prefix}.{TABLE}.mutation"]

    def checkpoint() -> ExtendedSequence | None:
        found = leases(ots, status_table, stream_id)
        return found[0].checkpoint_seq if found else None

    def produced() -> int:
        return sum(end_offsets(stack.kafka_bootstrap, topics[1]).values())

    # Slow status-table writes (UpdateRow: checkpoints and renewals; the writer uses BatchWriteRow) so the
    # checkpoint visibly trails what Kafka already holds.
    admin = EmulatorAdmin(emulator.url)
    admin.set_faults([{"api": "UpdateRow", "latency_ms": 400}])
    writer = Writer(emulator.url)
    first = BridgeWorkerProcess(tmp_path / "bridge.yaml", "w1", tmp_path / "first.log")
    second = BridgeWorkerProcess(tmp_path / "bridge.yaml", "w1", tmp_path / "second.log")
    try:
        writer.start()
        first.start()
        wait_until(lambda: checkpoint() is not None and produced() >= 150, 120, "messages and a checkpoint",
                   first.log)  # fmt: skip
        # Checkpoint writes now take 3 s, one at a time: messages Kafka acknowledges while one is under way are
        # produced but not yet checkpointed when the kill lands (the tail this test is about).
        admin.set_faults([{"api": "UpdateRow", "latency_ms": 3000}])
        sent = produced()
        wait_until(lambda: produced() >= sent + 20, 60, "messages produced while a checkpoint is slow", first.log)
        first.kill()
        time.sleep(3.5)  # a checkpoint write sent just before the kill lands within the injected latency
        admin.set_faults([{"api": "UpdateRow", "latency_ms": 400}])
        at_kill = checkpoint()
        boundary = {topic: end_offsets(stack.kafka_bootstrap, topic) for topic in topics}
        assert at_kill is not None

        second.start()
        wait_until(lambda: (checkpoint() or at_kill) > at_kill, 120, "the restarted worker's checkpoint", second.log)
        writer.stop.set()
        writer.join(30)
        assert writer.error is None, writer.error

        expected = _expected(_stream_records(emulator, stream_id), TableConfig.model_validate(table), prefix)
        messages: list[ReadMessage] = []
        for topic in topics:
            wanted = {mid for mid in expected if mid[0] == topic}

            def complete(got: list[ReadMessage], wanted: set[MessageId] = wanted) -> bool:
                return wanted <= {_message_id(m) for m in got}

            messages += read_messages(stack, topic, until=complete, timeout=120)
    finally:
        writer.stop.set()
        admin.clear_faults()
        first.kill()
        second.stop()

    before_kill = [m for m in messages if m.offset < boundary[m.topic][m.partition]]
    after_restart = [m for m in messages if m.offset >= boundary[m.topic][m.partition]]
    first_ids = Counter(_message_id(m) for m in before_kill)
    second_ids = Counter(_message_id(m) for m in after_restart)
    assert set(first_ids) | set(second_ids) == set(expected)  # every change at least once, nothing else
    assert max(first_ids.values()) == 1 and max(second_ids.values()) == 1  # each run sent a message once

    unconfirmed_tail = {mid for mid in first_ids if not expected[mid] <= at_kill}
    duplicates = {mid for mid, n in (first_ids + second_ids).items() if n > 1}
    assert unconfirmed_tail, "the kill should land between produce and checkpoint"
    assert duplicates == unconfirmed_tail
    # The restart resumed exactly after the stored checkpoint: all of the rest, none of what it covers.
    assert set(second_ids) == {mid for mid, position in expected.items() if not position <= at_kill}
    # The workload had records of several messages (sub-sequences), in both topics.
    assert any(isinstance(mid[2], int) and mid[2] > 0 for mid in expected)
