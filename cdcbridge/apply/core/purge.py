"""Remove soft-deleted rows once no redelivery can reach them any more.

A deleted row is kept (with its ``_seq``) so that a late redelivery of an older operation is recognised as stale
instead of re-creating the row. Once the Kafka retention (plus the longest replay the job may do, e.g. a restart
from an old checkpoint) has passed since the delete, nothing older can arrive and the row can go. Purge too early
and a late redelivery brings the row back. The horizon is computed from an injected ``now_ms`` so callers and
tests choose the clock. In a target the same predicate reads ``_deleted AND _source_ts < horizon``.
"""

from __future__ import annotations

from collections.abc import Iterable

from cdcbridge.apply.core.model import TargetRow
from cdcbridge.apply.errors import InvalidSettingError


def purge_horizon_ms(now_ms: int, retention_ms: int) -> int:
    """Deleted rows whose delete is older than this (ms) may be purged; `retention_ms` ≥ the Kafka retention."""
    if retention_ms < 0:
        raise InvalidSettingError(
            f"purge retention is {retention_ms} ms", fix="use a non-negative retention, at least the topic retention"
        )
    return now_ms - retention_ms


def is_purgeable(row: TargetRow, horizon_ms: int) -> bool:
    """A soft-deleted row whose delete happened before the horizon. Rows without ``_source_ts`` are kept."""
    return row.deleted and row.source_ts is not None and row.source_ts < horizon_ms


def purge_deleted(rows: Iterable[TargetRow], horizon_ms: int) -> tuple[list[TargetRow], list[TargetRow]]:
    """Split rows into (kept, purged)."""
    kept: list[TargetRow] = []
    purged: list[TargetRow] = []
    for row in rows:
        (purged if is_purgeable(row, horizon_ms) else kept).append(row)
    return kept, purged
