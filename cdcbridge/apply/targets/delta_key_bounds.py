"""Which files of a Delta table may hold given primary keys, known on the driver without a Spark job.

A Spark read of a Delta table first rebuilds the file list of the table's latest version with several Spark jobs
(checkpoint plus commits), and a micro-batch commits a new version each time, so every small batch paid that
rebuild just to learn that its new keys are stored nowhere. Here the file list, with each file's key bounds (the
min/max statistics Delta writes for each file), is built once and then brought forward commit by commit from the
log's JSON entries (``DeltaLog.getChanges``, read on the driver): a batch whose keys lie outside every file's bounds
is known to be new without a job.

Each file's add action is kept as well, so that the driver's read of a small batch's stored rows hands Delta's reader
exactly the files that may hold them, and its commit by position those files' entries, without the table's state
(which Delta rebuilds with Spark jobs for each new version).

The bounds are conservative: a file without statistics, a key column without them (binary) or a string bound
Delta may have truncated (:data:`STRING_PREFIX_LENGTH`) counts as able to hold any key. Deletion vectors do not
matter: they only remove rows, and a bound that still covers a deleted row is merely wide.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdcbridge.apply.core.model import PkValue, PrimaryKey

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Delta truncates string statistics to this many characters (``dataSkippingStringPrefixLength``); a bound that
#: long may be a prefix, so it bounds nothing here.
STRING_PREFIX_LENGTH = 32
_FILE_ACTIONS = ('{"add"', '{"remove"')


@dataclass(frozen=True, slots=True)
class KeyBounds:
    """Per primary-key column, the (min, max) of one file's values, or None where the file says nothing usable."""

    columns: Mapping[str, tuple[PkValue, PkValue] | None]

    def may_hold(self, key: PrimaryKey) -> bool:
        for name, value in key:
            bounds = self.columns.get(name)
            if bounds is None or value is None:
                continue
            low, high = bounds
            try:
                if value < low or value > high:  # type: ignore[operator]
                    return False
            except TypeError:  # a value of another type than the column's statistics: no conclusion
                continue
        return True

    def overlaps(self, other: KeyBounds | None) -> bool:
        """Whether a file of these bounds and one of `other` may hold a key in common (None: any key)."""
        if other is None:
            return True
        for name, bounds in self.columns.items():
            theirs = other.columns.get(name)
            if bounds is None or theirs is None:
                continue
            try:
                if bounds[1] < theirs[0] or theirs[1] < bounds[0]:  # type: ignore[operator]
                    return False
            except TypeError:  # bounds of two types: no conclusion
                continue
        return True


def key_bounds(stats: str | None, pk_names: Sequence[str]) -> KeyBounds | None:
    """A file's key bounds from its ``stats`` JSON (None: no statistics, so the file may hold any key)."""
    if not stats:
        return None
    try:
        parsed = json.loads(stats)
    except ValueError:
        return None
    lows, highs = parsed.get("minValues") or {}, parsed.get("maxValues") or {}
    columns: dict[str, tuple[PkValue, PkValue] | None] = {}
    for name in pk_names:
        low, high = lows.get(name), highs.get(name)
        columns[name] = (low, high) if _usable(low) and _usable(high) else None
    return KeyBounds(columns)


def _usable(bound: Any) -> bool:
    if isinstance(bound, bool):
        return False
    if isinstance(bound, int):
        return True
    return isinstance(bound, str) and len(bound) < STRING_PREFIX_LENGTH


def _may_hold_one(bounds: KeyBounds | None, keys: Collection[PrimaryKey]) -> bool:
    """Whether a file of these bounds may hold one of `keys` (a file without bounds may hold any)."""
    return bounds is None or any(map(bounds.may_hold, keys))


