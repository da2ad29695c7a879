"""Bridge throughput against its ceiling: one worker turning N pre-filled 10-column changes into Kafka messages,
then, in the same run, raw produce of the very same message bytes with the same producer settings.

- The emulator runs in a child process (its own GIL) and is filled through its model in bulk; filling is not timed.
- The bridge runs in this process (`run_bridge`, one worker, one table) against real Kafka and Apicurio; its time
  runs from the worker's start until every shard's stored checkpoint is at the shard's last record (so every
  message was acknowledged and checkpointed). The moment Kafka holds every message is reported too.
- The ceiling reads the bridge's messages back (key, value, headers) and produces them again to fresh topics with
  the same partition counts, interleaved across partitions as the bridge's random keys are, through a producer with
  the bridge's settings (idempotent, acks=all, murmur2_random, lz4 and the same batching), one shared delivery
  callback, timed from the first produce until every message is acknowledged.

The ratio bridge / ceiling (messages per second) is the figure that counts on a shared, noisy machine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from cdcbridge.changes import Sequence as RecordSequence
from cdcbridge.coordination.checkpoint.positions import ExtendedSequence

#: Columns of every change (10, mixed types, ~190 bytes of values), like the decode benchmark's records.
TABLE = "bench_orders"
STATUSES = ("NEW", "PAID", "SHIPPED", "CANCELLED")
REGIONS = ("cn-hangzhou", "eu-central-1", "us-west-1")
ACCESS_KEY_ID = "emulator-id"
ACCESS_KEY_SECRET = "emulator-secret"
#: `--masked`: the column settings of the masked run (one column left out, a string and an integer hashed, one
#: string redacted: every kind of work the transformation does) and its throwaway key.
MASKED_COLUMNS: dict[str, Any] = {
    "exclude": ["payload"], "mask": {"label": "hash", "order_count": "hash", "status": "redact"},
}  # fmt: skip
BENCH_HASH_KEY = "bench-column-hash-key-not-a-secret"

log = logging.getLogger(__name__)


class BridgeBenchError(Exception):
    """The benchmark could not run to its end; the message says which phase and why."""


# ------------------------------------------------------------------------------------------------- the emulator


def _change(rng: random.Random, index: int, keys: int) -> Any:
    from cdcbridge.emulator.model import CellChange, RowChange, WriteKind

    cells = [
        CellChange("order_count", value=rng.randrange(0, 1_000_000)),
        CellChange("view_count", value=rng.randrange(0, 1 << 40)),
        CellChange("version", value=rng.randrange(1, 100)),
        CellChange("amount", value=rng.uniform(0, 10_000)),
        CellChange("ratio", value=rng.random()),
        CellChange("status", value=rng.choice(STATUSES)),
        CellChange("region", value=rng.choice(REGIONS)),
        CellChange("label", value=f"label-{rng.randrange(10_000):04d}"),
        CellChange("is_active", value=rng.random() < 0.5),
        CellChange("payload", value=rng.randbytes(100)),
    ]
    key = index % keys
    return RowChange(WriteKind.PUT, [("user_id", f"user-{key:09d}"), ("event_seq", key)], cells)


def serve_prefilled(records: int, keys: int, shards: int, seed: int) -> None:
    """Child process (`python -m cdcbridge.harness.bench.bridge`): fill an emulator with `records` PUT changes of TABLE
    (split into `shards` shards first), print one JSON line when it serves, then answer `cpu` lines on stdin with
    this process's CPU seconds until stdin closes or says `stop`."""
    from cdcbridge.emulator.keys import PkType, PrimaryKeyColumn
    from cdcbridge.emulator.model import StreamSpec
    from cdcbridge.emulator.server import EmulatorServer

    server = EmulatorServer(credentials={ACCESS_KEY_ID: ACCESS_KEY_SECRET})
    backend = server.backend
    primary_key = [PrimaryKeyColumn("user_id", PkType.STRING), PrimaryKeyColumn("event_seq", PkType.INTEGER)]
    backend.call("create_table", TABLE, primary_key, stream=StreamSpec(True, 24))
    stream = backend.instance.table_stream(TABLE)
    while len(stream.open_shards()) < shards:  # split the widest open shard until there are enough
        widest = max(stream.open_shards(), key=lambda shard: shard.hash_end - shard.hash_start)
        backend.call("split_shard", TABLE, widest.shard_id)
    rng = random.Random(seed)
    started = time.perf_counter()
    batch = min(200, keys)  # a batch may not write one key twice
    for first in range(0, records, batch):
        changes = [(TABLE, _change(rng, i, keys)) for i in range(first, min(records, first + batch))]
        failed = [o.error for o in backend.call("batch_write", changes) if o.error is not None]
        if failed:
            raise BridgeBenchError(f"filling the emulator failed at row {first}: {failed[0]}")
    last = {shard.shard_id: shard.records[-1].sequence for shard in stream.open_shards() if shard.records}
    server.start()
    print(json.dumps({"url": server.url, "fill_seconds": time.perf_counter() - started, "last": last}), flush=True)
    for line in sys.stdin:
        if line.strip() != "cpu":
            break
        print(json.dumps({"cpu": time.process_time()}), flush=True)
    server.stop()


