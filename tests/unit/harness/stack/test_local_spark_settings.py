"""The local Spark defaults: the S3A jars join the session only when an apply path is on s3a://."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdcbridge.config import SparkSettings, parse_config
from cdcbridge.harness.stack import spark as local
from cdcbridge.harness.stack.errors import StackError


@pytest.fixture
def jvm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Component folders with fake jars; records which components were asked for."""
    asked: list[str] = []

    def ensure(component: str) -> Path:
        asked.append(component)
        folder = tmp_path / component
        folder.mkdir(exist_ok=True)
        names = {"spark": ["delta-spark_2.13-4.0.0.jar"], "s3a": ["hadoop-aws-3.4.1.jar", "bundle-2.24.6.jar"]}
        for name in names[component]:
            (folder / name).write_text("jar")
        return folder

    monkeypatch.setattr(local, "ensure_component", ensure)
    monkeypatch.setattr(local, "_usable_java_home", lambda: True)
    return asked


def _config(**apply: object):
    return parse_config({"source": {"tables": [{"name": "t"}]}, "apply": apply}, environ={})


def test_local_paths_fetch_no_s3a_jars(jvm: list[str]) -> None:
    config = _config()
    settings = local.local_spark_settings(config.apply.spark, paths=local.apply_paths(config))
    assert jvm == ["spark"]
    assert "spark.jars" not in settings.conf


@pytest.mark.parametrize(
    "apply",
    [
        {"delta_path": "s3a://bucket/tables"},
        {"checkpoint_location": "S3A://bucket/checkpoint", "target": "postgres", "postgres_dsn": "dbname=x"},
    ],
)
def test_an_s3a_path_adds_the_s3a_jars_to_the_configured_ones(jvm: list[str], apply: dict[str, str]) -> None:
    config = _config(**apply, spark={"conf": {"spark.jars": "/opt/extra.jar"}})
    settings = local.local_spark_settings(config.apply.spark, paths=local.apply_paths(config))
    assert jvm == ["spark", "s3a"]
    jars = settings.conf["spark.jars"].split(",")
    assert jars[0] == "/opt/extra.jar"
    assert sorted(Path(jar).name for jar in jars[1:]) == ["bundle-2.24.6.jar", "hadoop-aws-3.4.1.jar"]


def test_the_delta_path_of_another_target_is_not_an_apply_path() -> None:
    config = _config(delta_path="s3a://bucket/tables", target="postgres", postgres_dsn="dbname=x")
    assert not local.uses_s3a(local.apply_paths(config))


def test_jars_the_user_provides_are_not_fetched_again(jvm: list[str], tmp_path: Path) -> None:
    provided = tmp_path / "provided"
    provided.mkdir()
    (provided / "hadoop-aws-3.4.1.jar").write_text("jar")
    settings = local.local_spark_settings(SparkSettings(jars_dir=provided), paths=["s3a://bucket/t"])
    assert jvm == [] and "spark.jars" not in settings.conf
    packages = SparkSettings(conf={"spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.4.1"})
    assert "spark.jars" not in local.local_spark_settings(packages, paths=["s3a://bucket/t"]).conf
    assert jvm == ["spark"]


def test_a_failed_fetch_says_which_settings_provide_the_jars(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def ensure(component: str) -> Path:
        if component == "s3a":
            raise StackError("Maven could not fetch or build the s3a artifacts")
        return tmp_path

    monkeypatch.setattr(local, "ensure_component", ensure)
    monkeypatch.setattr(local, "_usable_java_home", lambda: True)
    with pytest.raises(StackError, match=r"s3a:// .*apply\.spark\.jars_dir or apply\.spark\.conf's spark\.jars"):
        local.local_spark_settings(SparkSettings(), paths=["s3a://bucket/checkpoint"])
