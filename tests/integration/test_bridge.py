"""The bridge end to end: emulator → worker (`run_bridge`) → Kafka + Apicurio, read back with AvroDeserializer."""

from __future__ import annotations

import json
import urllib.request
from collections import defaultdict

import pytest
from tablestore import (
    BatchWriteRowRequest,
    Condition,
    PutRowItem,
    Row,
    RowExistenceExpectation,
    TableInBatchWriteRowItem,
)

from cdcbridge.bridge.app import BridgeStartError, start_bridge
from cdcbridge.contract import TOMBSTONE_SEQ_KEY_HEADER
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.formats.keys import decode_key, java_partition
from cdcbridge.harness.emulator_admin import EmulatorAdmin
from cdcbridge.harness.stack.stack import StackEndpoints
from cdcbridge.kafka.errors import TopicPartitionMismatchError
from cdcbridge.tablestore import StreamClient
from tests.integration.bridge_helpers import (
    BridgeThread,
    ReadMessage,
    bridge_config,
    create_stream_table,
    ots_client,
    read_topic,
)

IGNORE = Condition(RowExistenceExpectation.IGNORE)


def _cells(message: ReadMessage) -> list[tuple[str, str, object]]:
    return [(c["name"], c["op"], _plain(c["value"])) for c in message.value["cells"]]


def _plain(value: object) -> object:
    return value[1] if isinstance(value, tuple) else value


def test_scripted_changes_become_exactly_the_expected_messages(stack: StackEndpoints, emulator: EmulatorServer) -> None:
    ots = ots_client(emulator.url)
    create_stream_table(ots, "orders", [("id", "INTEGER")])
    create_stream_table(ots, "users", [("region", "STRING"), ("uid", "INTEGER")])
    config = bridge_config(
        stack, emulator.url,
        [{"name": "orders", "formats": ["MUTATE_LOG", "RECORD_IMAGE"], "partitions": 3},
         {"name": "users", "formats": ["MUTATE_LOG"], "partitions": 2}],
    )  # fmt: skip
    prefix = config.kafka.topic_prefix

    ots.put_row("orders", Row([("id", 1)], [("item", "apple"), ("qty", 1)]), IGNORE)
    ots.update_row("orders", Row([("id", 1)], {"put": [("qty", 2)], "delete_all": ["item"]}), IGNORE)
    ots.update_row("orders", Row([("id", 1)], {"increment": [("qty", 5)]}), IGNORE)
    ots.put_row("orders", Row([("id", 2)], [("item", "pear"), ("price", 2.5), ("gift", True)]), IGNORE)
    ots.delete_row("orders", Row([("id", 1)]), IGNORE)
    batch = BatchWriteRowRequest()
    batch.add(TableInBatchWriteRowItem("users", [
        PutRowItem(Row([("region", "eu"), ("uid", 7)], [("name", "Ann")]), IGNORE),
        PutRowItem(Row([("region", "us"), ("uid", 8)], [("name", "Bo")]), IGNORE),
    ]))  # fmt: skip
    ots.batch_write_row(batch)

    bridge = BridgeThread(config).start()
    try:
        mutations = read_topic(stack, f"{prefix}.orders.mutation", until=lambda m: len(m) >= 5)
        images = read_topic(stack, f"{prefix}.orders.image", until=lambda m: len(m) >= 6)
        users = read_topic(stack, f"{prefix}.users.mutation", until=lambda m: len(m) >= 2)
    finally:
        bridge.close()

    by_key: dict[bytes, list[ReadMessage]] = defaultdict(list)
    for message in sorted(mutations, key=lambda m: m.value["seq"]["seq_key"]):
        by_key[message.key].append(message)
    one = by_key[b"[1]"]
    assert [(m.value["type"], m.value["replace_row"], m.value["row_deleted"]) for m in one] == [
        ("PUT", True, False), ("UPDATE", False, False), ("UPDATE", False, False), ("DELETE", False, True)
    ]  # fmt: skip
    assert _cells(one[0]) == [("item", "PUT", "apple"), ("qty", "PUT", 1)]
    assert _cells(one[1]) == [("qty", "PUT", 2), ("item", "DELETE_ALL_VERSION", None)]
    assert _cells(one[2]) == [("qty", "PUT", 7)]  # the emulator records increments as the resulting value
    assert one[3].value["cells"] == []
    assert sorted(_cells(by_key[b"[2]"][0])) == [("gift", "PUT", True), ("item", "PUT", "pear"), ("price", "PUT", 2.5)]
    for message in mutations:
        source = message.value["source"]
        assert (source["instance"], source["table"]) == ("cdcbridge", "orders") and source["shard_id"]
        assert [p["name"] for p in message.value["pk"]] == ["id"]
        # Keys land on the partition Java's murmur2 partitioner would choose.
        assert message.partition == java_partition(message.key, 3)
    seq_keys = [m.value["seq"]["seq_key"] for m in one]
    assert seq_keys == sorted(seq_keys) and len(set(seq_keys)) == 4

    # RECORD_IMAGE: the last image per key is the source row; a deleted row ends in a tombstone with its seq_key.
    last: dict[bytes, ReadMessage] = {}
    for message in sorted(images, key=lambda m: (m.partition, m.offset)):
        last[message.key] = message
    assert last[b"[1]"].value is None
    assert last[b"[1]"].headers[TOMBSTONE_SEQ_KEY_HEADER].decode() == one[3].value["seq"]["seq_key"]
    row_two = {name: _plain(cell["value"]) for name, cell in last[b"[2]"].value["columns"].items()}
    assert row_two == {"item": "pear", "price": 2.5, "gift": True}

    assert sorted(decode_key(m.key) for m in users) == [["eu", 7], ["us", 8]]
    assert all(m.value["type"] == "PUT" and m.partition == java_partition(m.key, 2) for m in users)


