"""The target interface: where folded rows go. One small class per store (Delta, PostgreSQL, Tablestore).

Per micro-batch the job asks a target for the batch marker of each table (skip a table the batch already
reached), reads the current rows of the batch's keys, folds, lets the target refuse rows it cannot store (e.g. a
type conflict in a typed column), then hands it one :class:`TargetBatch` to write with the guard: a row is
written only if its ``_seq`` is greater than the stored one (or nothing is stored), so a concurrent or repeated
writer can never move a row backwards. The rows, the dead letters and the marker of a table go in one atomic
unit (a Delta commit, a PostgreSQL transaction); a target that has no such unit (Tablestore) writes the marker
last and relies on the guard for a batch cut short.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdcbridge.apply.core.fold import ApplyStats
from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.model import PrimaryKey, TargetRow
from cdcbridge.apply.core.policy import DeadLetter

if TYPE_CHECKING:
    import numpy as np
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class FoldedTable:
    """One table of a folded batch: the counts, what its changed rows look like, and the rows themselves
    (``pk``, ``row``: :data:`~cdcbridge.apply.spark.fold.STATE_TYPE`, ``file``: the target file holding the
    row, null for a new row, and ``file_row``: the row's index in it), to be written with the guard."""

    table: str
    stats: ApplyStats
    columns: frozenset[tuple[str, str]]
    pk_signatures: frozenset[tuple[tuple[str, str], ...]]
    case_conflicts: int
    errors: int
    source_ts_quantiles: tuple[int, ...]
    rows: DataFrame
    #: The target files holding the changed rows, for a target whose current rows name them (``file``).
    files: frozenset[str] = frozenset()
    #: How many of the changed rows the target does not hold yet (no ``file``; all of them for a target that names
    #: no files).
    rows_new: int = 0
    #: How many of the table's keys have more than one message in the batch.
    keys_repeated: int = 0

    @property
    def only_new_keys(self) -> bool:
        """Whether each key had one message and every changed row is new, nothing stale: what the new-key path
        (:mod:`cdcbridge.apply.spark.new_keys`) takes."""
        return self.keys_repeated == 0 and self.rows_new == self.rows_changed and self.stats.stale == 0

    @property
    def rows_changed(self) -> int:
        return self.stats.rows_changed


@dataclass(frozen=True)
class TargetBatch:
    """What one micro-batch writes: changed rows per table, dead letters, and the marker to store with them."""

    marker: BatchMarker
    rows: Mapping[str, Sequence[TargetRow]] = field(default_factory=dict)
    dead_letters: Sequence[DeadLetter] = ()


class ApplyTarget(ABC):
    """A store the apply job writes to (see the module docstring for the protocol)."""

    #: Short name used in logs and the summary.
    name = "target"

    def prepare(self, tables: Collection[str]) -> None:  # noqa: B027 - optional hook
        """Connect and create what does not depend on the data (progress tables); called once at start."""

    @abstractmethod
    def read_marker(self, table: str, app_id: str) -> BatchMarker | None:
        """The last batch of `app_id` committed for `table` (a target with one marker for all tables ignores
        `table`), or None."""

    @abstractmethod
    def read_rows(self, table: str, keys: Collection[PrimaryKey]) -> dict[PrimaryKey, TargetRow]:
        """The stored rows among `keys` (soft-deleted rows included); absent keys are left out."""

    @abstractmethod
    def write(self, batch: TargetBatch) -> int:
        """Write the batch with the ``_seq`` guard, its dead letters and its marker; returns rows written."""

    def pk_names(self, table: str) -> tuple[str, ...] | None:
        """Primary-key column names of `table` if the target already holds it (names a bare tombstone's key)."""
        return None

    def refused_rows(self, table: str, rows: Sequence[TargetRow]) -> dict[PrimaryKey, str]:
        """Rows the target cannot store, with the reason (default: it stores any row)."""
        return {}

    def purge_deleted(self, table: str, horizon_ms: int) -> int:
        """Remove soft-deleted rows whose delete is older than `horizon_ms`; returns how many (default: none)."""
        return 0

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class PendingAppend(ABC):
    """A table's changed rows written by the job that folded them, not committed yet: committed once the batch's
    summary and key checks pass, dropped otherwise (see :meth:`SparkFoldTarget.pending_append`)."""

    @abstractmethod
    def written_in_full(self, folded: FoldedTable) -> bool:
        """Whether the table took every changed row of `folded` as it is: no new column, none refused."""

    @abstractmethod
    def stored_keys(self) -> int:
        """How many written rows share their key with a row the table holds (keys repeated within the batch are
        the caller's to check: it sees every message, the written rows only the changed ones)."""

    @abstractmethod
    def commit(self, marker: BatchMarker) -> None:
        """Commit the written rows under `marker`."""

    @abstractmethod
    def drop(self) -> None:
        """Remove the written rows; nothing of them is visible."""


class SparkFoldTarget(ApplyTarget):
    """A target the Spark path (:mod:`cdcbridge.apply.spark.batch`) can feed: it hands its current rows to
    Spark as a frame and takes folded rows as one, so no row passes through Python one by one. The reference
    path (:meth:`read_rows` / :meth:`write`) stays for batches the Spark path leaves to it."""

    @abstractmethod
    def current_rows(
        self, tables: Collection[str], grouped: DataFrame, keys_at_most: int | None = None
    ) -> DataFrame | None:
        """The stored rows of `tables` as ``table``, ``pk``, ``cur`` (:data:`~cdcbridge.apply.spark.fold.
        STATE_TYPE`) and optionally ``file`` (the file holding the row), at least those whose (table, pk) is in
        `grouped` (the batch's rows); None if the target holds none of the tables. Lazy where it can be: Spark
        evaluates it inside the fold's job. `keys_at_most`: a bound on the batch's keys when known (its
        messages), so a target need not count them."""

    def stored_among(self, tables: Collection[str], keys: DataFrame) -> DataFrame | None:
        """The rows of `keys` (``table``, ``pk``) whose key the target holds in `tables`, with at least ``table``;
        None if it holds none of the tables. Default: matched against :meth:`current_rows`; a target that can
        match its key columns alone does that instead."""
        current = self.current_rows(tables, keys)
        if current is None:
            return None
        return current.select("table", "pk").join(keys, on=["table", "pk"], how="left_semi")

    @abstractmethod
    def refusal(self, folded: FoldedTable) -> str | None:
        """Why some changed row of `folded` might not be storable (then the batch takes the reference path,
        which refuses rows one by one), or None."""

    @abstractmethod
    def write_folded(self, marker: BatchMarker, tables: Mapping[str, FoldedTable]) -> dict[str, int]:
        """Write every table's changed rows with the ``_seq`` guard and the marker; rows written per table."""

    def pending_append(self, table: str, rows: DataFrame, key_hashes: Callable[[], np.ndarray]) -> PendingAppend | None:
        """`rows` (changed rows of `table` with new keys, as :attr:`FoldedTable.rows`) written in the table's
        current columns but not committed, so the job that folds them writes them too; None (nothing written) if
        the target cannot, e.g. the table does not exist yet. `key_hashes`, once `rows` were written: the sorted
        hashes (:func:`~cdcbridge.apply.spark.fold.message_key_hash`) of the keys of every message of the batch,
        the written rows' among them. Default: it cannot."""
        return None

    def creates_when_written_first(self, table: str) -> bool:
        """Whether `table` does not exist yet and :meth:`pending_create` may write it first. Default: no."""
        return False

    def pending_create(
        self,
        table: str,
        rows: DataFrame,
        key_hashes: Callable[[], np.ndarray],
        columns: frozenset[tuple[str, str]],
        pk_signatures: frozenset[tuple[tuple[str, str], ...]],
    ) -> PendingAppend | None:
        """As :meth:`pending_append`, into a table that does not exist yet, made with the primary key and columns
        (name, type) a sample of the batch shows; the commit creates it. None (nothing written) if the target
        cannot, or the sample does not make a table. Default: it cannot."""
        return None
