"""How many Kafka messages a micro-batch holds, read from its offset ranges without running a Spark job.

The job picks the path of a batch by its size (:mod:`.job`): a batch of a few messages is cheaper on the driver
than as the Spark path's jobs, and a ``count()`` would cost a job of its own. Spark's Kafka source plans one input
partition per Kafka partition range (``KafkaBatchInputPartition.offsetRange``: from/until offsets), and the
frame ``foreachBatch`` hands over is a ``LogicalRDD`` whose RDD keeps those partitions, so the size is the sum of
the ranges. Anything else (another source, a plan Spark builds differently) gives None: the size is unknown and
the batch takes the Spark path, which handles any size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def kafka_batch_messages(batch: DataFrame) -> int | None:
    """The offsets of the Kafka ranges `batch` reads (its messages, or a few more where a range holds
    transaction markers or compacted-away offsets), or None when the frame is not a Kafka micro-batch Spark
    planned as expected."""
    try:
        plan = batch._jdf.queryExecution().analyzed()
        if plan.getClass().getSimpleName() != "LogicalRDD":
            return None
        total = 0
        for partition in plan.rdd().partitions():
            ranges = partition.inputPartitions()
            for index in range(ranges.size()):
                offsets = ranges.apply(index).offsetRange()
                size = int(offsets.untilOffset()) - int(offsets.fromOffset())
                if int(offsets.fromOffset()) < 0 or size < 0:
                    return None  # an unresolved (earliest / latest) bound
                total += size
        return total
    except Exception:  # py4j raises for a method the object lacks: not a Kafka batch as expected
        return None
