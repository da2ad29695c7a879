"""The Delta Lake build the Delta target needs, checked once when the target starts.

Why: besides Delta's public API the target takes internal steps of open-source Delta Lake (``DeltaLog`` snapshots
and transactions, the deletion-vector steps of its DELETE: :mod:`.delta_located_write`), which exist only in
delta-spark and change between its releases. Another build, such as the Databricks Runtime's own Delta (its classes
live under other names), would otherwise fail with a Py4J error in the middle of the first batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

from cdcbridge.apply.errors import TargetError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Internal classes of delta-spark the target uses (the Scala objects with their ``$``).
INTERNAL_CLASSES = (
    "org.apache.spark.sql.delta.DeltaLog",
    "org.apache.spark.sql.delta.DeltaOperations",
    "org.apache.spark.sql.delta.actions.Action",
    "org.apache.spark.sql.delta.actions.SetTransaction",
    "org.apache.spark.sql.delta.commands.DMLWithDeletionVectorsHelper$",
    "org.apache.spark.sql.delta.commands.DeletionVectorBitmapGenerator$",
)
#: Where delta-spark keeps its version (``io.delta.VERSION``).
_VERSION_HOLDER = "io.delta.package"
_FIX = (
    "run the apply job on a Spark that has open-source Delta Lake {tested}.x (delta-spark, the version cdcbridge "
    "pins; `make setup` puts its jars in .cache/jvm/spark) instead of another Delta build; a Databricks Runtime's "
    "own Delta is not supported (README: Databricks and EMR)"
)


def check_delta_build(spark: SparkSession, classes: Sequence[str] = INTERNAL_CLASSES, tested: str | None = None) -> str:
    """The JVM's delta-spark version; a TargetError naming what is missing when Spark lacks one of `classes` or
    runs a Delta of another major.minor than `tested` (default: that of the delta-spark Python package)."""
    from py4j.java_gateway import JavaPackage

    tested = tested if tested is not None else _tested_release()
    jvm = spark._jvm
    missing = [name for name in classes if isinstance(_java_class(jvm, name), JavaPackage)]
    if missing:
        raise TargetError(
            f"the Delta target needs classes of open-source Delta Lake that Spark cannot load: {', '.join(missing)}",
            fix=_FIX.format(tested=tested),
        )
    holder = _java_class(jvm, _VERSION_HOLDER)
    running = str(holder.VERSION()) if not isinstance(holder, JavaPackage) else "unknown"
    if _release(running) != tested:
        raise TargetError(
            f"Spark runs Delta Lake {running}, but the Delta target takes internal steps of Delta Lake {tested}, "
            "which differ between releases",
            fix=_FIX.format(tested=tested),
        )
    return running


def _java_class(jvm: Any, name: str) -> Any:
    """Py4J's handle of the class `name`; a ``JavaPackage`` when the class is not loadable."""
    package, _, simple = name.rpartition(".")
    return getattr(reduce(getattr, package.split("."), jvm), simple)


def _tested_release() -> str:
    """major.minor of the delta-spark Python package installed with cdcbridge (its pin in pyproject.toml)."""
    return _release(version("delta-spark"))


def _release(full: str) -> str:
    """``4.0.1`` → ``4.0``."""
    return ".".join(full.split(".")[:2])
