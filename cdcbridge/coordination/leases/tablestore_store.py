"""Lease rows in a Tablestore status table, through the official SDK (tablestore 6.4.8).

Schema (the Java Tablestore Stream Client's, so its checkpoints can be adopted): primary key StreamId, StatusType
("LeaseKey"), StatusValue (shard id), all STRING; attributes Checkpoint, LeaseCounter (INTEGER), LeaseOwner,
LeaseStealer, ParentShardIds, plus our optional CheckpointSeq. Do not run Java and Python workers on one table at the
same time: the protocol here is stricter (leases.md §5.1).
"""

from __future__ import annotations

import logging
from typing import Any

from tablestore import (
    INF_MAX,
    INF_MIN,
    CapacityUnit,
    ComparatorType,
    CompositeColumnCondition,
    Condition,
    LogicalOperator,
    OTSClient,
    OTSClientError,
    OTSServiceError,
    ReservedThroughput,
    Row,
    RowExistenceExpectation,
    SingleColumnCondition,
    TableMeta,
    TableOptions,
)
from urllib3.exceptions import HTTPError

from cdcbridge.coordination.clock import Clock
from cdcbridge.coordination.errors import LeaseStoreError, LeaseStoreUnavailableError
from cdcbridge.coordination.leases.conditional import (
    Columns,
    ConditionalLeaseStore,
    ConditionCheckFailed,
    RowCondition,
    RowExistence,
    WriteOutcomeUnknown,
)
from cdcbridge.coordination.leases.lease import (
    COL_LEASE_COUNTER,
    COL_STATUS_TYPE,
    COL_STATUS_VALUE,
    COL_STREAM_ID,
    LEASE_STATUS_TYPE,
    LeaseKey,
)
from cdcbridge.coordination.settings import CoordinationSettings
from cdcbridge.tablestore.errors import transport_failure

log = logging.getLogger(__name__)

#: Primary-key schema of the status table (seed schema, exactly).
STATUS_TABLE_PRIMARY_KEY: list[tuple[str, str]] = [
    (COL_STREAM_ID, "STRING"),
    (COL_STATUS_TYPE, "STRING"),
    (COL_STATUS_VALUE, "STRING"),
]

_CONDITION_FAILED = "OTSConditionCheckFail"
_TABLE_MISSING = "OTSObjectNotExist"
_TABLE_EXISTS = "OTSObjectAlreadyExist"
_TABLE_NOT_READY = "OTSTableNotReady"
#: Error codes that say "try later" rather than "your request is wrong".
_TRANSIENT_CODES = frozenset(
    {
        "OTSTimeout",
        "OTSRequestTimeout",
        "OTSInternalServerError",
        "OTSServerUnavailable",
        "OTSServerBusy",
        "OTSPartitionUnavailable",
        "OTSRowOperationConflict",
        "OTSNotEnoughCapacityUnit",
        "OTSCapacityUnitExhausted",
        "OTSOperationThrottled",
        "OTSQuotaExhausted",
        "OTSFlowControl",
        _TABLE_NOT_READY,
    }
)


def primary_key(key: LeaseKey) -> list[tuple[str, Any]]:
    """The SDK primary key of a lease row."""
    return [(COL_STREAM_ID, key.stream_id), (COL_STATUS_TYPE, LEASE_STATUS_TYPE), (COL_STATUS_VALUE, key.shard_id)]


def sdk_condition(condition: RowCondition) -> Condition:
    """Translate a RowCondition to tablestore.Condition (AND of EQUAL single-column conditions)."""
    singles = [
        SingleColumnCondition(
            c.name, c.value, ComparatorType.EQUAL, pass_if_missing=c.pass_if_missing, latest_version_only=True
        )
        for c in condition.columns
    ]
    column_condition: Any = None
    if len(singles) == 1:
        column_condition = singles[0]
    elif singles:
        column_condition = CompositeColumnCondition(LogicalOperator.AND)
        for single in singles:
            column_condition.add_sub_condition(single)
    expectation = {
        RowExistence.IGNORE: RowExistenceExpectation.IGNORE,
        RowExistence.EXPECT_EXIST: RowExistenceExpectation.EXPECT_EXIST,
        RowExistence.EXPECT_NOT_EXIST: RowExistenceExpectation.EXPECT_NOT_EXIST,
    }[condition.existence]
    return Condition(expectation, column_condition)


def _is_transient(exc: BaseException) -> bool:
    """Whether a failed call may have been fine and is worth repeating (transport errors, 5xx, throttling)."""
    if isinstance(exc, OTSServiceError):
        return exc.get_error_code() in _TRANSIENT_CODES or (exc.get_http_status() or 0) >= 500
    if isinstance(exc, OTSClientError):
        # The SDK sets http_status only when a response arrived but failed validation; without it the request itself
        # was malformed (a programming or configuration error).
        return exc.get_http_status() is not None
    return isinstance(exc, OSError | HTTPError)


