"""Apply-job benchmark: records/s from Kafka into Delta and into PostgreSQL, and end-to-end freshness.

Throughput: a MUTATE_LOG stream (puts, updates, increments, deletes; runs re-sent as after bridge restarts, about
15 % duplicates) is produced first, then the job runs with ``availableNow`` and ``maxOffsetsPerTrigger`` = the
batch size. The figure per batch size is the median of ``messages / seconds`` over the full-size batches after
the first (the first pays for table creation; it is reported separately), plus the phase split of the batches
(see :class:`~cdcbridge.apply.batch_report.BatchReport`) and how many took the Spark path. Before the first
measurement of a target, a few batches of every size warm the JVM up (JIT and Spark's generated code), so the
figures are those of a running job rather than of its first minutes: small batches alone left the first large
batches still warming up.

Floor (Delta only): after each Delta run, :mod:`.apply_floor` reads the same messages again and does the least an
apply of this design does per batch (decode, keep each key's last message, rewrite the table);
``floor_rec_per_s`` is its rate and ``share_of_floor`` the apply's rate as a share of it.

Table size (``--table-rows``, Delta only): per size, a table of that many rows is filled directly
(:mod:`.apply_table`), then 100k-record batches on random keys of it are applied from Kafka; the steady rate per
size and the ratio largest / smallest show whether a batch's cost follows the batch or the table. The sizes run
in rounds, in turn smallest and largest first, and the median round is reported.

Freshness: the job runs continuously (1 s trigger) while records are produced at a fixed rate; for every message
the time from its send to the commit of the target write that made its row reach (or pass) its seq is taken, and
p50/p95 reported. That is the apply job's share; :mod:`.apply_trickle` measures end to end at a trickle (SDK
write → row readable in Delta, the whole stack and the job's defaults), and :mod:`.apply_first_load` the initial
fill of an empty Delta target against a plain decode-and-append job. Everything runs on this machine: Kafka and
the registry (a LocalStack started here unless endpoints are given), PostgreSQL (a throw-away server), Spark
local[2].
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.model import PrimaryKey, TargetRow
from cdcbridge.apply.job import ApplySummary, run_apply
from cdcbridge.apply.target import ApplyTarget, SparkFoldTarget, TargetBatch
from cdcbridge.config import BridgeConfig, parse_config
from cdcbridge.formats import BridgeTableFormat
from cdcbridge.formats.keys import decode_key
from cdcbridge.harness.bench.apply_first_load import initial_fill, measure_first_load, median_of_rounds
from cdcbridge.harness.bench.apply_floor import measure_floor
from cdcbridge.harness.bench.apply_table import fill_table
from cdcbridge.harness.bench.apply_workload import (
    OutgoingMessage,
    WorkloadProducer,
    bridge_messages,
    ensure_topics,
    formats_of,
    generate_records,
    produce_messages,
    with_redeliveries,
)

if TYPE_CHECKING:
    from cdcbridge.apply.target import FoldedTable

TABLE = "bench_rows"
PHASES = ("seconds_decode", "seconds_read", "seconds_fold", "seconds_write")


class CommitClock(ApplyTarget):
    """Wraps a target and notes when each written row (with its seq) became visible."""

    def __init__(self, inner: ApplyTarget) -> None:
        self.inner = inner
        self.name = inner.name
        self.commits: list[tuple[float, list[tuple[PrimaryKey, str | None]]]] = []

    def prepare(self, tables: Collection[str]) -> None:
        self.inner.prepare(tables)

    def read_marker(self, table: str, app_id: str) -> BatchMarker | None:
        return self.inner.read_marker(table, app_id)

    def read_rows(self, table: str, keys: Collection[PrimaryKey]) -> dict[PrimaryKey, TargetRow]:
        return self.inner.read_rows(table, keys)

    def pk_names(self, table: str) -> tuple[str, ...] | None:
        return self.inner.pk_names(table)

    def refused_rows(self, table: str, rows: Sequence[TargetRow]) -> dict[PrimaryKey, str]:
        return self.inner.refused_rows(table, rows)

    def write(self, batch: TargetBatch) -> int:
        written = self.inner.write(batch)
        rows = [(row.pk, row.seq) for rows in batch.rows.values() for row in rows]
        self.commits.append((time.time(), rows))
        return written

    def close(self) -> None:
        self.inner.close()


class SparkCommitClock(CommitClock, SparkFoldTarget):
    """:class:`CommitClock` for a target the Spark path writes to (the written rows are collected for the clock,
    which only the freshness benchmark affords)."""

    inner: SparkFoldTarget

    def current_rows(self, tables: Collection[str], grouped: Any, keys_at_most: int | None = None) -> Any:
        return self.inner.current_rows(tables, grouped, keys_at_most)

    def refusal(self, folded: FoldedTable) -> str | None:
        return self.inner.refusal(folded)

    def write_folded(self, marker: BatchMarker, tables: Mapping[str, FoldedTable]) -> dict[str, int]:
        rows = []
        for folded in tables.values():
            for record in folded.rows.select("pk", "row.seq").collect():
                pk = tuple((item["n"], next(v for v in item["v"] if v is not None)) for item in record["pk"])
                rows.append((pk, record["seq"]))
        written = self.inner.write_folded(marker, tables)
        self.commits.append((time.time(), rows))
        return written


def commit_clock(inner: ApplyTarget) -> CommitClock:
    return SparkCommitClock(inner) if isinstance(inner, SparkFoldTarget) else CommitClock(inner)


def _config(endpoints: dict[str, str], prefix: str, work: Path, target: str, dsn: str | None, **apply: Any):
    return parse_config(
        {
            "source": {"tables": [{"name": TABLE, "formats": ["MUTATE_LOG"], "partitions": 4}]},
            "kafka": {"bootstrap_servers": endpoints["kafka"], "topic_prefix": prefix,
                      "schema_registry": {"url": endpoints["registry"]}},
            "apply": {"target": target, "postgres_dsn": dsn, "postgres_schema": prefix,
                      "delta_path": str(work / prefix / "delta"),
                      "checkpoint_location": str(work / prefix / "checkpoint"),
                      "app_id": f"{prefix}-{target}", **apply},
        },
        environ={},
    )  # fmt: skip


def _stream(prefix: str, records: int, seed: int) -> list[OutgoingMessage]:
    recs = generate_records(TABLE, keys=max(records // 2, 1), records=records, seed=seed)
    messages, _ = bridge_messages(recs, BridgeTableFormat(), topic_prefix=prefix)
    return with_redeliveries(messages, seed=seed, fraction=0.1)


def _produce(endpoints: dict[str, str], messages: list[OutgoingMessage]) -> float:
    client = {"bootstrap.servers": endpoints["kafka"]}
    ensure_topics(client, {m.topic for m in messages}, 4)
    started = time.perf_counter()
    produce_messages(client, endpoints["registry"], messages)
    return time.perf_counter() - started


def steady_rate(batch_times: Sequence[tuple[int, float]], batch_size: int) -> tuple[int | None, int]:
    """The median messages/s of the full batches (at least 90% of `batch_size`) after the first, and how many
    there were."""
    rates = [messages / seconds for messages, seconds in batch_times[1:] if messages >= batch_size * 0.9]
    return (round(statistics.median(rates)) if rates else None), len(rates)


def _throughput_figures(summary: ApplySummary, batch_size: int) -> dict[str, Any]:
    rate, measured = steady_rate([(messages, seconds) for _, messages, seconds in summary.batch_times], batch_size)
    first = summary.batch_times[0] if summary.batch_times else (0, 0, 0.0)
    figures: dict[str, Any] = {
        "rec_per_s": rate,
        "batches_measured": measured,
        "first_batch_rec_per_s": round(first[1] / first[2]) if first[2] else None,
        "messages": summary.report.stats.messages,
        "run_seconds": round(summary.seconds, 1),
    }
    total = sum(getattr(summary.report, phase) for phase in PHASES) or 1.0
    figures["phase_share"] = {
        phase.removeprefix("seconds_"): round(getattr(summary.report, phase) / total, 2) for phase in PHASES
    }
    figures["spark_batches"] = summary.report.spark_batches
    figures["batches"] = summary.report.batches
    return figures


def _measure_throughput(spark: Any, endpoints: dict, work: Path, target: str, dsn: str | None, batch_size: int,
                        batches: int, seed: int, *, floor: bool = False) -> dict[str, Any]:  # fmt: skip
    """Apply `batches` batches of `batch_size` records (plus their redeliveries) with a job of their own; with
    `floor`, then time :mod:`.apply_floor` on the same messages."""
    prefix = f"bench{int(time.time() * 1000) % 10**9}"
    produced = _produce(endpoints, _stream(prefix, batch_size * batches, seed))
    config = _config(endpoints, prefix, work, target, dsn, max_offsets_per_trigger=batch_size)
    summary = run_apply(config, once=True, spark=spark)
    figures = _throughput_figures(summary, batch_size)
    figures["produce_seconds"] = round(produced, 1)
    if floor:
        figures.update(_floor_figures(measure_floor(spark, config), batch_size, figures["rec_per_s"]))
    return figures


def _floor_figures(batch_times: Sequence[tuple[int, float]], batch_size: int, rec_per_s: int | None) -> dict[str, Any]:
    """The floor's steady rate and the apply's rate as a share of it (None where either is missing)."""
    rate, _ = steady_rate(batch_times, batch_size)
    share = round(rec_per_s / rate, 2) if rate and rec_per_s else None
    return {"floor_rec_per_s": rate, "share_of_floor": share}


def _measure_freshness(spark: Any, endpoints: dict, work: Path, target: str, dsn: str | None, *, rate: int,
                       seconds: float, seed: int) -> dict[str, Any]:  # fmt: skip
    prefix = f"fresh{int(time.time() * 1000) % 10**9}"
    messages = _stream(prefix, int(rate * seconds), seed)
    client = {"bootstrap.servers": endpoints["kafka"]}
    ensure_topics(client, {m.topic for m in messages}, 4)
    producer = WorkloadProducer(client, endpoints["registry"], formats_of(messages))
    producer.send(messages[:1])
    producer.flush()
    config: BridgeConfig = _config(endpoints, prefix, work, target, dsn, trigger_seconds=1.0)
    from cdcbridge.apply.targets.factory import build_target

    clock = commit_clock(build_target(config, spark))
    stop = threading.Event()
    job = threading.Thread(target=run_apply, args=(config,), kwargs={"stop_event": stop, "spark": spark,
                                                                      "target": clock}, daemon=True)  # fmt: skip
    job.start()
    warm_until = time.time() + 60
    while not clock.commits and time.time() < warm_until:  # the query started and applied the first message
        time.sleep(0.2)
    sent: list[tuple[float, OutgoingMessage]] = []
    started = time.time()
    chunk = max(rate // 20, 1)
    for index in range(1, len(messages), chunk):
        part = messages[index : index + chunk]
        sent.extend((time.time(), message) for message in part)
        producer.send(part)
        time.sleep(max(0.0, started + (index + chunk) / rate - time.time()))
    producer.flush()
    deadline = time.time() + 120
    latencies = _latencies(sent, clock)
    while len(latencies) < len(sent) and time.time() < deadline:
        time.sleep(1)
        latencies = _latencies(sent, clock)
    stop.set()
    job.join(120)
    if not latencies:
        return {"messages": len(sent), "visible": 0}
    ordered = sorted(latencies)
    return {
        "messages": len(sent),
        "visible": len(latencies),
        "rate_per_s": rate,
        "p50_s": round(ordered[len(ordered) // 2], 2),
        "p95_s": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 2),
    }


def _measure_first_load(
    spark: Any, endpoints: dict, work: Path, rows: int, batch_size: int, seed: int, rounds: int
) -> dict:
    """The initial fill of an empty Delta target with `rows` new rows, against the plain job, `rounds` times
    (:mod:`.apply_first_load`), after an unreported small fill that warms both jobs' code up."""
    measured = []
    warmup = min(rows, batch_size) // 5
    for index, size in enumerate([warmup] + [rows] * rounds):
        prefix = f"load{int(time.time() * 1000) % 10**9}"
        _produce(endpoints, initial_fill(TABLE, rows=size, prefix=prefix, seed=seed + index))
        per_batch = batch_size if index else max(size // 5, 1)
        config = _config(endpoints, prefix, work, "delta", None, max_offsets_per_trigger=per_batch)
        measured.append(measure_first_load(spark, config, apply_first=index % 2 == 0))
    return median_of_rounds(measured[1:])


def _measure_trickle(seconds: float, trigger_seconds: float | None) -> dict[str, Any]:
    """End-to-end freshness at a trickle (:mod:`.apply_trickle`): ``delta_trickle`` for new rows,
    ``delta_trickle_updates`` for updates of stored rows; needs delta-rs (``deltalake``, dev extras)."""
    try:
        import deltalake  # noqa: F401
    except ImportError:
        return {"delta_trickle": {"skipped": "needs deltalake (pip install -e '.[dev]')"}}
    from cdcbridge.harness.bench.apply_trickle import measure_trickle

    phases = measure_trickle(seconds=seconds, trigger_seconds=trigger_seconds)
    return {"delta_trickle": phases["inserts"], "delta_trickle_updates": phases["updates"]}


def _latencies(sent: list[tuple[float, OutgoingMessage]], clock: CommitClock) -> list[float]:
    """Per sent message: commit time of the first write that brought its row to (or past) its seq."""
    visible: dict[tuple, list[tuple[float, str]]] = {}
    for at, rows in list(clock.commits):
        for pk, seq in rows:
            visible.setdefault(tuple(value for _, value in pk), []).append((at, seq or ""))
    out = []
    for sent_at, message in sent:
        assert message.value is not None
        key = tuple(decode_key(message.key))
        seq = message.value["seq"]["seq_key"]
        for at, row_seq in visible.get(key, ()):
            if row_seq >= seq:
                out.append(max(0.0, at - sent_at))
                break
    return out


def run_apply_bench(
    *,
    batch_sizes: tuple[int, ...] = (10_000, 100_000),
    batches: int = 3,
    targets: tuple[str, ...] = ("delta", "postgres"),
    freshness_rate: int = 500,
    freshness_seconds: float = 20.0,
    endpoints: dict[str, str] | None = None,
    seed: int = 5,
    warmup_batches: int = 4,
    first_load_rows: int = 500_000,
    first_load_rounds: int = 3,
    trickle_seconds: float = 60.0,
    trickle_trigger: float | None = None,
) -> dict[str, Any]:
    """Measure apply throughput per target and batch size, and freshness into Delta; returns flat figures
    (``delta_100k_batches.rec_per_s``, ``delta_freshness.p95_s``, …). Each target is first warmed up with
    `warmup_batches` batches of every size (not reported). Then, for Delta, the first load of `first_load_rows`
    rows in batches of the largest size, `first_load_rounds` times (``delta_first_load``, the median) and, once
    this Spark is stopped, the end-to-end trickle of `trickle_seconds` with the whole stack, new rows then updates
    of them (``delta_trickle``, ``delta_trickle_updates``; `trickle_trigger` overrides the job's default trigger).
    0 skips either."""
    from cdcbridge.config import SparkSettings
    from cdcbridge.harness.stack.postgres import PostgresServer
    from cdcbridge.harness.stack.spark import local_spark_session
    from cdcbridge.harness.stack.stack import LocalStack, StackPorts

    work = Path(tempfile.mkdtemp(prefix="cdcbridge-apply-bench-"))
    stack = None
    if endpoints is None:
        stack = LocalStack(work / "stack")
        up = stack.up(StackPorts(0, 0, 0, 0), services=("kafka", "registry"))
        endpoints = {"kafka": up.kafka_bootstrap, "registry": up.registry_url}
    postgres = PostgresServer().start() if "postgres" in targets else None
    # local[2], as every figure in benchmarks/ was measured
    spark = local_spark_session("cdcbridge-bench-apply", SparkSettings(master="local[2]"))
    figures: dict[str, Any] = {}
    try:
        for target in targets:
            dsn = postgres.dsn if postgres is not None else None
            floor = target == "delta"
            for size, count in warmup_runs(batch_sizes, warmup_batches):
                _measure_throughput(spark, endpoints, work, target, dsn, size, count, seed + 1, floor=floor)
            for size in batch_sizes:
                label = f"{target}_{size // 1000}k_batches"
                figures[label] = _measure_throughput(
                    spark, endpoints, work, target, dsn, size, batches, seed, floor=floor
                )
        if "delta" in targets and freshness_seconds > 0:
            figures["delta_freshness"] = _measure_freshness(
                spark, endpoints, work, "delta", None, rate=freshness_rate, seconds=freshness_seconds, seed=seed
            )
        if "delta" in targets and first_load_rows > 0:
            figures["delta_first_load"] = _measure_first_load(
                spark, endpoints, work, first_load_rows, max(batch_sizes, default=100_000), seed, first_load_rounds
            )
        figures["spark_master"] = spark.sparkContext.master
        figures["cores"] = spark.sparkContext.defaultParallelism
    finally:
        spark.stop()
        if postgres is not None:
            postgres.stop()
        if stack is not None:
            stack.down()
        shutil.rmtree(work, ignore_errors=True)
    if "delta" in targets and trickle_seconds > 0:
        figures.update(_measure_trickle(trickle_seconds, trickle_trigger))
    return flatten(figures)


def _measure_table_size(spark: Any, endpoints: dict, work: Path, rows: int, batch_size: int, batches: int,
                        seed: int) -> dict[str, Any]:  # fmt: skip
    """Fill a Delta table of `rows` rows directly (:mod:`.apply_table`), then apply `batches` batches of
    `batch_size` records on random keys of it (plus redeliveries) from Kafka with a job of its own."""
    from delta.tables import DeltaTable

    from cdcbridge.apply.targets.delta import DeltaTarget

    prefix = f"rows{int(time.time() * 1000) % 10**9}"
    config = _config(endpoints, prefix, work, "delta", None, max_offsets_per_trigger=batch_size)
    target = DeltaTarget(spark, config.apply.delta_path)
    started = time.perf_counter()
    files = fill_table(target, TABLE, rows)
    filled = time.perf_counter() - started
    records = generate_records(TABLE, keys=rows, records=batch_size * batches, seed=seed, preloaded=rows)
    messages, _ = bridge_messages(records, BridgeTableFormat(), topic_prefix=prefix)
    produced = _produce(endpoints, with_redeliveries(messages, seed=seed, fraction=0.1))
    summary = run_apply(config, once=True, spark=spark)
    figures = _throughput_figures(summary, batch_size)
    detail = DeltaTable.forPath(spark, target.path(TABLE)).detail().first()
    figures.update(
        table_rows=rows,
        table_files=files,
        table_files_after=detail["numFiles"],
        fill_seconds=round(filled, 1),
        produce_seconds=round(produced, 1),
    )
    shutil.rmtree(work / prefix, ignore_errors=True)
    return figures


def rows_label(rows: int) -> str:
    """A table size as the figures name it: 250k, 2m, 10m."""
    if rows >= 1_000_000 and rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}m"
    return f"{rows // 1000}k" if rows % 1000 == 0 else str(rows)