def test_per_key_order_holds_across_a_split_and_a_merge(stack: StackEndpoints, emulator: EmulatorServer) -> None:
    ots = ots_client(emulator.url)
    create_stream_table(ots, "counters", [("k", "STRING")])
    config = bridge_config(stack, emulator.url, [{"name": "counters", "partitions": 4}])
    keys = [f"key-{i}" for i in range(20)]

    def write_round(n: int) -> None:
        for key in keys:
            ots.put_row("counters", Row([("k", key)], [("n", n)]), IGNORE)

    bridge = BridgeThread(config).start()
    try:
        write_round(0)
        admin = EmulatorAdmin(emulator.url)
        left, right = admin.split("counters", _shard_ids(emulator, "counters")[0])
        write_round(1)
        admin.merge("counters", left, right)
        write_round(2)
        topic = f"{config.kafka.topic_prefix}.counters.mutation"
        messages = read_topic(stack, topic, until=lambda m: len(m) >= 3 * len(keys))
    finally:
        bridge.close()

    per_key: dict[bytes, list[int]] = defaultdict(list)
    for message in sorted(messages, key=lambda m: (m.partition, m.offset)):
        per_key[message.key].append(_plain(message.value["cells"][0]["value"]))
    for key in keys:
        values = per_key[json.dumps([key]).encode()]
        # At-least-once: duplicates may appear, but a key's values never go back in Kafka's order.
        assert values == sorted(values) and set(values) == {0, 1, 2}, (key, values)
    shard_ids = {m.value["source"]["shard_id"] for m in messages}
    assert len(shard_ids) >= 3  # parent, both split children or the merge child carried records


def _shard_ids(emulator: EmulatorServer, table: str) -> list[str]:
    streams = StreamClient(ots_client(emulator.url))
    return [s.shard_id for s in streams.list_all_shards(streams.describe_table_stream(table).stream_id)]


def test_unknown_table_and_missing_stream_are_refused_clearly(stack: StackEndpoints, emulator: EmulatorServer) -> None:
    import threading

    config = bridge_config(stack, emulator.url, [{"name": "no_such_table"}])
    with pytest.raises(BridgeStartError, match="table no_such_table does not exist in Tablestore instance cdcbridge"):
        start_bridge(config, "w", threading.Event())
    from tablestore import CapacityUnit, ReservedThroughput, TableMeta, TableOptions

    ots_client(emulator.url).create_table(
        TableMeta("plain", [("id", "INTEGER")]), TableOptions(), ReservedThroughput(CapacityUnit(0, 0))
    )
    config = bridge_config(stack, emulator.url, [{"name": "plain"}])
    with pytest.raises(BridgeStartError, match="table plain has no stream enabled; enable it"):
        start_bridge(config, "w", threading.Event())


def test_a_changed_partition_count_is_refused_at_start(stack: StackEndpoints, emulator: EmulatorServer) -> None:
    import threading
    import time

    from confluent_kafka.admin import AdminClient, NewPartitions

    ots = ots_client(emulator.url)
    create_stream_table(ots, "sized", [("id", "INTEGER")])
    config = bridge_config(stack, emulator.url, [{"name": "sized", "partitions": 2}])
    runtime = start_bridge(config, "w", threading.Event())  # creates the topic with 2 partitions, records it
    runtime.sink.close(5)
    topic = f"{config.kafka.topic_prefix}.sized.mutation"
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    time.sleep(2)  # let the broker's metadata catch up with the controller
    with pytest.raises(TopicPartitionMismatchError, match=f"topic {topic} has 3 partitions but 2 were recorded"):
        start_bridge(config, "w", threading.Event())


