"""What a table's snapshot means for the bridge workers that stream it.

- While the snapshot runs, the workers produce nothing for the table. The apply guard keeps, per row, only
  operations newer than the last one applied, and snapshot images sort before every stream record; so a stream
  message that reached Kafka before the row's image would make the image stale and the row would miss the columns
  the stream never touched. A worker that starts while a snapshot runs waits (:func:`wait_for_snapshots`); a
  processor that finds one running refuses to start (:class:`~cdcbridge.snapshot.errors.SnapshotInProgressError`),
  and `cdcbridge snapshot` refuses to begin while a worker holds a live lease of the table.
- Once it is done, records committed before its start (T0) are covered by the export: the processor checkpoints
  them as handled without producing anything. Records from T0 on are produced and replayed onto the images.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from cdcbridge.snapshot.errors import SnapshotInProgressError
from cdcbridge.snapshot.state import SnapshotState, SnapshotStateStore

log = logging.getLogger(__name__)


class StreamStartReader:
    """Called when a shard's processor starts: the table's stream start in µs, or None to produce every record."""

    def __init__(self, store: SnapshotStateStore, stream_id: str, table: str) -> None:
        self._store = store
        self._stream_id = stream_id
        self._table = table

    def __call__(self) -> int | None:
        record = self._store.read(self._stream_id, self._table)
        if record is None:
            return None
        if record.state is SnapshotState.RUNNING:
            raise SnapshotInProgressError(
                f"the snapshot of table {self._table} is still running; its stream records are produced once it "
                "is done (run `cdcbridge snapshot` again if it was interrupted)"
            )
        return record.start_us


def running_snapshot_progress(store: SnapshotStateStore, stream_id: str, table: str) -> str | None:
    """A one-line description of the table's running snapshot, or None when none runs."""
    record = store.read(stream_id, table)
    if record is None or record.state is not SnapshotState.RUNNING:
        return None
    ranges = store.read_ranges(stream_id)
    done = sum(1 for progress in ranges if progress.done)
    rows = sum(progress.rows for progress in ranges)
    return f"{done}/{record.ranges if record.ranges is not None else '?'} ranges, {rows:,} rows exported"


def wait_for_snapshots(
    store: SnapshotStateStore, tables: Sequence[tuple[str, str]], stop: threading.Event, poll_seconds: float
) -> bool:
    """Block while any of `tables` ((table, stream id) pairs) has a running snapshot; False if `stop` came first."""
    while True:
        running = {}
        for table, stream_id in tables:
            progress = running_snapshot_progress(store, stream_id, table)
            if progress is not None:
                running[table] = progress
        if not running:
            return True
        for table, progress in running.items():
            log.info("waiting for the snapshot of table %s to finish (%s)", table, progress)
        if stop.wait(poll_seconds):
            return False
