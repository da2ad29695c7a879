"""The (app id, batch id) marker that makes a re-run micro-batch a no-op.

Spark re-runs a failed ``foreachBatch`` with the same batch id and the same offsets. A target writes the marker
in the same transaction as the batch's rows (Delta ``txn`` action: appId + version; PostgreSQL: a progress
row), so before writing a batch it asks whether that batch is already in. Batch ids grow per checkpoint
location, so the stored marker is the last batch id committed for the app id, and any id up to it is done (Delta's
rule). A new checkpoint location restarts batch ids at 0 and needs a new app id; otherwise its first batches
would be skipped. The seq guard still protects a target that cannot store a marker atomically.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdcbridge.apply.errors import InvalidBatchMarkerError


@dataclass(frozen=True, slots=True)
class BatchMarker:
    """The last batch committed to a target by one apply job (app id = one checkpoint location)."""

    app_id: str
    batch_id: int

    def __post_init__(self) -> None:
        if not isinstance(self.app_id, str) or not self.app_id:
            raise InvalidBatchMarkerError(f"batch marker app id is {self.app_id!r}")
        if isinstance(self.batch_id, bool) or not isinstance(self.batch_id, int) or self.batch_id < 0:
            raise InvalidBatchMarkerError(f"batch marker batch id is {self.batch_id!r}")


def batch_already_applied(stored: BatchMarker | None, app_id: str, batch_id: int) -> bool:
    """Whether batch `batch_id` of `app_id` is already in a target whose stored marker is `stored`.

    `stored` is the marker the target holds for this app id (None if it has none). A marker of another app id
    says nothing about this one, so it gives False.
    """
    current = BatchMarker(app_id, batch_id)
    if stored is None or stored.app_id != current.app_id:
        return False
    return current.batch_id <= stored.batch_id
