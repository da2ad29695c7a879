"""The Delta target tunes the session for many small MERGEs, but never over a setting the Spark configuration
made."""

from dataclasses import dataclass, field

import pytest

import cdcbridge.apply.targets.delta as delta
from cdcbridge.apply.targets.delta import MICRO_BATCH_CONF, DeltaTarget


@pytest.fixture(autouse=True)
def _no_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    """These sessions have no JVM to check the Delta build in (tests/integration/apply/test_delta_build.py does)."""
    monkeypatch.setattr(delta, "check_delta_build", lambda spark: "4.0.0")


@dataclass
class _SparkConf:
    configured: dict[str, str]

    def contains(self, key: str) -> bool:
        return key in self.configured


@dataclass
class _RuntimeConf:
    values: dict[str, str] = field(default_factory=dict)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _Context:
    def __init__(self, configured: dict[str, str]) -> None:
        self._conf = _SparkConf(configured)

    def getConf(self) -> _SparkConf:
        return self._conf


class _Session:
    def __init__(self, configured: dict[str, str]) -> None:
        self.sparkContext = _Context(configured)
        self.conf = _RuntimeConf()


def test_an_unconfigured_session_gets_every_micro_batch_setting() -> None:
    session = _Session({})
    DeltaTarget(session, "/tables")  # type: ignore[arg-type]
    assert session.conf.values == MICRO_BATCH_CONF
    assert "spark.databricks.delta.stats.skipping" not in session.conf.values  # reads of deletion vectors need it


def test_a_setting_the_spark_configuration_made_is_left_alone() -> None:
    kept = "spark.sql.optimizer.runtime.bloomFilter.enabled"
    session = _Session({kept: "true"})
    DeltaTarget(session, "/tables")  # type: ignore[arg-type]
    assert kept not in session.conf.values
    assert set(session.conf.values) == set(MICRO_BATCH_CONF) - {kept}
