"""Producing a workload to real Kafka and reading back what a target holds."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg

from cdcbridge.apply.targets.postgres import decode_attrs
from cdcbridge.config import BridgeConfig, parse_config
from cdcbridge.contract import MessageFormat
from cdcbridge.formats import BridgeTableFormat, schema_text
from cdcbridge.harness.bench.apply_workload import (
    OutgoingMessage,
    SourceTable,
    bridge_messages,
    ensure_topics,
    generate_records,
    produce_messages,
    with_redeliveries,
)
from cdcbridge.harness.stack.stack import StackEndpoints

BOOKKEEPING = {"_versions", "_seq", "_deleted", "_source_ts"}
TABLES = {"users": "MUTATE_LOG", "items": "RECORD_IMAGE"}


def unique_prefix() -> str:
    return f"it{uuid.uuid4().hex[:8]}"


def job_config(stack: StackEndpoints, prefix: str, work: Path, **apply: Any) -> BridgeConfig:
    return parse_config(job_settings(stack, prefix, work, **apply), environ={})


def job_settings(stack: StackEndpoints, prefix: str, work: Path, **apply: Any) -> dict[str, Any]:
    """The configuration of a job reading `prefix`'s topics into `work`, as the YAML file would hold it."""
    tables = [{"name": name, "formats": [fmt], "partitions": 2} for name, fmt in TABLES.items()]
    settings = {
        "delta_path": str(work / "delta"),
        "checkpoint_location": str(work / "checkpoint"),
        "app_id": prefix,
        "max_offsets_per_trigger": 300,
        # the Spark path, which these tests were written for (test_small_batches sets its own threshold)
        "small_batch_max_messages": 0,
        **apply,
    }
    return {
        "source": {"tables": tables},
        "kafka": {"bootstrap_servers": stack.kafka_bootstrap, "topic_prefix": prefix,
                  "schema_registry": {"url": stack.registry_url}},
        "apply": settings,
    }  # fmt: skip


@dataclass
class Workload:
    """Both tables' messages with redeliveries interleaved (runs sent 2-3 times), a tail of the MUTATE_LOG table
    written with an evolved envelope schema (a second schema id), and the source tables they leave."""

    messages: list[OutgoingMessage]
    evolved: list[OutgoingMessage]
    sources: dict[str, SourceTable]

    def expected(self, table: str) -> dict[tuple, dict[str, Any]]:
        return self.sources[table].live_values()


def evolved_mutate_log_schema() -> str:
    schema = json.loads(schema_text(MessageFormat.MUTATE_LOG))
    schema["fields"].append({"name": "trace_id", "type": ["null", "string"], "default": None})
    return json.dumps(schema)


def make_workload(prefix: str, *, records: int = 160, tail: int = 40, keys: int = 15, seed: int = 11) -> Workload:
    messages: list[OutgoingMessage] = []
    evolved: list[OutgoingMessage] = []
    sources: dict[str, SourceTable] = {}
    for offset, (table, fmt) in enumerate(TABLES.items()):
        recs = generate_records(table, keys=keys, records=records + tail, seed=seed + offset)
        table_format = BridgeTableFormat(formats=(fmt,))
        head, source = bridge_messages(recs[:records], table_format, topic_prefix=prefix)
        rest, sources[table] = bridge_messages(recs[records:], table_format, topic_prefix=prefix, source=source)
        messages.extend(with_redeliveries(head, seed=seed, fraction=0.6))
        if fmt == "MUTATE_LOG":
            traced = [replace(m, value={**m.value, "trace_id": "t-1"}) for m in rest]
            evolved.extend(with_redeliveries(traced, seed=seed, fraction=0.6))
        else:
            messages.extend(with_redeliveries(rest, seed=seed, fraction=0.6))
    return Workload(messages, evolved, sources)


def produce_workload(stack: StackEndpoints, work: Workload) -> None:
    produce(stack, work.messages)
    schemas = {m.topic: evolved_mutate_log_schema() for m in work.evolved}
    config = {"bootstrap.servers": stack.kafka_bootstrap}
    produce_messages(config, stack.registry_url, work.evolved, schemas=schemas)


def produce(stack: StackEndpoints, messages: list[OutgoingMessage]) -> list[tuple[str, int, int]]:
    config = {"bootstrap.servers": stack.kafka_bootstrap}
    ensure_topics(config, {m.topic for m in messages}, 2)
    return produce_messages(config, stack.registry_url, messages)


def _plain(value: Any) -> Any:
    return bytes(value) if isinstance(value, bytearray | memoryview) else value


def delta_live(spark, path: str) -> dict[tuple, dict[str, Any]]:
    frame = spark.read.format("delta").load(path)
    return live_rows(row.asDict() for row in frame.where("NOT _deleted").collect())


def live_rows(records: Iterable[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """The rows not soft-deleted, by primary key, without the bookkeeping columns (as `Workload.expected`)."""
    pk = ["region", "id"]
    out = {}
    for record in records:
        if record["_deleted"]:
            continue
        out[tuple(record[k] for k in pk)] = {
            k: _plain(v) for k, v in record.items() if k not in BOOKKEEPING and k not in pk and v is not None
        }
    return out


def postgres_live(dsn: str, table: str, schema: str = "public") -> dict[tuple, dict[str, Any]]:
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(
            f'SELECT region, id, attrs, _versions FROM "{schema}"."{table}" WHERE NOT _deleted'
        ).fetchall()
    return {(r, i): {k: c.value for k, c in decode_attrs(a, v).items()} for r, i, a, v in rows}


def operation_label(commit: Any) -> str:
    """A Delta history row's operation as the tests tell them apart: a WRITE by its mode (``WRITE Append``,
    ``WRITE Overwrite``), a MERGE of rows located by the read by its matched clause (``MERGE by position``)."""
    from cdcbridge.apply.targets.delta_located_write import MATCHED_ACTION

    parameters = commit["operationParameters"] or {}
    if commit["operation"] == "WRITE" and parameters.get("mode"):
        return f"WRITE {parameters['mode']}"
    if commit["operation"] == "MERGE" and MATCHED_ACTION in parameters.get("matchedPredicates", ""):
        return "MERGE by position"
    return commit["operation"]


def spark_jobs_of(spark: Any, group: str, action: Any) -> tuple[Any, int]:
    """`action`'s result and the number of Spark jobs it ran."""
    context = spark.sparkContext
    context.setJobGroup(group, group)
    try:
        result = action()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return result, len(context.statusTracker().getJobIdsForGroup(group))
