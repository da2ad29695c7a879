"""The test cluster's daemons start as on nodes of their own (nothing of the caller's Python or Spark environment,
loopback only), and its /json/ views are read by application name and id."""

from __future__ import annotations

from pathlib import Path

from cdcbridge.harness.stack.spark_cluster import (
    ClusterPorts,
    applications,
    daemon_env,
    executors_of,
    master_argv,
    worker_argv,
)


def test_the_daemons_inherit_nothing_of_the_callers_python_or_spark(tmp_path: Path) -> None:
    caller = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "PYTHONPATH": "/work/checkout",
        "PYSPARK_PYTHON": "/venv/bin/python",
        "SPARK_CONF_DIR": "/etc/spark",
        "SPARK_LOCAL_IP": "10.0.0.5",
    }
    env = daemon_env(caller, home=Path("/spark"), java_home=Path("/jdk17"), work_dir=tmp_path, host="127.0.0.1")
    assert env["PATH"] == "/usr/bin" and env["HOME"] == "/root"
    assert "PYTHONPATH" not in env and "PYSPARK_PYTHON" not in env
    assert env["SPARK_CONF_DIR"] == str(tmp_path / "conf")
    assert env["SPARK_LOCAL_IP"] == env["SPARK_LOCAL_HOSTNAME"] == "127.0.0.1"
    assert env["JAVA_HOME"] == "/jdk17" and env["SPARK_HOME"] == "/spark"


def test_master_and_worker_bind_the_given_host_and_ports(tmp_path: Path) -> None:
    ports = ClusterPorts(7077, 8080, 7078, 8081)
    master = master_argv(Path("/spark"), "127.0.0.1", ports)
    assert master[:2] == ["/spark/bin/spark-class", "org.apache.spark.deploy.master.Master"]
    assert master[2:] == ["--host", "127.0.0.1", "--port", "7077", "--webui-port", "8080"]
    worker = worker_argv(Path("/spark"), "127.0.0.1", ports, cores=1, memory="1g", work_dir=tmp_path)
    assert worker[-1] == "spark://127.0.0.1:7077"
    assert worker[worker.index("--cores") + 1] == "1" and worker[worker.index("--memory") + 1] == "1g"
    assert worker[worker.index("--webui-port") + 1] == "8081"


def test_applications_and_executors_are_found_running_or_finished() -> None:
    master = {
        "activeapps": [{"id": "app-2", "name": "apply-b", "cores": 1, "state": "RUNNING"}],
        "completedapps": [{"id": "app-1", "name": "apply-a", "cores": 0, "state": "FINISHED"}],
    }
    assert [app["id"] for app in applications(master, "apply-a")] == ["app-1"]
    assert [app["id"] for app in applications(master, "apply-b")] == ["app-2"]
    assert applications(master, "other") == []
    worker = {
        "executors": [{"id": 0, "appid": "app-2"}],
        "finishedexecutors": [{"id": 0, "appid": "app-1"}, {"id": 1, "appid": "app-1"}],
    }
    assert [e["id"] for e in executors_of(worker, "app-1")] == [0, 1]
    assert [e["id"] for e in executors_of(worker, "app-2")] == [0]
    assert executors_of({"executors": []}, "app-1") == []
