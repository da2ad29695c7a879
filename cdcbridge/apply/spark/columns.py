"""Column expressions a Spark job builds once and reuses in every micro-batch.

A batch's frames are new, but the expressions over them are the same from batch to batch until what they depend
on changes (a new schema id, a new key of a table). Building one is a call into the JVM per function, literal and
column name, hundreds per batch, a visible share of the driver's time per batch. An expression belongs to the JVM
that built it, so the cache is keyed by the Spark application as well.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")


class ColumnCache(Generic[T]):
    """The last `kept` built values by key, per Spark application."""

    def __init__(self, kept: int = 8) -> None:
        self.kept = kept
        self._built: dict[Hashable, T] = {}

    def get(self, spark: SparkSession, key: Hashable, build: Callable[[], T]) -> T:
        """The value built for `key` in `spark`'s application, built now if it is not kept."""
        full_key = (spark.sparkContext.applicationId, key)
        built = self._built.get(full_key)
        if built is None:
            built = build()
            while len(self._built) >= self.kept:
                self._built.pop(next(iter(self._built)))
            self._built[full_key] = built
        return built
