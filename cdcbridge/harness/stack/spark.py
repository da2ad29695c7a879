"""The local Spark environment: what `apply.spark` leaves unset, resolved on this machine for the command line, the
demo, the benchmarks and the tests. The product's Spark session takes these as settings and finds nothing itself."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from cdcbridge.config import SparkSettings
from cdcbridge.harness.stack.artifacts import ensure_component
from cdcbridge.harness.stack.errors import StackError
from cdcbridge.harness.stack.java import find_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The JDKs Spark 4.0 runs on.
SPARK_JAVA = (17, 21)


def _usable_java_home() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(home) and (Path(home) / "bin" / "java").exists()


def local_spark_settings(settings: SparkSettings | None = None) -> SparkSettings:
    """`settings` with the local defaults filled in: the connector jars of the checkout's cache (Maven fetches and
    builds them when missing or stale) and, without a usable JAVA_HOME, an installed JDK Spark runs on."""
    settings = settings or SparkSettings()
    update: dict[str, Path] = {}
    if settings.jars_dir is None:
        try:
            update["jars_dir"] = ensure_component("spark")
        except StackError as error:
            raise StackError(
                f"apply.spark.jars_dir is unset and the local connector jars cannot be made: {error}; or set "
                "apply.spark.jars_dir to a folder holding them"
            ) from None
    if settings.java_home is None and not _usable_java_home():
        update["java_home"] = find_java(*SPARK_JAVA, purpose="Spark 4.0").home
    return settings.model_copy(update=update)


def local_spark_session(app_name: str, settings: SparkSettings | None = None) -> SparkSession:
    """A session on this machine for the tools (demo, chaos, bench) and tests, built as the job builds its own."""
    from cdcbridge.apply.spark.session import build_spark_session

    return build_spark_session(app_name, local_spark_settings(settings))
