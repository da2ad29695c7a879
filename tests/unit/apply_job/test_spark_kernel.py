"""Registering a compiled function: a Spark without the kernel jar gets an error that says how to build it."""

from __future__ import annotations

import pytest

from cdcbridge.apply.job_errors import ApplyJobError
from cdcbridge.apply.spark_fold import FOLD, RESULT_TYPE


class _Udf:
    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.registered: list[tuple[str, str, str]] = []

    def registerJavaFunction(self, name: str, java_class: str, return_type: str) -> None:
        if self.error is not None:
            raise self.error
        self.registered.append((name, java_class, return_type))


class _Catalog:
    def __init__(self, udf: _Udf) -> None:
        self.udf = udf

    def functionExists(self, name: str) -> bool:
        return any(registered == name for registered, _, _ in self.udf.registered)


class _Spark:
    def __init__(self, error: Exception | None = None) -> None:
        self.udf = _Udf(error)
        self.catalog = _Catalog(self.udf)


def test_the_fold_is_registered_once_under_its_name_with_its_result_type() -> None:
    spark = _Spark()
    FOLD.register(spark)  # type: ignore[arg-type]
    FOLD.register(spark)  # type: ignore[arg-type]
    assert spark.udf.registered == [("cdcbridge_fold_row", "io.cdcbridge.spark.FoldRow", RESULT_TYPE)]


def test_a_spark_without_the_kernel_jar_is_told_how_to_build_it() -> None:
    missing = RuntimeError("[CANNOT_LOAD_FUNCTION_CLASS] Cannot load class io.cdcbridge.spark.FoldRow when registering")
    with pytest.raises(ApplyJobError, match=r"Spark cannot load io\.cdcbridge\.spark\.FoldRow.*make setup") as caught:
        FOLD.register(_Spark(missing))  # type: ignore[arg-type]
    assert caught.value.__suppress_context__


def test_any_other_registration_error_is_not_disguised() -> None:
    with pytest.raises(RuntimeError, match="the Spark context was stopped"):
        FOLD.register(_Spark(RuntimeError("the Spark context was stopped")))  # type: ignore[arg-type]
