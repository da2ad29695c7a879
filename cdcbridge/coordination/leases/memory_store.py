"""An in-memory lease store with Tablestore's condition semantics, a write log and fault injection.

Used by unit and property tests (and usable for single-process demos). Faults make a write "ambiguous": applied but
reported as a timeout, or lost before being applied (T8, I9).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from enum import StrEnum

from cdcbridge.coordination.clock import Clock
from cdcbridge.coordination.errors import LeaseStoreUnavailableError
from cdcbridge.coordination.leases.conditional import (
    Columns,
    ConditionalLeaseStore,
    ConditionCheckFailed,
    RowCondition,
    WriteOutcomeUnknown,
)
from cdcbridge.coordination.leases.lease import LeaseKey


class WriteFault(StrEnum):
    """How an injected fault disturbs one write."""

    #: The write lands but the caller sees a timeout (the dropped-response case).
    APPLIED_THEN_TIMEOUT = "applied-then-timeout"
    #: The write never lands and the caller sees a timeout.
    TIMEOUT_NOT_APPLIED = "timeout-not-applied"


class Primitive(StrEnum):
    PUT = "put"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class WriteRecord:
    """One applied write, for invariant checks: the row before and after (None = absent)."""

    primitive: Primitive
    key: LeaseKey
    before: Columns | None
    after: Columns | None


@dataclass(slots=True)
class _PendingFault:
    fault: WriteFault
    shard_id: str | None
    primitive: Primitive | None
    remaining: int


class InMemoryLeaseStore(ConditionalLeaseStore):
    """Lease rows in a dict, evaluated with the same RowCondition rules the Tablestore server applies."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        read_retries: int = 3,
        retry_backoff_seconds: float = 0.1,
        retry_backoff_cap_seconds: float = 1.0,
    ) -> None:
        super().__init__(
            clock=clock,
            read_retries=read_retries,
            retry_backoff_seconds=retry_backoff_seconds,
            retry_backoff_cap_seconds=retry_backoff_cap_seconds,
        )
        self._lock = threading.RLock()
        self._rows: dict[LeaseKey, Columns] = {}
        self._faults: list[_PendingFault] = []
        self._unavailable = False
        #: Every applied write in order (kept for invariant checks).
        self.write_log: list[WriteRecord] = []

    # ----- test hooks ---------------------------------------------------------------------------------------

    def inject_write_fault(
        self,
        fault: WriteFault,
        *,
        shard_id: str | None = None,
        primitive: Primitive | None = None,
        times: int = 1,
    ) -> None:
        """Disturb the next `times` writes matching `shard_id` / `primitive` (None = any)."""
        with self._lock:
            self._faults.append(_PendingFault(fault, shard_id, primitive, times))

    def clear_faults(self) -> None:
        """Drop every pending injected fault."""
        with self._lock:
            self._faults.clear()

    def set_unavailable(self, unavailable: bool) -> None:
        """While set, reads fail as unreachable and writes time out without landing."""
        with self._lock:
            self._unavailable = unavailable

    def row(self, stream_id: str, shard_id: str) -> Columns | None:
        """A copy of a stored row (for assertions)."""
        with self._lock:
            found = self._rows.get(LeaseKey(stream_id, shard_id))
            return None if found is None else dict(found)

    def put_raw_row(self, stream_id: str, shard_id: str, columns: Columns) -> None:
        """Store a row as is (e.g. one written by the Java client), bypassing the protocol."""
        with self._lock:
            self._rows[LeaseKey(stream_id, shard_id)] = dict(columns)

    # ----- LeaseStore ---------------------------------------------------------------------------------------

    def ensure_table(self) -> None:
        with self._lock:
            if self._unavailable:
                raise LeaseStoreUnavailableError("in-memory lease store set unavailable")

    # ----- primitives ---------------------------------------------------------------------------------------

    def _put_row(self, key: LeaseKey, columns: Columns, condition: RowCondition) -> None:
        self._apply(Primitive.PUT, key, condition, lambda _: dict(columns))

    def _update_row(self, key: LeaseKey, put: Columns, condition: RowCondition) -> None:
        self._apply(Primitive.UPDATE, key, condition, lambda row: {**(row or {}), **put})

    def _delete_row(self, key: LeaseKey, condition: RowCondition) -> None:
        self._apply(Primitive.DELETE, key, condition, lambda _: None)

    def _get_row(self, key: LeaseKey) -> Columns | None:
        with self._lock:
            if self._unavailable:
                raise LeaseStoreUnavailableError("in-memory lease store set unavailable")
            found = self._rows.get(key)
            return None if found is None else dict(found)

    def _scan_rows(self, stream_id: str) -> list[tuple[str, Columns]]:
        with self._lock:
            if self._unavailable:
                raise LeaseStoreUnavailableError("in-memory lease store set unavailable")
            keys = sorted(k for k in self._rows if k.stream_id == stream_id)
            return [(k.shard_id, dict(self._rows[k])) for k in keys]

    def _apply(self, primitive: Primitive, key: LeaseKey, condition: RowCondition, change) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            if self._unavailable:
                raise WriteOutcomeUnknown("in-memory lease store set unavailable")
            fault = self._take_fault(primitive, key)
            if fault is WriteFault.TIMEOUT_NOT_APPLIED:
                raise WriteOutcomeUnknown(f"injected fault: {primitive} of {key.shard_id} timed out before applying")
            before = self._rows.get(key)
            if not condition.holds_for(before):
                raise ConditionCheckFailed(f"{primitive} of {key.shard_id}: condition check failed")
            after = change(before)
            if after is None:
                self._rows.pop(key, None)
            else:
                self._rows[key] = after
            self.write_log.append(WriteRecord(primitive, key, copy.copy(before), copy.copy(after)))
            if fault is WriteFault.APPLIED_THEN_TIMEOUT:
                raise WriteOutcomeUnknown(f"injected fault: {primitive} of {key.shard_id} applied, response lost")

    def _take_fault(self, primitive: Primitive, key: LeaseKey) -> WriteFault | None:
        for pending in self._faults:
            if pending.shard_id not in (None, key.shard_id) or pending.primitive not in (None, primitive):
                continue
            pending.remaining -= 1
            if pending.remaining <= 0:
                self._faults.remove(pending)
            return pending.fault
        return None
