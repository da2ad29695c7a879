"""The lease protocol of leases.md §5.2, written once over primitive conditional row writes.

Backends (in-memory, Tablestore) implement only the row primitives with Tablestore's condition semantics; the
conditions of each operation and the resolution of ambiguous writes by re-reading (I9) live here, so every backend
behaves identically.
"""

from __future__ import annotations

import logging
import threading
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from cdcbridge.coordination.checkpoint.positions import TRIM_HORIZON, ExtendedSequence
from cdcbridge.coordination.clock import Clock, SystemClock
from cdcbridge.coordination.errors import LeaseLostError, LeaseStoreUnavailableError
from cdcbridge.coordination.leases.lease import (
    COL_CHECKPOINT,
    COL_CHECKPOINT_SEQ,
    COL_LEASE_COUNTER,
    COL_LEASE_OWNER,
    COL_LEASE_STEALER,
    COL_PARENT_SHARD_IDS,
    NOBODY,
    Lease,
    LeaseKey,
    encode_parent_ids,
)
from cdcbridge.coordination.leases.row_format import InvalidLeaseRowError, LeaseRowReporter, parse_lease_row
from cdcbridge.coordination.leases.store import LeaseStore

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: A stored attribute value (Tablestore STRING or INTEGER).
ColumnValue = str | int
#: The attribute columns of one row.
Columns = dict[str, ColumnValue]


class RowExistence(StrEnum):
    """Tablestore RowExistenceExpectation."""

    IGNORE = "IGNORE"
    EXPECT_EXIST = "EXPECT_EXIST"
    EXPECT_NOT_EXIST = "EXPECT_NOT_EXIST"


@dataclass(frozen=True, slots=True)
class ColumnEquals:
    """A SingleColumnCondition with comparator EQUAL on the latest version."""

    name: str
    value: ColumnValue
    pass_if_missing: bool = False


@dataclass(frozen=True, slots=True)
class RowCondition:
    """Row existence plus columns that must all hold (a CompositeColumnCondition AND)."""

    existence: RowExistence
    columns: tuple[ColumnEquals, ...] = ()

    def holds_for(self, row: Columns | None) -> bool:
        """Tablestore's evaluation of this condition against the current row (None = no row)."""
        if self.existence is RowExistence.EXPECT_EXIST and row is None:
            return False
        if self.existence is RowExistence.EXPECT_NOT_EXIST and row is not None:
            return False
        current = row or {}
        for column in self.columns:
            if column.name not in current:
                if not column.pass_if_missing:
                    return False
            elif current[column.name] != column.value:
                return False
        return True


class ConditionCheckFailed(Exception):
    """Primitive outcome: the row condition did not hold, nothing was written (OTSConditionCheckFail)."""


class WriteOutcomeUnknown(Exception):
    """Primitive outcome: the request may or may not have been applied (timeout, 5xx, dropped response)."""


class LeaseOperation(StrEnum):
    CREATE = "create"
    RENEW = "renew"
    CHECKPOINT = "checkpoint"
    TAKE = "take"
    STEAL_REQUEST = "steal-request"
    TRANSFER = "transfer"
    RELEASE = "release"
    DELETE = "delete"


