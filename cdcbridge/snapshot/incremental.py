"""The exporter of an incremental snapshot: reads a table's key range chunk by chunk while the bridge workers keep
streaming, and emits each chunk's rows once the shard owners have fenced it (the window/fence protocol, README
"Incremental snapshots").

Per chunk (a key range [from, to) of at most `chunk_rows` rows, or a list of keys to re-read):

1. *Announce.* The chunk row is written OPEN with W = (time before the write) - m, the range [resume, end) and no
   fence yet. Owners act on a view of the chunks at most R old, so a record an owner handled without knowing the
   chunk was handled before the write returned + R and committed before that + m; from then on owners note the keys
   of the chunk they see change at or after W (dirty) and hold nothing yet.
2. *Read.* R + 2m after the write returned (so every record handled without knowledge of the chunk is committed and
   reflected), GetRange reads the chunk (GetRow per key for a key list); t1 is taken when the read returns.
3. *Fence.* The chunk row gets F = write start + allowance + R + m (>= t1 + m) and the end narrowed to the key after
   the last row read: owners learn F before any record after it can reach them, hold the chunk's records after F,
   and report once they passed F with every record up to F acknowledged by Kafka.
4. *Emit.* When every shard that needs a report has one (:mod:`.report_quorum`), the rows minus the dirty keys go
   to Kafka as PUT images with sequence (epoch, t1, 0); after every acknowledgement the progress is stored and the
   chunk is marked EMITTED (owners release their holds). Dirty keys are re-read later as key-list chunks, up to
   `max_key_retries` times, then listed as skipped (hot).

A fence write that takes longer than the allowance abandons the chunk (it is redone): F was computed before the
write returned. Pause and cancel are obeyed between chunks and while waiting for reports (the open chunk
is abandoned); an exporter whose heartbeat could be judged dead never produces (see :meth:`_check_alive`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import IO, Any, Protocol

from tablestore import INF_MAX, INF_MIN, OTSClientError, OTSServiceError
from urllib3.exceptions import HTTPError

from cdcbridge.changes import Sequence
from cdcbridge.snapshot.errors import SnapshotError, SnapshotExportError
from cdcbridge.snapshot.export import Publisher, encode_snapshot_rows
from cdcbridge.snapshot.incremental_state import (
    ChunkState,
    ExporterReplacedError,
    IncrementalChunk,
    IncrementalReport,
    IncrementalSnapshot,
    IncrementalSnapshotStore,
    IncrementalState,
    PendingKey,
)
from cdcbridge.snapshot.key_bounds import KeyBound, describe_bound
from cdcbridge.snapshot.progress_display import ProgressDisplay
from cdcbridge.snapshot.rate_limit import RowRateLimiter
from cdcbridge.snapshot.report_quorum import ShardNode, missing_reports

log = logging.getLogger(__name__)

#: How often an unfinished chunk's reports are re-read; the shards and the snapshot's state every SLOW_POLL_SECONDS.
REPORT_POLL_SECONDS = 0.2
SLOW_POLL_SECONDS = 1.0
#: How often the exporter logs which shards it still waits for.
WAIT_LOG_SECONDS = 10.0
_READ_ERRORS = (OTSServiceError, OTSClientError, OSError, HTTPError)


@dataclass(frozen=True)
class ExporterSettings:
    """The protocol's timings (snapshot.incremental) and what the exporter adds to them."""

    chunk_rows: int = 1000
    clock_skew_margin_seconds: float = 1.0
    fence_refresh_seconds: float = 1.0
    exporter_timeout_seconds: float = 15.0
    max_key_retries: int = 5
    rows_per_second: float | None = None
    heartbeat_seconds: float = 1.0
    #: The exporter producer's `message.timeout.ms` / 1000: every message is written or failed by then.
    delivery_seconds: float = 5.0
    #: How long the fence write may take: F is computed before the write with this much room.
    write_allowance_seconds: float = 0.5

    @classmethod
    def from_config(cls, section: Any) -> ExporterSettings:
        """From `snapshot.incremental`; the delivery deadline is a third of the exporter timeout (see _check_alive)."""
        return cls(
            chunk_rows=section.chunk_rows, clock_skew_margin_seconds=section.clock_skew_margin_seconds,
            fence_refresh_seconds=section.fence_refresh_seconds,
            exporter_timeout_seconds=section.exporter_timeout_seconds, max_key_retries=section.max_key_retries,
            rows_per_second=section.rows_per_second,
            heartbeat_seconds=min(1.0, section.exporter_timeout_seconds / 5),
            delivery_seconds=max(1.0, section.exporter_timeout_seconds / 3),
        )  # fmt: skip

    @property
    def lead_seconds(self) -> float:
        """From the start of the fence write to the fence it names."""
        return self.write_allowance_seconds + self.fence_refresh_seconds + self.clock_skew_margin_seconds


