"""The snapshot's rows in the status table, beside the leases: the stream start and each key range's progress.

Rows (primary key StreamId = the table's stream id, StatusType, StatusValue):

- ``Snapshot`` / table name: `StartTimeUs` (the stream start T0: records committed before it are covered by the
  export), `State` (RUNNING, DONE), `Ranges` (how many key ranges, written once they are all stored),
  `Rows`, `StartedAtMs`, `FinishedAtMs`.
- ``SnapshotRange`` / zero-padded range index: `Begin`, `End`, `ResumeKey` (the next key to export; every row
  before it was acknowledged by Kafka), `Rows` (exported and acknowledged), `Done`.

The start row is created with EXPECT_NOT_EXIST, so two snapshots of one table cannot both begin.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from tablestore import (
    INF_MAX,
    INF_MIN,
    Condition,
    OTSClientError,
    OTSServiceError,
    Row,
    RowExistenceExpectation,
)
from urllib3.exceptions import HTTPError

from cdcbridge.snapshot.errors import SnapshotConflictError, SnapshotStateError
from cdcbridge.snapshot.key_bounds import KeyBound, decode_bound, encode_bound
from cdcbridge.snapshot.split_points import KeyRange

SNAPSHOT_STATUS_TYPE = "Snapshot"
RANGE_STATUS_TYPE = "SnapshotRange"
_IGNORE = Condition(RowExistenceExpectation.IGNORE)


class SnapshotState(StrEnum):
    RUNNING = "RUNNING"
    DONE = "DONE"


@dataclass(frozen=True)
class SnapshotRecord:
    """The start row of one table's snapshot. `ranges` is None until the key ranges are stored."""

    stream_id: str
    table: str
    start_us: int
    state: SnapshotState
    ranges: int | None = None
    rows: int = 0
    started_at_ms: int = 0
    finished_at_ms: int | None = None


@dataclass(frozen=True)
class RangeProgress:
    """How far one key range is exported. `resume` is None once the whole range is acknowledged (`done`)."""

    index: int
    begin: KeyBound
    end: KeyBound
    resume: KeyBound | None
    rows: int = 0

    @property
    def done(self) -> bool:
        return self.resume is None

    def advanced(self, resume: KeyBound | None, rows: int) -> RangeProgress:
        return replace(self, resume=resume, rows=rows)


