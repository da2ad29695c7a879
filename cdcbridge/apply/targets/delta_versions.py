"""A Delta row's cell versions as the ``_versions`` column stores them: compact, with the row's most common version
under the empty key and only the cells of another version (or of none, as null) by name.

Why: the fold reads ``_versions`` of every stored row a batch's keys may lie in, which for random keys is the
whole table, and a map of one entry per cell was about a seventh of that scan (see ``benchmarks/history.md``).
Most rows hold few distinct versions: a row written whole holds one. The empty key names no column (Tablestore
column names are never empty), and a map without it is read as before: a map written by an earlier version of the
job, with every versioned cell by name, means the same in both readings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from cdcbridge.apply.core.model import ColumnValue
from cdcbridge.apply.spark.kernel import KernelFunction

#: The key of the row's most common version in ``_versions``.
COMMON_VERSION_KEY = ""
#: The compact map from a folded row's ``cols`` (:data:`~cdcbridge.apply.spark.fold.COLUMNS_TYPE`), compiled:
#: deploy/spark/src/main/java/io/cdcbridge/spark/RowVersions.java, the same rule as :func:`stored_versions`.
ROW_VERSIONS = KernelFunction("cdcbridge_row_versions", "io.cdcbridge.spark.RowVersions", "map<string,bigint>")


def stored_versions(columns: Mapping[str, ColumnValue]) -> dict[str, int | None]:
    """`columns`' versions as ``_versions`` stores them: the most common version (the newest of equally common
    ones) under :data:`COMMON_VERSION_KEY`, and each cell whose version differs from it by name; empty when no
    cell has a version."""
    counts = Counter(cell.version for cell in columns.values() if cell.version is not None)
    if not counts:
        return {}
    common = max(counts, key=lambda version: (counts[version], version))
    versions: dict[str, int | None] = {COMMON_VERSION_KEY: common}
    versions.update({name: cell.version for name, cell in columns.items() if cell.version != common})
    return versions


def cell_version(versions: Mapping[str, int | None], column: str) -> int | None:
    """The version of `column` in a stored ``_versions`` map: its own entry, else the row's common version, else
    none."""
    if column in versions:
        return versions[column]
    return versions.get(COMMON_VERSION_KEY)