class ConditionalLeaseStore(LeaseStore):
    """LeaseStore on top of five row primitives a backend provides.

    Primitive contract: writes raise ConditionCheckFailed (definitely not applied, condition false) or
    WriteOutcomeUnknown (maybe applied); reads raise LeaseStoreUnavailableError on transport errors.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        read_retries: int = 10,
        retry_backoff_seconds: float = 0.1,
        retry_backoff_cap_seconds: float = 1.0,
    ) -> None:
        self._clock = clock or SystemClock()
        self._read_retries = read_retries
        self._backoff = retry_backoff_seconds
        self._backoff_cap = retry_backoff_cap_seconds
        self._stats_lock = threading.Lock()
        #: Writes reported as failed or unknown that a re-read proved applied (I9).
        self.resolved_ambiguous_writes = 0
        self._row_reporter = LeaseRowReporter(self._clock.monotonic)

    # ----- primitives a backend implements -------------------------------------------------------------------

    @abstractmethod
    def _put_row(self, key: LeaseKey, columns: Columns, condition: RowCondition) -> None: ...

    @abstractmethod
    def _update_row(self, key: LeaseKey, put: Columns, condition: RowCondition) -> None: ...

    @abstractmethod
    def _delete_row(self, key: LeaseKey, condition: RowCondition) -> None: ...

    @abstractmethod
    def _get_row(self, key: LeaseKey) -> Columns | None: ...

    @abstractmethod
    def _scan_rows(self, stream_id: str) -> list[tuple[str, Columns]]:
        """(shard id, columns) of every lease row of a stream."""

    # ----- reads ----------------------------------------------------------------------------------------------

    def list_leases(self, stream_id: str) -> list[Lease]:
        """Every valid lease row of the stream; invalid rows are reported (see `invalid_lease_rows`) and left out,
        so no worker takes or reads their shards until someone fixes them."""
        rows = self._with_read_retries(f"list leases of stream {stream_id!r}", lambda: self._scan_rows(stream_id))
        leases = []
        for shard_id, columns in rows:
            lease = self._parse(stream_id, shard_id, columns)
            if lease is not None:
                leases.append(lease)
        self._row_reporter.scanned(stream_id, {shard_id for shard_id, _ in rows})
        return leases

    def get_lease(self, stream_id: str, shard_id: str) -> Lease | None:
        """One lease, or None if there is no row or the row is invalid (reported; a child keeps waiting on it)."""
        key = LeaseKey(stream_id, shard_id)
        columns = self._with_read_retries(f"read lease {shard_id!r}", lambda: self._get_row(key))
        return None if columns is None else self._parse(stream_id, shard_id, columns)

    def invalid_lease_rows(self, stream_id: str) -> list[InvalidLeaseRowError]:
        """The rows of `stream_id` that the last reads found invalid (edited by hand), each naming the fix."""
        return self._row_reporter.invalid_rows(stream_id)

    def _parse(self, stream_id: str, shard_id: str, columns: Columns) -> Lease | None:
        try:
            parsed = parse_lease_row(stream_id, shard_id, columns)
        except InvalidLeaseRowError as error:
            self._row_reporter.invalid(error)
            return None
        self._row_reporter.valid(stream_id, shard_id, parsed.warnings)
        return parsed.lease

    def _with_read_retries(self, what: str, read: Callable[[], _T]) -> _T:
        attempt = 0
        while True:
            try:
                return read()
            except LeaseStoreUnavailableError as exc:
                if attempt >= self._read_retries:
                    raise LeaseStoreUnavailableError(f"{what}: no answer after {attempt + 1} tries: {exc}") from exc
                attempt += 1
                self._clock.sleep(min(self._backoff * attempt, self._backoff_cap))

    # ----- writes (leases.md §5.2) ------------------------------------------------------------------------

    def create_lease_if_absent(self, lease: Lease) -> bool:
        columns: Columns = {
            COL_LEASE_OWNER: NOBODY,
            COL_LEASE_COUNTER: 0,
            COL_LEASE_STEALER: NOBODY,
            COL_CHECKPOINT: lease.checkpoint or TRIM_HORIZON,
            COL_PARENT_SHARD_IDS: encode_parent_ids(lease.parent_shard_ids),
        }
        if lease.checkpoint_seq is not None:
            columns[COL_CHECKPOINT_SEQ] = lease.checkpoint_seq.to_text()
        condition = RowCondition(RowExistence.EXPECT_NOT_EXIST)
        try:
            self._put_row(lease.key, columns, condition)
            return True
        except ConditionCheckFailed:
            return False
        except WriteOutcomeUnknown as exc:
            # Whoever wrote it, a row exists now or it does not; an existing row is never overwritten.
            what = f"re-read lease {lease.shard_id!r} after {LeaseOperation.CREATE} timed out"
            current = self._with_read_retries(what, lambda: self._get_row(lease.key))
            if current is None:
                raise LeaseStoreUnavailableError(
                    f"creating the lease of shard {lease.shard_id!r} timed out and did not land; the next shard sync "
                    "retries it"
                ) from exc
            return False

    def renew(self, lease: Lease) -> Lease:
        written = lease.evolve(counter=lease.counter + 1)
        self._conditional_update(
            LeaseOperation.RENEW,
            lease,
            put={COL_LEASE_COUNTER: written.counter},
            condition=self._owned_at(lease),
            applied=lambda cur: cur.owner == lease.owner and cur.counter == written.counter,
            unchanged=lambda cur: cur.owner == lease.owner and cur.counter == lease.counter,
        )
        return written

    def checkpoint(self, lease: Lease, checkpoint: str, checkpoint_seq: ExtendedSequence | None) -> Lease:
        put: Columns = {COL_LEASE_COUNTER: lease.counter + 1, COL_CHECKPOINT: checkpoint}
        seq = lease.checkpoint_seq
        if checkpoint_seq is not None:
            put[COL_CHECKPOINT_SEQ] = checkpoint_seq.to_text()
            seq = checkpoint_seq
        written = lease.evolve(counter=lease.counter + 1, checkpoint=checkpoint, checkpoint_seq=seq)
        self._conditional_update(
            LeaseOperation.CHECKPOINT,
            lease,
            put=put,
            condition=self._owned_at(lease),
            applied=lambda cur: (
                cur.owner == lease.owner
                and cur.counter == written.counter
                and cur.checkpoint == checkpoint
                and (checkpoint_seq is None or cur.checkpoint_seq == checkpoint_seq)
            ),
            unchanged=lambda cur: cur.owner == lease.owner and cur.counter == lease.counter,
        )
        return written

    def take(self, lease: Lease, new_owner: str) -> Lease:
        written = lease.evolve(counter=lease.counter + 1, owner=new_owner, stealer=NOBODY)
        self._conditional_update(
            LeaseOperation.TAKE,
            lease,
            put={COL_LEASE_COUNTER: written.counter, COL_LEASE_OWNER: new_owner, COL_LEASE_STEALER: NOBODY},
            condition=RowCondition(RowExistence.EXPECT_EXIST, (ColumnEquals(COL_LEASE_COUNTER, lease.counter),)),
            applied=lambda cur: cur.owner == new_owner and cur.counter == written.counter,
            unchanged=lambda cur: cur.counter == lease.counter,
        )
        return written

    def request_steal(self, lease: Lease, stealer: str) -> Lease:
        written = lease.evolve(stealer=stealer)
        self._conditional_update(
            LeaseOperation.STEAL_REQUEST,
            lease,
            put={COL_LEASE_STEALER: stealer},
            condition=RowCondition(
                RowExistence.EXPECT_EXIST,
                (
                    ColumnEquals(COL_LEASE_OWNER, lease.owner),
                    ColumnEquals(COL_LEASE_STEALER, NOBODY, pass_if_missing=True),
                ),
            ),
            applied=lambda cur: cur.owner == lease.owner and cur.stealer == stealer,
            unchanged=lambda cur: cur.owner == lease.owner and cur.stealer == NOBODY,
        )
        return written

    def transfer(self, lease: Lease, new_owner: str) -> Lease:
        written = lease.evolve(counter=lease.counter + 1, owner=new_owner)
        self._conditional_update(
            LeaseOperation.TRANSFER,
            lease,
            put={COL_LEASE_COUNTER: written.counter, COL_LEASE_OWNER: new_owner},
            condition=self._owned_at(lease),
            applied=lambda cur: cur.owner == new_owner and cur.counter == written.counter,
            unchanged=lambda cur: cur.owner == lease.owner and cur.counter == lease.counter,
        )
        return written

    def release(self, lease: Lease) -> Lease:
        written = lease.evolve(counter=lease.counter + 1, owner=NOBODY)
        self._conditional_update(
            LeaseOperation.RELEASE,
            lease,
            put={COL_LEASE_COUNTER: written.counter, COL_LEASE_OWNER: NOBODY},
            condition=self._owned_at(lease),
            applied=lambda cur: cur.owner == NOBODY and cur.counter == written.counter,
            unchanged=lambda cur: cur.owner == lease.owner and cur.counter == lease.counter,
        )
        return written

    def delete(self, lease: Lease) -> bool:
        condition = RowCondition(RowExistence.EXPECT_EXIST, (ColumnEquals(COL_LEASE_COUNTER, lease.counter),))
        try:
            self._delete_row(lease.key, condition)
            return True
        except ConditionCheckFailed:
            current = self._reread(lease.key, LeaseOperation.DELETE, None)
            if current is None:
                return False
            raise LeaseLostError(lease.shard_id, f"not deleted, it changed to {current.describe()}") from None
        except WriteOutcomeUnknown as exc:
            current = self._reread(lease.key, LeaseOperation.DELETE, exc)
            if current is None:
                self._note_resolved(LeaseOperation.DELETE, lease.shard_id)
                return True
            if current.counter == lease.counter:
                raise LeaseStoreUnavailableError(f"deleting the lease of {lease.shard_id!r} timed out") from exc
            raise LeaseLostError(lease.shard_id, f"not deleted, it changed to {current.describe()}") from exc

    # ----- helpers ----------------------------------------------------------------------------------------------

    @staticmethod
    def _owned_at(lease: Lease) -> RowCondition:
        return RowCondition(
            RowExistence.EXPECT_EXIST,
            (ColumnEquals(COL_LEASE_COUNTER, lease.counter), ColumnEquals(COL_LEASE_OWNER, lease.owner)),
        )

    def _conditional_update(
        self,
        operation: LeaseOperation,
        lease: Lease,
        *,
        put: Columns,
        condition: RowCondition,
        applied: Callable[[Lease], bool],
        unchanged: Callable[[Lease], bool],
    ) -> None:
        """Run one conditional update; resolve a failed or unknown outcome by re-reading the row (I9).

        A condition failure is re-read too: the backend (or the SDK's own retry) may have applied an earlier attempt,
        and that must not look like a lost lease (KCL PR #59). A failure is never retried.
        """
        try:
            self._update_row(lease.key, put, condition)
            return
        except ConditionCheckFailed:
            cause: Exception | None = None
        except WriteOutcomeUnknown as exc:
            cause = exc
        current = self._reread(lease.key, operation, cause)
        if current is not None and applied(current):
            self._note_resolved(operation, lease.shard_id)
            return
        if cause is not None and current is not None and unchanged(current):
            raise LeaseStoreUnavailableError(
                f"{operation} of the lease of shard {lease.shard_id!r} timed out and did not land ({cause}); "
                "the lease is unchanged, the next cycle tries again"
            ) from cause
        now = current.describe() if current is not None else "the row is gone"
        raise LeaseLostError(lease.shard_id, f"{operation} expected counter {lease.counter}, found {now}")

    def _reread(self, key: LeaseKey, operation: LeaseOperation, cause: Exception | None) -> Lease | None:
        """The row now (None if gone); a row edited into an invalid state means the lease is no longer ours."""
        what = f"re-read lease {key.shard_id!r} after {operation} " + ("timed out" if cause else "condition failed")
        columns = self._with_read_retries(what, lambda: self._get_row(key))
        if columns is None:
            return None
        try:
            return parse_lease_row(key.stream_id, key.shard_id, columns).lease
        except InvalidLeaseRowError as error:
            self._row_reporter.invalid(error)
            raise LeaseLostError(key.shard_id, f"{operation} found the row edited into an invalid state") from cause

    def _note_resolved(self, operation: LeaseOperation, shard_id: str) -> None:
        with self._stats_lock:
            self.resolved_ambiguous_writes += 1
        log.info("lease %s of shard %s was applied although reported failed; resolved by re-read", operation, shard_id)
