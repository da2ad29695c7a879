"""The apply job's compiled Spark functions and how a session gets them.

They are Spark Java UDFs in ``cdcbridge-spark-kernel.jar``, which deploy/spark/pom.xml builds from
deploy/spark/src/main/java into the connector jars folder (so ``spark.jars`` carries it). Compiled because Spark
SQL runs higher-order functions (``transform``, ``filter``, ``aggregate``, map functions) interpreted, lambda by
lambda, where a Java UDF runs once per row as plain code. Each is registered by name in the session whose frames
call it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdcbridge.apply.job_errors import ApplyJobError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession


@dataclass(frozen=True)
class KernelFunction:
    """One compiled function: the SQL name it is registered under, its Java class and its result type."""

    name: str
    java_class: str
    return_type: str

    def register(self, spark: SparkSession) -> None:
        """Register the function in `spark` unless it is there already (registering again makes Spark log a
        warning); a Spark that lacks the kernel jar gets an error saying how to build it."""
        if spark.catalog.functionExists(self.name):
            return
        try:
            spark.udf.registerJavaFunction(self.name, self.java_class, self.return_type)
        except Exception as error:  # Spark's AnalysisException (or Py4J's error) when the class is not loadable
            if self.java_class not in str(error):
                raise
            raise ApplyJobError(
                f"Spark cannot load {self.java_class}, a compiled function of the apply job "
                "(cdcbridge-spark-kernel.jar)",
                fix="run `make setup` (Maven builds it from deploy/spark/pom.xml into .cache/jvm/spark); if "
                "CDCBRIDGE_SPARK_JARS names a jars folder of your own, build that pom with -Djars.dir=<that folder>",
            ) from None

    def __call__(self, *arguments: Column) -> Column:
        """The function applied to `arguments` (register it in the frame's session first)."""
        from pyspark.sql import functions as F

        return F.call_function(self.name, *arguments)
