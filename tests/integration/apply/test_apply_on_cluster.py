"""The apply job on a real Spark standalone cluster: `cdcbridge apply` with ``apply.spark.master`` = the cluster's
``spark://`` URL runs its tasks in executors the worker starts (separate JVMs that get the connector jars and the
compiled kernel through ``spark.jars``), and the target equals the source.

The executors' Python cannot import cdcbridge (an interpreter without site-packages, in a worker that inherits no
PYTHONPATH): the job ships none of its code to executors because none runs there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from cdcbridge.harness.processes import ChildProcess
from cdcbridge.harness.stack.spark_cluster import SparkStandaloneCluster, applications, executors_of, spark_home

from .helpers import TABLES, delta_live, job_settings, make_workload, produce_workload, unique_prefix

LOOPBACK = "127.0.0.1"
JOB_SECONDS = 900  # a generous bound for a loaded machine, not a speed check


def python_without_site(target: Path, python: str, starts: Path) -> Path:
    """A launcher that runs `python` without site-packages (``-S``): PySpark only from where Spark puts it (its
    pyspark.zip on PYTHONPATH) and none of the packages installed beside the interpreter, as on a node that never
    installed ours. Each start appends a line to `starts`."""
    target.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(starts))}\nexec {shlex.quote(python)} -S "$@"\n')
    target.chmod(0o755)
    return target


def spark_python_path() -> str:
    """The PYTHONPATH Spark gives the Python it starts on an executor: its own pyspark.zip and py4j."""
    return os.pathsep.join(str(p) for p in sorted((spark_home() / "python" / "lib").glob("*.zip")))


def cluster_settings(cluster: SparkStandaloneCluster, app_name: str, python: Path, work: Path) -> dict[str, Any]:
    """``apply.spark`` for the test cluster: its master, one 512 MB executor of one core, a driver the executors
    reach on loopback (a real cluster leaves the driver's address to Spark, or names the host's)."""
    return {
        "master": cluster.master_url,
        "driver_memory": "1g",
        "conf": {
            "spark.app.name": app_name,
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": "1",
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.pyspark.python": str(python),
            "spark.sql.warehouse.dir": str(work / "warehouse"),
        },
    }


def test_the_apply_job_runs_on_a_standalone_cluster(stack, spark_cluster, spark, tmp_path) -> None:
    starts = tmp_path / "executor-python.starts"
    python = python_without_site(tmp_path / "executor-python", sys.executable, starts)
    probe = subprocess.run([str(python), "-c", "import pyspark.worker; import cdcbridge"], capture_output=True,
                           text=True, cwd=tmp_path, env={"PYTHONPATH": spark_python_path()}, check=False)  # fmt: skip
    assert "No module named 'cdcbridge'" in probe.stderr, probe.stderr  # PySpark's worker imports, ours does not
    starts.unlink()

    prefix = unique_prefix()
    work = make_workload(prefix, seed=61)
    produce_workload(stack, work)
    app_name = f"cdcbridge-apply-{prefix}"
    config_file = tmp_path / "cdcbridge.yaml"  # JSON is YAML
    settings = job_settings(stack, prefix, tmp_path, spark=cluster_settings(spark_cluster, app_name, python, tmp_path))
    config_file.write_text(json.dumps(settings))
    job = ChildProcess(
        "cdcbridge apply", [sys.executable, "-m", "cdcbridge", "apply", "--config", str(config_file), "--once"],
        tmp_path / "job.log", env={"SPARK_LOCAL_IP": LOOPBACK}, cwd=tmp_path,
    )  # fmt: skip
    running: dict[str, Any] = {}
    executors_while_running: list[dict[str, Any]] = []
    job.start()
    try:
        deadline = time.monotonic() + JOB_SECONDS
        while job.alive and time.monotonic() < deadline:
            try:
                for app in applications(spark_cluster.master_state(), app_name):
                    if app["state"] == "RUNNING" and app["cores"] > 0:
                        running = app
                if running and not executors_while_running:
                    executors_while_running = executors_of(spark_cluster.worker_state(), running["id"])
            except requests.RequestException:  # a daemon slow to answer on a loaded machine: look again
                pass
            time.sleep(0.5)
        assert not job.alive, f"the job did not end within {JOB_SECONDS}s; log tail:\n{job.log_tail(40)}"
    finally:
        job.ensure_dead()
    assert job.returncode == 0, job.log_tail(60)

    # The master ran the application on the worker's core, and the worker ran its executors.
    assert running, f"the master never listed {app_name} as running with cores"
    assert running["cores"] == 1 and running["memoryperexecutor"] == 512
    assert executors_while_running and executors_while_running[0]["memory"] == 512
    finished = _wait_for(lambda: [a for a in spark_cluster.master_state()["completedapps"] if a["id"] == running["id"]])
    assert finished[0]["state"] == "FINISHED"
    assert executors_of(spark_cluster.worker_state(), running["id"])
    executor_logs = "".join(log.read_text() for log in spark_cluster.executor_logs(running["id"]))
    if "PythonRunner" in executor_logs:  # the executors started Python (PySpark's own step): it was ours, without site
        assert starts.exists() and "pyspark.daemon" in starts.read_text(), "not the Python spark.pyspark.python named"

    # Every message was read, the compiled Spark path ran on the executors, and the target equals the source.
    summary = job.log()
    batches, on_spark = map(int, re.findall(r"(\d+) batches \((\d+) on Spark", summary)[-1])
    assert int(re.findall(r"^messages (\d+):", summary, re.MULTILINE)[-1]) == len(work.messages) + len(work.evolved)
    assert 0 < on_spark <= batches
    for table in TABLES:
        assert delta_live(spark, f"{tmp_path}/delta/{table}") == work.expected(table)


def _wait_for(found, timeout: float = 120.0) -> Any:
    """`found()` once it is truthy (the master moves a stopped application to its completed list shortly after)."""
    deadline = time.monotonic() + timeout
    while not (value := found()):
        assert time.monotonic() < deadline, "the master did not list the application as completed"
        time.sleep(0.5)
    return value
