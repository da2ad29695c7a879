"""A Delta table's new rows written by the job that decodes and folds them, then checked, then committed or dropped.

Why: a batch of new keys (a first load) is otherwise decoded and checked in one Spark job and written from the
cache in another. Written first, it is read from Kafka once; what must hold before it is committed is checked
afterwards: the batch's shape against the columns it was written in (:meth:`DeltaPendingAppend.written_in_full`),
and its keys, from the written files' key columns alone, against the table's (:meth:`DeltaPendingAppend.stored_keys`;
keys repeated within the batch are observed while it is written). A batch that fails either is dropped (its files
deleted, no commit names them) and takes the job's other paths. A write of no row leaves one empty file no commit
names, as Delta's own writes do (its write returns no entry for it, so it is not dropped); ``VACUUM`` removes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.target import FoldedTable, PendingAppend
from cdcbridge.apply.targets.column_types import quote
from cdcbridge.apply.targets.delta_key_hashes import held

if TYPE_CHECKING:
    import numpy as np
    from pyspark.sql import DataFrame, SparkSession

    from cdcbridge.apply.targets.delta_located_write import PendingFiles


@dataclass(frozen=True)
class KnownKeys:
    """The hashes of every key the table holds at the files' version, and of the written keys (sorted:
    :mod:`.delta_key_hashes`)."""

    stored: np.ndarray
    written: np.ndarray


class DeltaPendingAppend(PendingAppend):
    """New rows of a Delta table (primary key `pk`: name → Spark type) in `files`; `stored`: the table's rows at the
    files' version that may hold a written key (None: none may); `known`: the key hashes, when the job knows every
    key of the table (then `stored` is not read); `takes`: the target's judgement of :meth:`written_in_full`;
    `committed`: called with the marker and the version of the commit."""

    def __init__(
        self,
        spark: SparkSession,
        pk: Mapping[str, str],
        files: PendingFiles,
        *,
        stored: DataFrame | None,
        known: KnownKeys | None = None,
        takes: Callable[[FoldedTable], bool],
        committed: Callable[[BatchMarker, int], None],
    ) -> None:
        self.spark = spark
        self.pk = dict(pk)
        self.files = files
        self.stored = stored
        self.known = known
        self._takes = takes
        self._committed = committed

    def written_in_full(self, folded: FoldedTable) -> bool:
        return self._takes(folded)

    def stored_keys(self) -> int:
        """Looked up in the known key hashes, if any; else the stored keys streamed past the written ones,
        broadcast, as the fold's read does: no job when no stored file's key bounds meet the written files'."""
        from pyspark.sql import functions as F

        if self.known is not None:
            return held(self.known.stored, self.known.written)
        paths = self.files.paths
        if not paths or self.stored is None:
            return 0
        names = list(self.pk)
        keys = [F.col(quote(name)) for name in names]
        written = self.spark.read.parquet(*paths).select(*keys)
        return self.stored.select(*keys).join(F.broadcast(written), on=names, how="left_semi").count()

    def commit(self, marker: BatchMarker) -> None:
        self._committed(marker, self.files.commit_append(marker))

    def drop(self) -> None:
        self.files.drop()
