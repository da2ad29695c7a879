"""The Delta target checks at start that Spark runs the Delta Lake build whose internal steps it takes
(:mod:`cdcbridge.apply.targets.delta_build`), so another build fails with an error that says so, not mid-batch."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from cdcbridge.apply.errors import TargetError
from cdcbridge.apply.targets.delta import DeltaTarget
from cdcbridge.apply.targets.delta_build import INTERNAL_CLASSES, check_delta_build


def test_the_test_spark_runs_the_pinned_delta_build(spark) -> None:
    assert check_delta_build(spark) == version("delta-spark")


def test_a_spark_without_one_of_the_classes_is_refused_by_name(spark) -> None:
    absent = "org.apache.spark.sql.delta.NoSuchStep$"
    with pytest.raises(TargetError) as raised:
        check_delta_build(spark, classes=(*INTERNAL_CLASSES, absent))
    text = str(raised.value)
    assert absent in text
    assert INTERNAL_CLASSES[0] not in text
    assert "open-source Delta Lake 4.0.x" in text and "Databricks Runtime" in text


def test_a_delta_of_another_release_is_refused(spark) -> None:
    with pytest.raises(TargetError, match=r"runs Delta Lake 4\.0\.\d+, but the Delta target takes internal steps of "
                       r"Delta Lake 9\.9"):  # fmt: skip
        check_delta_build(spark, tested="9.9")


def test_the_target_checks_when_it_starts(spark, tmp_path, monkeypatch) -> None:
    import cdcbridge.apply.targets.delta_build as build

    monkeypatch.setattr(build, "_tested_release", lambda: "9.9")
    with pytest.raises(TargetError, match=r"takes internal steps of Delta Lake 9\.9"):
        DeltaTarget(spark, str(tmp_path))
