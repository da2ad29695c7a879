"""The apply job end to end with real Kafka, the registry and Spark: exact target rows despite redeliveries and
an evolved schema, re-run batches, bad input, and a job killed mid-batch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.model import ColumnValue, TargetRow
from cdcbridge.apply.errors import UndecodableMessageError
from cdcbridge.apply.job import run_apply
from cdcbridge.apply.target import TargetBatch
from cdcbridge.apply.targets import delta
from cdcbridge.apply.targets.delta import KEY_FILTER_MAX, DeltaTarget
from cdcbridge.apply.targets.postgres import PostgresTarget
from cdcbridge.apply.targets.tablestore import TablestoreTarget
from cdcbridge.config import ObservabilityConfig
from cdcbridge.harness.processes import free_port
from cdcbridge.harness.stack.spark import local_spark_settings

from .helpers import (
    TABLES,
    delta_live,
    job_config,
    job_settings,
    make_workload,
    postgres_live,
    produce,
    produce_workload,
    unique_prefix,
)

HERE = Path(__file__).parent
ROOT = HERE.parents[2]


class ScrapingDeltaTarget(DeltaTarget):
    """Scrapes the job's metrics endpoint when the job closes its target: after the last batch, before the
    endpoint stops."""

    def __init__(self, spark, root: str, metrics_url: str) -> None:
        super().__init__(spark, root)
        self.metrics_url = metrics_url
        self.scraped = ""

    def close(self) -> None:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            self.scraped = response.read().decode()
        super().close()


def _sample(text: str, name: str, labels: str = "") -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(f"{name}{labels} ")]
    return float(line.split()[-1])


@pytest.mark.parametrize("key_filter_max", [KEY_FILTER_MAX, 0], ids=["keys-filtered", "files-named"])
def test_delta_target_equals_the_source_despite_redeliveries_and_schema_evolution(
    stack, spark, tmp_path, monkeypatch, key_filter_max
) -> None:
    """With the workload's batches of few keys read through a filter on their values, and read as every file of
    the version named from the log (the read of a larger batch, inside the streaming batch's own session)."""
    monkeypatch.setattr(delta, "KEY_FILTER_MAX", key_filter_max)
    prefix = unique_prefix()
    work = make_workload(prefix)
    produce_workload(stack, work)
    port = free_port()
    config = job_config(stack, prefix, tmp_path).model_copy(
        update={"observability": ObservabilityConfig(metrics_port=port)}
    )
    target = ScrapingDeltaTarget(spark, f"{tmp_path}/delta", f"http://127.0.0.1:{port}/metrics")
    summary = run_apply(config, once=True, spark=spark, target=target)
    figures = summary.as_dict()
    assert figures["messages"] == len(work.messages) + len(work.evolved)
    assert figures["batches"] >= 4 and figures["duplicates"] + figures["stale"] > 0
    assert figures["dead_lettered"] == 0
    assert 0 < figures["spark_batches"] < figures["batches"]  # the first batch holds tombstones of a new table
    metrics = target.scraped  # counted per batch by the job, served by its endpoint
    assert _sample(metrics, "cdcbridge_apply_batches_total") == figures["batches"]
    for outcome, figure in (("applied", "applied"), ("duplicate", "duplicates"), ("stale", "stale")):
        assert _sample(metrics, "cdcbridge_apply_messages_total", f'{{outcome="{outcome}"}}') == figures[figure]
    written = sum(_sample(metrics, "cdcbridge_apply_rows_written_total", f'{{table="{t}"}}') for t in TABLES)
    assert written == figures["rows_written"]
    assert _sample(metrics, "cdcbridge_apply_freshness_seconds_count") > 0
    for table in ("users", "items"):
        assert delta_live(spark, f"{tmp_path}/delta/{table}") == work.expected(table)
    registry = SchemaRegistryClient({"url": stack.registry_url, "timeout": 10})
    assert len(registry.get_versions(f"{prefix}.users.mutation-value")) == 2  # two writer schema ids were decoded

    rerun = run_apply(config, once=True, spark=spark)  # same checkpoint: nothing new to read
    assert rerun.as_dict()["messages"] == 0


def test_postgres_target_equals_the_source_despite_redeliveries(stack, spark, postgres, tmp_path) -> None:
    prefix = unique_prefix()
    work = make_workload(prefix, seed=23)
    produce_workload(stack, work)
    config = job_config(stack, prefix, tmp_path, target="postgres", postgres_dsn=postgres.dsn, postgres_schema=prefix)
    summary = run_apply(config, once=True, spark=spark)
    assert summary.as_dict()["messages"] == len(work.messages) + len(work.evolved)
    for table in ("users", "items"):
        assert postgres_live(postgres.dsn, table, prefix) == work.expected(table)
    with psycopg.connect(postgres.dsn) as connection:
        (batch_id,) = connection.execute(f'SELECT max(batch_id) FROM "{prefix}"._apply_progress').fetchone()
    assert batch_id == summary.as_dict()["batches"] - 1


def _row(seq: str, visits: int) -> TargetRow:
    return TargetRow("t", (("id", 1),), {"visits": ColumnValue(visits, 1)}, seq=seq, source_ts=1)


def test_a_rerun_batch_is_a_noop_in_delta_and_postgres(spark, postgres, tmp_path) -> None:
    first = TargetBatch(BatchMarker("app", 3), {"t": [_row("0002", 10)]})
    rerun = TargetBatch(BatchMarker("app", 3), {"t": [_row("0003", 99)]})
    delta = DeltaTarget(spark, str(tmp_path / "delta"))
    assert delta.write(first) == 1
    delta.write(rerun)
    assert delta.read_rows("t", [(("id", 1),)])[(("id", 1),)].columns["visits"].value == 10
    assert delta.read_marker("t", "app") == BatchMarker("app", 3)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path}/delta/t`").where("operation != 'CREATE TABLE'")
    assert history.count() == 1  # the first batch's append (the table held no row); the re-run committed nothing

    pg = PostgresTarget(postgres.dsn, schema=f"rerun{os.getpid()}")
    pg.prepare(["t"])
    assert pg.write(first) == 1
    assert pg.write(rerun) == 0
    stale = TargetBatch(BatchMarker("app", 4), {"t": [_row("0001", 5)]})  # older seq: the guard keeps the row
    assert pg.write(stale) == 0
    assert pg.read_rows("t", [(("id", 1),)])[(("id", 1),)].columns["visits"].value == 10
    assert pg.read_marker("t", "app") == BatchMarker("app", 4)
    pg.close()


def test_purge_removes_only_soft_deleted_rows_older_than_the_horizon(spark, postgres, tmp_path) -> None:
    rows = [
        TargetRow("t", (("id", 1),), {}, seq="0005", deleted=True, source_ts=100),  # old delete: purged
        TargetRow("t", (("id", 2),), {}, seq="0005", deleted=True, source_ts=900),  # recent delete: kept
        TargetRow("t", (("id", 3),), {"a": ColumnValue(1, 1)}, seq="0005", source_ts=100),  # live: kept
    ]
    keys = [row.pk for row in rows]
    delta = DeltaTarget(spark, str(tmp_path / "delta"))
    delta.write(TargetBatch(BatchMarker("app", 0), {"t": rows}))
    assert delta.purge_deleted("t", 500) == 1
    assert sorted(delta.read_rows("t", keys)) == keys[1:]

    pg = PostgresTarget(postgres.dsn, schema=f"purge{os.getpid()}")
    pg.prepare(["t"])
    pg.write(TargetBatch(BatchMarker("app", 0), {"t": rows}))
    assert pg.purge_deleted("t", 500) == 1
    assert sorted(pg.read_rows("t", keys)) == keys[1:]
    pg.close()


def test_an_undecodable_message_stops_the_job_or_goes_to_the_dead_letter_table(stack, spark, tmp_path) -> None:
    prefix = unique_prefix()
    work = make_workload(prefix, records=30, tail=0, keys=5)
    positions = produce(stack, work.messages)
    from confluent_kafka import Producer

    topic = f"{prefix}.users.mutation"
    producer = Producer({"bootstrap.servers": stack.kafka_bootstrap})
    delivered = []
    producer.produce(topic, key=b'["r0",1]', value=b"\x07not avro", partition=1,
                     on_delivery=lambda err, msg: delivered.append((msg.partition(), msg.offset())))  # fmt: skip
    producer.flush(30)
    ((partition, offset),) = delivered
    assert positions

    stop = job_config(stack, prefix, tmp_path / "stop")
    with pytest.raises(UndecodableMessageError) as failure:
        run_apply(stop, once=True, spark=spark)
    assert f"topic '{topic}' partition {partition} offset {offset}" in str(failure.value)
    assert "magic byte 7" in str(failure.value)

    # With a topic pattern nothing is preloaded: every schema id is met for the first time and looked up.
    aside = job_config(stack, prefix, tmp_path / "aside", on_bad_record="dead_letter", topic_pattern=f"{prefix}\\..*")
    summary = run_apply(aside, once=True, spark=spark)
    assert summary.as_dict()["dead_lettered"] == 1
    letters = spark.read.format("delta").load(f"{tmp_path}/aside/delta/_dead_letters").collect()
    assert [(r.topic, r.partition, r.offset, r.error_type) for r in letters] == [
        (topic, partition, offset, "UndecodableMessageError")
    ]
    assert delta_live(spark, f"{tmp_path}/aside/delta/users") == work.expected("users")


def test_a_job_killed_mid_batch_resumes_exactly(stack, spark, tmp_path) -> None:
    prefix = unique_prefix()
    work = make_workload(prefix, seed=31)
    produce_workload(stack, work)
    config_file = tmp_path / "config.json"
    config_file.write_text(job_config(stack, prefix, tmp_path, trigger_seconds=1.0).model_dump_json())
    flag = tmp_path / "killed-here"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    runner = [sys.executable, str(HERE / "run_job.py"), str(config_file)]

    job = subprocess.Popen([*runner, "--hang-after-write", "1", "--flag", str(flag)], env=env)
    try:
        deadline = time.monotonic() + 240
        while not flag.exists():
            assert job.poll() is None, "the job ended before it was killed"
            assert time.monotonic() < deadline, "the job never reached its second batch"
            time.sleep(0.2)
        job.send_signal(signal.SIGKILL)
    finally:
        job.wait(30)
    assert job.returncode == -signal.SIGKILL
    partial = delta_live(spark, f"{tmp_path}/delta/users")
    assert partial != work.expected("users")  # the kill came before the end

    # Restart as a long-running job; once the target is exact, SIGTERM must stop it cleanly.
    restarted = subprocess.Popen([*runner, "--continuous"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while delta_live(spark, f"{tmp_path}/delta/items") != work.expected("items") or partial_users(
            spark, tmp_path, work
        ):
            assert restarted.poll() is None, restarted.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the restarted job did not catch up"
            time.sleep(1)
        restarted.send_signal(signal.SIGTERM)
        output, _ = restarted.communicate(timeout=120)
    finally:
        if restarted.poll() is None:
            restarted.kill()
    assert restarted.returncode == 0, output[-3000:]
    assert "(already applied)" in output  # the batch cut short was re-run and skipped by the Delta txn marker
    for table in ("users", "items"):
        assert delta_live(spark, f"{tmp_path}/delta/{table}") == work.expected(table)


def partial_users(spark, tmp_path: Path, work) -> bool:
    try:
        return delta_live(spark, f"{tmp_path}/delta/users") != work.expected("users")
    except Exception:  # the table may be mid-commit: look again
        return True


def test_tablestore_target_equals_the_source_despite_redeliveries(stack, spark, tmp_path) -> None:
    from cdcbridge.emulator.server import EmulatorServer

    emulator = EmulatorServer("127.0.0.1", port=0).start()
    try:
        prefix = unique_prefix()
        work = make_workload(prefix, records=100, tail=20, seed=41)
        produce_workload(stack, work)
        config = job_config(stack, prefix, tmp_path, target="tablestore", tablestore_endpoint=emulator.url,
                            tablestore_instance="replica", tablestore_table_prefix="copy_")  # fmt: skip
        summary = run_apply(config, once=True, spark=spark)
        assert summary.as_dict()["messages"] == len(work.messages) + len(work.evolved)
        target = TablestoreTarget.from_config(config)
        all_keys = [(("region", f"r{k % 3}"), ("id", k)) for k in range(15)]
        for table in ("users", "items"):
            rows = target.read_rows(table, all_keys)
            live = {(row.pk[0][1], row.pk[1][1]): {n: c.value for n, c in row.columns.items()}
                    for row in rows.values() if not row.deleted}  # fmt: skip
            assert live == work.expected(table)
        marker = target.read_marker("users", summary.app_id)
        assert marker is not None and marker.batch_id < summary.report.batches
    finally:
        emulator.stop()


def test_under_spark_submit_the_job_takes_the_master_and_settings_it_was_given(stack, spark, tmp_path) -> None:
    import pyspark

    prefix = unique_prefix()
    work = make_workload(prefix, records=60, tail=10, seed=53)
    produce_workload(stack, work)
    config_file = tmp_path / "cdcbridge.yaml"  # JSON is YAML
    configured = {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "3", "spark.executor.cores": "1"}}
    config_file.write_text(json.dumps(job_settings(stack, prefix, tmp_path, spark=configured)))
    local = local_spark_settings()
    assert local.jars_dir is not None
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    if local.java_home is not None:
        env["JAVA_HOME"] = str(local.java_home)
    submit = [
        str(Path(pyspark.__file__).parent / "bin" / "spark-submit"),
        "--master", "local[1]",
        "--conf", "spark.sql.shuffle.partitions=1",
        "--conf", "spark.ui.enabled=false",
        "--jars", ",".join(str(jar) for jar in sorted(local.jars_dir.glob("*.jar"))),
        str(ROOT / "deploy" / "spark" / "cdcbridge_submit.py"), "apply", "--config", str(config_file), "--once",
    ]  # fmt: skip
    result = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=600, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    (launched,) = [line for line in output.splitlines() if "Spark was launched with master" in line]
    assert "master local[1];" in launched  # spark-submit's, not apply.spark.master
    added = launched.split("it was not given: ")[1].split(", ")
    assert "spark.executor.cores" in added and "spark.sql.extensions" in added
    assert "spark.sql.shuffle.partitions" not in added and "spark.master" not in added
    for table in TABLES:
        assert delta_live(spark, f"{tmp_path}/delta/{table}") == work.expected(table)
