"""`on_trimmed: resnapshot`: the incremental snapshot that repairs a shard's trimmed records.

Tablestore's stream API does not expose a shard's key range (ListStream / DescribeStream name shards and their
parents, not the keys they hold), so "the shard's range" is not knowable: the snapshot covers the whole table. One
request per shard and trim, not one per retry or per worker: its id is derived from the table, the shard and the
checkpoint the trim was met at, and the request is a conditional put, so a retry, or the next owner after a crash,
finds the same row. No new request is needed while a whole-table snapshot of the table is still PENDING: none of its
chunks has been read yet, so each will be read after every lost change (those committed before the trim was met).
A RUNNING one is not enough: its chunks already emitted may have been read before the lost changes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from cdcbridge.coordination.trim_policy import TrimmedRead
from cdcbridge.snapshot.errors import SnapshotConflictError
from cdcbridge.snapshot.incremental_state import IncrementalSnapshotStore, IncrementalState, RequestedBy


def repair_id(table: str, trimmed: TrimmedRead) -> str:
    """The same id for the same shard and trim (the checkpoint it was met at); ids sort by the checkpoint's time."""
    checkpoint = trimmed.checkpoint_seq.to_text() if trimmed.checkpoint_seq is not None else "start"
    millis = trimmed.checkpoint_seq.sequence.timestamp_us // 1000 if trimmed.checkpoint_seq is not None else 0
    digest = hashlib.sha256(f"{table}/{trimmed.shard_id}/{checkpoint}".encode()).hexdigest()[:10]
    return f"{millis:013d}-trim-{digest}"


class TrimRepair:
    """Requests (or finds) the incremental snapshot that repairs one trim of one table's shard."""

    def __init__(self, store: IncrementalSnapshotStore, stream_id: str, table: str,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self._store = store
        self._stream_id = stream_id
        self._table = table
        self._clock = clock

    def request(self, trimmed: TrimmedRead) -> tuple[str, bool]:
        """The repairing snapshot's id, and whether this call requested it (False: it existed already). Raises
        SnapshotError if the status table cannot be read or written (the shard then waits and asks again)."""
        wanted = repair_id(self._table, trimmed)
        pending = None
        for snapshot in self._store.list_snapshots(self._stream_id, self._table):
            if snapshot.snapshot_id == wanted:
                return wanted, False
            whole = snapshot.begin is None and snapshot.end is None
            if pending is None and whole and snapshot.state is IncrementalState.PENDING and not snapshot.exporter_id:
                pending = snapshot.snapshot_id
        if pending is not None:
            return pending, False
        try:
            self._store.request(self._stream_id, self._table, now_ms=int(self._clock() * 1000),
                                requested_by=RequestedBy.TRIM, snapshot_id=wanted)  # fmt: skip
        except SnapshotConflictError:  # another worker met the same trim a moment ago
            return wanted, False
        return wanted, True
