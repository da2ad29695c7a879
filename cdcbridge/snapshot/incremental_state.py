"""The incremental-snapshot protocol's rows in the status table: the exporter and the shard owners talk through them.

All rows sit under the table's stream id (primary key StreamId, StatusType, StatusValue), beside the leases:

- ``IncrementalSnapshot`` / snapshot id: one snapshot of a key range. `Table`, `State` (PENDING, RUNNING, PAUSED,
  CANCELLED, DONE, FAILED), `Begin` / `End` (encoded bounds; missing = the whole table), `RequestedBy`,
  `RowsPerSecond` (missing or 0 = unlimited), `ResumeKey` (next key to read; missing = `Begin`), `RangeDone`,
  `Rows`, `Chunks`, `PendingKeys` (dirty keys still to retry, with their attempts), `SkippedKeys` (hot keys given up),
  `ExporterId` + `HeartbeatMs` (who runs it; every exporter write is conditional on its id), `CreatedMs`,
  `UpdatedMs`, `Error`.
  **The signal row**: any tool asks for a snapshot by writing such a row with only `Table` = the table name and
  `State` = ``PENDING`` (optionally `Begin`, `End`, `RowsPerSecond`), StatusValue any id not used yet.
- ``IncrementalChunk`` / snapshot id: the snapshot's current chunk. `Number` (a redone chunk gets a new number, so
  reports of an older attempt never count), `Begin` / `End` or `Keys` (a key-list chunk), `WindowStartUs` (W),
  `FenceUs` (F), `State` (OPEN, EMITTED, ABANDONED), `OpenedMs`.
- ``IncrementalReport`` / ``<snapshot id>/<chunk number>/<shard id>``: one shard owner's report on a chunk.
  `Passed`, `DirtyKeys`, `Epochs` (of the in-window records it saw), `NewestEpoch`, `ReportedMs`, `Holding`.

Times of the window and fence are commit times in µs (the stream records' unit); heartbeats are wall-clock ms.

One chunk, with R = `fence_refresh_seconds` and m = `clock_skew_margin_seconds`:

1. The exporter *announces* it before reading: :meth:`IncrementalSnapshotStore.open_chunk` with W = (time before the
   write) - m, `fence_us` None and the range [resume, snapshot end) (a superset of what the read will cover). From
   then on owners mark every key of the range they see change at or after W as dirty.
2. It waits until R + 2m after the write returned, then reads (t0, t1). Why: an owner acts on a view of the chunks at
   most R old, so a record it produced without knowing of the chunk was produced before the write + R (its clock,
   + m) and committed before that (+ m): the read, started later, reflects it, and its message precedes the PUT.
   Without the announcement, a record committed just after the read but produced before the owner learned of the
   chunk would be neither reflected nor marked dirty, and the snapshot image would land after it and stay last.
3. :meth:`IncrementalSnapshotStore.set_fence` narrows the range to what was read and sets F = (time after that write)
   + R + m. Owners hold in-range records committed after F until the chunk is EMITTED / ABANDONED (or the exporter
   is dead), and report once they passed F with every record up to F acknowledged by Kafka.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import Any

from tablestore import (
    INF_MAX,
    INF_MIN,
    ComparatorType,
    CompositeColumnCondition,
    Condition,
    LogicalOperator,
    OTSClientError,
    OTSServiceError,
    Row,
    RowExistenceExpectation,
    SingleColumnCondition,
)
from urllib3.exceptions import HTTPError

from cdcbridge.snapshot.errors import SnapshotConflictError, SnapshotStateError
from cdcbridge.snapshot.key_bounds import KeyBound, decode_bound, encode_bound, key_in_range

SNAPSHOT_TYPE = "IncrementalSnapshot"
CHUNK_TYPE = "IncrementalChunk"
REPORT_TYPE = "IncrementalReport"
_IGNORE = Condition(RowExistenceExpectation.IGNORE)
_STORE_ERRORS = (OTSServiceError, OTSClientError, OSError, HTTPError)


class IncrementalState(StrEnum):
    """A snapshot's life: PENDING (requested) → RUNNING ⇄ PAUSED → DONE, or CANCELLED / FAILED."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    CANCELLED = "CANCELLED"
    DONE = "DONE"
    FAILED = "FAILED"

    @property
    def finished(self) -> bool:
        return self in (IncrementalState.CANCELLED, IncrementalState.DONE, IncrementalState.FAILED)


