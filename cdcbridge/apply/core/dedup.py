"""Drop redelivered messages inside a batch and group the rest by target row.

Kafka delivers at least once and the bridge re-sends after a restart, so one operation may appear several times
in a batch. Its identity is (table, pk, seq_key): the first occurrence in input order is kept. Redeliveries that
cross batch boundaries are left to the guard (:mod:`cdcbridge.apply.core.guard`). Tombstones without a seq have no
identity and pass through untouched (:mod:`cdcbridge.apply.core.tombstones` drops them).

The same key works as Spark ``dropDuplicates(["table", "pk_key", "seq_key"])`` before the shuffle, which is
cheaper on large batches; the fold dedups again, so doing both is harmless.
"""

from __future__ import annotations

from collections.abc import Iterable

from cdcbridge.apply.core.model import PrimaryKey, RowKey
from cdcbridge.apply.core.operations import Operation

DedupKey = tuple[str, PrimaryKey, str]


def dedup_key(operation: Operation) -> DedupKey | None:
    """(table, pk, seq_key), or None for a tombstone without seq (never deduplicated)."""
    if operation.seq_key is None:
        return None
    return (operation.table, operation.pk, operation.seq_key)


def dedup_operations(operations: Iterable[Operation]) -> tuple[list[Operation], int]:
    """The operations without redeliveries (first occurrence kept, input order preserved), and how many were
    dropped."""
    seen: set[DedupKey] = set()
    unique: list[Operation] = []
    dropped = 0
    for operation in operations:
        key = dedup_key(operation)
        if key is not None:
            if key in seen:
                dropped += 1
                continue
            seen.add(key)
        unique.append(operation)
    return unique, dropped


def group_by_row(operations: Iterable[Operation]) -> dict[RowKey, list[Operation]]:
    """Operations per target row, each list in input order."""
    groups: dict[RowKey, list[Operation]] = {}
    for operation in operations:
        groups.setdefault(operation.row_key, []).append(operation)
    return groups
