"""`cdcbridge demo`: the whole flow on the embedded default, ending in a checked summary.

Local stack (Kafka, Apicurio, the Tablestore emulator recording increments as deltas) → a source table with a
stream → two bridge worker processes (`cdcbridge run`) → Kafka → the Spark apply job → Delta Lake. While traffic
runs (puts, updates, increments, deletes, batch writes) a shard is split, its children are merged again, and one
worker is killed with SIGKILL and restarted. Then the apply job runs until the target catches up, and the target
is compared with the source row by row. Exit code 0 only if they are equal.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cdcbridge.changes import ChangeRecord
from cdcbridge.harness.emulator_admin import EmulatorAdmin
from cdcbridge.harness.processes import BridgeWorkerProcess
from cdcbridge.harness.stack.stack import LocalStack, StackEndpoints, StackPorts

TABLE = "accounts"
PRIMARY_KEY = [("region", "STRING"), ("id", "INTEGER")]
REGIONS = ("eu", "us", "ap")


@dataclass
class DemoSummary:
    operations: int = 0
    rows_in_source: int = 0
    rows_in_target: int = 0
    messages_in_kafka: int = 0
    stream_records: int = 0
    traffic_seconds: float = 0.0
    catch_up_seconds: float = 0.0
    apply_runs: int = 0
    duplicates_absorbed: int = 0
    events: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    #: Where everything but these lines went: this process and Spark, each worker, each stack service.
    logs: list[Path] = field(default_factory=list)

    @property
    def check_passed(self) -> bool:
        return not self.mismatches and self.rows_in_source > 0

    def lines(self) -> list[str]:
        return [
            f"source operations      {self.operations} in {self.traffic_seconds:.1f}s "
            f"({self.operations / max(self.traffic_seconds, 1e-9):,.0f} ops/s)",
            *(f"  event: {event}" for event in self.events),
            f"stream records         {self.stream_records} (one per row mutation, over every shard)",
            f"messages in Kafka      {self.messages_in_kafka} on the mutation topic: "
            f"{self.messages_in_kafka - self.stream_records} redelivered after the kill (at-least-once)",
            f"duplicates absorbed    {self.duplicates_absorbed} (redelivered or already applied operations)",
            f"apply catch-up         {self.catch_up_seconds:.1f}s over {self.apply_runs} run(s) of the apply job",
            f"rows: source {self.rows_in_source}, target {self.rows_in_target}",
            "check                  "
            + ("PASSED: the Delta table equals the source table row by row" if self.check_passed else "FAILED"),
            *(f"  mismatch: {m}" for m in self.mismatches[:10]),
            *_log_lines(self.logs),
        ]


def _log_lines(logs: list[Path]) -> list[str]:
    """The log files, under the folder of the first (the work folder)."""
    if not logs:
        return []
    root = logs[0].parent
    return [
        f"logs                   {root}/",
        *(f"  {p.relative_to(root) if p.is_relative_to(root) else p}" for p in logs),
    ]


@contextmanager
def _terminal_kept_for_echo(log_path: Path) -> Iterator[Callable[[str], None]]:
    """Send the process's stdout and stderr to `log_path` at the file-descriptor level, so the Spark JVM, librdkafka,
    warnings and log records started meanwhile write there too; yield an echo that still reaches the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    with log_path.open("ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield lambda line: print(line, file=terminal, flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        terminal.close()


def demo_config(
    work: Path, endpoints: StackEndpoints, *, table: str = TABLE, topic_prefix: str = "demo",
    apply: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The demo's settings: both formats, MUTATE_LOG applied to a local Delta table, lease timings short enough for
    a demo's splits and takeovers; `apply` settings are added to the apply section."""
    return {
        "source": {
            "endpoint": endpoints.emulator_url,
            "instance": "cdcbridge",
            "tables": [{"name": table, "formats": ["RECORD_IMAGE", "MUTATE_LOG"], "partitions": 4}],
        },
        "coordination": {
            "status_table": "cdcbridge_status",
            "lease_duration_seconds": 6.0,
            "renew_interval_seconds": 2.0,
            "take_interval_seconds": 2.0,
            "shard_sync_interval_seconds": 2.0,
            "parent_poll_interval_seconds": 0.5,
            "handoff_timeout_seconds": 10.0,
            "idle_fetch_interval_seconds": 0.1,
        },
        "kafka": {
            "bootstrap_servers": endpoints.kafka_bootstrap,
            "topic_prefix": topic_prefix,
            "schema_registry": {"url": endpoints.registry_url},
        },
        "apply": {
            "target": "delta",
            "delta_path": str(work / "delta"),
            "checkpoint_location": str(work / "apply-checkpoint"),
            "prefer_format": "MUTATE_LOG",
            **(apply or {}),
        },
        "observability": {"log_level": "INFO"},
    }


def write_config(work: Path, config: dict[str, Any]) -> Path:
    path = work / "cdcbridge.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _traffic(ots: Any, rows: int, operations: int, seed: int, milestones: dict[int, Callable[[], None]]) -> int:
    """Random puts, updates (put / delete a column), increments, deletes and batch writes over `rows` keys."""
    from tablestore import BatchWriteRowRequest, Condition, PutRowItem, Row, RowExistenceExpectation
    from tablestore import TableInBatchWriteRowItem as BatchItem

    rng = random.Random(seed)
    ignore = Condition(RowExistenceExpectation.IGNORE)
    keys = [[("region", REGIONS[i % len(REGIONS)]), ("id", i)] for i in range(rows)]
    done = 0
    while done < operations:
        if done in milestones:
            milestones.pop(done)()
        key = rng.choice(keys)
        choice = rng.random()
        if choice < 0.30:
            columns = [("owner", f"user-{rng.randrange(1000)}"), ("balance", rng.randrange(1000)),
                       ("score", rng.random() * 100), ("vip", rng.random() < 0.2)]  # fmt: skip
            ots.put_row(TABLE, Row(key, columns), ignore)
        elif choice < 0.50:
            ots.update_row(TABLE, Row(key, {"put": [("note", f"n{rng.randrange(100)}")], "delete_all": ["score"]}),
                           ignore)  # fmt: skip
        elif choice < 0.80:
            ots.update_row(TABLE, Row(key, {"increment": [("balance", rng.randrange(1, 50))]}), ignore)
        elif choice < 0.90:
            ots.delete_row(TABLE, Row(key), ignore)
        else:
            batch = BatchWriteRowRequest()
            items = [PutRowItem(Row(k, [("owner", "batch"), ("balance", rng.randrange(100))]), ignore)
                     for k in rng.sample(keys, 10)]  # fmt: skip
            batch.add(BatchItem(TABLE, items))
            ots.batch_write_row(batch)
        done += 1
    return done


#: Primary-key column names of the demo table, in order.
PK_NAMES = tuple(name for name, _ in PRIMARY_KEY)


def read_source_rows(ots: Any, table: str = TABLE, pk_names: tuple[str, ...] = PK_NAMES) -> dict[tuple, dict[str, Any]]:
    """Every row of the source table (GetRange pages): primary-key values → attribute columns."""
    from tablestore import INF_MAX, INF_MIN

    rows: dict[tuple, dict[str, Any]] = {}
    start: Any = [(name, INF_MIN) for name in pk_names]
    end = [(name, INF_MAX) for name in pk_names]
    while start:
        _, start, page, _ = ots.get_range(table, "FORWARD", start, end, max_version=1)
        for row in page:
            pk = tuple(value for _, value in row.primary_key)
            rows[pk] = {name: value for name, value, _ in row.attribute_columns}
    return rows


def read_delta_rows(spark: Any, path: Path, pk_names: tuple[str, ...] = PK_NAMES) -> dict[tuple, dict[str, Any]]:
    """The live (not soft-deleted) rows of a Delta target table, in the shape of `read_source_rows`."""
    frame = spark.read.format("delta").load(str(path)).where("not _deleted")
    attributes = [c for c in frame.columns if not c.startswith("_") and c not in pk_names]
    rows = {}
    for row in frame.collect():
        values = row.asDict()
        rows[tuple(values[name] for name in pk_names)] = {c: values[c] for c in attributes if values[c] is not None}
    return rows


def compare_rows(source: dict, target: dict) -> list[str]:
    """One line per row that differs between source and target (floats compared to 9 decimals)."""
    mismatches = []
    for key in sorted(set(source) | set(target), key=str):
        expected, actual = source.get(key), target.get(key)
        if expected is not None and actual is not None:
            expected = {k: round(v, 9) if isinstance(v, float) else v for k, v in expected.items()}
            actual = {k: round(v, 9) if isinstance(v, float) else v for k, v in actual.items()}
        if expected != actual:
            mismatches.append(f"{key}: source {expected}, target {actual}")
    return mismatches


def read_stream_records(streams: Any, stream_id: str, table: str = "") -> dict[str, list[ChangeRecord]]:
    """Every retained record of every shard, in shard order (the ground truth Kafka is compared with)."""
    records: dict[str, list[ChangeRecord]] = {}
    for shard in streams.list_all_shards(stream_id):
        shard_records = records.setdefault(shard.shard_id, [])
        iterator = streams.get_shard_iterator(stream_id, shard.shard_id)
        while iterator:
            page = streams.get_stream_record(iterator, 1000, table=table, shard_id=shard.shard_id)
            shard_records.extend(page.records)
            if not page.records:
                break
            iterator = page.next_shard_iterator
    return records


def _stream_records(streams: Any, stream_id: str) -> int:
    return sum(len(records) for records in read_stream_records(streams, stream_id).values())


@dataclass
class CatchUp:
    """What `apply_until_equal` did: runs of the apply job, duplicates they absorbed, and how it ended."""

    runs: int = 0
    duplicates_absorbed: int = 0
    seconds: float = 0.0
    rows_in_target: int = 0
    mismatches: list[str] = field(default_factory=list)


def apply_until_equal(config: Any, spark: Any, table: str, source: dict[tuple, dict[str, Any]], *,
                      pk_names: tuple[str, ...] = PK_NAMES, timeout: float = 300.0) -> CatchUp:  # fmt: skip
    """Run the apply job (`--once`) until the Delta table of `table` equals `source` or `timeout` passes.

    The bridge may still be delivering the tail, so one run is not always enough; duplicates absorbed (redelivered
    or already applied operations) are summed over the runs.
    """
    from cdcbridge.apply.job import run_apply

    result = CatchUp()
    started = time.monotonic()
    table_path = Path(config.apply.delta_path) / table
    while True:
        stats = run_apply(config, once=True, spark=spark).report.stats
        result.runs += 1
        result.duplicates_absorbed += stats.duplicates + stats.stale
        target = read_delta_rows(spark, table_path, pk_names) if table_path.exists() else {}
        result.mismatches = compare_rows(source, target)
        result.rows_in_target = len(target)
        if not result.mismatches or time.monotonic() - started > timeout:
            break
        time.sleep(2)
    result.seconds = time.monotonic() - started
    return result


def _messages_in(endpoints: StackEndpoints, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": "demo-count"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        consumer.close()


def run_demo(*, rows: int = 300, operations: int = 3000, seed: int = 7, keep: bool = False,
             timeout: float = 300.0) -> DemoSummary:  # fmt: skip
    """Run the demo; the terminal gets its progress lines only, everything else goes to the log files the summary
    names (on a failure they are named before the error)."""
    work = Path(tempfile.mkdtemp(prefix="cdcbridge-demo-"))
    summary = DemoSummary(logs=[work / "demo.log"])
    with _terminal_kept_for_echo(summary.logs[0]) as echo:
        try:
            return _run_demo(work, summary, echo, rows=rows, operations=operations, seed=seed, keep=keep,
                             timeout=timeout)  # fmt: skip
        except BaseException:
            for line in _log_lines(summary.logs):
                echo(line)
            raise


def _run_demo(work: Path, summary: DemoSummary, echo: Callable[[str], None], *, rows: int, operations: int,
              seed: int, keep: bool, timeout: float) -> DemoSummary:  # fmt: skip
    from cdcbridge.config import load_config
    from cdcbridge.harness.stack.spark import local_spark_session
    from cdcbridge.tablestore import StreamClient, build_ots_client

    stack = LocalStack(work / "stack")
    echo(f"starting Kafka, Apicurio Registry and the Tablestore emulator (work folder {work})")
    endpoints = stack.up(StackPorts(0, 0, 0, 0), increments_as_deltas=True)
    summary.logs += [Path(str(info["log"])) for info in stack.status().values()]
    workers: list[BridgeWorkerProcess] = []
    try:
        assert endpoints.emulator_url is not None
        ots = build_ots_client(endpoints.emulator_url, "cdcbridge", "emulator-id", "emulator-secret")
        from tablestore import CapacityUnit, ReservedThroughput, TableMeta, TableOptions

        streams = StreamClient(ots)
        streams.create_table_with_stream(
            TableMeta(TABLE, PRIMARY_KEY), TableOptions(time_to_live=-1, max_version=1),
            ReservedThroughput(CapacityUnit(0, 0)), 24,
        )  # fmt: skip
        stream_id = streams.describe_table_stream(TABLE).stream_id
        config_path = write_config(work, demo_config(work, endpoints))
        config = load_config(config_path)
        echo("starting two bridge workers (cdcbridge run)")
        workers = [BridgeWorkerProcess(config_path, f"demo-worker-{i}", work / f"demo-worker-{i}.log") for i in (1, 2)]
        summary.logs += [worker.log_path for worker in workers]
        admin = EmulatorAdmin(endpoints.emulator_url)
        for worker in workers:
            worker.start()

        children: list[str] = []

        def split() -> None:
            shard = streams.list_all_shards(stream_id)[0].shard_id
            children.extend(admin.split(TABLE, shard))
            summary.events.append(f"split {shard} into {', '.join(children)}")

        def kill() -> None:
            workers[0].kill()
            summary.events.append(f"killed {workers[0].worker_id} with SIGKILL")

        def restart() -> None:
            workers[0].start()
            summary.events.append(f"restarted {workers[0].worker_id}")

        def merge() -> None:
            child = admin.merge(TABLE, children[0], children[1])
            summary.events.append(f"merged {children[0]} and {children[1]} into {child}")

        milestones = {operations * 3 // 10: split, operations // 2: kill, operations * 6 // 10: restart,
                      operations * 7 // 10: merge}  # fmt: skip
        echo(f"writing {operations} operations over {rows} rows (split, kill -9, restart and merge midway)")
        started = time.monotonic()
        summary.operations = _traffic(ots, rows, operations, seed, milestones)
        summary.traffic_seconds = time.monotonic() - started

        echo("running the Spark apply job into Delta Lake until the target equals the source")
        source = read_source_rows(ots)
        spark = local_spark_session("cdcbridge-demo", config.apply.spark)
        try:
            catch_up = apply_until_equal(config, spark, TABLE, source, timeout=timeout)
        finally:
            spark.stop()
        summary.apply_runs, summary.duplicates_absorbed = catch_up.runs, catch_up.duplicates_absorbed
        summary.mismatches, summary.catch_up_seconds = catch_up.mismatches, catch_up.seconds
        summary.rows_in_source, summary.rows_in_target = len(source), catch_up.rows_in_target
        summary.messages_in_kafka = _messages_in(endpoints, f"demo.{TABLE}.mutation")
        summary.stream_records = _stream_records(streams, stream_id)
        return summary
    finally:
        for worker in workers:
            worker.stop()
        if not keep:
            stack.down()