class SnapshotStateStore:
    """Reads and writes the snapshot rows through an official OTSClient; failures raise SnapshotStateError."""

    def __init__(self, client: Any, status_table: str) -> None:
        self._client = client
        self._table = status_table

    # ----- the start row --------------------------------------------------------------------------------------

    def read(self, stream_id: str, table: str) -> SnapshotRecord | None:
        row = self._get(self._start_key(stream_id, table), f"the snapshot row of table {table}")
        if row is None:
            return None
        try:
            return SnapshotRecord(
                stream_id=stream_id, table=table, start_us=int(row["StartTimeUs"]),
                state=SnapshotState(row["State"]), ranges=_optional_int(row.get("Ranges")),
                rows=int(row.get("Rows", 0)), started_at_ms=int(row.get("StartedAtMs", 0)),
                finished_at_ms=_optional_int(row.get("FinishedAtMs")),
            )  # fmt: skip
        except (KeyError, ValueError) as error:
            raise SnapshotStateError(
                f"the snapshot row of table {table} in status table {self._table} is malformed ({error}); delete "
                "it and run the snapshot again"
            ) from None

    def create(self, stream_id: str, table: str, start_us: int, started_at_ms: int) -> SnapshotRecord:
        """Store the stream start of a new snapshot (fails if one exists: SnapshotConflictError)."""
        columns = [("StartTimeUs", start_us), ("State", SnapshotState.RUNNING.value), ("Rows", 0),
                   ("StartedAtMs", started_at_ms)]  # fmt: skip
        row = Row(self._start_key(stream_id, table), columns)
        try:
            self._client.put_row(self._table, row, Condition(RowExistenceExpectation.EXPECT_NOT_EXIST))
        except OTSServiceError as error:
            if error.get_error_code() == "OTSConditionCheckFail":
                raise SnapshotConflictError(
                    f"another snapshot of table {table} started at the same moment; let it finish (or run "
                    "`cdcbridge snapshot` again to resume it)"
                ) from None
            raise self._error(f"store the snapshot start of table {table}", error) from None
        except (OTSClientError, OSError, HTTPError) as error:
            raise self._error(f"store the snapshot start of table {table}", error) from None
        return SnapshotRecord(stream_id, table, start_us, SnapshotState.RUNNING, started_at_ms=started_at_ms)

    def finish(self, stream_id: str, table: str, rows: int, finished_at_ms: int) -> None:
        self._update(self._start_key(stream_id, table),
                     [("State", SnapshotState.DONE.value), ("Rows", rows), ("FinishedAtMs", finished_at_ms)],
                     f"mark the snapshot of table {table} done")  # fmt: skip

    def delete(self, stream_id: str, table: str) -> None:
        """Remove a snapshot's rows (a refused start): the bridge then streams as if there had been none."""
        self._delete_ranges(stream_id, table)
        self._delete(self._start_key(stream_id, table), f"remove the snapshot row of table {table}")

    # ----- the ranges -----------------------------------------------------------------------------------------

    def store_ranges(self, stream_id: str, table: str, ranges: list[KeyRange]) -> list[RangeProgress]:
        """Store every range (nothing exported yet), then their count: the export starts only after both. Ranges
        left by an attempt that stopped before storing the count are replaced."""
        self._delete_ranges(stream_id, table)
        stored = [RangeProgress(r.index, r.begin, r.end, r.begin) for r in ranges]
        for progress in stored:
            self.save_progress(stream_id, progress)
        self._update(self._start_key(stream_id, table), [("Ranges", len(stored))],
                     f"store the key ranges of table {table}")  # fmt: skip
        return stored

    def save_progress(self, stream_id: str, progress: RangeProgress) -> None:
        columns: list[tuple[str, Any]] = [
            ("Begin", encode_bound(progress.begin)), ("End", encode_bound(progress.end)),
            ("ResumeKey", "" if progress.resume is None else encode_bound(progress.resume)),
            ("Rows", progress.rows), ("Done", progress.done),
        ]  # fmt: skip
        self._update(self._range_key(stream_id, progress.index), columns, f"save progress of range {progress.index}")

    def read_ranges(self, stream_id: str) -> list[RangeProgress]:
        start: Any = [("StreamId", stream_id), ("StatusType", RANGE_STATUS_TYPE), ("StatusValue", INF_MIN)]
        end = [("StreamId", stream_id), ("StatusType", RANGE_STATUS_TYPE), ("StatusValue", INF_MAX)]
        found: list[RangeProgress] = []
        while start:
            try:
                _, start, rows, _ = self._client.get_range(self._table, "FORWARD", start, end, max_version=1)
            except (OTSServiceError, OTSClientError, OSError, HTTPError) as error:
                raise self._error("read the snapshot ranges", error) from None
            for row in rows:
                index = int(dict(row.primary_key)["StatusValue"])
                columns = {name: value for name, value, *_ in row.attribute_columns}
                resume = columns.get("ResumeKey", "")
                found.append(RangeProgress(
                    index, decode_bound(columns["Begin"]), decode_bound(columns["End"]),
                    None if columns.get("Done") else decode_bound(resume), int(columns.get("Rows", 0)),
                ))  # fmt: skip
        return sorted(found, key=lambda progress: progress.index)

    def _delete_ranges(self, stream_id: str, table: str) -> None:
        for progress in self.read_ranges(stream_id):
            self._delete(self._range_key(stream_id, progress.index), f"remove range {progress.index} of {table}")

    # ----- primitives ----------------------------------------------------------------------------------------

    @staticmethod
    def _start_key(stream_id: str, table: str) -> list[tuple[str, str]]:
        return [("StreamId", stream_id), ("StatusType", SNAPSHOT_STATUS_TYPE), ("StatusValue", table)]

    @staticmethod
    def _range_key(stream_id: str, index: int) -> list[tuple[str, str]]:
        return [("StreamId", stream_id), ("StatusType", RANGE_STATUS_TYPE), ("StatusValue", f"{index:06d}")]

    def _get(self, key: list[tuple[str, str]], what: str) -> dict[str, Any] | None:
        try:
            _, row, _ = self._client.get_row(self._table, key, columns_to_get=None, max_version=1)
        except (OTSServiceError, OTSClientError, OSError, HTTPError) as error:
            raise self._error(f"read {what}", error) from None
        if row is None:
            return None
        return {name: value for name, value, *_ in row.attribute_columns}

    def _update(self, key: list[tuple[str, str]], columns: list[tuple[str, Any]], what: str) -> None:
        try:
            self._client.update_row(self._table, Row(key, {"put": columns}), _IGNORE)
        except (OTSServiceError, OTSClientError, OSError, HTTPError) as error:
            raise self._error(what, error) from None

    def _delete(self, key: list[tuple[str, str]], what: str) -> None:
        try:
            self._client.delete_row(self._table, Row(key), _IGNORE)
        except (OTSServiceError, OTSClientError, OSError, HTTPError) as error:
            raise self._error(what, error) from None

    def _error(self, what: str, error: Exception) -> SnapshotStateError:
        detail: object = error
        if isinstance(error, OTSServiceError):
            detail = f"{error.get_error_code()} {error.get_error_message()}"
        return SnapshotStateError(f"could not {what} in status table {self._table}: {detail}")


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
