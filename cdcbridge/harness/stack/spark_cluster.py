"""A Spark standalone cluster (one master, one worker) on loopback, from the installed pyspark's own launcher.

The tests run the apply job on it as on any cluster: `bin/spark-class` of the pip-installed pyspark starts the same
Master and Worker daemons a standalone deployment runs, so the job's executors are separate JVMs that fetch the
connector jars from the driver and reach Kafka and the target themselves. The daemons get a clean environment (no
PYTHONPATH, no SPARK_* or PYSPARK_* of the caller, an empty conf folder), as they would on other machines.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from cdcbridge.harness.processes import ProcessRecord, free_port, start_service
from cdcbridge.harness.stack.errors import StackError
from cdcbridge.harness.stack.java import find_java
from cdcbridge.harness.stack.spark import SPARK_JAVA

LOOPBACK = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: Variables of the caller a daemon must not inherit: they describe this process's Python and Spark, not a node's.
_CALLER_ONLY = ("PYTHONPATH", "PYSPARK_", "SPARK_", "PYTHONSTARTUP")


def spark_home() -> Path:
    """The installed pyspark's folder: the pip package holds Spark's bin/, jars/ and python/lib/ (pyspark.zip)."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise StackError(f"the installed pyspark at {home} has no bin/spark-class; reinstall pyspark")
    return home


@dataclass(frozen=True)
class ClusterPorts:
    """The four ports of a one-worker cluster (RPC and web UI of master and worker)."""

    master: int
    master_ui: int
    worker: int
    worker_ui: int

    @classmethod
    def free(cls, host: str = LOOPBACK) -> ClusterPorts:
        return cls(*(free_port(host) for _ in range(4)))


def daemon_env(base: dict[str, str], *, home: Path, java_home: Path, work_dir: Path, host: str) -> dict[str, str]:
    """The daemons' environment: `base` without what belongs to the caller, plus Spark's own variables (bind and
    advertise `host`, small daemon heaps, logs and the worker's folder under `work_dir`, no stray spark-defaults)."""
    env = {key: value for key, value in base.items() if not key.startswith(_CALLER_ONLY)}
    env |= {
        "SPARK_HOME": str(home),
        "JAVA_HOME": str(java_home),
        "SPARK_LOCAL_IP": host,  # the daemons' web UIs bind every interface unless this is set
        "SPARK_LOCAL_HOSTNAME": host,  # what the daemons advertise (else this machine's hostname)
        "SPARK_DAEMON_MEMORY": "256m",  # heap of the Master and Worker JVMs themselves (default 1g)
        "SPARK_CONF_DIR": str(work_dir / "conf"),
        "SPARK_LOG_DIR": str(work_dir / "logs"),
        "SPARK_WORKER_DIR": str(work_dir / "worker"),
    }
    return env


def master_argv(home: Path, host: str, ports: ClusterPorts) -> list[str]:
    return [str(home / "bin" / "spark-class"), MASTER_CLASS,
            "--host", host, "--port", str(ports.master), "--webui-port", str(ports.master_ui)]  # fmt: skip


def worker_argv(home: Path, host: str, ports: ClusterPorts, *, cores: int, memory: str, work_dir: Path) -> list[str]:
    return [str(home / "bin" / "spark-class"), WORKER_CLASS,
            "--host", host, "--port", str(ports.worker), "--webui-port", str(ports.worker_ui),
            "--cores", str(cores), "--memory", memory, "--work-dir", str(work_dir / "worker"),
            f"spark://{host}:{ports.master}"]  # fmt: skip


def applications(master_state: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The applications called `name` in a master's /json/ state, running ones first, then completed ones."""
    return [app for key in ("activeapps", "completedapps") for app in master_state.get(key, []) if app["name"] == name]


def executors_of(worker_state: dict[str, Any], app_id: str) -> list[dict[str, Any]]:
    """The executors, running or finished, that a worker's /json/ state lists for application `app_id`."""
    found = [*worker_state.get("executors", []), *worker_state.get("finishedexecutors", [])]
    return [executor for executor in found if executor.get("appid") == app_id]


class SparkStandaloneCluster:
    """A master and one worker (`cores`, `memory` for executors) bound to `host` on free ports; logs, pid files
    and the worker's folder under `work_dir`. Start with `start()` (or `with`), end with `stop()`."""

    def __init__(self, work_dir: Path, *, cores: int = 1, memory: str = "1g", host: str = LOOPBACK,
                 java_home: Path | None = None) -> None:  # fmt: skip
        self.work_dir = work_dir
        self.cores = cores
        self.memory = memory
        self.host = host
        self.java_home = java_home
        self.ports = ClusterPorts(0, 0, 0, 0)
        self.records: list[ProcessRecord] = []

    @property
    def master_url(self) -> str:
        """What a driver connects to (``apply.spark.master``)."""
        return f"spark://{self.host}:{self.ports.master}"

    @property
    def master_json_url(self) -> str:
        return f"http://{self.host}:{self.ports.master_ui}/json/"

    @property
    def worker_json_url(self) -> str:
        return f"http://{self.host}:{self.ports.worker_ui}/json/"

    def master_state(self) -> dict[str, Any]:
        """The master's /json/ view: status, workers, active and completed applications."""
        return _get_json(self.master_json_url)

    def worker_state(self) -> dict[str, Any]:
        """The worker's /json/ view: cores and memory used, running and finished executors."""
        return _get_json(self.worker_json_url)

    def executor_logs(self, app_id: str) -> list[Path]:
        """The stdout and stderr files of the worker's executors of application `app_id`."""
        return sorted((self.work_dir / "worker" / app_id).glob("*/std*"))

    def start(self, timeout: float = 180.0) -> SparkStandaloneCluster:
        """Start the master, then the worker; return once the master lists the worker as alive."""
        if self.records:
            raise StackError("the Spark cluster is started already")
        home = spark_home()
        java_home = self.java_home or find_java(*SPARK_JAVA, purpose="Spark 4.0").home
        for folder in ("conf", "logs", "worker"):
            (self.work_dir / folder).mkdir(parents=True, exist_ok=True)
        env = daemon_env(dict(os.environ), home=home, java_home=java_home, work_dir=self.work_dir, host=self.host)
        self.ports = ClusterPorts.free(self.host)
        master = master_argv(home, self.host, self.ports)
        worker = worker_argv(home, self.host, self.ports, cores=self.cores, memory=self.memory, work_dir=self.work_dir)
        try:
            self._start("spark-master", master, env, lambda: self.master_state()["status"] == "ALIVE", timeout)
            self._start("spark-worker", worker, env, lambda: self.master_state()["aliveworkers"] == 1, timeout)
        except Exception:
            self.stop()
            raise
        return self

    def _start(
        self, name: str, argv: list[str], env: dict[str, str], ready: Callable[[], bool], timeout: float
    ) -> None:
        """One daemon in its own session and environment, with its pid file and log (`<work_dir>/<name>.log`)."""
        record = start_service(name, argv, state_dir=self.work_dir, endpoint=self.master_url, ready=ready, env=env,
                               inherit_env=False, cwd=self.work_dir, timeout=timeout)  # fmt: skip
        self.records.append(record)

    def stop(self) -> None:
        """SIGTERM the worker (its executors end with it), then the master; SIGKILL what outlives the wait."""
        while self.records:
            self.records.pop().stop(self.work_dir, timeout=30)

    def __enter__(self) -> SparkStandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _get_json(url: str) -> dict[str, Any]:
    response = requests.get(url, timeout=5)
    response.raise_for_status()
    return response.json()