@dataclass(frozen=True)
class StreamShards:
    """The stream's shards as the report rule sees them, and the newest epoch of any checkpoint (a fallback)."""

    nodes: dict[str, ShardNode]
    checkpoint_epoch: int | None = None


class ShardView(Protocol):
    def __call__(self) -> StreamShards: ...


@dataclass(frozen=True)
class IncrementalResult:
    snapshot_id: str
    table: str
    state: IncrementalState
    rows: int
    chunks: int
    skipped_keys: tuple[KeyBound, ...]
    seconds: float

    def line(self) -> str:
        how = {IncrementalState.DONE: "done", IncrementalState.CANCELLED: "cancelled"}.get(self.state, self.state.value)
        text = (f"table {self.table}: incremental snapshot {self.snapshot_id} {how}, {self.rows:,} rows in "
                f"{self.chunks} chunk(s), {self.seconds:.1f}s")  # fmt: skip
        if self.skipped_keys:
            text += f"; {len(self.skipped_keys)} hot key(s) skipped: " + ", ".join(
                describe_bound(key) for key in self.skipped_keys[:5]
            )
        return text


@dataclass(frozen=True)
class _Plan:
    """What one chunk reads: a range from `begin` (to the snapshot's end) or a list of keys."""

    begin: KeyBound | None = None
    keys: tuple[KeyBound, ...] | None = None


@dataclass
class _Read:
    rows: list[Any]
    #: The key after the last row read (None: the range is finished); unused for key lists.
    next_key: KeyBound | None
    t1: float