class _PrefilledEmulator:
    """The emulator in a child process of its own (its own GIL), filled before the bridge starts."""

    def __init__(self, records: int, keys: int, shards: int, seed: int) -> None:
        command = [sys.executable, "-m", "cdcbridge.harness.bench.bridge", "--records", str(records), "--keys",
                   str(keys), "--shards", str(shards), "--seed", str(seed)]  # fmt: skip
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = ""
        self.fill_seconds = 0.0
        #: shard id → sequence of its last record: the bridge is done when every checkpoint reaches these.
        self.last_sequences: dict[str, RecordSequence] = {}

    def _answer(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise BridgeBenchError(
                f"the emulator child exited with code {self._process.wait(10)} (its error is printed above)"
            )
        return json.loads(line)

    def wait_filled(self) -> None:
        ready = self._answer()
        self.url, self.fill_seconds = ready["url"], ready["fill_seconds"]
        self.last_sequences = {shard: RecordSequence(*seq) for shard, seq in ready["last"].items()}

    def cpu_seconds(self) -> float:
        assert self._process.stdin is not None
        self._process.stdin.write("cpu\n")
        self._process.stdin.flush()
        return float(self._answer()["cpu"])

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            assert self._process.stdin is not None
            self._process.stdin.close()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)


# ------------------------------------------------------------------------------------------------- measuring


@dataclass
class _Watch:
    """Samples Kafka's end offsets and the lease checkpoints until both show the run complete."""

    bootstrap: str
    topics: list[str]
    expected_messages: int
    store: Any
    stream_id: str
    last_sequences: dict[str, RecordSequence]

    def __post_init__(self) -> None:
        self._consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"bench-{uuid.uuid4().hex}"})
        self._partitions: list[TopicPartition] = []
        self._count = 0

    def produced(self) -> int:
        """Messages in the bridge's topics (the last count while a just-created topic has no leader yet)."""
        try:
            if not self._partitions:
                metadata = self._consumer.list_topics(timeout=10)
                if not all(topic in metadata.topics for topic in self.topics):
                    return 0
                for topic in self.topics:
                    self._partitions += [TopicPartition(topic, p) for p in metadata.topics[topic].partitions]
            self._count = sum(
                self._consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in self._partitions
            )
        except KafkaException as error:
            log.debug("offsets not readable yet: %s", error)
        return self._count

    def checkpointed(self) -> bool:
        positions = {lease.shard_id: lease.checkpoint_seq for lease in self.store.list_leases(self.stream_id)}
        return all(
            positions.get(shard) is not None and positions[shard] >= ExtendedSequence(last)
            for shard, last in self.last_sequences.items()
        )

    def close(self) -> None:
        self._consumer.close()


