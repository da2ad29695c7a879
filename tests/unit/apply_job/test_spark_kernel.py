"""Registering a compiled function: a Spark without the kernel jar gets an error that says how to build it."""

from __future__ import annotations

from typing import Any

import pytest
from py4j.java_gateway import JavaPackage

from cdcbridge.apply.job_errors import ApplyJobError
from cdcbridge.apply.spark_batch import ROW_SHAPE, SHAPE_TYPE
from cdcbridge.apply.spark_fold import FOLD, RESULT_TYPE
from cdcbridge.apply.spark_kernel import EXPRESSION_FACTORY


class _Udf:
    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.registered: list[tuple[str, str, str]] = []

    def registerJavaFunction(self, name: str, java_class: str, return_type: str) -> None:
        if self.error is not None:
            raise self.error
        self.registered.append((name, java_class, return_type))


class _Registry:
    """Spark's function registry, as far as an expression's registration uses it."""

    def __init__(self) -> None:
        self.registered: list[tuple[str, Any, str]] = []

    def createOrReplaceTempFunction(self, name: str, builder: Any, source: str) -> None:
        self.registered.append((name, builder, source))


class _Factory:
    """KernelExpression's static builder; `missing` names classes it cannot load."""

    def __init__(self, missing: str | None = None) -> None:
        self.missing = missing

    def builder(self, java_class: str, result_type: str) -> tuple[str, str]:
        if java_class == self.missing:
            raise RuntimeError(f"java.lang.ClassNotFoundException: {java_class}")
        return ("builder", java_class, result_type)


class _Jvm:
    """Resolves dotted names the way py4j does: `factory` at EXPRESSION_FACTORY, packages on the way."""

    def __init__(self, factory: Any, path: str = "") -> None:
        self._factory = factory
        self._path = path

    def __getattr__(self, name: str) -> Any:
        path = f"{self._path}.{name}" if self._path else name
        return self._factory if path == EXPRESSION_FACTORY else _Jvm(self._factory, path)


class _Catalog:
    def __init__(self, spark: _Spark) -> None:
        self.spark = spark

    def functionExists(self, name: str) -> bool:
        names = [n for n, _, _ in self.spark.udf.registered] + [n for n, _, _ in self.spark.registry.registered]
        return name in names


class _Spark:
    def __init__(self, error: Exception | None = None, factory: Any = None) -> None:
        self.udf = _Udf(error)
        self.registry = _Registry()
        self.catalog = _Catalog(self)
        self._jvm = _Jvm(factory if factory is not None else _Factory())
        session_state = type("SessionState", (), {"functionRegistry": lambda _: self.registry})()
        self._jsparkSession = type("JSparkSession", (), {"sessionState": lambda _: session_state})()


def test_a_udf_is_registered_once_under_its_name_with_its_result_type() -> None:
    spark = _Spark()
    ROW_SHAPE.register(spark)  # type: ignore[arg-type]
    ROW_SHAPE.register(spark)  # type: ignore[arg-type]
    assert spark.udf.registered == [("cdcbridge_row_shape", "io.cdcbridge.spark.RowShape", SHAPE_TYPE)]
    assert spark.registry.registered == []


def test_the_fold_is_registered_once_as_an_expression_built_for_its_result_type() -> None:
    spark = _Spark()
    FOLD.register(spark)  # type: ignore[arg-type]
    FOLD.register(spark)  # type: ignore[arg-type]
    builder = ("builder", "io.cdcbridge.spark.FoldRow", RESULT_TYPE)
    assert spark.registry.registered == [("cdcbridge_fold_row", builder, "java_udf")]
    assert spark.udf.registered == []


def test_a_spark_without_the_kernel_jar_is_told_how_to_build_it() -> None:
    missing = RuntimeError("[CANNOT_LOAD_FUNCTION_CLASS] Cannot load class io.cdcbridge.spark.RowShape when loading")
    with pytest.raises(ApplyJobError, match=r"Spark cannot load io\.cdcbridge\.spark\.RowShape.*make setup") as caught:
        ROW_SHAPE.register(_Spark(missing))  # type: ignore[arg-type]
    assert caught.value.__suppress_context__


def test_a_spark_without_the_kernel_jar_is_told_so_for_an_expression_too() -> None:
    no_jar = _Spark(factory=JavaPackage(EXPRESSION_FACTORY, gateway_client=None))
    with pytest.raises(ApplyJobError, match=r"Spark cannot load io\.cdcbridge\.spark\.FoldRow.*make setup"):
        FOLD.register(no_jar)  # type: ignore[arg-type]
    old_jar = _Spark(factory=_Factory(missing="io.cdcbridge.spark.FoldRow"))
    with pytest.raises(ApplyJobError, match=r"Spark cannot load io\.cdcbridge\.spark\.FoldRow.*make setup"):
        FOLD.register(old_jar)  # type: ignore[arg-type]
    assert no_jar.registry.registered == [] and old_jar.registry.registered == []


def test_any_other_registration_error_is_not_disguised() -> None:
    with pytest.raises(RuntimeError, match="the Spark context was stopped"):
        ROW_SHAPE.register(_Spark(RuntimeError("the Spark context was stopped")))  # type: ignore[arg-type]