@dataclass
class TableFiles:
    """One table's files at `version`: path → key bounds (None: unbounded), path → size in bytes, and path → its
    add action as JSON (what Delta needs to read the file or mark rows in it: deletion vector, statistics, tags)."""

    version: int
    files: dict[str, KeyBounds | None]
    sizes: dict[str, int] = field(default_factory=dict)
    adds: dict[str, str] = field(default_factory=dict)

    @property
    def size_bytes(self) -> int:
        return sum(self.sizes.values())

    def may_hold_any(self, keys: Collection[PrimaryKey]) -> bool:
        return any(_may_hold_one(bounds, keys) for bounds in self.files.values())

    def holding(self, keys: Collection[PrimaryKey]) -> list[str]:
        """The files whose bounds may hold one of `keys`."""
        return [path for path, bounds in self.files.items() if _may_hold_one(bounds, keys)]

    def overlapping(self, others: Collection[KeyBounds | None]) -> list[str]:
        """The files that may hold a key in common with a file of one of `others`' bounds."""
        return [
            path
            for path, bounds in self.files.items()
            if any(bounds is None or bounds.overlaps(other) for other in others)
        ]

    def apply_actions(self, actions: Sequence[Mapping[str, Any]], pk_names: Sequence[str]) -> None:
        """One commit's actions: its removes first, then its adds (a deletion-vector update removes and re-adds
        the same path in one commit)."""
        for action in actions:
            removed = action.get("remove")
            if removed is not None:
                self.files.pop(removed["path"], None)
                self.sizes.pop(removed["path"], None)
                self.adds.pop(removed["path"], None)
        for action in actions:
            added = action.get("add")
            if added is not None:
                self.add(added, pk_names)

    def add(self, added: Mapping[str, Any], pk_names: Sequence[str]) -> None:
        """One file's add action (its fields, as the log holds them)."""
        path = added["path"]
        self.files[path] = key_bounds(added.get("stats"), pk_names)
        self.sizes[path] = int(added.get("size") or 0)
        self.adds[path] = json.dumps({"add": dict(added)})


class DeltaKeyBounds:
    """The driver's file lists with key bounds, per table path, kept at the latest version asked for."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._tables: dict[str, TableFiles] = {}

    def files(self, path: str, snapshot: Any, pk_names: Sequence[str]) -> TableFiles:
        """The files of `snapshot` (the table's latest Delta snapshot, a JVM object) with their key bounds."""
        version = int(snapshot.version())
        known = self._tables.get(path)
        if known is not None and known.version < version:
            try:
                self._bring_forward(known, snapshot, pk_names)
            except Exception as error:  # a commit the log no longer holds (cleaned up), or one we cannot read
                log.info("rebuilding the file list of %s at version %d: %s", path, version, error)
                known = None
        if known is None or known.version != version:
            known = self._rebuild(snapshot, pk_names)
        self._tables[path] = known
        return known

    def _bring_forward(self, known: TableFiles, snapshot: Any, pk_names: Sequence[str]) -> None:
        version = int(snapshot.version())
        changes = snapshot.deltaLog().getChanges(known.version + 1, version, True)
        while changes.hasNext():
            entry = changes.next()
            commit = int(entry._1())
            if commit != known.version + 1:
                raise LookupError(f"commit {known.version + 1} is missing from the log (next is {commit})")
            seq = entry._2()
            texts = (seq.apply(i).json() for i in range(seq.size()))
            # Only file actions are read: others need not be valid JSON (a commitInfo's parameters are not).
            known.apply_actions([json.loads(text) for text in texts if text.startswith(_FILE_ACTIONS)], pk_names)
            known.version = commit
        if known.version != version:
            raise LookupError(f"the log ends at commit {known.version}, not {version}")

    def _rebuild(self, snapshot: Any, pk_names: Sequence[str]) -> TableFiles:
        """The whole file list of `snapshot`: one rebuild of its state (the Spark jobs every read paid before)."""
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        files = DataFrame(snapshot.allFiles().toDF(), self.spark).select(F.to_json(F.struct("*"))).collect()
        table = TableFiles(int(snapshot.version()), {})
        for (text,) in files:
            table.add(json.loads(text), pk_names)
        return table
