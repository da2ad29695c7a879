"""The apply job's SparkSession, from its configuration (`apply.spark`) or from the Spark it runs under.

- The job launches Spark itself (`cdcbridge apply`): the master, the connector jars (local files: `spark.jars.packages`
  would go through Ivy to the network at every start), the Java home, the driver's memory and the executors' Python
  (`spark.pyspark.python`) come from `apply.spark`.
  A local master binds the driver to loopback and gets the local tuning below; any other master leaves the driver's
  address to Spark, so that a cluster's executors can reach it.
- Spark launched the job (spark-submit) or already runs in the process (a notebook, an embedding application): the
  master and every setting it was given stand. The job adds only what is missing of what it needs (UTC session time
  zone, Delta's extension and catalog) and of `apply.spark.conf`.

Nothing here finds a JDK or fetches jars: the command line resolves those local defaults before it calls the job.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from cdcbridge.apply.errors import ApplyJobError
from cdcbridge.config import SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: log4j2 settings of a local master's driver: Spark's WARN lines without those that ask nothing of a user.
LOCAL_LOG4J2 = Path(__file__).with_name("log4j2-local.properties")
#: JVM options of a local master's driver (``apply.spark.conf`` may replace them).
LOCAL_DRIVER_JAVA_OPTIONS = f"-XX:+UseParallelGC -Dlog4j2.configurationFile={LOCAL_LOG4J2.as_uri()}"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
LOOPBACK = "127.0.0.1"


def spark_jars(jars_dir: Path) -> list[str]:
    """Absolute paths of the jars in `jars_dir`; an empty or missing folder is an error that says what to do."""
    jars = sorted(str(p.absolute()) for p in jars_dir.glob("*.jar"))
    if not jars:
        raise ApplyJobError(
            f"apply.spark.jars_dir {jars_dir} holds no .jar files",
            fix="build the connector jars into it (mvn -f deploy/spark/pom.xml package -Djars.dir=<that folder>) "
            "or unset it so that `cdcbridge apply` uses the checkout's .cache/jvm/spark",
        )
    return jars


def local_cores(master: str) -> int | None:
    """The cores a ``local``/``local[N]``/``local[*]`` master runs tasks on (None for any other master)."""
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if match is None:
        return None
    return (os.cpu_count() or 1) if match.group(1) == "*" else int(match.group(1))


def job_conf(*, delta: bool) -> dict[str, str]:
    """Settings the job runs with unless Spark was given others."""
    conf = {
        "spark.sql.session.timeZone": "UTC",
        # One apply batch generates ~50 classes for its fold job and ~75 per table for a Delta MERGE and its log
        # reads; with Spark's default cache of 100 the next batch would find none of them and compile all again.
        "spark.sql.codegen.cache.maxEntries": "2000",
    }
    if delta:
        conf["spark.sql.extensions"] = DELTA_EXTENSION
        conf["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
    return conf


def launch_conf(app_name: str, settings: SparkSettings, *, delta: bool = True) -> dict[str, str]:
    """Every setting of a Spark the job launches itself; `settings.conf` replaces the job's defaults."""
    conf = {"spark.app.name": app_name, "spark.master": settings.master, "spark.ui.showConsoleProgress": "false"}
    jars = spark_jars(settings.jars_dir) if settings.jars_dir is not None else []
    jars += [jar for jar in settings.conf.get("spark.jars", "").split(",") if jar]
    if jars:
        conf["spark.jars"] = ",".join(jars)
    if settings.driver_memory is not None:
        conf["spark.driver.memory"] = settings.driver_memory
    if settings.master.startswith("local"):  # driver and executors on this machine: nothing needs to reach it
        conf |= {"spark.driver.host": LOOPBACK, "spark.driver.bindAddress": LOOPBACK, "spark.ui.enabled": "false"}
    cores = local_cores(settings.master)
    if cores is not None:
        # The driver JVM runs every task of a local master: the throughput collector, not the default G1, whose
        # concurrent marking and write barriers take CPU from the tasks.
        conf["spark.driver.extraJavaOptions"] = LOCAL_DRIVER_JAVA_OPTIONS
        # One shuffle partition per core: a micro-batch's shuffles are small, and each extra task costs more than
        # it spreads.
        conf["spark.sql.shuffle.partitions"] = str(cores)
    conf |= job_conf(delta=delta)
    conf |= {key: value for key, value in settings.conf.items() if key != "spark.jars"}
    return conf


