"""The apply job's compiled Spark functions and how a session gets them.

They live in ``cdcbridge-spark-kernel.jar``, which deploy/spark/pom.xml builds from deploy/spark/src/main/java into
the connector jars folder (so ``spark.jars`` carries it). Compiled because Spark SQL runs higher-order functions
(``transform``, ``filter``, ``aggregate``, map functions) interpreted, lambda by lambda, where compiled code runs
once per row. Each is a Catalyst expression (``KernelExpression.java``) registered by name in the session whose
frames call it: it reads and returns Spark's own values (InternalRow, ArrayData, MapData, UTF8String), where a
Java UDF has every argument converted into Row/Seq/Map/String objects and its result converted back (for the fold
that conversion cost more than the fold itself). The expressions generate code, so an operator holding one stays in
whole-stage code generation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

from cdcbridge.apply.errors import ApplyJobError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession


#: The Java class that builds a compiled Catalyst expression for Spark's function registry.
EXPRESSION_FACTORY = "io.cdcbridge.spark.KernelExpression"


@dataclass(frozen=True)
class KernelFunction:
    """One compiled function: the SQL name it is registered under, its Java class (a ``KernelExpression``) and its
    result type (Spark DDL)."""

    name: str
    java_class: str
    return_type: str

    def register(self, spark: SparkSession) -> None:
        """Register the function in `spark` unless it is there already (registering again makes Spark log a
        warning); a Spark that lacks the kernel jar gets an error saying how to build it."""
        if spark.catalog.functionExists(self.name):
            return
        try:
            self._register_expression(spark)
        except Exception as error:  # Py4J's error (or our LookupError) when the class is not loadable
            if self.java_class not in str(error):
                raise
            raise ApplyJobError(
                f"Spark cannot load {self.java_class}, a compiled function of the apply job "
                "(cdcbridge-spark-kernel.jar)",
                fix="run `make setup` (Maven builds it from deploy/spark/pom.xml into .cache/jvm/spark); if "
                "apply.spark.jars_dir names a jars folder of your own, build that pom with -Djars.dir=<that folder>; "
                "under spark-submit, pass that folder's jars with --jars",
            ) from None

    def _register_expression(self, spark: SparkSession) -> None:
        """Put the expression's builder (``KernelExpression.builder``) in the session's function registry."""
        from py4j.java_gateway import JavaPackage

        factory: Any = reduce(getattr, EXPRESSION_FACTORY.split("."), spark._jvm)
        if isinstance(factory, JavaPackage):  # what py4j returns for a class it cannot load
            raise LookupError(f"{EXPRESSION_FACTORY} is not on Spark's class path, so neither is {self.java_class}")
        builder = factory.builder(self.java_class, self.return_type)
        registry = spark._jsparkSession.sessionState().functionRegistry()
        registry.createOrReplaceTempFunction(self.name, builder, "java_udf")

    def __call__(self, *arguments: Column) -> Column:
        """The function applied to `arguments` (register it in the frame's session first)."""
        from pyspark.sql import functions as F

        return F.call_function(self.name, *arguments)
