"""A SparkSession wired with our Maven Central jars (Kafka source, Avro, Delta, JDBC) as local files.

`spark.jars.packages` would go through Ivy to the network at every start and ignores Maven settings, so the jars
fetched by deploy/spark/pom.xml are handed to Spark as local paths instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from cdcbridge.harness.stack.artifacts import ensure_component
from cdcbridge.harness.stack.java import find_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: log4j2 settings of a local master's driver: Spark's WARN lines without those that ask nothing of a user.
LOCAL_LOG4J2 = Path(__file__).with_name("log4j2-local.properties")
#: JVM options of a local master's driver (``extra_conf`` may replace them).
LOCAL_DRIVER_JAVA_OPTIONS = f"-XX:+UseParallelGC -Dlog4j2.configurationFile={LOCAL_LOG4J2.as_uri()}"


def spark_jars(jars_dir: Path | None = None) -> list[str]:
    """Absolute paths of the connector jars; fetched through Maven on first use."""
    folder = jars_dir or Path(os.environ.get("CDCBRIDGE_SPARK_JARS") or ensure_component("spark"))
    return sorted(str(p) for p in folder.glob("*.jar"))


def local_cores(master: str) -> int | None:
    """The cores a ``local``/``local[N]``/``local[*]`` master runs tasks on (None for any other master)."""
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if match is None:
        return None
    return (os.cpu_count() or 1) if match.group(1) == "*" else int(match.group(1))


def build_spark_session(
    app_name: str = "cdcbridge",
    *,
    master: str = "local[2]",
    jars_dir: Path | None = None,
    delta: bool = True,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Create (or return the running) SparkSession bound to loopback with the connector jars loaded."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if "JAVA_HOME" not in os.environ or not (Path(os.environ["JAVA_HOME"]) / "bin" / "java").exists():
        os.environ["JAVA_HOME"] = str(find_java(17, 21, purpose="Spark 4.0").home)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.jars", ",".join(spark_jars(jars_dir)))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        # One apply batch generates more classes (fold job, Delta MERGE, log reads) than Spark's default cache
        # of 100 holds, so every batch would compile them all again.
        .config("spark.sql.codegen.cache.maxEntries", "2000")
    )
    cores = local_cores(master)
    if cores is not None:
        # The driver JVM runs every task of a local master. The throughput collector, not the default G1, whose
        # concurrent marking and write barriers take CPU from the tasks.
        builder = builder.config("spark.driver.extraJavaOptions", LOCAL_DRIVER_JAVA_OPTIONS)
        # One shuffle partition per core: a micro-batch's shuffles are small, and each extra task costs more than
        # it spreads.
        builder = builder.config("spark.sql.shuffle.partitions", str(cores))
    if delta:
        builder = builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension").config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
