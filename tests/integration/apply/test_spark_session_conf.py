"""The session the apply job builds runs one shuffle partition per local core (streaming queries, which the
apply job is, do not coalesce partitions adaptively, so this is the number of reduce tasks per shuffle),
and a local driver, which runs every task, collects garbage with the throughput collector."""

from cdcbridge.apply.spark.session import LOCAL_LOG4J2, local_cores


def test_the_session_shuffles_into_one_partition_per_core(spark) -> None:
    cores = local_cores(spark.sparkContext.master)
    assert cores == spark.sparkContext.defaultParallelism
    assert spark.conf.get("spark.sql.shuffle.partitions") == str(cores)


def test_the_local_driver_runs_the_throughput_collector(spark) -> None:
    jvm = spark.sparkContext._jvm
    beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    collectors = {beans.get(i).getName() for i in range(beans.size())}
    assert collectors == {"PS Scavenge", "PS MarkSweep"}


def test_the_local_driver_logs_with_our_log4j2_profile(spark) -> None:
    """Spark's WARN lines still show, the ones that ask nothing of a user (native-hadoop, streaming AQE) do not."""
    jvm = spark.sparkContext._jvm
    assert jvm.java.lang.System.getProperty("log4j2.configurationFile") == LOCAL_LOG4J2.as_uri()
    manager = jvm.org.apache.logging.log4j.LogManager
    assert str(manager.getRootLogger().getLevel()) == "WARN"
    for quiet in ("org.apache.hadoop.util.NativeCodeLoader",
                  "org.apache.spark.sql.execution.streaming.ResolveWriteToStream"):  # fmt: skip
        assert str(manager.getLogger(quiet).getLevel()) == "ERROR"