def _transient_reason(exc: BaseException) -> str:
    """A transport failure in words ("cannot reach Tablestore at URL (connection refused)"), anything else as is."""
    failure = transport_failure(exc)
    return failure.describe() if failure is not None else repr(exc)


class TablestoreLeaseStore(ConditionalLeaseStore):
    """ConditionalLeaseStore whose rows live in a Tablestore table, accessed with an `OTSClient`."""

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        clock: Clock | None = None,
        read_retries: int = 10,
        retry_backoff_seconds: float = 0.1,
        retry_backoff_cap_seconds: float = 1.0,
        table_ready_timeout_seconds: float = 120.0,
        table_ready_poll_seconds: float = 0.1,
    ) -> None:
        super().__init__(
            clock=clock,
            read_retries=read_retries,
            retry_backoff_seconds=retry_backoff_seconds,
            retry_backoff_cap_seconds=retry_backoff_cap_seconds,
        )
        self._client = client
        self._table = table_name
        self._ready_timeout = table_ready_timeout_seconds
        self._ready_poll = table_ready_poll_seconds

    @classmethod
    def from_settings(
        cls, client: Any, settings: CoordinationSettings, *, clock: Clock | None = None
    ) -> TablestoreLeaseStore:
        """The store of `settings.status_table` with the configured read retries and back-off, so every product
        entry point (bridge, status, snapshot) reads the lease table the way the user configured it."""
        return cls(
            client,
            settings.status_table,
            clock=clock,
            read_retries=settings.store_read_retries,
            retry_backoff_seconds=settings.store_retry_backoff_seconds,
            retry_backoff_cap_seconds=settings.store_retry_backoff_cap_seconds,
        )

    @property
    def table_name(self) -> str:
        return self._table

    # ----- table ----------------------------------------------------------------------------------------------

    def ensure_table(self) -> None:
        """Create the status table if missing (TTL off, one version), check its key, wait until it serves."""
        try:
            described = self._client.describe_table(self._table)
        except OTSServiceError as exc:
            if exc.get_error_code() != _TABLE_MISSING:
                raise self._store_error("describe the status table", exc) from exc
            self._create_table()
        except Exception as exc:
            raise self._store_error("describe the status table", exc) from exc
        else:
            self._check_schema(described.table_meta.schema_of_primary_key)
        self._wait_until_ready()

    def _create_table(self) -> None:
        meta = TableMeta(self._table, list(STATUS_TABLE_PRIMARY_KEY))
        options = TableOptions(time_to_live=-1, max_version=1)
        try:
            self._client.create_table(meta, options, ReservedThroughput(CapacityUnit(0, 0)))
            log.info("created lease status table %s", self._table)
        except OTSServiceError as exc:
            if exc.get_error_code() != _TABLE_EXISTS:  # another worker created it first: fine
                raise self._store_error("create the status table", exc) from exc
        except Exception as exc:
            raise self._store_error("create the status table", exc) from exc

    def _check_schema(self, schema: list[tuple[Any, ...]]) -> None:
        found = [(name, kind) for name, kind, *_ in schema]
        if found != STATUS_TABLE_PRIMARY_KEY:
            raise LeaseStoreError(
                f"status table {self._table!r} has primary key {found}, expected {STATUS_TABLE_PRIMARY_KEY}; "
                "point coordination.status_table at another table or drop this one"
            )

    def _wait_until_ready(self) -> None:
        """Poll with a GetRow until the new table answers (as the Java client does, ≤ 120 s)."""
        deadline = self._clock.monotonic() + self._ready_timeout
        probe = LeaseKey("__cdcbridge_ready_probe__", "probe")
        while True:
            try:
                self._client.get_row(self._table, primary_key(probe), columns_to_get=None, max_version=1)
                return
            except Exception as exc:
                code = exc.get_error_code() if isinstance(exc, OTSServiceError) else None
                not_ready = code in (_TABLE_NOT_READY, _TABLE_MISSING)
                if not (not_ready or _is_transient(exc)):
                    raise self._store_error("probe the status table", exc) from exc
                if self._clock.monotonic() >= deadline:
                    raise LeaseStoreUnavailableError(
                        f"status table {self._table!r} not ready after {self._ready_timeout:.0f} s: {exc}"
                    ) from exc
                self._clock.sleep(self._ready_poll)

    # ----- primitives -------------------------------------------------------------------------------------------

    def _put_row(self, key: LeaseKey, columns: Columns, condition: RowCondition) -> None:
        row = Row(primary_key(key), list(columns.items()))
        self._send_write("PutRow", key, lambda: self._client.put_row(self._table, row, sdk_condition(condition)))

    def _update_row(self, key: LeaseKey, put: Columns, condition: RowCondition) -> None:
        row = Row(primary_key(key), {"put": list(put.items())})
        self._send_write("UpdateRow", key, lambda: self._client.update_row(self._table, row, sdk_condition(condition)))

    def _delete_row(self, key: LeaseKey, condition: RowCondition) -> None:
        row = Row(primary_key(key))
        self._send_write("DeleteRow", key, lambda: self._client.delete_row(self._table, row, sdk_condition(condition)))

    def _get_row(self, key: LeaseKey) -> Columns | None:
        try:
            _, row, _ = self._client.get_row(self._table, primary_key(key), columns_to_get=None, max_version=1)
        except Exception as exc:
            raise self._read_error(f"GetRow of lease {key.shard_id!r}", exc) from exc
        return None if row is None else _columns_of(row)

    def _scan_rows(self, stream_id: str) -> list[tuple[str, Columns]]:
        start: Any = [(COL_STREAM_ID, stream_id), (COL_STATUS_TYPE, LEASE_STATUS_TYPE), (COL_STATUS_VALUE, INF_MIN)]
        end = [(COL_STREAM_ID, stream_id), (COL_STATUS_TYPE, LEASE_STATUS_TYPE), (COL_STATUS_VALUE, INF_MAX)]
        found: list[tuple[str, Columns]] = []
        while start is not None:
            try:
                _, next_start, rows, _ = self._client.get_range(
                    self._table, "FORWARD", start, end, columns_to_get=None, max_version=1
                )
            except Exception as exc:
                raise self._read_error(f"GetRange of the leases of stream {stream_id!r}", exc) from exc
            for row in rows:
                found.append((str(dict(_pk_pairs(row))[COL_STATUS_VALUE]), _columns_of(row)))
            start = next_start or None
        return found

    # ----- error mapping ----------------------------------------------------------------------------------------

    def _send_write(self, api: str, key: LeaseKey, call: Any) -> None:
        try:
            call()
        except OTSServiceError as exc:
            if exc.get_error_code() == _CONDITION_FAILED:
                raise ConditionCheckFailed(f"{api} of lease {key.shard_id!r}: {exc}") from exc
            if _is_transient(exc):
                raise WriteOutcomeUnknown(f"{api} of lease {key.shard_id!r}: {exc}") from exc
            raise self._store_error(f"{api} of lease {key.shard_id!r}", exc) from exc
        except Exception as exc:
            if _is_transient(exc):
                raise WriteOutcomeUnknown(f"{api} of lease {key.shard_id!r}: {exc!r}") from exc
            raise self._store_error(f"{api} of lease {key.shard_id!r}", exc) from exc

    def _read_error(self, what: str, exc: Exception) -> Exception:
        if _is_transient(exc):
            return LeaseStoreUnavailableError(f"{what} in table {self._table!r}: {_transient_reason(exc)}")
        return self._store_error(what, exc)

    def _store_error(self, what: str, exc: BaseException) -> LeaseStoreError:
        if _is_transient(exc):
            return LeaseStoreUnavailableError(f"could not {what} ({self._table!r}): {_transient_reason(exc)}")
        return LeaseStoreError(
            f"could not {what} ({self._table!r}): {exc}; check the endpoint, instance, credentials and that the "
            "status table is not used by something else"
        )


