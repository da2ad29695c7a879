"""The local Spark environment: what `apply.spark` leaves unset, resolved on this machine for the command line, the
demo, the benchmarks and the tests. The product's Spark session takes these as settings and finds nothing itself."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from cdcbridge.config import ApplyTarget, BridgeConfig, SparkSettings
from cdcbridge.harness.stack.artifacts import ensure_component
from cdcbridge.harness.stack.errors import StackError
from cdcbridge.harness.stack.java import find_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The JDKs Spark 4.0 runs on.
SPARK_JAVA = (17, 21)
#: Hadoop's S3 filesystem, whose jars (hadoop-aws, the AWS SDK) pyspark does not ship.
S3A_SCHEME = "s3a://"


def _usable_java_home() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(home) and (Path(home) / "bin" / "java").exists()


def apply_paths(config: BridgeConfig) -> tuple[str, ...]:
    """The filesystem paths the apply job writes: its streaming checkpoint and, for the Delta target, the tables."""
    paths = [config.apply.checkpoint_location]
    if config.apply.target is ApplyTarget.DELTA:
        paths.append(config.apply.delta_path)
    return tuple(paths)


def uses_s3a(paths: Iterable[str]) -> bool:
    return any(path.strip().lower().startswith(S3A_SCHEME) for path in paths)


def _has_hadoop_aws(settings: SparkSettings, jars_dir: Path | None) -> bool:
    """Whether the configured jars already hold hadoop-aws (the user provides their own S3A jars)."""
    names = [Path(jar).name for jar in settings.conf.get("spark.jars", "").split(",") if jar.strip()]
    if jars_dir is not None:
        names += [jar.name for jar in jars_dir.glob("*.jar")]
    packages = settings.conf.get("spark.jars.packages", "")
    return any(name.startswith("hadoop-aws-") for name in names) or "hadoop-aws" in packages


def local_spark_settings(settings: SparkSettings | None = None, *, paths: Iterable[str] = ()) -> SparkSettings:
    """`settings` with the local defaults filled in: the connector jars of the checkout's cache (Maven fetches and
    builds them when missing or stale), the S3A jars when one of `paths` (see :func:`apply_paths`) is on s3a:// and
    the configured jars lack them, and, without a usable JAVA_HOME, an installed JDK Spark runs on."""
    settings = settings or SparkSettings()
    update: dict[str, object] = {}
    if settings.jars_dir is None:
        try:
            update["jars_dir"] = ensure_component("spark")
        except StackError as error:
            raise StackError(
                f"apply.spark.jars_dir is unset and the local connector jars cannot be made: {error}; or set "
                "apply.spark.jars_dir to a folder holding them"
            ) from None
    if uses_s3a(paths) and not _has_hadoop_aws(settings, settings.jars_dir):
        update["conf"] = {**settings.conf, "spark.jars": ",".join(_with_s3a_jars(settings.conf.get("spark.jars", "")))}
    if settings.java_home is None and not _usable_java_home():
        update["java_home"] = find_java(*SPARK_JAVA, purpose="Spark 4.0").home
    return settings.model_copy(update=update)


def _with_s3a_jars(jars: str) -> list[str]:
    """`jars` (spark.jars) and the S3A jars of the checkout's cache, fetched by Maven when missing."""
    try:
        s3a = ensure_component("s3a")
    except StackError as error:
        raise StackError(
            f"the apply paths are on s3a:// and the S3A jars (hadoop-aws, AWS SDK) cannot be fetched: {error}; or "
            "add them to apply.spark.jars_dir or apply.spark.conf's spark.jars"
        ) from None
    return [*(jar for jar in jars.split(",") if jar.strip()), *sorted(str(jar) for jar in s3a.glob("*.jar"))]


def local_spark_session(
    app_name: str, settings: SparkSettings | None = None, *, paths: Iterable[str] = ()
) -> SparkSession:
    """A session on this machine for the tools (demo, chaos, bench) and tests, built as the job builds its own."""
    from cdcbridge.apply.spark.session import build_spark_session

    return build_spark_session(app_name, local_spark_settings(settings, paths=paths))
