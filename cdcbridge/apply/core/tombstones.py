"""Kafka tombstones (null RECORD_IMAGE values): why one without a seq changes nothing.

The bridge writes a tombstone right after the ``row_deleted`` image of the same key, so that log compaction can
drop the key. The ``row_deleted`` image carries the delete's seq and does the deleting. A tombstone has no seq
of its own, and its position in Kafka does not give one: the bridge checkpoints by sub-sequence, so after a
restart it may re-send starting at a tombstone. An old tombstone can then land right after a newer image of the
re-created row, e.g. ``image@2 | tombstone(of delete@1) image@2`` with a batch boundary between the two.
Deleting on it would lose a live row for good (the re-sent image@2 is stale once the row's ``_seq`` moved on).
So:

- a tombstone WITH a seq (the job passes ``seq_key`` to ``tombstone_message``, e.g. read from a message header)
  is an ordinary row delete, judged by the guard; it never changes a row already deleted or absent;
- a tombstone WITHOUT a seq is dropped and counted (``ApplyStats.tombstones_without_seq``), never applied.

What this misses: a consumer that lags behind log compaction, which removed the ``row_deleted`` image and kept
the tombstone, keeps the row. Keep the apply lag below the image topic's ``min.compaction.lag.ms``, or have the
bridge send the delete's seq_key in a tombstone header and pass it through.
"""

from __future__ import annotations

from collections.abc import Iterable

from cdcbridge.apply.core.operations import Operation


def is_seqless_tombstone(operation: Operation) -> bool:
    return operation.tombstone and operation.seq_key is None


def drop_seqless_tombstones(operations: Iterable[Operation]) -> tuple[list[Operation], int]:
    """The operations without seq-less tombstones, and how many were dropped."""
    kept: list[Operation] = []
    dropped = 0
    for operation in operations:
        if is_seqless_tombstone(operation):
            dropped += 1
        else:
            kept.append(operation)
    return kept, dropped