def _run_bridge_phase(
    endpoints: Any, emulator: _PrefilledEmulator, formats: Sequence[str], partitions: int, records: int,
    coordination: dict[str, Any], timeout: float, columns: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    from cdcbridge.bridge.app import run_bridge
    from cdcbridge.config import parse_config
    from cdcbridge.coordination.leases.tablestore_store import TablestoreLeaseStore
    from cdcbridge.tablestore import StreamClient, build_ots_client

    suffix = uuid.uuid4().hex[:8]
    config = parse_config(
        {
            "source": {
                "endpoint": emulator.url, "instance": "bench", "access_key_id": ACCESS_KEY_ID,
                "access_key_secret": ACCESS_KEY_SECRET,
                "tables": [{"name": TABLE, "formats": list(formats), "partitions": partitions,
                            **({"columns": columns} if columns else {})}],
                **({"column_hash_key": BENCH_HASH_KEY} if columns else {}),
            },
            "coordination": {"status_table": f"bench_status_{suffix}", **coordination},
            "kafka": {
                "bootstrap_servers": endpoints.kafka_bootstrap, "topic_prefix": f"bench{suffix}",
                "schema_registry": {"url": endpoints.registry_url},
            },
        },
        environ={},
    )  # fmt: skip
    topics = list(config.source.tables[0].topics(prefix=config.kafka.topic_prefix, table=TABLE).values())
    ots = build_ots_client(emulator.url, "bench", ACCESS_KEY_ID, ACCESS_KEY_SECRET)
    stream_id = StreamClient(ots).describe_table_stream(TABLE).stream_id
    watch = _Watch(
        endpoints.kafka_bootstrap, topics, records * len(formats),
        TablestoreLeaseStore(ots, config.coordination.status_table), stream_id, emulator.last_sequences,
    )  # fmt: skip
    stop = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            run_bridge(config, "bench-worker", stop, own_process=True)
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, name="bench-bridge", daemon=True)
    cpu_before, emulator_cpu_before = time.process_time(), emulator.cpu_seconds()
    started = time.perf_counter()
    thread.start()
    first_at = acked_at = None
    try:
        while True:
            time.sleep(0.25)
            now = time.perf_counter()
            if failure:
                raise BridgeBenchError(f"the bridge stopped during the benchmark: {failure[0]}") from failure[0]
            if now - started > timeout:
                raise BridgeBenchError(
                    f"the bridge did not deliver {records} records within {timeout:.0f}s "
                    f"({watch.produced()} messages in Kafka)"
                )
            produced = watch.produced()
            if first_at is None and produced:
                first_at = now
            if acked_at is None and produced >= watch.expected_messages:
                acked_at = now
            if acked_at is not None and watch.checkpointed():
                done_at = now
                break
        cpu = time.process_time() - cpu_before
        emulator_cpu = emulator.cpu_seconds() - emulator_cpu_before
    finally:
        stop.set()
        thread.join(60)
        watch.close()
    seconds = done_at - started
    return {
        "topics": topics,
        "fill_seconds": emulator.fill_seconds,
        "seconds": seconds,
        "seconds_to_all_acked": acked_at - started,
        "seconds_to_first_message": first_at - started,
        "records_per_s": records / seconds,
        "messages_per_s": watch.expected_messages / seconds,
        # CPU of this process (the bridge, plus light polling) and of the emulator, per wall second of the run.
        "bridge_process_cpu_per_s": cpu / seconds,
        "emulator_cpu_per_s": emulator_cpu / seconds,
        # The same CPU per record: steadier than the rates on a shared machine (librdkafka's threads included).
        "bridge_process_cpu_us_per_record": cpu / records * 1e6,
    }


