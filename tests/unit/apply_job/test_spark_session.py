"""The apply job's Spark settings: what a launch from apply.spark sets (local or cluster master), what is added under
spark-submit (only what it was not given), and errors that stop before Spark starts."""

import os
import sys
from pathlib import Path

import pytest

from cdcbridge.apply.errors import ApplyJobError
from cdcbridge.apply.spark.session import (
    DELTA_EXTENSION,
    LOCAL_DRIVER_JAVA_OPTIONS,
    added_conf,
    build_spark_session,
    executor_python,
    launch_conf,
    launched_conf,
    local_cores,
    under_launched_spark,
)
from cdcbridge.config import SparkSettings


@pytest.mark.parametrize(
    ("master", "cores"),
    [("local", 1), ("local[2]", 2), ("local[16]", 16), ("local[3,4]", 3), ("local[*]", os.cpu_count() or 1)],
)
def test_a_local_master_names_its_cores(master: str, cores: int) -> None:
    assert local_cores(master) == cores


@pytest.mark.parametrize("master", ["spark://host:7077", "yarn", "local[x]", "local-cluster[2,1,1024]"])
def test_other_masters_leave_the_shuffle_partitions_to_spark(master: str) -> None:
    assert local_cores(master) is None


def _jars(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"PK")
    return folder


def test_a_local_launch_binds_loopback_and_tunes_for_the_cores(tmp_path: Path) -> None:
    jars = _jars(tmp_path / "jars", "b.jar", "a.jar", "notes.txt")
    conf = launch_conf("app", SparkSettings(master="local[2]", jars_dir=jars))
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.jars"] == f"{jars / 'a.jar'},{jars / 'b.jar'}"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.driver.extraJavaOptions"] == LOCAL_DRIVER_JAVA_OPTIONS
    assert conf["spark.sql.shuffle.partitions"] == "2"
    assert conf["spark.sql.extensions"] == DELTA_EXTENSION
    assert "spark.driver.memory" not in conf  # Spark's default unless configured


def test_a_cluster_master_leaves_the_driver_address_and_the_tuning_to_spark(tmp_path: Path) -> None:
    settings = SparkSettings(master="spark://head:7077", driver_memory="4g", conf={"spark.executor.memory": "8g"})
    conf = launch_conf("app", settings)
    assert conf["spark.master"] == "spark://head:7077"
    assert conf["spark.driver.memory"] == "4g"
    assert conf["spark.executor.memory"] == "8g"
    for local_only in ("spark.driver.host", "spark.driver.bindAddress", "spark.ui.enabled",
                       "spark.driver.extraJavaOptions", "spark.sql.shuffle.partitions", "spark.jars"):  # fmt: skip
        assert local_only not in conf


def test_configured_settings_replace_the_jobs_defaults_and_add_jars(tmp_path: Path) -> None:
    jars = _jars(tmp_path / "jars", "kafka.jar")
    settings = SparkSettings(
        master="local[2]",
        jars_dir=jars,
        conf={"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "true", "spark.jars": "/opt/hadoop-aws.jar"},
    )
    conf = launch_conf("app", settings)
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.ui.enabled"] == "true"
    assert conf["spark.jars"] == f"{jars / 'kafka.jar'},/opt/hadoop-aws.jar"


def test_a_jars_dir_without_jars_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ApplyJobError, match=r"holds no \.jar files.*-Djars\.dir"):
        launch_conf("app", SparkSettings(jars_dir=tmp_path))


def test_under_spark_submit_only_settings_it_was_not_given_are_added() -> None:
    given = {
        "spark.master": "spark://head:7077",
        "spark.app.name": "nightly-apply",
        "spark.sql.session.timeZone": "Asia/Shanghai",
        "spark.executor.memory": "16g",
    }
    settings = SparkSettings(master="local[2]", driver_memory="4g",
                             conf={"spark.executor.memory": "8g", "spark.executor.cores": "4"})  # fmt: skip
    added = added_conf(given, "cdcbridge-apply", settings)
    assert added == {
        "spark.sql.codegen.cache.maxEntries": "2000",
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.executor.cores": "4",
    }


def test_under_spark_submit_delta_joins_a_given_extension_list() -> None:
    given = {"spark.master": "yarn", "spark.sql.extensions": "com.example.Audit"}
    assert added_conf(given, "a", SparkSettings())["spark.sql.extensions"] == f"com.example.Audit,{DELTA_EXTENSION}"
    given = {"spark.master": "yarn", "spark.sql.extensions": f"{DELTA_EXTENSION}, com.example.Audit"}
    assert "spark.sql.extensions" not in added_conf(given, "a", SparkSettings())


def _no_spark_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a fresh process: the integration tests' session (same pytest process) must not count as launched."""
    from pyspark import SparkContext

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)


def test_spark_submits_gateway_means_spark_launched_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_spark_in_this_process(monkeypatch)
    assert not under_launched_spark()
    assert launched_conf() is None
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "41234")
    assert under_launched_spark()


def test_a_java_home_without_java_stops_before_spark_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_spark_in_this_process(monkeypatch)
    monkeypatch.setenv("JAVA_HOME", "/usr/lib/jvm/unchanged")
    with pytest.raises(ApplyJobError, match=r"java_home .* has no bin/java"):
        build_spark_session("app", SparkSettings(java_home=tmp_path))
    assert os.environ["JAVA_HOME"] == "/usr/lib/jvm/unchanged"


def test_the_executors_python_is_the_configured_one_or_for_a_local_master_this_one() -> None:
    """PySpark launched from Python reads only PYSPARK_PYTHON for the executors' Python: the setting is exported."""
    configured = SparkSettings(master="spark://head:7077", conf={"spark.pyspark.python": "/opt/py311/bin/python"})
    assert executor_python(configured, exported="/usr/bin/python3") == "/opt/py311/bin/python"
    assert executor_python(SparkSettings(master="local[2]"), exported=None) == sys.executable
    assert executor_python(SparkSettings(master="local[2]"), exported="/usr/bin/python3") is None  # kept as exported
    assert executor_python(SparkSettings(master="yarn"), exported=None) is None  # Spark's default: python3 on PATH
