"""Batch idempotence marker and the purge of soft-deleted rows."""

from __future__ import annotations

import pytest

from cdcbridge.apply.core import (
    BatchMarker,
    InvalidBatchMarkerError,
    InvalidSettingError,
    TargetRow,
    batch_already_applied,
    is_purgeable,
    purge_deleted,
    purge_horizon_ms,
)
from tests.unit.apply.envelopes import PK, TABLE


def test_no_marker_means_not_applied():
    assert not batch_already_applied(None, "app", 0)


def test_batches_up_to_the_stored_one_are_applied():
    stored = BatchMarker("app", 7)
    assert batch_already_applied(stored, "app", 7)
    assert batch_already_applied(stored, "app", 3)
    assert not batch_already_applied(stored, "app", 8)


def test_a_marker_of_another_app_says_nothing():
    assert not batch_already_applied(BatchMarker("old-checkpoint", 99), "app", 0)


@pytest.mark.parametrize(("app_id", "batch_id"), [("", 1), ("app", -1), ("app", True), ("app", 1.0)])
def test_malformed_markers_are_refused(app_id, batch_id):
    with pytest.raises(InvalidBatchMarkerError):
        batch_already_applied(None, app_id, batch_id)


def _row(deleted: bool, source_ts: int | None) -> TargetRow:
    return TargetRow(TABLE, PK, {}, "0" * 46, deleted, source_ts)


def test_only_deleted_rows_older_than_the_horizon_are_purged():
    horizon = purge_horizon_ms(now_ms=10_000, retention_ms=3_000)
    assert horizon == 7_000
    old_deleted, new_deleted = _row(True, 6_999), _row(True, 7_000)
    old_live, unknown_age = _row(False, 1), _row(True, None)
    kept, purged = purge_deleted([old_deleted, new_deleted, old_live, unknown_age], horizon)
    assert purged == [old_deleted]
    assert kept == [new_deleted, old_live, unknown_age]
    assert is_purgeable(old_deleted, horizon) and not is_purgeable(old_live, horizon)


def test_negative_retention_is_refused():
    with pytest.raises(InvalidSettingError, match="retention"):
        purge_horizon_ms(now_ms=0, retention_ms=-1)