def _read_back(bootstrap: str, topics: list[str], expected: int, timeout: float) -> list[list[tuple[Any, ...]]]:
    """Every message of `topics` as (topic, partition, key, value, headers), one list per partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-read-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "fetch.max.bytes": 64 * 1024 * 1024})  # fmt: skip
    try:
        metadata = consumer.list_topics(timeout=10)
        assignment = [TopicPartition(t, p, 0) for t in topics for p in metadata.topics[t].partitions]
        consumer.assign(assignment)
        by_partition: dict[tuple[str, int], list[tuple[Any, ...]]] = {(tp.topic, tp.partition): [] for tp in assignment}
        count = 0
        deadline = time.monotonic() + timeout
        while count < expected:
            if time.monotonic() > deadline:
                raise BridgeBenchError(f"read back only {count} of {expected} messages for the ceiling")
            for message in consumer.consume(10_000, 1.0):
                if message.error() is not None:
                    raise BridgeBenchError(f"reading the bridge's messages back failed: {message.error()}")
                by_partition[(message.topic(), message.partition())].append(
                    (message.topic(), message.partition(), message.key(), message.value(), message.headers())
                )
                count += 1
        return list(by_partition.values())
    finally:
        consumer.close()


def _interleaved(per_partition: list[list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    """Round-robin over partitions: the order random keys give, not one partition after another."""
    result = []
    longest = max((len(p) for p in per_partition), default=0)
    for index in range(longest):
        result.extend(p[index] for p in per_partition if index < len(p))
    return result


def _run_ceiling_phase(endpoints: Any, bridge_topics: list[str], partitions: int, expected: int) -> dict[str, Any]:
    from cdcbridge.kafka.sink import producer_config
    from cdcbridge.kafka.topics import TopicAdmin, TopicSpec

    messages = _interleaved(_read_back(endpoints.kafka_bootstrap, bridge_topics, expected, timeout=600))
    renamed = {topic: f"{topic}.ceiling" for topic in bridge_topics}
    admin = TopicAdmin({"bootstrap.servers": endpoints.kafka_bootstrap})
    admin.ensure([TopicSpec(name, partitions) for name in renamed.values()], {})
    value_bytes = sum(len(m[3] or b"") for m in messages)
    producer = Producer(producer_config({"bootstrap.servers": endpoints.kafka_bootstrap, "client.id": "bench-raw"}))
    acked = 0
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        nonlocal acked
        if error is None:
            acked += 1
        else:
            errors.append(error)

    # Warm up outside the timing: metadata, connections and the idempotent producer id (the bridge's time includes
    # its start-up; the ceiling is the best case).
    for topic in renamed.values():
        producer.produce(topic, b"warm-up", b"warm-up")
    if producer.flush(60):
        raise BridgeBenchError("the raw producer could not deliver its warm-up messages within 60s")
    produce = producer.produce
    started, cpu_before = time.perf_counter(), time.process_time()
    for count, (topic, _, key, value, headers) in enumerate(messages):
        while True:
            try:
                produce(renamed[topic], value, key, on_delivery=delivered, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        if count % 1000 == 0:
            producer.poll(0)
    while acked + len(errors) < len(messages):
        producer.flush(1.0)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_before
    if errors:
        raise BridgeBenchError(f"raw produce failed for {len(errors)} messages: {errors[0]}")
    return {
        "seconds": seconds,
        "cpu_us_per_message": cpu / max(len(messages), 1) * 1e6,
        "messages_per_s": len(messages) / seconds,
        "avg_value_bytes": value_bytes / max(len(messages), 1),
    }


def run_bridge_bench(
    records: int = 500_000,
    *,
    formats: Sequence[str] = ("MUTATE_LOG",),
    partitions: int = 6,
    keys: int = 100_000,
    shards: int = 1,
    seed: int = 0,
    coordination: dict[str, Any] | None = None,
    endpoints: Any = None,
    state_dir: Path | None = None,
    timeout: float = 3600.0,
    columns: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Bridge records/s for `records` PUT changes of a 10-column table, and raw produce of the same messages.

    `formats`: MUTATE_LOG (one message a change) and/or RECORD_IMAGE (two messages a change with both).
    `keys`: distinct primary keys the changes cycle through; `shards`: stream shards of the table (one worker
    reads them all); `partitions`: of each topic.
    `coordination`: overrides of the worker's coordination settings (defaults otherwise), e.g.
    ``{"worker_loop_interval_seconds": 0.002}`` to see what the worker loop's pause between tasks costs.
    `columns`: the table's `columns` setting (selection and masking; e.g. MASKED_COLUMNS), none by default.
    `endpoints`: a running Kafka + registry (StackEndpoints); by default both are started for the run in
    `state_dir` (a temporary folder by default) and stopped at the end.

    Returns flat figures (records/s and messages/s of both phases, their ratio, CPU per wall second of the bridge
    process and of the emulator, fill time) ready for `record_result("bridge", ...)`.
    """
    from cdcbridge.harness.stack.stack import LocalStack, StackPorts

    logging.getLogger("tablestore-client").setLevel(logging.CRITICAL)
    stack = None
    scratch = None
    if endpoints is None:
        scratch = tempfile.TemporaryDirectory(prefix="cdcbridge-bench-") if state_dir is None else None
        stack = LocalStack(Path(scratch.name) if scratch else state_dir)
    emulator: _PrefilledEmulator | None = _PrefilledEmulator(records, keys, shards, seed)  # fills meanwhile
    try:
        if stack is not None:
            endpoints = stack.up(StackPorts(0, 0, 0, 0), services=("kafka", "registry"))
        emulator.wait_filled()
        bridge = _run_bridge_phase(
            endpoints, emulator, formats, partitions, records, coordination or {}, timeout, columns
        )
        emulator.stop()
        emulator = None  # its memory and CPU are not part of the ceiling's run
        ceiling = _run_ceiling_phase(endpoints, bridge["topics"], partitions, records * len(formats))
    finally:
        if emulator is not None:
            emulator.stop()
        if stack is not None:
            stack.down()
        if scratch is not None:
            scratch.cleanup()
    return {
        "records": records,
        "formats": "+".join(formats),
        "masked_columns": bool(columns),
        "messages": records * len(formats),
        "partitions": partitions,
        "shards": shards,
        "distinct_keys": min(keys, records),
        "avg_value_bytes": round(ceiling["avg_value_bytes"]),
        "emulator_fill_seconds": round(bridge["fill_seconds"], 1),
        "bridge_seconds": round(bridge["seconds"], 2),
        "bridge_seconds_to_first_message": round(bridge["seconds_to_first_message"], 2),
        "bridge_seconds_to_all_acked": round(bridge["seconds_to_all_acked"], 2),
        "bridge_records_per_s": round(bridge["records_per_s"]),
        "bridge_messages_per_s": round(bridge["messages_per_s"]),
        "bridge_process_cpu_per_s": round(bridge["bridge_process_cpu_per_s"], 2),
        "emulator_cpu_per_s": round(bridge["emulator_cpu_per_s"], 2),
        "bridge_process_cpu_us_per_record": round(bridge["bridge_process_cpu_us_per_record"], 1),
        "ceiling_seconds": round(ceiling["seconds"], 2),
        "ceiling_messages_per_s": round(ceiling["messages_per_s"]),
        "ceiling_process_cpu_us_per_message": round(ceiling["cpu_us_per_message"], 1),
        "ratio_bridge_to_ceiling": round(bridge["messages_per_s"] / ceiling["messages_per_s"], 3),
    }


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--records", type=click.IntRange(min=0), required=True, help="PUT changes to fill in.")
@click.option("--keys", type=click.IntRange(min=1), required=True, help="Distinct primary keys they cycle through.")
@click.option("--shards", type=click.IntRange(min=1), default=1, show_default=True, help="Open shards of the stream.")
@click.option("--seed", type=int, default=0, show_default=True)
def serve_prefilled_command(records: int, keys: int, shards: int, seed: int) -> None:
    """The emulator child of the bridge benchmark: fill, serve, answer `cpu` on stdin (see `serve_prefilled`)."""
    serve_prefilled(records, keys, shards, seed)


if __name__ == "__main__":
    serve_prefilled_command(prog_name="python -m cdcbridge.harness.bench.bridge")