def table_size_ratio(figures: Mapping[str, Mapping[str, Any]], table_rows: Sequence[int]) -> float | None:
    """The steady rec/s at the largest table size as a share of that at the smallest (None if either is
    missing)."""
    small = figures.get(f"delta_{rows_label(min(table_rows))}_rows", {}).get("rec_per_s")
    large = figures.get(f"delta_{rows_label(max(table_rows))}_rows", {}).get("rec_per_s")
    return round(large / small, 2) if small and large else None


def run_table_rows_bench(
    *,
    table_rows: tuple[int, ...] = (250_000, 10_000_000),
    batch_size: int = 100_000,
    batches: int = 4,
    rounds: int = 3,
    endpoints: dict[str, str] | None = None,
    seed: int = 5,
    warmup_batches: int = 4,
) -> dict[str, Any]:
    """Per table size: steady rec/s of `batch_size`-record batches on random keys into a Delta table of that many
    rows, filled directly beforehand; and the ratio largest / smallest (``ratio_large_to_small``), which is 1
    when a batch's cost does not depend on the table. The sizes run `rounds` times, their order reversed every
    round, and the median round is reported (:func:`median_table_rows_round`): one round's ratio swings with the
    machine. A small table takes `warmup_batches` batches first."""
    from cdcbridge.config import SparkSettings
    from cdcbridge.harness.stack.spark import local_spark_session
    from cdcbridge.harness.stack.stack import LocalStack, StackPorts

    work = Path(tempfile.mkdtemp(prefix="cdcbridge-apply-bench-"))
    stack = None
    if endpoints is None:
        stack = LocalStack(work / "stack")
        up = stack.up(StackPorts(0, 0, 0, 0), services=("kafka", "registry"))
        endpoints = {"kafka": up.kafka_bootstrap, "registry": up.registry_url}
    spark = local_spark_session("cdcbridge-bench-apply", SparkSettings(master="local[2]"))
    measured: list[dict[str, Any]] = []
    try:
        if warmup_batches > 0:
            _measure_table_size(spark, endpoints, work, min(table_rows), batch_size, warmup_batches, seed + 1)
        for round_ in range(max(rounds, 1)):
            figures: dict[str, Any] = {}
            for rows in sorted(table_rows, reverse=round_ % 2 == 1):
                figures[f"delta_{rows_label(rows)}_rows"] = _measure_table_size(
                    spark, endpoints, work, rows, batch_size, batches, seed + round_
                )
            figures["ratio_large_to_small"] = table_size_ratio(figures, table_rows)
            measured.append(figures)
        result = median_table_rows_round(measured)
        result["batch_records"] = batch_size
        result["spark_master"] = spark.sparkContext.master
        result["cores"] = spark.sparkContext.defaultParallelism
    finally:
        spark.stop()
        if stack is not None:
            stack.down()
        shutil.rmtree(work, ignore_errors=True)
    return flatten(result)


def median_table_rows_round(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The round whose ratio is the median of the rounds' (the lower middle one of an even count), with the
    lowest and highest ratio and the number of rounds beside it."""
    ratios = [r["ratio_large_to_small"] for r in rounds if r.get("ratio_large_to_small") is not None]
    if not ratios:
        return {**rounds[-1], "rounds": len(rounds)}
    middle = statistics.median_low(ratios)
    chosen = next(r for r in rounds if r.get("ratio_large_to_small") == middle)
    return {**chosen, "ratio_lowest": min(ratios), "ratio_highest": max(ratios), "rounds": len(rounds)}


def warmup_runs(batch_sizes: Collection[int], warmup_batches: int) -> list[tuple[int, int]]:
    """The unreported runs before a target's measurements, as (batch size, batches): each size, smallest
    first, so the largest batches' code is warm too."""
    if warmup_batches <= 0:
        return []
    return [(size, warmup_batches) for size in sorted(set(batch_sizes))]


def flatten(figures: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """One level of ``name: value`` (nested names joined with ``.``), as the results table shows them."""
    flat: dict[str, Any] = {}
    for name, value in figures.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat
