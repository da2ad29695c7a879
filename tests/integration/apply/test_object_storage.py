"""The apply job with its Delta tables and streaming checkpoint on object storage (s3a:// on moto's S3 server): the
target equals the source, a job killed mid-batch resumes exactly, and the credentials never reach the output."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.s3_server import S3Server

from .helpers import TABLES, job_config, job_settings, live_rows, make_workload, produce_workload, unique_prefix

HERE = Path(__file__).parent
#: The test's JVMs stay small: the machine is shared.
SPARK = {"master": "local[2]", "driver_memory": "1g"}


def _dumped(dump: Path) -> dict[str, dict[tuple, dict]]:
    return {table: live_rows(rows) for table, rows in pickle.loads(dump.read_bytes()).items()}


def _run(argv: list[str], env: dict[str, str], timeout: float = 600) -> str:
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    return output


def test_delta_tables_and_checkpoint_on_s3a_equal_the_source(stack, s3: S3Server, tmp_path) -> None:
    prefix = unique_prefix()
    work = make_workload(prefix, seed=61)
    produce_workload(stack, work)
    # Credentials as ${ENV} references in apply.spark.conf (the other test uses the default provider chain).
    credentials = {
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.access.key": "${TEST_S3_ACCESS_KEY}",
        "spark.hadoop.fs.s3a.secret.key": "${TEST_S3_SECRET_KEY}",
    }
    settings = job_settings(
        stack, prefix, tmp_path, delta_path=s3.url(f"{prefix}/delta"), checkpoint_location=s3.url(f"{prefix}/ck"),
        spark={**SPARK, "conf": {**s3.endpoint_conf(), **credentials}},
    )  # fmt: skip
    config_file = tmp_path / "cdcbridge.yaml"  # JSON is YAML
    config_file.write_text(json.dumps(settings))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "TEST_S3_ACCESS_KEY": s3.access_key, "TEST_S3_SECRET_KEY": s3.secret_key}  # fmt: skip

    # As a user runs it: the command line resolves the local defaults, the S3A jars among them.
    applied = _run([sys.executable, "-m", "cdcbridge", "apply", "--config", str(config_file), "--once"], env)
    assert f"messages {len(work.messages) + len(work.evolved)}:" in applied
    for table in TABLES:
        assert f"{prefix}/delta/{table}/_delta_log/00000000000000000000.json" in s3.keys(f"{prefix}/delta/{table}/")
    assert s3.keys(f"{prefix}/ck/commits/") and s3.keys(f"{prefix}/ck/offsets/")
    assert not (tmp_path / "delta").exists() and not (tmp_path / "ck").exists()  # nothing went to local disk

    # A second run from the same checkpoint finds nothing new, then reads the tables back from the bucket.
    dump = tmp_path / "tables.pickle"
    rerun = _run([sys.executable, str(HERE / "run_job.py"), str(config_file), "--dump", str(dump)], env)
    assert "messages 0:" in rerun
    tables = _dumped(dump)
    for table in TABLES:
        assert tables[table] == work.expected(table)
    for output in (applied, rerun):
        assert s3.secret_key not in output


def test_a_job_killed_mid_batch_on_s3a_resumes_exactly(stack, s3: S3Server, tmp_path) -> None:
    prefix = unique_prefix()
    work = make_workload(prefix, seed=67)
    produce_workload(stack, work)
    checkpoint = f"{prefix}/ck"
    config = job_config(
        stack, prefix, tmp_path, trigger_seconds=1.0, delta_path=s3.url(f"{prefix}/delta"),
        checkpoint_location=s3.url(checkpoint), spark={**SPARK, "conf": s3.endpoint_conf()},
    )  # fmt: skip
    config_file = tmp_path / "config.json"
    config_file.write_text(config.model_dump_json())
    # Credentials from the environment, through S3A's default provider chain (no credential setting at all).
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}  # fmt: skip
    runner = [sys.executable, str(HERE / "run_job.py"), str(config_file)]
    flag = tmp_path / "killed-here"
    first_log = tmp_path / "first-run.log"

    with first_log.open("w") as log:
        job = subprocess.Popen([*runner, "--hang-after-write", "1", "--flag", str(flag)], env=env, stdout=log,
                               stderr=subprocess.STDOUT)  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while not flag.exists():
                assert job.poll() is None, first_log.read_text()[-3000:]
                assert time.monotonic() < deadline, "the job never reached its second batch"
                time.sleep(0.2)
            job.send_signal(signal.SIGKILL)
        finally:
            if job.poll() is None:
                job.kill()
            job.wait(30)
    assert job.returncode == -signal.SIGKILL
    # Killed between the two commits: the target holds batch N, the checkpoint has its offsets but no commit.
    batch = int(flag.read_text())
    keys = s3.keys(f"{checkpoint}/")
    assert f"{checkpoint}/offsets/{batch}" in keys and f"{checkpoint}/commits/{batch}" not in keys, keys

    dump = tmp_path / "tables.pickle"
    restarted = _run([*runner, "--dump", str(dump)], env)
    assert "(already applied)" in restarted  # the batch cut short was re-run and skipped by the Delta txn marker
    tables = _dumped(dump)
    for table in TABLES:
        assert tables[table] == work.expected(table)
    for output in (first_log.read_text(), restarted):
        assert s3.secret_key not in output and s3.access_key not in output
