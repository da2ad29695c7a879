"""Kafka tombstones (null RECORD_IMAGE values): with a seq an ordinary delete, without one never applied."""

from __future__ import annotations

from cdcbridge.apply.core import ColumnValue, TargetRow, decode_message, fold_batch, fold_row, tombstone_message
from tests.unit.apply.envelopes import PK, TABLE, image, seq_key


def tombstone(offset: int | None = None, seq: str | None = None) -> dict:
    return tombstone_message(TABLE, PK, topic="cdc.orders.image", partition=0, offset=offset, seq_key=seq)


def fold(messages, current=None):
    return fold_row(current, [decode_message(m) for m in messages])


LIVE = TargetRow(TABLE, PK, {"a": ColumnValue(1, 1)}, seq_key(1), False, 1)


def test_tombstone_message_decodes_to_a_seqless_row_delete():
    operation = decode_message(tombstone(offset=9))
    assert operation.tombstone and operation.row_deleted
    assert operation.seq_key is None
    assert operation.row_key == (TABLE, PK)
    assert operation.location.offset == 9


def test_seqless_tombstone_is_never_applied_but_counted():
    result = fold([tombstone(offset=5)], LIVE)
    assert not result.changed
    assert result.row is LIVE
    assert result.stats.tombstones_without_seq == 1
    after_image = fold([image(2, {"a": (2, 2)}, offset=3), tombstone(offset=4)], LIVE)
    assert not after_image.row.deleted
    assert after_image.stats.tombstones_without_seq == 1


def test_resent_tombstone_after_a_recreated_row_does_not_delete_it():
    """History: delete@1, put@2. The bridge restarts and re-sends from the tombstone (its checkpoint was the
    delete record's image), so the log reads  D@1 T | img@2 T' img@2'  and a batch may end right after T'."""
    log = [
        image(1, row_deleted=True, offset=0),
        tombstone(offset=1),
        image(2, {"a": (2, 2)}, offset=2),
        tombstone(offset=3),
        image(2, {"a": (2, 2)}, offset=4),
    ]
    target: dict = {}
    for batch in (log[:2], log[2:4], log[4:]):
        target.update(fold_batch(batch, target).rows)
    final = target[(TABLE, PK)]
    assert not final.deleted
    assert final.columns == {"a": ColumnValue(2, 2)}


def test_tombstone_with_seq_is_an_ordinary_delete():
    result = fold([tombstone(offset=8, seq=seq_key(4))], LIVE)
    assert result.row == TargetRow(TABLE, PK, {}, seq_key(4), True, 1)
    stale = fold([tombstone(offset=8, seq=seq_key(1))], LIVE)
    assert not stale.changed
    assert stale.stats.stale == 1


def test_tombstone_with_seq_never_changes_a_deleted_or_absent_row():
    deleted = TargetRow(TABLE, PK, {}, seq_key(2), True, 2)
    result = fold([tombstone(seq=seq_key(3))], deleted)
    assert not result.changed
    assert result.stats.tombstones_redundant == 1
    assert fold([tombstone(seq=seq_key(3))]).row is None


def test_tombstone_with_the_delete_images_seq_is_a_duplicate_of_it():
    result = fold([image(2, row_deleted=True), tombstone(seq=seq_key(2))], LIVE)
    assert result.row.deleted
    assert result.stats.duplicates == 1
