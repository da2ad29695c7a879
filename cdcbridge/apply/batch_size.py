"""Which Kafka offset ranges a micro-batch reads, and so how many messages it holds, without running a Spark job.

The job picks the path of a batch by its size (:mod:`.job`): a batch of a few messages is cheaper on the driver
than as the Spark path's jobs, and a ``count()`` would cost a job of its own; the driver then reads exactly these
ranges itself (:mod:`.driver.kafka_fetch`). Spark's Kafka source plans one input partition per Kafka partition
range (``KafkaBatchInputPartition.offsetRange``: topic, partition, from/until offsets), and the frame
``foreachBatch`` hands over is a ``LogicalRDD`` whose RDD keeps those partitions. Anything else (another source, a
plan Spark builds differently) gives None: the ranges are unknown and the batch takes the Spark path, which
handles any size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdcbridge.apply.driver.kafka_fetch import OffsetRange

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def kafka_offset_ranges(batch: DataFrame) -> list[OffsetRange] | None:
    """The Kafka ranges `batch` reads, or None when the frame is not a Kafka micro-batch Spark planned as
    expected (or a bound is unresolved)."""
    try:
        plan = batch._jdf.queryExecution().analyzed()
        if plan.getClass().getSimpleName() != "LogicalRDD":
            return None
        ranges: list[OffsetRange] = []
        for partition in plan.rdd().partitions():
            planned = partition.inputPartitions()
            for index in range(planned.size()):
                offsets = planned.apply(index).offsetRange()
                start, until = int(offsets.fromOffset()), int(offsets.untilOffset())
                if start < 0 or until < start:
                    return None  # an unresolved (earliest / latest) bound
                topic_partition = offsets.topicPartition()
                ranges.append(OffsetRange(str(topic_partition.topic()), int(topic_partition.partition()), start, until))
        return ranges
    except Exception:  # py4j raises for a method the object lacks: not a Kafka batch as expected
        return None


def batch_messages(ranges: Sequence[OffsetRange]) -> int:
    """The offsets of `ranges`: the batch's messages, or a few more where a range holds transaction markers or
    compacted-away offsets."""
    return sum(item.until_offset - item.from_offset for item in ranges)