def added_conf(
    given: Mapping[str, str], app_name: str, settings: SparkSettings, *, delta: bool = True
) -> dict[str, str]:
    """What the job adds to the settings Spark was launched with: only keys it was not given (Delta's extension
    joins a given extension list that lacks it, since the Delta target cannot run without it)."""
    wanted = {"spark.app.name": app_name, **job_conf(delta=delta), **settings.conf}
    added = {key: value for key, value in wanted.items() if key not in given}
    extensions = [name.strip() for name in given.get("spark.sql.extensions", "").split(",") if name.strip()]
    if delta and extensions and DELTA_EXTENSION not in extensions:
        added["spark.sql.extensions"] = ",".join([*extensions, DELTA_EXTENSION])
    return added


def launched_conf() -> dict[str, str] | None:
    """The settings of the Spark that launched this process (spark-submit) or already runs in it (a notebook, an
    embedding application); None when there is none and the job launches Spark itself."""
    from pyspark import SparkConf, SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        return dict(active.getConf().getAll())
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # set by spark-submit for the Python driver it starts
        return None
    SparkContext._ensure_initialized()  # joins spark-submit's JVM, whose system properties hold what it was given
    return dict(SparkConf().getAll())


def under_launched_spark() -> bool:
    """Whether Spark launched this process or already runs in it (then the local environment is not needed)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None or "PYSPARK_GATEWAY_PORT" in os.environ


def build_spark_session(app_name: str, settings: SparkSettings, *, delta: bool = True) -> SparkSession:
    """The session of the job: launched from `settings`, or on the Spark that launched the process (see the module
    docstring)."""
    from pyspark.sql import SparkSession

    given = launched_conf()
    if given is None:
        _prepare_launch(settings)
        conf = launch_conf(app_name, settings, delta=delta)
    else:
        conf = added_conf(given, app_name, settings, delta=delta)
        log.info(
            "Spark was launched with master %s; the job adds only settings it was not given: %s",
            given.get("spark.master", "(unset)"),
            ", ".join(sorted(conf)) or "none",
        )
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if given is None:
        session.sparkContext.setLogLevel("WARN")
    return session


def _prepare_launch(settings: SparkSettings) -> None:
    """The environment spark-submit reads when the job launches Spark: the Java home, the executors' Python and,
    for a local master, the loopback address."""
    if settings.java_home is not None:
        if not (settings.java_home / "bin" / "java").exists():
            raise ApplyJobError(
                f"apply.spark.java_home {settings.java_home} has no bin/java",
                fix="point it at a JDK 17 or 21 (Spark 4.0 runs on those), or unset it to use JAVA_HOME",
            )
        os.environ["JAVA_HOME"] = str(settings.java_home)
    python = executor_python(settings, os.environ.get("PYSPARK_PYTHON"))
    if python is not None:
        os.environ["PYSPARK_PYTHON"] = python
    if settings.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)


def executor_python(settings: SparkSettings, exported: str | None) -> str | None:
    """The Python executors start when a task needs one (PySpark's step that turns driver-side rows into a frame;
    no code of ours runs there). A Spark launched from Python tells them PYSPARK_PYTHON only, never
    ``spark.pyspark.python``, so that setting is exported; a local master's executors share this machine and get
    this interpreter (Spark's default, ``python3`` on PATH, may be another version, which PySpark refuses)."""
    configured = settings.conf.get("spark.pyspark.python")
    if configured:
        return configured
    if exported is None and settings.master.startswith("local"):
        return sys.executable
    return None
