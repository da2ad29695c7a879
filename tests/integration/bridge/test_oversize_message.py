"""A row larger than its topic allows: that shard stops with an error naming table, key and size, its checkpoint
stays before the row, other shards go on, and once the topic accepts the row it is delivered (never skipped)."""

from __future__ import annotations

import os
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from tablestore import Condition, Row, RowExistenceExpectation

from cdcbridge.changes import Sequence
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.formats.keys import decode_key
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import StackEndpoints
from tests.integration.bridge.workers import leases, read_messages, wait_until, write_config
from tests.integration.bridge_helpers import ReadMessage, create_stream_table, ots_client

IGNORE = Condition(RowExistenceExpectation.IGNORE)
TOPIC_LIMIT = 20_000
BIG_ID = 100


def _seq(message: ReadMessage) -> Sequence:
    seq = message.value["seq"]
    return Sequence(seq["epoch"], seq["timestamp_us"], seq["row_index"])


def _ids(messages: list[ReadMessage]) -> list[int]:
    return [decode_key(m.key)[0] for m in messages]


def test_an_oversize_row_stops_its_shard_only_and_is_never_skipped(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    ots = ots_client(emulator.url)
    big_stream = create_stream_table(ots, "big", [("id", "INTEGER")])
    small_stream = create_stream_table(ots, "small", [("id", "INTEGER")])
    config = write_config(
        tmp_path / "bridge.yaml", stack, emulator.url,
        [{"name": "big", "partitions": 1}, {"name": "small", "partitions": 1}],
    )  # fmt: skip
    status_table = config["coordination"]["status_table"]
    prefix = config["kafka"]["topic_prefix"]
    big_topic, small_topic = f"{prefix}.big.mutation", f"{prefix}.small.mutation"
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    topic_config = {"cleanup.policy": "delete", "max.message.bytes": str(TOPIC_LIMIT)}
    admin.create_topics([NewTopic(big_topic, 1, 1, config=topic_config)])[big_topic].result(30)

    def put(table: str, row_id: int, payload: bytes = b"small") -> None:  # bytearray: the SDK's BINARY
        ots.put_row(table, Row([("id", row_id)], [("payload", bytearray(payload))]), IGNORE)

    def checkpoint_of(stream_id: str) -> ExtendedSequence | None:
        (lease,) = leases(ots, status_table, stream_id)
        return lease.checkpoint_seq

    worker = BridgeWorkerProcess(tmp_path / "bridge.yaml", "w1", tmp_path / "w1.log").start()
    try:
        for i in range(1, 4):
            put("big", i)
        before = read_messages(stack, big_topic, until=lambda m: len(m) >= 3, timeout=120)
        last_good = ExtendedSequence(max(_seq(m) for m in before))
        wait_until(lambda: checkpoint_of(big_stream) == last_good, 60, "big's checkpoint at row 3", worker.log)

        # Random bytes: lz4 cannot shrink the row under the topic's limit.
        put("big", BIG_ID, os.urandom(3 * TOPIC_LIMIT))
        put("big", 4)
        put("big", 5)
        for i in range(1, 4):
            put("small", i)
        stop = worker.wait_for_log(rf"shard \S+ of table big stops: message for key '\[{BIG_ID}\]' on topic "
                                   rf"{big_topic} is (\d+) bytes")  # fmt: skip
        assert int(stop[0].group(1)) > 3 * TOPIC_LIMIT

        # Other shards go on while big's shard is stopped.
        for i in range(4, 7):
            put("small", i)
        small = read_messages(stack, small_topic, until=lambda m: len(m) >= 6, timeout=120)
        assert sorted(_ids(small)) == list(range(1, 7))
        small_last = ExtendedSequence(max(_seq(m) for m in small))
        wait_until(lambda: checkpoint_of(small_stream) == small_last, 60, "small's checkpoint", worker.log)

        # The next record of the stopped shard restarts it from its checkpoint; the row fails again.
        put("big", 6)
        worker.wait_for_log(rf"table big restarts from its checkpoint: message for key '\[{BIG_ID}\]'")
        assert checkpoint_of(big_stream) == last_good  # never past the refused row
        assert BIG_ID not in _ids(read_messages(stack, big_topic, until=lambda m: len(m) >= 3))

        # Once the topic accepts the row, the shard delivers it and everything after it.
        resource = ConfigResource("topic", big_topic, incremental_configs=[
            ConfigEntry("max.message.bytes", str(10 * TOPIC_LIMIT), incremental_operation=AlterConfigOpType.SET)
        ])  # fmt: skip
        admin.incremental_alter_configs([resource])[resource].result(30)
        put("big", 7)
        after = read_messages(stack, big_topic, until=lambda m: {BIG_ID, 7} <= set(_ids(m)), timeout=120)
        assert set(_ids(after)) == {1, 2, 3, BIG_ID, 4, 5, 6, 7}  # rows after it may repeat (restarts)
        assert _ids(after).count(BIG_ID) == 1
        big_last = ExtendedSequence(max(_seq(m) for m in after))
        wait_until(lambda: checkpoint_of(big_stream) == big_last, 60, "big's checkpoint past the row", worker.log)
    finally:
        worker.stop()


def _raw_messages(stack: StackEndpoints, topic: str, count: int, timeout: float = 120) -> list[tuple[bytes, bytes]]:
    """(key, value) of the first `count` messages of a topic that is not Avro (the dead-letter topic is JSON)."""
    import time
    import uuid

    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": stack.kafka_bootstrap, "group.id": f"dlq-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    found: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append((message.key(), message.value()))
    finally:
        consumer.close()
    assert len(found) >= count, f"only {len(found)} of {count} messages on {topic}"
    return found


def test_with_a_dead_letter_topic_an_oversize_row_becomes_a_reference_and_its_shard_goes_on(
    stack: StackEndpoints, emulator: EmulatorServer, tmp_path: Path
) -> None:
    import json

    import yaml

    ots = ots_client(emulator.url)
    create_stream_table(ots, "bigdl", [("id", "INTEGER")])
    config = write_config(tmp_path / "bridge.yaml", stack, emulator.url, [{"name": "bigdl", "partitions": 1}])
    prefix = config["kafka"]["topic_prefix"]
    topic, dead_letters = f"{prefix}.bigdl.mutation", f"{prefix}.dead-letters"
    config["kafka"]["dead_letter_topic"] = dead_letters
    (tmp_path / "bridge.yaml").write_text(yaml.safe_dump(config))
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    topic_config = {"cleanup.policy": "delete", "max.message.bytes": str(TOPIC_LIMIT)}
    admin.create_topics([NewTopic(topic, 1, 1, config=topic_config)])[topic].result(30)

    def put(row_id: int, payload: bytes = b"small") -> None:
        ots.put_row("bigdl", Row([("id", row_id)], [("payload", bytearray(payload))]), IGNORE)

    worker = BridgeWorkerProcess(tmp_path / "bridge.yaml", "w1", tmp_path / "w1.log").start()
    try:
        put(1)
        put(BIG_ID, os.urandom(3 * TOPIC_LIMIT))
        put(2)
        put(3)
        delivered = read_messages(stack, topic, until=lambda m: {1, 2, 3} <= set(_ids(m)), timeout=120)
        assert BIG_ID not in _ids(delivered)
        ((key, value),) = _raw_messages(stack, dead_letters, 1)
        reference = json.loads(value)
        assert decode_key(key)[0] == BIG_ID
        assert reference["table"] == "bigdl" and reference["topic"] == topic
        assert reference["size"] > 3 * TOPIC_LIMIT and reference["reason"] == "message_too_large"
        worker.wait_for_log(rf"message for key \[{BIG_ID}\] on topic {topic} is \d+ bytes, too large for Kafka; a "
                            rf"reference went to the dead-letter topic {dead_letters}")  # fmt: skip
    finally:
        worker.stop()
