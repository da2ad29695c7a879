"""Registering a compiled function: a Spark without the kernel jar gets an error that says how to build it."""

from __future__ import annotations

from typing import Any

import pytest
from py4j.java_gateway import JavaPackage

from cdcbridge.apply.errors import ApplyJobError
from cdcbridge.apply.spark.batch import ROW_SHAPE, SHAPE_TYPE
from cdcbridge.apply.spark.fold import FOLD, RESULT_TYPE, STATE_TYPE
from cdcbridge.apply.spark.kernel import EXPRESSION_FACTORY, KernelFunction
from cdcbridge.apply.spark.operations import ENVELOPE_OP_TYPE, IMAGE_OP, MUTATION_OP
from cdcbridge.apply.targets.delta import ROW_STATE


class _Registry:
    """Spark's function registry, as far as an expression's registration uses it."""

    def __init__(self) -> None:
        self.registered: list[tuple[str, Any, str]] = []

    def createOrReplaceTempFunction(self, name: str, builder: Any, source: str) -> None:
        self.registered.append((name, builder, source))


class _Factory:
    """KernelExpression's static builder; `missing` names classes it cannot load, `error` fails every call."""

    def __init__(self, missing: str | None = None, error: Exception | None = None) -> None:
        self.missing = missing
        self.error = error

    def builder(self, java_class: str, result_type: str) -> tuple[str, str, str]:
        if self.error is not None:
            raise self.error
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
        return name in [n for n, _, _ in self.spark.registry.registered]


class _Spark:
    def __init__(self, factory: Any = None) -> None:
        self.registry = _Registry()
        self.catalog = _Catalog(self)
        self._jvm = _Jvm(factory if factory is not None else _Factory())
        session_state = type("SessionState", (), {"functionRegistry": lambda _: self.registry})()
        self._jsparkSession = type("JSparkSession", (), {"sessionState": lambda _: session_state})()


@pytest.mark.parametrize(
    ("function", "java_class", "result_type"),
    [
        (FOLD, "io.cdcbridge.spark.FoldRow", RESULT_TYPE),
        (ROW_STATE, "io.cdcbridge.spark.RowState", STATE_TYPE),
        (ROW_SHAPE, "io.cdcbridge.spark.RowShape", SHAPE_TYPE),
        (MUTATION_OP, "io.cdcbridge.spark.MutationOp", ENVELOPE_OP_TYPE),
        (IMAGE_OP, "io.cdcbridge.spark.ImageOp", ENVELOPE_OP_TYPE),
    ],
)
def test_each_function_is_registered_once_as_an_expression_built_for_its_result_type(
    function: KernelFunction, java_class: str, result_type: str
) -> None:
    spark = _Spark()
    function.register(spark)  # type: ignore[arg-type]
    function.register(spark)  # type: ignore[arg-type]
    assert spark.registry.registered == [(function.name, ("builder", java_class, result_type), "java_udf")]


def test_a_spark_without_the_kernel_jar_is_told_how_to_build_it() -> None:
    no_jar = _Spark(factory=JavaPackage(EXPRESSION_FACTORY, gateway_client=None))
    with pytest.raises(ApplyJobError, match=r"Spark cannot load io\.cdcbridge\.spark\.FoldRow.*make setup") as caught:
        FOLD.register(no_jar)  # type: ignore[arg-type]
    assert caught.value.__suppress_context__
    old_jar = _Spark(factory=_Factory(missing="io.cdcbridge.spark.RowShape"))
    with pytest.raises(ApplyJobError, match=r"Spark cannot load io\.cdcbridge\.spark\.RowShape.*make setup"):
        ROW_SHAPE.register(old_jar)  # type: ignore[arg-type]
    assert no_jar.registry.registered == [] and old_jar.registry.registered == []


def test_any_other_registration_error_is_not_disguised() -> None:
    stopped = _Spark(factory=_Factory(error=RuntimeError("the Spark context was stopped")))
    with pytest.raises(RuntimeError, match="the Spark context was stopped"):
        ROW_SHAPE.register(stopped)  # type: ignore[arg-type]