class RequestedBy(StrEnum):
    CLI = "cli"
    SIGNAL = "signal"
    TRIM = "trim"


class ChunkState(StrEnum):
    """OPEN: owners watch the window and hold records after the fence; EMITTED / ABANDONED: they go on."""

    OPEN = "OPEN"
    EMITTED = "EMITTED"
    ABANDONED = "ABANDONED"


class ExporterReplacedError(SnapshotConflictError):
    """Another exporter took the snapshot over (this one's heartbeat was judged dead): stop without producing."""


@dataclass(frozen=True)
class PendingKey:
    """A key whose row changed while its chunk was open: re-read alone later; `attempts` so far."""

    key: KeyBound
    attempts: int


@dataclass(frozen=True)
class IncrementalSnapshot:
    """One snapshot's row. `begin` / `end` None: the table's lowest / highest key. `resume` None: start at `begin`."""

    stream_id: str
    snapshot_id: str
    table: str
    state: IncrementalState
    begin: KeyBound | None = None
    end: KeyBound | None = None
    requested_by: RequestedBy = RequestedBy.SIGNAL
    rows_per_second: float | None = None
    resume: KeyBound | None = None
    range_done: bool = False
    rows: int = 0
    chunks: int = 0
    pending_keys: tuple[PendingKey, ...] = ()
    skipped_keys: tuple[KeyBound, ...] = ()
    exporter_id: str = ""
    heartbeat_ms: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    error: str = ""

    def heartbeat_age_ms(self, now_ms: int) -> int | None:
        """How old the exporter's heartbeat is by `now_ms` (another host's clock: for display), None if none."""
        return None if not self.exporter_id else max(0, now_ms - self.heartbeat_ms)


@dataclass(frozen=True)
class IncrementalChunk:
    """The chunk a snapshot has open (or last closed): a key range [begin, end) or a key list (`keys`)."""

    stream_id: str
    snapshot_id: str
    number: int
    window_start_us: int
    #: None while the chunk is announced and being read (no fence yet: owners only mark dirty keys).
    fence_us: int | None
    state: ChunkState = ChunkState.OPEN
    begin: KeyBound | None = None
    end: KeyBound | None = None
    keys: tuple[KeyBound, ...] | None = None
    opened_ms: int = 0

    @cached_property
    def _key_set(self) -> frozenset[tuple[Any, ...]]:
        return frozenset(tuple(value for _, value in key) for key in self.keys or ())

    def covers(self, key: KeyBound) -> bool:
        """Whether a row key belongs to the chunk (a range chunk's None bounds are open ends)."""
        if self.keys is not None:
            return tuple(value for _, value in key) in self._key_set
        begin = self.begin if self.begin is not None else [(name, INF_MIN) for name, _ in key]
        end = self.end if self.end is not None else [(name, INF_MAX) for name, _ in key]
        return key_in_range(key, begin, end)

    def in_window(self, commit_us: int) -> bool:
        """Whether a change committed at `commit_us` may or may not be reflected in the chunk's read: [W, F]
        (from W on while the fence is not set)."""
        return self.window_start_us <= commit_us and (self.fence_us is None or commit_us <= self.fence_us)


@dataclass(frozen=True)
class IncrementalReport:
    """A shard owner's report on one chunk: it passed the fence with every record up to it acknowledged by Kafka
    (`passed`), which keys of the chunk changed in the window, and the sequence epochs it saw."""

    stream_id: str
    snapshot_id: str
    chunk: int
    shard_id: str
    passed: bool
    dirty_keys: tuple[KeyBound, ...] = ()
    epochs: tuple[int, ...] = ()
    newest_epoch: int | None = None
    reported_ms: int = 0
    #: The shard holds records of the chunk's keys committed after F (written again when a hold starts after the
    #: first report): what `cdcbridge status` shows as held shards.
    holding: bool = False


