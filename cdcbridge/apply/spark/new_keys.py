"""The new-key path: a batch whose keys each have one operation and are not stored folds message by message.

A key with exactly one operation in the batch and no stored row folds to what the compiled fold makes of that one
operation onto an absent row (:data:`~.fold.FOLD` of ``[op]`` and null), whatever the operation is. A first load
is such batches. Then the grouping's shuffle of whole operations, the join with the stored rows and the fold
result's local checkpoint are not needed: each decoded message is its own group (:func:`per_message_groups`),
folded where it is read.

The batch must be checked first: per table, how many keys repeat (a count per key hash, a shuffle of longs) and how
many the target holds (its key columns matched to the batch's keys). Both counts are computed in the job that
computes the batch's summary (:func:`key_checks`), so a batch that passes runs its summary job and its write, two
jobs over the decoded batch (persisted). One that fails takes the grouped path on the same decoded batch. A hash
collision only sends a batch to the grouped path.

A target that takes a pending append (Delta, :meth:`~cdcbridge.apply.target.SparkFoldTarget.pending_append`) lets
a job of one table check after writing instead: the batch written by the job that decodes it, its summary observed
in that job and its keys checked from the written rows, then committed or dropped
(:meth:`~cdcbridge.apply.spark.batch.SparkBatchApplier.apply`). One Kafka read and one pass instead of two. A
table that does not exist yet is made by the commit of its first batch, in the shape a sample of the batch shows
(:meth:`~cdcbridge.apply.target.SparkFoldTarget.pending_create`).

:class:`NewKeyPlanner` decides from what the driver already knows whether a batch tries it: while batches would fail
the checks (updates, keys repeated within a batch), they do not pay for them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdcbridge.apply.spark.operations import OP_TYPE, OTHER, PYTHON, UNKNOWN_SID

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: The check columns :func:`key_checks` adds per table.
REPEATED_KEYS, STORED_KEYS = "repeated_keys", "stored_keys"


def per_message_groups(normalized: DataFrame) -> DataFrame:
    """`normalized` (:func:`~.operations.normalized_operations`) in the shape of
    :func:`~.fold.grouped_operations`, one row per message: its operation alone (none for a message that is no
    operation) and its own counts, so that summing over the rows gives the grouped counts."""
    from pyspark.sql import functions as F

    kind = F.col("_class")
    return normalized.select(
        F.col("table"),
        F.col("pk"),
        F.when(F.col("op").isNotNull(), F.array("op")).otherwise(F.array().cast(f"array<{OP_TYPE}>")).alias("ops"),
        F.lit(1).cast("long").alias("messages"),
        (kind == PYTHON).cast("long").alias("python"),
        (kind == OTHER).cast("long").alias("other"),
        F.when(kind == UNKNOWN_SID, F.array("_sid")).otherwise(F.array().cast("array<int>")).alias("unknown_sids"),
    )


def key_checks(normalized: DataFrame, stored: DataFrame | None) -> DataFrame:
    """Per table of `normalized`: :data:`REPEATED_KEYS` (keys with more than one operation, by key hash) and
    :data:`STORED_KEYS` (rows of `stored`, the batch's keys the target holds with at least ``table``; None: it holds
    none), null where there are none."""
    from pyspark.sql import functions as F

    keyed = normalized.where(F.col("table").isNotNull())
    repeated = (
        keyed.groupBy(F.col("table"), F.xxhash64("table", "pk").alias("_key_hash"))
        .agg(F.count(F.lit(1)).alias("_n"))
        .where(F.col("_n") > 1)
        .groupBy("table")
        .agg(F.count(F.lit(1)).alias(REPEATED_KEYS))
    )
    if stored is None:
        return repeated.withColumn(STORED_KEYS, F.lit(None).cast("long"))
    held = stored.groupBy("table").agg(F.count(F.lit(1)).alias(STORED_KEYS))
    return repeated.join(held, on="table", how="full")


@dataclass
class NewKeyPlanner:
    """Whether a batch tries the new-key path: while every table's last batch would have passed the checks (no key
    repeated, every changed row new, no operation stale), as in a first load, or the job has written none yet. A
    stream of updates or of keys that repeat within a batch then pays for one try at most."""

    #: Per table: whether its last batch would have passed the checks.
    clean: dict[str, bool] = field(default_factory=dict)

    def worth_trying(self, tables: Collection[str]) -> bool:
        return all(self.clean.get(table, True) for table in tables)

    def known_clean(self, table: str) -> bool:
        """Whether `table`'s last batch is known to have passed the checks (after a restart nothing is known): a
        batch that writes before it checks is tried only then, so a stream of updates never pays for its write."""
        return self.clean.get(table, False)

    def learn(self, clean: Mapping[str, bool]) -> None:
        """Note, per table of a batch just folded, whether it would have passed the checks."""
        self.clean.update(clean)