def _pk_pairs(row: Any) -> list[tuple[Any, Any]]:
    return [(item[0], item[1]) for item in row.primary_key]


def _columns_of(row: Any) -> Columns:
    """Attribute columns of an SDK Row (items are (name, value, timestamp)); latest version wins."""
    columns: Columns = {}
    seen_ts: dict[str, int] = {}
    for item in row.attribute_columns or []:
        name, value = item[0], item[1]
        ts = item[2] if len(item) > 2 and item[2] is not None else 0
        if name not in seen_ts or ts >= seen_ts[name]:
            seen_ts[name] = ts
            columns[name] = value
    return columns


def lease_renew_times(client: OTSClient, status_table: str, stream_id: str) -> dict[str, int]:
    """shard id → ms timestamp of the latest LeaseCounter write."""
    start: Any = [(COL_STREAM_ID, stream_id), (COL_STATUS_TYPE, LEASE_STATUS_TYPE), (COL_STATUS_VALUE, INF_MIN)]
    end = [(COL_STREAM_ID, stream_id), (COL_STATUS_TYPE, LEASE_STATUS_TYPE), (COL_STATUS_VALUE, INF_MAX)]
    times: dict[str, int] = {}
    while start:
        _, start, rows, _ = client.get_range(
            status_table, "FORWARD", start, end, columns_to_get=[COL_LEASE_COUNTER], max_version=1
        )
        for row in rows:
            shard = dict(row.primary_key)[COL_STATUS_VALUE]
            for name, _value, timestamp in row.attribute_columns:
                if name == COL_LEASE_COUNTER:
                    times[shard] = timestamp
    return times