def test_a_partition_count_changed_while_running_stops_the_worker(
    stack: StackEndpoints, emulator: EmulatorServer
) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    ots = ots_client(emulator.url)
    create_stream_table(ots, "grown", [("id", "INTEGER")])
    config = bridge_config(stack, emulator.url, [{"name": "grown", "partitions": 2}])
    config = config.model_copy(
        update={"kafka": config.kafka.model_copy(update={"partition_check_interval_seconds": 0.5})}
    )
    topic = f"{config.kafka.topic_prefix}.grown.mutation"
    bridge = BridgeThread(config, "worker-a").start()
    ots.put_row("grown", Row([("id", 1)], [("v", 1)]), IGNORE)
    read_topic(stack, topic, until=lambda m: len(m) >= 1)  # running, topic created with 2 partitions
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    assert bridge.thread is not None
    bridge.thread.join(60)
    assert not bridge.thread.is_alive(), "the worker stops once the changed count is seen"
    with pytest.raises(TopicPartitionMismatchError, match=f"topic {topic} now has 3 partitions but had 2"):
        bridge.close()


def test_status_shows_a_live_cluster(stack: StackEndpoints, emulator: EmulatorServer) -> None:
    import time

    from cdcbridge.bridge.status import collect_status, render_text

    ots = ots_client(emulator.url)
    create_stream_table(ots, "watched", [("id", "INTEGER")])
    config = bridge_config(stack, emulator.url, [{"name": "watched", "partitions": 2}])
    for i in range(30):
        ots.put_row("watched", Row([("id", i)], [("v", i)]), IGNORE)
    shard = _shard_ids(emulator, "watched")[0]
    EmulatorAdmin(emulator.url).split("watched", shard)
    first, second = BridgeThread(config, "worker-a").start(), BridgeThread(config, "worker-b").start()
    try:
        read_topic(stack, f"{config.kafka.topic_prefix}.watched.mutation", until=lambda m: len(m) >= 30)
        deadline = time.monotonic() + 60
        while True:  # both children held, one by each worker, and nothing left behind
            status = collect_status(config)
            live = [s for s in status.shards if not s.finished]
            if (len(live) == 2 and {s.owner for s in live} == {"worker-a", "worker-b"}
                    and all(s.lag_records == 0 for s in status.shards)):  # fmt: skip
                break
            assert time.monotonic() < deadline, render_text(status)
            time.sleep(1)
    finally:
        first.close()
        second.close()
    parent = next(s for s in status.shards if s.shard_id == shard)
    assert parent.finished and parent.checkpoint == "SHARD_END"
    assert all(s.parents == [shard] for s in live)
    assert all(s.renewed_seconds_ago is not None and s.renewed_seconds_ago < 30 for s in live)
    assert status.owners == {"worker-a": 1, "worker-b": 1}
    topic = f"{config.kafka.topic_prefix}.watched.mutation"
    assert [(t.topic, t.recorded_partitions, t.actual_partitions) for t in status.topics] == [(topic, 2, 2)]
    text = render_text(status)
    assert "worker-a" in text and "SHARD_END" in text and topic in text


def test_a_worker_exposes_prometheus_metrics(stack: StackEndpoints, emulator: EmulatorServer) -> None:
    import time

    from cdcbridge.harness.processes import free_port

    ots = ots_client(emulator.url)
    create_stream_table(ots, "metered", [("id", "INTEGER")])
    port = free_port()
    config = bridge_config(stack, emulator.url, [{"name": "metered", "partitions": 1}])
    config = config.model_copy(update={"observability": config.observability.model_copy(update={"metrics_port": port})})
    for i in range(5):
        ots.put_row("metered", Row([("id", i)], [("v", i)]), IGNORE)
    bridge = BridgeThread(config, "metered-worker").start()
    try:
        read_topic(stack, f"{config.kafka.topic_prefix}.metered.mutation", until=lambda m: len(m) >= 5)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    text = response.read().decode()
            except OSError:
                text = ""
            if 'cdcbridge_leases_held{worker="metered-worker"} 1.0' in text:
                break
            assert time.monotonic() < deadline, text[-2000:]
            time.sleep(0.5)
    finally:
        bridge.close()
    assert 'cdcbridge_lease_events_total{event="taken"} 1.0' in text
    assert "emulator-secret" not in text
