"""The apply benchmark's floor: the least work an apply of this design does per batch, timed on this machine.

Per micro-batch, with the apply job's own Kafka source options and writer schemas: read the batch, decode every
value with ``from_avro``, keep each row key's last message (one shuffle), and rewrite a Delta table as its rows
with other keys plus those, committed with a txn marker. That is what :mod:`cdcbridge.apply.spark.batch` must do
at the least on a batch whose keys touch every file of the table, without the checks, the fold onto the stored
rows and the per-table summary, so the rows it writes are not the apply's. Its rate bounds the real path's from
above on the same messages, as a raw producer's rate bounds the bridge's in ``bench bridge``: the gap between the
two is the apply's own work, the floor itself is Kafka, Avro, a shuffle and a Delta write on these cores.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from cdcbridge.apply.job import start_query
from cdcbridge.apply.routing import TopicRouting
from cdcbridge.apply.spark.decode import decoded_struct, with_framing
from cdcbridge.apply.writer_schemas import WriterSchema, WriterSchemas
from cdcbridge.config import BridgeConfig
from cdcbridge.contract import MessageFormat

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import DataFrame, SparkSession


def rewrite_with_last_messages(
    batch: DataFrame, schemas: Mapping[int, WriterSchema], path: str, app_id: str, batch_id: int
) -> int:
    """Rewrite the Delta table at `path` with each key's last MUTATE_LOG message of `batch` (key, seq, timestamp,
    cells, row_deleted) in place of its stored row; returns the batch's message count."""
    from delta.tables import DeltaTable
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    envelope = decoded_struct(schemas, MessageFormat.MUTATE_LOG)
    if envelope is None:
        raise ValueError("no MUTATE_LOG writer schema is loaded: the floor decodes MUTATE_LOG messages only")
    message = F.struct(*[F.col("_m")[name].alias(name) for name in ("seq", "timestamp", "cells", "row_deleted")])
    last = (
        with_framing(batch)
        .withColumn("_m", envelope)
        .groupBy("key")
        .agg(F.max_by(message, F.struct("partition", "offset")).alias("m"), F.count(F.lit(1)).alias("n"))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        messages = int(last.agg(F.sum("n")).first()[0] or 0)
        rows = last.select("key", "m.*")
        if DeltaTable.isDeltaTable(batch.sparkSession, path):
            stored = batch.sparkSession.read.format("delta").load(path)
            rows = stored.join(F.broadcast(rows.select("key")), on="key", how="left_anti").unionByName(rows)
        (
            rows.write.format("delta")
            .mode("overwrite")
            .option("txnAppId", app_id)
            .option("txnVersion", batch_id)
            .save(path)
        )
    finally:
        last.unpersist()
    return messages


def measure_floor(spark: SparkSession, config: BridgeConfig) -> list[tuple[int, float]]:
    """Read the configured topics with a new checkpoint (from ``apply.starting_offsets``) in batches of
    ``apply.max_offsets_per_trigger`` (``availableNow``) and rewrite a Delta table under ``apply.delta_path`` per
    batch; returns (messages, seconds) per batch."""
    routing = TopicRouting.from_config(config)
    schemas = WriterSchemas(config.kafka.schema_registry.client_config())
    loaded = schemas.preload(f"{topic}-value" for topic in routing.subscribed_topics())
    path = f"{config.apply.delta_path}/_floor"
    app_id = f"{config.apply.app_id}-floor"
    times: list[tuple[int, float]] = []

    def apply_batch(batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        messages = rewrite_with_last_messages(batch, loaded, path, app_id, batch_id)
        times.append((messages, time.monotonic() - started))

    # The apply job's own query, with a checkpoint and app id of its own: the apply's run ended, its offsets stay.
    floor_apply = config.apply.model_copy(
        update={"checkpoint_location": f"{config.apply.checkpoint_location}-floor", "app_id": app_id}
    )
    floor_config = config.model_copy(update={"apply": floor_apply})
    start_query(spark, floor_config, routing, apply_batch, once=True).awaitTermination()
    return times
