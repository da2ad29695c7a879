"""One shard owner's part in an incremental snapshot's chunk (cdcbridge.snapshot.incremental_state): dirty keys,
passing the fence, the report, and the hold.

For every OPEN chunk of a live exporter, in shard order:

- a record of a key in the chunk committed in its window [W, F] (from W on while the fence is not set yet) makes the
  key dirty: the exporter leaves it out and re-reads it alone later;
- the shard has *passed* F once a record committed after F comes (or an empty read at a local time after F + m);
  the report is sent once every record before that point is acknowledged by Kafka;
- a record of a key in the chunk committed after F is held, with every record after it (shard order), until the
  chunk is EMITTED or ABANDONED or its exporter is dead: its message must follow the snapshot's image;
- until the shard's first report on the chunk is stored, the checkpoint stays before the first record that made a
  key dirty: the dirty keys live in this processor's memory only, so a successor (after a crash or a lease move)
  must read those records again to know them. A report stored once is merged into, never replaced;
- at the shard's end every open chunk is passed (no record can follow) and reported before the end is checkpointed:
  a finished shard is not waited for, so its dirty keys must be stored by then.

The rules are here, without threads, Kafka or the status table: the processor feeds records, acknowledged positions
and the view of :class:`~cdcbridge.snapshot.fences.SnapshotFences`, and sends what comes out.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from cdcbridge.bridge.acks import ConfirmedPosition
from cdcbridge.changes import ChangeRecord, Sequence, format_time_us
from cdcbridge.snapshot.fences import FenceView
from cdcbridge.snapshot.incremental_state import IncrementalChunk, IncrementalReport
from cdcbridge.snapshot.key_bounds import KeyBound, describe_bound

log = logging.getLogger(__name__)

ChunkId = tuple[str, int]


@dataclass
class _Watched:
    chunk: IncrementalChunk
    dirty: dict[tuple[Any, ...], KeyBound] = field(default_factory=dict)
    epochs: set[int] = field(default_factory=set)
    passed: bool = False
    #: The last record admitted before the shard passed F: the report waits until it is acknowledged.
    pass_point: Sequence | None = None
    reported: bool = False
    #: Whether this shard holds a record back for the chunk.
    held: bool = False
    #: The checkpoint may not pass the first record that made a key dirty until the first report is stored: True
    #: once such a record was seen, with `cap` the record before it (None: none before it in this incarnation).
    capped: bool = False
    cap: Sequence | None = None
    #: The first report was stored: the cap is lifted for good.
    stored_once: bool = False


def _acknowledged(point: Sequence | None, confirmed: ConfirmedPosition | None) -> bool:
    if point is None:
        return True
    if confirmed is None:
        return False
    return confirmed.sequence > point or (confirmed.sequence == point and confirmed.sub_sequence is None)


class ShardChunkWatch:
    """The protocol state of one shard processor (thread-safe: the processing thread admits, the checkpoint pump
    asks for reports)."""

    def __init__(self, table: str, shard_id: str, margin_us: int) -> None:
        self._table = table
        self._shard_id = shard_id
        self._margin_us = margin_us
        self._lock = threading.Lock()
        self._watched: dict[ChunkId, _Watched] = {}
        self._last_admitted: Sequence | None = None
        self._newest_epoch: int | None = None
        #: Why the shard holds (None: it does not), for the log lines at the start and end of a hold.
        self._holding: str | None = None

    @property
    def holding(self) -> str | None:
        """What the shard waits for, while it holds records back."""
        return self._holding

    def admit(self, records: list[ChangeRecord], view: FenceView | None) -> int:
        """How many of `records` (the shard's next records, in order) may be produced now; the rest are held.
        `view` None (the open chunks are unknown) holds everything."""
        with self._lock:
            if view is None:
                if records:
                    self._hold("the status table can be read again (its incremental snapshots are unknown)")
                return 0
            watched = self._sync(view)
            if not watched:  # no open chunk (nearly always): nothing to look at per record
                if records:
                    self._last_admitted = records[-1].sequence
                    self._newest_epoch = records[-1].sequence.epoch
                self._release()
                return len(records)
            for index, record in enumerate(records):
                sequence = record.sequence
                commit_us = sequence.timestamp_us
                key = record.primary_key
                held_by: IncrementalChunk | None = None
                for watch in watched:
                    chunk = watch.chunk
                    inside = chunk.covers(key)
                    if inside and chunk.in_window(commit_us):
                        watch.dirty[tuple(value for _, value in key)] = list(key)
                        watch.epochs.add(sequence.epoch)
                        if not watch.capped and not watch.stored_once:
                            watch.capped, watch.cap = True, self._last_admitted
                    if chunk.fence_us is not None and commit_us > chunk.fence_us:
                        self._pass(watch)
                        if inside and held_by is None:
                            held_by = chunk
                if held_by is not None:
                    held = self._watched[(held_by.snapshot_id, held_by.number)]
                    if not held.held:
                        held.held = True
                        held.reported = False  # reported again, now saying it holds (for `cdcbridge status`)
                    self._hold(
                        f"chunk {held_by.number} of incremental snapshot {held_by.snapshot_id} is emitted (record "
                        f"{sequence.to_text()} of key {describe_bound(key)} follows its fence "
                        f"{format_time_us(held_by.fence_us or 0)})"
                    )
                    return index
                self._last_admitted = sequence
                self._newest_epoch = sequence.epoch
            self._release()
            return len(records)

    def idle(self, view: FenceView | None, now_us: int) -> None:
        """An empty read at `now_us` (this host's clock): the shard passed every fence older than now - m."""
        with self._lock:
            if view is None:
                return
            for watch in self._sync(view):
                fence = watch.chunk.fence_us
                if fence is not None and now_us > fence + self._margin_us:
                    self._pass(watch)

    def reports_due(self, confirmed: ConfirmedPosition | None, now_ms: int) -> list[IncrementalReport]:
        """Reports of chunks this shard passed with everything up to the pass acknowledged (`confirmed`), not sent
        yet; call :meth:`reported` for each once it is stored."""
        with self._lock:
            due = []
            for watch in self._watched.values():
                if watch.passed and not watch.reported and _acknowledged(watch.pass_point, confirmed):
                    chunk = watch.chunk
                    due.append(IncrementalReport(
                        chunk.stream_id, chunk.snapshot_id, chunk.number, self._shard_id, True,
                        dirty_keys=tuple(key for key in watch.dirty.values() if chunk.covers(key)),
                        epochs=tuple(sorted(watch.epochs)), newest_epoch=self._newest_epoch, reported_ms=now_ms,
                        holding=watch.held,
                    ))  # fmt: skip
            return due

    def reported(self, report: IncrementalReport) -> None:
        with self._lock:
            watch = self._watched.get((report.snapshot_id, report.chunk))
            if watch is not None:
                watch.reported = watch.stored_once = True
                watch.capped = False

    def checkpoint_cap(self) -> tuple[bool, Sequence | None]:
        """(capped, position): whether the checkpoint must stay at or before `position` (None: write none) because
        an unreported open chunk's dirty keys rest on records after it."""
        with self._lock:
            caps = [watch.cap for watch in self._watched.values() if watch.capped]
        if not caps:
            return False, None
        if any(cap is None for cap in caps):
            return True, None
        return True, min(cap for cap in caps if cap is not None)

    def shard_ended(self) -> None:
        """The shard was read to its end: no record can follow, so every open chunk counts as passed."""
        with self._lock:
            for watch in self._watched.values():
                self._pass(watch)

    def unreported(self) -> int:
        """Open chunks this shard passed and has not reported yet."""
        with self._lock:
            return sum(1 for watch in self._watched.values() if watch.passed and not watch.reported)

    # ----- internals ------------------------------------------------------------------------------------------

    def _sync(self, view: FenceView) -> list[_Watched]:
        """Follow the view: new chunks are watched, changed ones (a fence set, a narrower end) updated, closed or
        dead ones forgotten."""
        current: dict[ChunkId, _Watched] = {}
        for chunk in view.chunks:
            chunk_id = (chunk.snapshot_id, chunk.number)
            watch = self._watched.get(chunk_id) or _Watched(chunk)
            watch.chunk = chunk
            current[chunk_id] = watch
        self._watched = current
        return list(current.values())

    def _pass(self, watch: _Watched) -> None:
        if not watch.passed:
            watch.passed = True
            watch.pass_point = self._last_admitted

    def _hold(self, why: str) -> None:
        if self._holding is None:
            log.info("shard %s of table %s holds its records until %s", self._shard_id, self._table, why)
        self._holding = why

    def _release(self) -> None:
        if self._holding is not None:
            log.info("shard %s of table %s no longer holds its records", self._shard_id, self._table)
            self._holding = None
