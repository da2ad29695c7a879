"""What the shard owners of one table know of its incremental snapshots: the open chunks of live exporters.

One :class:`SnapshotFences` per table per worker, shared by the table's shard processors. A view is only ever used
while the read it came from started at most `fence_refresh_seconds` (R) ago; older, it is read again first (one
range read), and if that read fails or itself takes R or longer there is no view (the caller holds every record:
producing one without knowing of a chunk announced since could put it after the snapshot's image). The exporter
announces a chunk at least R + m before its window starts, which is what makes this bound enough
(cdcbridge.snapshot.incremental_state, step 2).

An exporter is alive while its heartbeat keeps changing: the first time a worker sees a (exporter, heartbeat) pair
starts a timer on the worker's monotonic clock; once the pair has not changed for `exporter_timeout_seconds` the
exporter is dead and its chunk no longer holds anything. Comparing the heartbeat's wall time with this host's clock
instead would let clock skew judge a live exporter dead.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace

from cdcbridge.coordination.clock import Clock
from cdcbridge.snapshot.errors import SnapshotStateError
from cdcbridge.snapshot.incremental_state import (
    ChunkState,
    IncrementalChunk,
    IncrementalReport,
    IncrementalSnapshot,
    IncrementalSnapshotStore,
)

log = logging.getLogger(__name__)

#: A refresh failure is logged at most this often (the view is retried at every use).
_FAILURE_LOG_SECONDS = 30.0


@dataclass(frozen=True)
class FenceView:
    """The OPEN chunks of the table whose exporter is alive, as read at `read_at` (monotonic seconds)."""

    chunks: tuple[IncrementalChunk, ...]
    read_at: float


class SnapshotFences:
    """Thread-safe cache of one table's open chunks; also where the table's shard owners send their reports."""

    def __init__(
        self,
        store: IncrementalSnapshotStore,
        stream_id: str,
        table: str,
        *,
        refresh_seconds: float,
        exporter_timeout_seconds: float,
        clock: Clock,
    ) -> None:
        self._store = store
        self._stream_id = stream_id
        self._table = table
        self._refresh = refresh_seconds
        self._timeout = exporter_timeout_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._view: FenceView | None = None
        #: snapshot id → ((exporter id, heartbeat ms), monotonic time that pair was first seen).
        self._heartbeats: dict[str, tuple[tuple[str, int], float]] = {}
        self._failure_logged_at: float | None = None

    @property
    def table(self) -> str:
        return self._table

    def view(self) -> FenceView | None:
        """A view read at most R ago (read now if needed); None if the status table could not be read."""
        with self._lock:
            now = self.clock.monotonic()
            if self._view is not None and now - self._view.read_at < self._refresh:
                return self._view
            try:
                self._view = self._read(now)
                took = self.clock.monotonic() - now
                if took >= self._refresh:  # already too old to act on: an announcement may have been missed
                    raise SnapshotStateError(
                        f"reading them took {took:.1f}s, longer than snapshot.incremental.fence_refresh_seconds "
                        f"({self._refresh}s); raise it above the status table's read latency"
                    )
            except SnapshotStateError as error:
                self._view = None
                if self._failure_logged_at is None or now - self._failure_logged_at >= _FAILURE_LOG_SECONDS:
                    self._failure_logged_at = now
                    log.warning("table %s: cannot read its incremental snapshots, so its shards hold their records "
                                "until it can: %s", self._table, error)  # fmt: skip
            return self._view

    def report(self, report: IncrementalReport) -> None:
        """Store a shard owner's report, merged with one an earlier owner of the shard stored (its dirty keys rest
        on records the checkpoint has passed since, which this owner never saw). Raises SnapshotStateError; the
        owner tries again later."""
        earlier = [r for r in self._store.read_reports(report.stream_id, report.snapshot_id, report.chunk)
                   if r.shard_id == report.shard_id]  # fmt: skip
        if earlier:
            dirty = {tuple(v for _, v in key): key for key in (*earlier[0].dirty_keys, *report.dirty_keys)}
            report = replace(report, dirty_keys=tuple(dirty.values()),
                             epochs=tuple(sorted({*earlier[0].epochs, *report.epochs})))  # fmt: skip
        self._store.write_report(report)

    def _read(self, started: float) -> FenceView:
        listed, all_chunks = self._store.snapshots_and_chunks(self._stream_id, self._table)
        snapshots = {s.snapshot_id: s for s in listed}
        live = {snapshot_id for snapshot_id, s in snapshots.items() if not s.state.finished and self._alive(s, started)}
        for gone in set(self._heartbeats) - set(snapshots):
            del self._heartbeats[gone]
        chunks = tuple(c for c in all_chunks if c.state is ChunkState.OPEN and c.snapshot_id in live)
        return FenceView(chunks, started)

    def _alive(self, snapshot: IncrementalSnapshot, now: float) -> bool:
        if not snapshot.exporter_id:
            return False
        pair = (snapshot.exporter_id, snapshot.heartbeat_ms)
        seen = self._heartbeats.get(snapshot.snapshot_id)
        if seen is None or seen[0] != pair:
            self._heartbeats[snapshot.snapshot_id] = (pair, now)
            return True
        return now - seen[1] < self._timeout