class _Deliveries:
    """The fate of one chunk's messages: how many were produced and have neither been written nor failed yet."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.outstanding = 0
        self.failure: Exception | None = None

    def sent(self) -> None:
        with self._changed:
            self.outstanding += 1

    def on_delivery(self, delivery: Any) -> None:
        with self._changed:
            self.outstanding -= 1
            if delivery.error is not None and self.failure is None:
                self.failure = delivery.error
            self._changed.notify_all()

    def wait(self, timeout: float) -> bool:
        """True once every produced message was written or failed."""
        with self._changed:
            return self._changed.wait_for(lambda: self.outstanding <= 0, timeout)


class ChunkAbandoned(Exception):
    """The chunk is given up (paused, cancelled, stopped, a slow write); the loop decides what comes next."""


class HeartbeatKeeper:
    """Renews the exporter's heartbeat every `interval` seconds from its own thread; remembers the last value
    written (wall-clock seconds) and whether the snapshot was taken over."""

    def __init__(
        self, store: IncrementalSnapshotStore, snapshot: IncrementalSnapshot, interval: float,
        clock: Callable[[], float],
    ) -> None:  # fmt: skip
        self._store = store
        self._snapshot = snapshot
        self._interval = interval
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{snapshot.snapshot_id}", daemon=True)
        self.last_written = snapshot.heartbeat_ms / 1000
        self.replaced: ExporterReplacedError | None = None

    def start(self) -> HeartbeatKeeper:
        self._thread.start()
        return self

    def beat(self) -> None:
        now = self._clock()
        try:
            self._store.heartbeat(self._snapshot, int(now * 1000))
        except ExporterReplacedError as error:
            self.replaced = error
            self._stop.set()
            return
        except SnapshotError as error:
            log.warning("could not renew the heartbeat of snapshot %s: %s", self._snapshot.snapshot_id, error)
            return
        self.last_written = max(self.last_written, now)

    def age(self) -> float:
        return self._clock() - self.last_written

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.beat()


class IncrementalExporter:
    """Runs one claimed snapshot to DONE (or until paused-and-stopped, cancelled, or taken over)."""

    def __init__(
        self,
        *,
        ots: Any,
        store: IncrementalSnapshotStore,
        shards: ShardView,
        publisher: Publisher,
        settings: ExporterSettings,
        stop: threading.Event | None = None,
        progress_file: IO[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ots = ots
        self._store = store
        self._shards = shards
        self._publisher = publisher
        self._encoder = publisher.encoder()
        self._settings = settings
        self._stop = stop or threading.Event()
        self._progress_file = progress_file
        self._clock = clock
        self._limiter = RowRateLimiter(settings.rows_per_second)
        self._keeper: HeartbeatKeeper | None = None
        self._next_number = 1
        self._last_wait_log = 0.0
        self._checkpoint_epoch: int | None = None
        self._deliveries: _Deliveries | None = None
        self._announced_at = 0.0
        self._pk_columns: list[str] | None = None

    # ----- the loop -------------------------------------------------------------------------------------------

    def run(self, snapshot: IncrementalSnapshot) -> IncrementalResult:
        """`snapshot` must be claimed by this exporter (:meth:`IncrementalSnapshotStore.claim`)."""
        started = time.monotonic()
        keeper = self._keeper = HeartbeatKeeper(self._store, snapshot, self._settings.heartbeat_seconds, self._clock)
        keeper.start()
        display = ProgressDisplay(snapshot.table, 1, 1 if snapshot.range_done else 0, snapshot.rows,
                                  file=self._progress_file)  # fmt: skip
        try:
            self._close_leftover_chunk(snapshot)
            snapshot = self._loop(snapshot, display)
        finally:
            keeper.stop()
            display.close(snapshot.rows)
            self._release(snapshot)
        return IncrementalResult(snapshot.snapshot_id, snapshot.table, snapshot.state, snapshot.rows, snapshot.chunks,
                                 snapshot.skipped_keys, time.monotonic() - started)  # fmt: skip

    def _loop(self, snapshot: IncrementalSnapshot, display: ProgressDisplay) -> IncrementalSnapshot:
        paused_logged = False
        last_was_range = False
        while True:
            snapshot = self._refresh(snapshot)
            if snapshot.state is IncrementalState.CANCELLED:
                log.info("incremental snapshot %s of table %s was cancelled", snapshot.snapshot_id, snapshot.table)
                return snapshot
            if snapshot.state is IncrementalState.PAUSED:
                if not paused_logged:
                    log.info("incremental snapshot %s of table %s is paused; `cdcbridge snapshot resume` goes on",
                             snapshot.snapshot_id, snapshot.table)  # fmt: skip
                    paused_logged = True
                if self._stop.wait(REPORT_POLL_SECONDS * 5):
                    return snapshot
                continue
            paused_logged = False
            if self._stop.is_set():
                raise SnapshotError(
                    f"incremental snapshot {snapshot.snapshot_id} of table {snapshot.table} was stopped at "
                    f"{snapshot.rows:,} rows; run `cdcbridge snapshot --table {snapshot.table}` again to resume it"
                )
            if snapshot.range_done and not snapshot.pending_keys:
                return self._finish(snapshot)
            if snapshot.pending_keys and (snapshot.range_done or last_was_range):
                keys = tuple(p.key for p in snapshot.pending_keys[: self._settings.chunk_rows])
                plan = _Plan(keys=keys)
            else:
                plan = _Plan(begin=snapshot.resume if snapshot.resume is not None else self._begin(snapshot))
            last_was_range = plan.keys is None
            try:
                snapshot = self._chunk(snapshot, plan)
            except ChunkAbandoned as why:
                log.info("chunk of incremental snapshot %s abandoned: %s", snapshot.snapshot_id, why)
            display.show(1 if snapshot.range_done else 0, snapshot.rows)

    def _chunk(self, snapshot: IncrementalSnapshot, plan: _Plan) -> IncrementalSnapshot:
        settings = self._settings
        self._limiter.set_rate(snapshot.rows_per_second or settings.rows_per_second)
        if not self._limiter.wait(self._stop):
            raise ChunkAbandoned("stopped")
        self._deliveries = None
        chunk = self._write_chunk(snapshot, self._announced(snapshot, plan))
        try:
            margin = settings.clock_skew_margin_seconds
            self._sleep_until(self._announced_at + settings.fence_refresh_seconds + 2 * margin)
            read = self._read(snapshot, plan)
            self._limiter.spend(len(plan.keys) if plan.keys is not None else len(read.rows))
            if plan.keys is None:
                end = read.next_key if read.next_key is not None else self._end(snapshot)
                chunk = replace(chunk, end=end)
            chunk = self._write_chunk(snapshot, chunk, fence=True)
            if (chunk.fence_us or 0) / 1e6 < read.t1 + settings.clock_skew_margin_seconds:
                raise ChunkAbandoned(f"the fence {chunk.fence_us} came before the read ended")  # cannot happen
            reports = self._await_reports(snapshot, chunk)
            snapshot = self._emit(snapshot, chunk, plan, read, reports)
        except BaseException:
            if self._in_flight():
                log.warning(
                    "chunk %d of incremental snapshot %s stays OPEN: %d of its messages may still reach Kafka, so "
                    "the workers hold its newer records until this exporter's heartbeat is dead (%.0fs)",
                    chunk.number, snapshot.snapshot_id, self._in_flight(), settings.exporter_timeout_seconds,
                )  # fmt: skip
            else:
                self._abandon(chunk)
            raise
        self._store.close_chunk(chunk, ChunkState.EMITTED, self._now_ms())
        return snapshot

    # ----- steps ----------------------------------------------------------------------------------------------

    def _announced(self, snapshot: IncrementalSnapshot, plan: _Plan) -> IncrementalChunk:
        return IncrementalChunk(
            snapshot.stream_id, snapshot.snapshot_id, self._next_number, 0, None, ChunkState.OPEN,
            begin=plan.begin, end=self._end(snapshot) if plan.keys is None else None, keys=plan.keys,
        )  # fmt: skip

    def _write_chunk(
        self, snapshot: IncrementalSnapshot, chunk: IncrementalChunk, *, fence: bool = False
    ) -> IncrementalChunk:
        """Announce the chunk (first write: W = start - m) or set its fence and narrowed end (second write: F computed
        from the time before the write, so a write slower than the allowance abandons the chunk)."""
        self._raise_if_replaced()
        settings = self._settings
        start = self._clock()
        if not fence:
            window_us = int((start - settings.clock_skew_margin_seconds) * 1_000_000)
            chunk = replace(chunk, window_start_us=window_us, opened_ms=int(start * 1000))
            self._next_number += 1
            self._store.open_chunk(snapshot, chunk)
            self._announced_at = self._clock()
            return chunk
        fence_us = int((start + settings.lead_seconds) * 1_000_000)
        chunk = self._store.set_fence(chunk, fence_us, chunk.end)
        took = self._clock() - start
        if took > settings.write_allowance_seconds:
            self._abandon(chunk)
            raise ChunkAbandoned(f"setting the fence took {took:.2f}s (allowance {settings.write_allowance_seconds}s)")
        return chunk

    def _read(self, snapshot: IncrementalSnapshot, plan: _Plan) -> _Read:
        if plan.keys is not None:
            rows = [row for row in (self._get_row(snapshot, key) for key in plan.keys) if row is not None]
            return _Read(rows, None, self._clock())
        rows: list[Any] = []
        start: KeyBound | None = plan.begin
        end = self._end(snapshot)
        while start is not None and len(rows) < self._settings.chunk_rows:
            try:
                _, next_key, page, _ = self._ots.get_range(
                    snapshot.table, "FORWARD", start, end, max_version=1, limit=self._settings.chunk_rows - len(rows)
                )
            except _READ_ERRORS as error:
                raise SnapshotExportError(
                    f"table {snapshot.table}: GetRange from {describe_bound(start)} failed: {error}; run the "
                    "snapshot again to resume"
                ) from None
            rows += page
            start = next_key or None
        return _Read(rows, start, self._clock())

    def _get_row(self, snapshot: IncrementalSnapshot, key: KeyBound) -> Any:
        try:
            _, row, _ = self._ots.get_row(snapshot.table, key, columns_to_get=None, max_version=1)
        except _READ_ERRORS as error:
            raise SnapshotExportError(
                f"table {snapshot.table}: GetRow of {describe_bound(key)} failed: {error}; run the snapshot again "
                "to resume"
            ) from None
        return row

    def _await_reports(self, snapshot: IncrementalSnapshot, chunk: IncrementalChunk) -> list[IncrementalReport]:
        """Poll until every shard that needs a report has a passed one; pause / cancel / stop abandon the chunk."""
        shards, shards_read = self._shards(), time.monotonic()
        state_read = time.monotonic()
        while True:
            reports = self._store.read_reports(chunk.stream_id, chunk.snapshot_id, chunk.number)
            missing = missing_reports(shards.nodes, (r.shard_id for r in reports if r.passed))
            if missing and time.monotonic() - shards_read >= SLOW_POLL_SECONDS:
                shards, shards_read = self._shards(), time.monotonic()  # a shard may have finished or split
                missing = missing_reports(shards.nodes, (r.shard_id for r in reports if r.passed))
            if not missing:
                self._checkpoint_epoch = shards.checkpoint_epoch
                return reports
            self._log_waiting(snapshot, chunk, missing)
            if self._stop.wait(REPORT_POLL_SECONDS):
                raise ChunkAbandoned("stopped")
            if time.monotonic() - state_read >= SLOW_POLL_SECONDS:
                state_read = time.monotonic()
                current = self._refresh(snapshot)
                if current.state is not IncrementalState.RUNNING:
                    raise ChunkAbandoned(f"the snapshot is {current.state.value}")

    def _emit(
        self, snapshot: IncrementalSnapshot, chunk: IncrementalChunk, plan: _Plan, read: _Read,
        reports: list[IncrementalReport],
    ) -> IncrementalSnapshot:  # fmt: skip
        dirty = {_key_of(key) for report in reports for key in report.dirty_keys if chunk.covers(list(key))}
        epoch = choose_epoch(reports, self._checkpoint_epoch)
        sequence = Sequence(epoch, int(read.t1 * 1_000_000), 0)
        clean = [row for row in read.rows if _key_of(row.primary_key) not in dirty]
        self._produce(snapshot, clean, sequence)
        pending = self._pending_after(snapshot, plan, dirty)
        skipped = list(snapshot.skipped_keys)
        for key, attempts in pending.items():
            if attempts > self._settings.max_key_retries:
                skipped.append(list(key))
                log.warning(
                    "table %s: key %s changed during each of its %d re-reads; incremental snapshot %s skips it (hot "
                    "key). Its stream messages keep the target right for the columns they carry; to re-read it, "
                    "request a snapshot of just that key when it is quieter (`cdcbridge snapshot --table %s --from "
                    "... --to ...`) or raise snapshot.incremental.max_key_retries",
                    snapshot.table, describe_bound(list(key)), self._settings.max_key_retries, snapshot.snapshot_id,
                    snapshot.table,
                )  # fmt: skip
        still = [PendingKey(list(key), attempts) for key, attempts in pending.items()
                 if attempts <= self._settings.max_key_retries]  # fmt: skip
        if plan.keys is None:
            resume, range_done = read.next_key, read.next_key is None
        else:
            resume, range_done = snapshot.resume, snapshot.range_done
        return self._store.save_progress(
            snapshot, now_ms=self._now_ms(), resume=resume, range_done=range_done, rows=snapshot.rows + len(clean),
            chunks=snapshot.chunks + 1, pending_keys=still, skipped_keys=skipped,
        )  # fmt: skip

    def _pending_after(self, snapshot: IncrementalSnapshot, plan: _Plan, dirty: set[tuple]) -> dict[tuple, int]:
        """Keys still to re-read (key → attempts made): a range chunk's dirty keys join with 0 attempts; a key-list
        chunk's keys leave the list unless dirty again (one more attempt)."""
        pending = {_key_of(p.key): p.attempts for p in snapshot.pending_keys}
        if plan.keys is None:
            for key in sorted(dirty, key=repr):
                pending.setdefault(key, 0)
            return pending
        for key in (_key_of(k) for k in plan.keys):
            attempts = pending.pop(key, 0)
            if key in dirty:
                pending[key] = attempts + 1
        return pending

    def _produce(self, snapshot: IncrementalSnapshot, rows: list[Any], sequence: Sequence) -> None:
        publisher = self._publisher
        where = f"incremental snapshot {snapshot.snapshot_id}"
        messages = encode_snapshot_rows(self._encoder, publisher, rows, sequence, where)
        deliveries = self._deliveries = _Deliveries()
        produce, headers = publisher.sink.produce, publisher.headers()
        deadline = self._settings.delivery_seconds + min(5.0, self._settings.delivery_seconds)
        try:
            for index, (key, (topic, _, value)) in enumerate(messages):
                if index % 500 == 0:
                    self._check_alive(snapshot)
                deliveries.sent()
                produce(topic, key, value, deliveries.on_delivery, headers)
        finally:
            # Whatever happens, the chunk closes only once nothing of it can still reach Kafka (the producer's
            # message timeout is below this deadline); the chunk's newer stream records wait until then.
            settled = deliveries.wait(deadline)
        if not settled or deliveries.failure is not None:
            raise SnapshotExportError(
                f"table {snapshot.table}: Kafka did not acknowledge the chunk's messages "
                f"({deliveries.failure or f'{deliveries.outstanding} unsettled after {deadline:.0f}s'}); run the "
                "snapshot again to resume"
            )

    def _check_alive(self, snapshot: IncrementalSnapshot) -> None:
        """Produce only while the heartbeat cannot be judged dead before every message is written or failed: the
        heartbeat's age, plus the producer's delivery deadline, plus the clock margin, stay below the exporter
        timeout (owners then still hold the chunk's newer records)."""
        self._raise_if_replaced()
        keeper = self._keeper
        assert keeper is not None
        settings = self._settings
        room = settings.exporter_timeout_seconds - settings.delivery_seconds - settings.clock_skew_margin_seconds
        if keeper.age() > room:
            keeper.beat()
            self._raise_if_replaced()
            if keeper.age() > room:
                raise SnapshotExportError(
                    f"incremental snapshot {snapshot.snapshot_id}: the exporter's heartbeat is {keeper.age():.1f}s "
                    f"old (status table {self._store_name()} slow or unreachable), too old to produce safely; run the "
                    "snapshot again once the status table answers"
                )

    def _finish(self, snapshot: IncrementalSnapshot) -> IncrementalSnapshot:
        self._raise_if_replaced()
        self._store.set_state(snapshot.stream_id, snapshot.snapshot_id, IncrementalState.DONE, now_ms=self._now_ms(),
                              expected=IncrementalState.RUNNING)  # fmt: skip
        log.info("incremental snapshot %s of table %s is done: %d rows, %d chunks", snapshot.snapshot_id,
                 snapshot.table, snapshot.rows, snapshot.chunks)  # fmt: skip
        return replace(snapshot, state=IncrementalState.DONE)

    # ----- helpers --------------------------------------------------------------------------------------------

    def _close_leftover_chunk(self, snapshot: IncrementalSnapshot) -> None:
        """A chunk an earlier exporter left OPEN is abandoned (owners go on); ours get higher numbers."""
        chunk = self._store.read_chunk(snapshot.stream_id, snapshot.snapshot_id)
        if chunk is None:
            return
        self._next_number = chunk.number + 1
        if chunk.state is ChunkState.OPEN:
            log.info("abandoning chunk %d of incremental snapshot %s left open by an earlier exporter",
                     chunk.number, snapshot.snapshot_id)  # fmt: skip
            self._store.close_chunk(chunk, ChunkState.ABANDONED, self._now_ms())

    def _in_flight(self) -> int:
        return self._deliveries.outstanding if self._deliveries is not None else 0

    def _release(self, snapshot: IncrementalSnapshot) -> None:
        """An exporter that stops before the end (error, SIGTERM, paused and stopped) with nothing in flight clears
        its heartbeat, so the next run takes the snapshot over at once instead of after the exporter timeout."""
        if snapshot.state.finished or self._in_flight() or (self._keeper and self._keeper.replaced):
            return
        try:
            self._store.heartbeat(snapshot, 0)
        except SnapshotError as error:
            log.info("could not release incremental snapshot %s: %s", snapshot.snapshot_id, error)

    def _abandon(self, chunk: IncrementalChunk) -> None:
        try:
            self._store.close_chunk(chunk, ChunkState.ABANDONED, self._now_ms())
        except SnapshotError as error:  # owners stop holding once the heartbeat is dead
            log.warning("could not abandon chunk %d of snapshot %s: %s", chunk.number, chunk.snapshot_id, error)

    def _refresh(self, snapshot: IncrementalSnapshot) -> IncrementalSnapshot:
        """The snapshot row as stored now (state and rate may be changed by `cdcbridge snapshot pause|resume|cancel`
        or by editing the row); progress stays ours."""
        self._raise_if_replaced()
        current = self._store.read(snapshot.stream_id, snapshot.snapshot_id)
        if current is None or current.exporter_id != snapshot.exporter_id:
            raise ExporterReplacedError(
                f"incremental snapshot {snapshot.snapshot_id} of table {snapshot.table} was taken over by another "
                "exporter or removed; this exporter stops"
            )
        return replace(snapshot, state=current.state, rows_per_second=current.rows_per_second)

    def _raise_if_replaced(self) -> None:
        if self._keeper is not None and self._keeper.replaced is not None:
            raise self._keeper.replaced

    def _sleep_until(self, wall_seconds: float) -> None:
        while (left := wall_seconds - self._clock()) > 0:
            if self._stop.wait(min(left, 0.5)):
                raise ChunkAbandoned("stopped")

    def _log_waiting(self, snapshot: IncrementalSnapshot, chunk: IncrementalChunk, missing: list[ShardNode]) -> None:
        now = time.monotonic()
        if now - self._last_wait_log < WAIT_LOG_SECONDS:
            return
        self._last_wait_log = now
        for node in missing:
            why = (f"owner {node.owner} has not reported yet (it does once it passed the fence and Kafka acknowledged "
                   "its records up to it)" if node.owner else
                   "no worker owns it: start a `cdcbridge run` worker for the table")  # fmt: skip
            log.info("incremental snapshot %s of table %s, chunk %d: waiting for shard %s: %s", snapshot.snapshot_id,
                     snapshot.table, chunk.number, node.shard_id, why)  # fmt: skip

    def _begin(self, snapshot: IncrementalSnapshot) -> KeyBound:
        return snapshot.begin if snapshot.begin is not None else self._bound(INF_MIN)

    def _end(self, snapshot: IncrementalSnapshot) -> KeyBound:
        return snapshot.end if snapshot.end is not None else self._bound(INF_MAX)

    def _bound(self, sentinel: Any) -> KeyBound:
        columns = self._pk_columns
        if columns is None:
            schema = self._ots.describe_table(self._publisher.table).table_meta.schema_of_primary_key
            columns = self._pk_columns = [column[0] for column in schema]
        return [(name, sentinel) for name in columns]

    def _store_name(self) -> str:
        return getattr(self._store, "_table", "?")

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)


def choose_epoch(reports: Iterable[IncrementalReport], checkpoint_epoch: int | None) -> int:
    """The sequence epoch of a chunk's PUTs: the newest epoch any owner reported (seen in the window or known as
    its newest), else the newest in any checkpoint, else 0. Epochs only grow with time, so the newest one is what
    the records after the fence carry; disagreeing reports mean an epoch change around the window, and the newest
    keeps the PUT before what comes after it (the chunk is not redone)."""
    known = [epoch for report in reports for epoch in (*report.epochs, report.newest_epoch) if epoch is not None]
    if known:
        return max(known)
    return checkpoint_epoch if checkpoint_epoch is not None else 0


def _key_of(primary_key: Iterable[tuple[str, Any]]) -> tuple:
    """A comparable form of a row's primary key (bytearray and bytes compare equal)."""
    return tuple((name, bytes(value) if isinstance(value, bytearray) else value) for name, value in primary_key)