def new_snapshot_id(now_ms: int) -> str:
    """Ids sort by creation time: ``<ms>-<8 hex>``."""
    return f"{now_ms:013d}-{uuid.uuid4().hex[:8]}"


def new_exporter_id() -> str:
    return uuid.uuid4().hex


@dataclass
class _Columns:
    """The attribute columns of one status row, read leniently (a signal row has only a few)."""

    values: dict[str, Any] = field(default_factory=dict)

    def text(self, name: str, default: str = "") -> str:
        value = self.values.get(name)
        return default if value is None else str(value)

    def number(self, name: str, default: int = 0) -> int:
        value = self.values.get(name)
        return default if value is None or value == "" else int(value)

    def bound(self, name: str) -> KeyBound | None:
        value = self.values.get(name)
        return None if value in (None, "") else decode_bound(str(value))

    def bounds(self, name: str) -> list[KeyBound]:
        value = self.values.get(name)
        return [] if value in (None, "") else [decode_bound(text) for text in json.loads(str(value))]


def _encode_keys(keys: Sequence[KeyBound]) -> str:
    return json.dumps([encode_bound(key) for key in keys], separators=(",", ":"))


def _optional_bound(bound: KeyBound | None) -> str:
    return "" if bound is None else encode_bound(bound)


class IncrementalSnapshotStore:
    """Reads and writes the protocol rows through an official OTSClient (or the emulator's). Failures raise
    SnapshotStateError; a lost conditional write raises SnapshotConflictError (ExporterReplacedError for an
    exporter that no longer owns its snapshot)."""

    def __init__(self, client: Any, status_table: str) -> None:
        self._client = client
        self._table = status_table

    # ----- snapshots ------------------------------------------------------------------------------------------

    def request(
        self,
        stream_id: str,
        table: str,
        *,
        now_ms: int,
        begin: KeyBound | None = None,
        end: KeyBound | None = None,
        requested_by: RequestedBy = RequestedBy.CLI,
        rows_per_second: float | None = None,
        snapshot_id: str | None = None,
    ) -> IncrementalSnapshot:
        """Store a PENDING snapshot of [begin, end) of `table` (a new id unless `snapshot_id` is given: then the
        request is idempotent, SnapshotConflictError if that id exists); an exporter claims it."""
        snapshot = IncrementalSnapshot(
            stream_id, snapshot_id or new_snapshot_id(now_ms), table, IncrementalState.PENDING, begin, end,
            requested_by, rows_per_second, created_ms=now_ms, updated_ms=now_ms,
        )  # fmt: skip
        columns: list[tuple[str, Any]] = [
            ("Table", table), ("State", snapshot.state.value), ("RequestedBy", requested_by.value),
            ("Begin", _optional_bound(begin)), ("End", _optional_bound(end)),
            ("RowsPerSecond", float(rows_per_second or 0.0)), ("Rows", 0), ("Chunks", 0),
            ("ExporterId", ""), ("HeartbeatMs", 0), ("CreatedMs", now_ms), ("UpdatedMs", now_ms),
        ]  # fmt: skip
        key = self._snapshot_key(stream_id, snapshot.snapshot_id)
        self._write("put_row", Row(key, columns), Condition(RowExistenceExpectation.EXPECT_NOT_EXIST),
                    f"request a snapshot of table {table}", conflict=f"snapshot id {snapshot.snapshot_id} is taken; "
                    "request it again")  # fmt: skip
        return snapshot

    def read(self, stream_id: str, snapshot_id: str) -> IncrementalSnapshot | None:
        columns = self._get(self._snapshot_key(stream_id, snapshot_id), f"incremental snapshot {snapshot_id}")
        return None if columns is None else self._snapshot(stream_id, snapshot_id, columns)

    def list_snapshots(self, stream_id: str, table: str | None = None) -> list[IncrementalSnapshot]:
        """Every snapshot of the stream (of `table` only, if given), oldest id first."""
        found = [self._snapshot(stream_id, value, columns) for value, columns in self._scan(stream_id, SNAPSHOT_TYPE)]
        return [snapshot for snapshot in found if table is None or snapshot.table == table]

    def snapshots_and_chunks(
        self, stream_id: str, table: str
    ) -> tuple[list[IncrementalSnapshot], list[IncrementalChunk]]:
        """The table's snapshots and the stream's chunks in one range read (what the owners refresh every R, so it
        costs one request and one round trip): the row types sort IncrementalChunk < IncrementalReport <
        IncrementalSnapshot, and the reports in between are skipped."""
        start: Any = [("StreamId", stream_id), ("StatusType", CHUNK_TYPE), ("StatusValue", INF_MIN)]
        end = [("StreamId", stream_id), ("StatusType", SNAPSHOT_TYPE), ("StatusValue", INF_MAX)]
        snapshots: list[IncrementalSnapshot] = []
        chunks: list[IncrementalChunk] = []
        while start:
            try:
                _, start, rows, _ = self._client.get_range(self._table, "FORWARD", start, end, max_version=1)
            except _STORE_ERRORS as error:
                raise self._error("read the incremental snapshots and their chunks", error) from None
            for row in rows:
                key = dict(row.primary_key)
                kind, value = key["StatusType"], str(key["StatusValue"])
                columns = {name: v for name, v, *_ in row.attribute_columns}
                if kind == SNAPSHOT_TYPE:
                    snapshot = self._snapshot(stream_id, value, columns)
                    if snapshot.table == table:
                        snapshots.append(snapshot)
                elif kind == CHUNK_TYPE:
                    chunks.append(self._chunk(stream_id, value, columns))
        return snapshots, chunks

    def claim(self, snapshot: IncrementalSnapshot, exporter_id: str, now_ms: int) -> IncrementalSnapshot:
        """Become `snapshot`'s exporter: a PENDING one becomes RUNNING; a RUNNING / PAUSED one whose exporter is
        dead is taken over. Conditional on the exporter and heartbeat read in `snapshot`, so of two exporters
        racing for it one wins and the other gets SnapshotConflictError."""
        state = IncrementalState.RUNNING if snapshot.state is IncrementalState.PENDING else snapshot.state
        singles = [
            SingleColumnCondition("ExporterId", snapshot.exporter_id, ComparatorType.EQUAL,
                                  pass_if_missing=not snapshot.exporter_id),
            SingleColumnCondition("HeartbeatMs", snapshot.heartbeat_ms, ComparatorType.EQUAL,
                                  pass_if_missing=not snapshot.heartbeat_ms),
            SingleColumnCondition("State", snapshot.state.value, ComparatorType.EQUAL, pass_if_missing=False),
        ]  # fmt: skip
        condition = CompositeColumnCondition(LogicalOperator.AND)
        for single in singles:
            condition.add_sub_condition(single)
        columns = [("ExporterId", exporter_id), ("HeartbeatMs", now_ms), ("State", state.value), ("UpdatedMs", now_ms)]
        self._write("update_row", Row(self._snapshot_key(snapshot.stream_id, snapshot.snapshot_id), {"put": columns}),
                    Condition(RowExistenceExpectation.EXPECT_EXIST, condition),
                    f"claim incremental snapshot {snapshot.snapshot_id}",
                    conflict=f"another exporter claimed incremental snapshot {snapshot.snapshot_id} of table "
                    f"{snapshot.table} first; it runs there (see `cdcbridge status`)")  # fmt: skip
        return replace(snapshot, exporter_id=exporter_id, heartbeat_ms=now_ms, state=state, updated_ms=now_ms)

    def heartbeat(self, snapshot: IncrementalSnapshot, now_ms: int) -> IncrementalSnapshot:
        """Renew the exporter's heartbeat; ExporterReplacedError if another exporter took the snapshot over."""
        self._exporter_update(snapshot, [("HeartbeatMs", now_ms), ("UpdatedMs", now_ms)], "renew the heartbeat of")
        return replace(snapshot, heartbeat_ms=now_ms, updated_ms=now_ms)

    def save_progress(
        self,
        snapshot: IncrementalSnapshot,
        *,
        now_ms: int,
        resume: KeyBound | None,
        range_done: bool,
        rows: int,
        chunks: int,
        pending_keys: Sequence[PendingKey] = (),
        skipped_keys: Sequence[KeyBound] = (),
    ) -> IncrementalSnapshot:
        """Store how far the exporter got (after the chunk's messages were acknowledged); exporter-conditional."""
        pending = json.dumps([[encode_bound(p.key), p.attempts] for p in pending_keys], separators=(",", ":"))
        columns: list[tuple[str, Any]] = [
            ("ResumeKey", _optional_bound(resume)), ("RangeDone", range_done), ("Rows", rows), ("Chunks", chunks),
            ("PendingKeys", pending), ("SkippedKeys", _encode_keys(skipped_keys)), ("UpdatedMs", now_ms),
        ]  # fmt: skip
        self._exporter_update(snapshot, columns, "save the progress of")
        return replace(
            snapshot, resume=resume, range_done=range_done, rows=rows, chunks=chunks,
            pending_keys=tuple(pending_keys), skipped_keys=tuple(skipped_keys), updated_ms=now_ms,
        )  # fmt: skip

    def set_state(
        self,
        stream_id: str,
        snapshot_id: str,
        state: IncrementalState,
        *,
        now_ms: int,
        expected: IncrementalState | None = None,
        error: str = "",
    ) -> None:
        """Change a snapshot's state (pause / resume / cancel from the CLI, DONE / FAILED from the exporter); with
        `expected`, only from that state (SnapshotConflictError otherwise)."""
        columns: list[tuple[str, Any]] = [("State", state.value), ("UpdatedMs", now_ms)]
        if error:
            columns.append(("Error", error))
        column_condition = None
        if expected is not None:
            column_condition = SingleColumnCondition("State", expected.value, ComparatorType.EQUAL,
                                                     pass_if_missing=False)  # fmt: skip
        self._write("update_row", Row(self._snapshot_key(stream_id, snapshot_id), {"put": columns}),
                    Condition(RowExistenceExpectation.EXPECT_EXIST, column_condition),
                    f"set incremental snapshot {snapshot_id} to {state.value}",
                    conflict=f"incremental snapshot {snapshot_id} is no longer "
                    f"{expected.value if expected else 'there'}; see `cdcbridge status`")  # fmt: skip

    def delete(self, stream_id: str, snapshot_id: str) -> None:
        """Remove a snapshot's rows: its chunk, every report on any of its chunks and the snapshot row."""
        self.delete_snapshot_reports(stream_id, snapshot_id)
        self._delete(self._chunk_key(stream_id, snapshot_id), f"remove the chunk of snapshot {snapshot_id}")
        self._delete(self._snapshot_key(stream_id, snapshot_id), f"remove incremental snapshot {snapshot_id}")

    # ----- chunks ---------------------------------------------------------------------------------------------

    def open_chunk(self, snapshot: IncrementalSnapshot, chunk: IncrementalChunk) -> None:
        """Write `chunk` (state OPEN, normally without a fence yet: the announcement) as the snapshot's current
        chunk, after checking the exporter still owns it (ExporterReplacedError otherwise)."""
        self._exporter_update(snapshot, [("UpdatedMs", chunk.opened_ms)], "open a chunk of")
        columns: list[tuple[str, Any]] = [
            ("Number", chunk.number), ("WindowStartUs", chunk.window_start_us), ("FenceUs", chunk.fence_us or 0),
            ("State", chunk.state.value), ("OpenedMs", chunk.opened_ms),
            ("Begin", _optional_bound(chunk.begin)), ("End", _optional_bound(chunk.end)),
            ("Keys", "" if chunk.keys is None else _encode_keys(chunk.keys)), ("IsKeyList", chunk.keys is not None),
        ]  # fmt: skip
        self._write("put_row", Row(self._chunk_key(chunk.stream_id, chunk.snapshot_id), columns), _IGNORE,
                    f"open chunk {chunk.number} of snapshot {chunk.snapshot_id}")  # fmt: skip

    def read_chunk(self, stream_id: str, snapshot_id: str) -> IncrementalChunk | None:
        columns = self._get(self._chunk_key(stream_id, snapshot_id), f"the chunk of snapshot {snapshot_id}")
        return None if columns is None else self._chunk(stream_id, snapshot_id, columns)

    def list_chunks(self, stream_id: str) -> list[IncrementalChunk]:
        """The current chunk of every snapshot of the stream (owners keep those OPEN)."""
        return [self._chunk(stream_id, value, columns) for value, columns in self._scan(stream_id, CHUNK_TYPE)]

    def set_fence(self, chunk: IncrementalChunk, fence_us: int, end: KeyBound | None = None) -> IncrementalChunk:
        """After the read: set F and (for a range chunk) narrow the end to the key after the last row read. Only if
        `chunk` is still the snapshot's current chunk (SnapshotConflictError otherwise)."""
        columns: list[tuple[str, Any]] = [("FenceUs", fence_us)]
        if chunk.keys is None:
            columns.append(("End", _optional_bound(end)))
        condition = SingleColumnCondition("Number", chunk.number, ComparatorType.EQUAL, pass_if_missing=False)
        what = f"chunk {chunk.number} of snapshot {chunk.snapshot_id}"
        self._write("update_row", Row(self._chunk_key(chunk.stream_id, chunk.snapshot_id), {"put": columns}),
                    Condition(RowExistenceExpectation.EXPECT_EXIST, condition), f"set the fence of {what}",
                    conflict=f"{what} is no longer its open chunk")  # fmt: skip
        return replace(chunk, fence_us=fence_us, end=end if chunk.keys is None else chunk.end)

    def close_chunk(self, chunk: IncrementalChunk, state: ChunkState, now_ms: int) -> None:
        """Mark `chunk` EMITTED or ABANDONED (only if it is still the snapshot's current chunk), then delete its
        reports."""
        condition = SingleColumnCondition("Number", chunk.number, ComparatorType.EQUAL, pass_if_missing=False)
        row = Row(self._chunk_key(chunk.stream_id, chunk.snapshot_id),
                  {"put": [("State", state.value), ("ClosedMs", now_ms)]})  # fmt: skip
        what = f"chunk {chunk.number} of snapshot {chunk.snapshot_id}"
        self._write("update_row", row, Condition(RowExistenceExpectation.EXPECT_EXIST, condition),
                    f"mark {what} {state.value}", conflict=f"{what} is no longer its open chunk")  # fmt: skip
        self.delete_reports(chunk.stream_id, chunk.snapshot_id, chunk.number)

    # ----- reports --------------------------------------------------------------------------------------------

    def write_report(self, report: IncrementalReport) -> None:
        columns: list[tuple[str, Any]] = [
            ("Passed", report.passed), ("DirtyKeys", _encode_keys(report.dirty_keys)),
            ("Epochs", json.dumps(list(report.epochs))), ("ReportedMs", report.reported_ms),
            ("Holding", report.holding),
        ]  # fmt: skip
        if report.newest_epoch is not None:
            columns.append(("NewestEpoch", report.newest_epoch))
        value = f"{self._report_prefix(report.snapshot_id, report.chunk)}{report.shard_id}"
        what = f"report shard {report.shard_id} on chunk {report.chunk} of snapshot {report.snapshot_id}"
        self._write("put_row", Row(self._report_key(report.stream_id, value), columns), _IGNORE, what)

    def read_reports(self, stream_id: str, snapshot_id: str, chunk: int) -> list[IncrementalReport]:
        prefix = self._report_prefix(snapshot_id, chunk)
        found = []
        for value, columns in self._scan(stream_id, REPORT_TYPE, prefix):
            read = _Columns(columns)
            newest = columns.get("NewestEpoch")
            try:
                found.append(IncrementalReport(
                    stream_id, snapshot_id, chunk, value[len(prefix):], bool(columns.get("Passed", False)),
                    tuple(read.bounds("DirtyKeys")), tuple(int(e) for e in json.loads(read.text("Epochs", "[]"))),
                    None if newest is None else int(newest), read.number("ReportedMs"),
                    bool(columns.get("Holding", False)),
                ))  # fmt: skip
            except (ValueError, TypeError) as error:
                raise self._malformed(f"report {value}", error) from None
        return found

    def delete_reports(self, stream_id: str, snapshot_id: str, chunk: int) -> None:
        prefix = self._report_prefix(snapshot_id, chunk)
        for value, _ in self._scan(stream_id, REPORT_TYPE, prefix):
            self._delete(self._report_key(stream_id, value), f"remove report {value}")

    def delete_snapshot_reports(self, stream_id: str, snapshot_id: str) -> None:
        """Remove every report on any chunk of a snapshot (call when it ends): an owner whose view of a chunk was
        up to R old may store a report after the chunk was closed and its reports deleted."""
        for value, _ in self._scan(stream_id, REPORT_TYPE, f"{snapshot_id}/"):
            self._delete(self._report_key(stream_id, value), f"remove report {value}")

    # ----- decoding -------------------------------------------------------------------------------------------

    def _snapshot(self, stream_id: str, snapshot_id: str, columns: dict[str, Any]) -> IncrementalSnapshot:
        read = _Columns(columns)
        try:
            rate = float(columns.get("RowsPerSecond") or 0.0)
            pending = json.loads(read.text("PendingKeys", "[]"))
            return IncrementalSnapshot(
                stream_id=stream_id, snapshot_id=snapshot_id, table=read.text("Table"),
                state=IncrementalState(read.text("State")), begin=read.bound("Begin"), end=read.bound("End"),
                requested_by=RequestedBy(read.text("RequestedBy", RequestedBy.SIGNAL.value)),
                rows_per_second=rate if rate > 0 else None, resume=read.bound("ResumeKey"),
                range_done=bool(columns.get("RangeDone", False)), rows=read.number("Rows"),
                chunks=read.number("Chunks"),
                pending_keys=tuple(PendingKey(decode_bound(text), int(attempts)) for text, attempts in pending),
                skipped_keys=tuple(read.bounds("SkippedKeys")), exporter_id=read.text("ExporterId"),
                heartbeat_ms=read.number("HeartbeatMs"), created_ms=read.number("CreatedMs"),
                updated_ms=read.number("UpdatedMs"), error=read.text("Error"),
            )  # fmt: skip
        except (ValueError, TypeError) as error:
            raise self._malformed(f"incremental snapshot {snapshot_id}", error) from None

    def _chunk(self, stream_id: str, snapshot_id: str, columns: dict[str, Any]) -> IncrementalChunk:
        read = _Columns(columns)
        try:
            keys = tuple(read.bounds("Keys")) if columns.get("IsKeyList") else None
            return IncrementalChunk(
                stream_id, snapshot_id, int(columns["Number"]), int(columns["WindowStartUs"]),
                int(columns["FenceUs"]) or None, ChunkState(read.text("State")), read.bound("Begin"), read.bound("End"),
                keys, read.number("OpenedMs"),
            )  # fmt: skip
        except (KeyError, ValueError, TypeError) as error:
            raise self._malformed(f"the chunk of snapshot {snapshot_id}", error) from None

    def _malformed(self, what: str, error: Exception) -> SnapshotStateError:
        detail = f"column {error} is missing" if isinstance(error, KeyError) else str(error)
        return SnapshotStateError(
            f"{what} in status table {self._table} is malformed ({detail}); cancel it (`cdcbridge snapshot cancel`) "
            "or delete its row, and request the snapshot again"
        )

    # ----- primitives -----------------------------------------------------------------------------------------

    @staticmethod
    def _snapshot_key(stream_id: str, snapshot_id: str) -> list[tuple[str, str]]:
        return [("StreamId", stream_id), ("StatusType", SNAPSHOT_TYPE), ("StatusValue", snapshot_id)]

    @staticmethod
    def _chunk_key(stream_id: str, snapshot_id: str) -> list[tuple[str, str]]:
        return [("StreamId", stream_id), ("StatusType", CHUNK_TYPE), ("StatusValue", snapshot_id)]

    @staticmethod
    def _report_key(stream_id: str, value: str) -> list[tuple[str, str]]:
        return [("StreamId", stream_id), ("StatusType", REPORT_TYPE), ("StatusValue", value)]

    @staticmethod
    def _report_prefix(snapshot_id: str, chunk: int) -> str:
        return f"{snapshot_id}/{chunk:010d}/"

    def _exporter_update(self, snapshot: IncrementalSnapshot, columns: list[tuple[str, Any]], what: str) -> None:
        condition = SingleColumnCondition("ExporterId", snapshot.exporter_id, ComparatorType.EQUAL,
                                          pass_if_missing=False)  # fmt: skip
        try:
            self._write("update_row", Row(self._snapshot_key(snapshot.stream_id, snapshot.snapshot_id),
                                          {"put": columns}),
                        Condition(RowExistenceExpectation.EXPECT_EXIST, condition),
                        f"{what} incremental snapshot {snapshot.snapshot_id}", conflict="")  # fmt: skip
        except SnapshotConflictError:
            raise ExporterReplacedError(
                f"incremental snapshot {snapshot.snapshot_id} of table {snapshot.table} was taken over by another "
                "exporter (this one's heartbeat was judged dead) or removed; this exporter stops"
            ) from None

    def _write(self, api: str, row: Row, condition: Condition, what: str, *, conflict: str | None = None) -> None:
        try:
            getattr(self._client, api)(self._table, row, condition)
        except OTSServiceError as error:
            if conflict is not None and error.get_error_code() == "OTSConditionCheckFail":
                raise SnapshotConflictError(conflict) from None
            raise self._error(what, error) from None
        except _STORE_ERRORS as error:
            raise self._error(what, error) from None

    def _get(self, key: list[tuple[str, str]], what: str) -> dict[str, Any] | None:
        try:
            _, row, _ = self._client.get_row(self._table, key, columns_to_get=None, max_version=1)
        except _STORE_ERRORS as error:
            raise self._error(f"read {what}", error) from None
        if row is None:
            return None
        return {name: value for name, value, *_ in row.attribute_columns}

    def _scan(self, stream_id: str, status_type: str, prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
        """(StatusValue, columns) of the rows of one type under the stream, those starting with `prefix` only."""
        low: Any = prefix if prefix else INF_MIN
        high: Any = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else INF_MAX
        start: Any = [("StreamId", stream_id), ("StatusType", status_type), ("StatusValue", low)]
        end = [("StreamId", stream_id), ("StatusType", status_type), ("StatusValue", high)]
        found: list[tuple[str, dict[str, Any]]] = []
        while start:
            try:
                _, start, rows, _ = self._client.get_range(self._table, "FORWARD", start, end, max_version=1)
            except _STORE_ERRORS as error:
                raise self._error(f"read the {status_type} rows", error) from None
            for row in rows:
                value = str(dict(row.primary_key)["StatusValue"])
                found.append((value, {name: v for name, v, *_ in row.attribute_columns}))
        return found

    def _delete(self, key: list[tuple[str, str]], what: str) -> None:
        try:
            self._client.delete_row(self._table, Row(key), _IGNORE)
        except _STORE_ERRORS as error:
            raise self._error(what, error) from None

    def _error(self, what: str, error: Exception) -> SnapshotStateError:
        detail: object = error
        if isinstance(error, OTSServiceError):
            detail = f"{error.get_error_code()} {error.get_error_message()}"
        return SnapshotStateError(f"could not {what} in status table {self._table}: {detail}")
