"""The first load: the initial fill of an empty Delta target from Kafka, against a plain Spark job on the same
messages.

The stream holds one PUT per row (distinct keys in random order, as a table's initial export arrives). The apply
job reads it with ``availableNow`` in batches of ``maxOffsetsPerTrigger`` into an empty table; the plain job reads
the same messages with the apply job's own Kafka source options in the same batches, decodes each value with
``from_avro`` and appends the decoded rows to a Delta table under a txn marker: no grouping, no fold, no checks, so
its rate bounds the apply's on this machine. Both rates are rows/s over the batches' own time (the query's start
and the first table creation included in neither), and ``ratio`` is apply / plain, measured in the same run; over
several rounds (each a new stream and table, the two jobs' order alternating) the median of the rounds' ratios.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdcbridge.apply.job import run_apply, start_query
from cdcbridge.apply.routing import TopicRouting
from cdcbridge.apply.spark.decode import decoded_struct, with_framing
from cdcbridge.apply.writer_schemas import WriterSchemas
from cdcbridge.changes import Cell, ChangeRecord, RecordAction
from cdcbridge.changes import Sequence as RecordSequence
from cdcbridge.config import BridgeConfig
from cdcbridge.contract import CellOp, MessageFormat
from cdcbridge.formats import BridgeTableFormat
from cdcbridge.harness.bench.apply_workload import START_US, bridge_messages

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdcbridge.harness.bench.apply_workload import OutgoingMessage


def initial_fill(table: str, *, rows: int, prefix: str, seed: int = 0) -> list[OutgoingMessage]:
    """One MUTATE_LOG PUT per row of `table` (keys 0 … rows-1 in random order), as the bridge sends them."""
    rng = random.Random(seed)
    keys = list(range(rows))
    rng.shuffle(keys)
    records = []
    for index, key in enumerate(keys):
        sequence = RecordSequence(1, START_US + index * 1000, 0)
        ts = sequence.timestamp_us // 1000
        cells = [
            Cell("name", CellOp.PUT, f"n{rng.randrange(10_000)}", ts),
            Cell("score", CellOp.PUT, rng.random() * 100, ts),
            Cell("visits", CellOp.PUT, rng.randrange(100), ts),
        ]
        pk = [("region", f"r{key % 3}"), ("id", key)]
        records.append(ChangeRecord(table, RecordAction.PUT, pk, cells, sequence, shard_id="shard-0"))
    messages, _ = bridge_messages(records, BridgeTableFormat(), topic_prefix=prefix)
    return messages


def plain_append(spark: SparkSession, config: BridgeConfig) -> list[tuple[int, float]]:
    """Read the configured topics with a checkpoint of their own in the apply job's batches, decode with
    ``from_avro`` and append to ``<delta_path>/_plain``; returns (messages, seconds) per batch (the count is
    read from the commit's metrics after the timed write)."""
    from delta.tables import DeltaTable

    routing = TopicRouting.from_config(config)
    schemas = WriterSchemas(config.kafka.schema_registry.client_config())
    loaded = schemas.preload(f"{topic}-value" for topic in routing.subscribed_topics())
    envelope = decoded_struct(loaded, MessageFormat.MUTATE_LOG)
    if envelope is None:
        raise ValueError("no MUTATE_LOG writer schema is loaded")
    path = f"{config.apply.delta_path}/_plain"
    app_id = f"{config.apply.app_id}-plain"
    times: list[tuple[int, float]] = []

    def append(batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        rows = with_framing(batch).select("key", envelope.alias("m")).select("key", "m.*")
        rows.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", batch_id).save(path)
        seconds = time.monotonic() - started
        last = DeltaTable.forPath(batch.sparkSession, path).history(1).select("operationMetrics").first()
        metrics = (last["operationMetrics"] if last is not None else None) or {}
        times.append((int(metrics.get("numOutputRows", 0)), seconds))

    plain_apply = config.apply.model_copy(
        update={"checkpoint_location": f"{config.apply.checkpoint_location}-plain", "app_id": app_id}
    )
    start_query(spark, config.model_copy(update={"apply": plain_apply}), routing, append, once=True).awaitTermination()
    return times


def measure_first_load(spark: SparkSession, config: BridgeConfig, *, apply_first: bool = False) -> dict[str, Any]:
    """Fill an empty Delta target with the apply job and run the plain job on the same messages (the plain job
    first unless `apply_first`); rows/s of each and their ratio."""
    if apply_first:
        summary = run_apply(config, once=True, spark=spark)
        plain = plain_append(spark, config)
    else:
        plain = plain_append(spark, config)
        summary = run_apply(config, once=True, spark=spark)
    apply_rows = sum(messages for _, messages, _ in summary.batch_times)
    apply_seconds = sum(seconds for _, _, seconds in summary.batch_times)
    plain_rows = sum(messages for messages, _ in plain)
    plain_seconds = sum(seconds for _, seconds in plain)
    apply_rate = round(apply_rows / apply_seconds) if apply_seconds else None
    plain_rate = round(plain_rows / plain_seconds) if plain_seconds else None
    return {
        "rows": summary.report.rows_written,
        "batches": len(summary.batch_times),
        "rows_per_s": apply_rate,
        "plain_rows_per_s": plain_rate,
        "ratio": round(apply_rate / plain_rate, 2) if apply_rate and plain_rate else None,
    }


def median_of_rounds(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The figures of several first loads (:func:`measure_first_load`) as one: each rate and the ratio the median
    of the rounds', with the lowest and highest ratio beside it (one round swings by about ±10 %)."""
    ratios = [r["ratio"] for r in rounds if r["ratio"] is not None]
    figures = dict(rounds[-1])
    for name in ("rows_per_s", "plain_rows_per_s"):
        rates = [r[name] for r in rounds if r[name] is not None]
        figures[name] = round(statistics.median(rates)) if rates else None
    figures["ratio"] = round(statistics.median(ratios), 2) if ratios else None
    figures["ratio_lowest"] = min(ratios, default=None)
    figures["ratio_highest"] = max(ratios, default=None)
    figures["rounds"] = len(rounds)
    return figures
