"""Tablestore target: replicate into tables of another (or the same) instance, as the Tunnel Service examples do.

Target table ``<apply.tablestore_table_prefix><table>`` (created with the source's primary key, max_versions 1
when missing): the attribute columns with their native types, ``_versions`` (JSON text column → version ms: the
cells' own timestamps are the target's write time, not the source version), ``_seq``, ``_deleted``, ``_source_ts``.

Each changed row is one PutRow of its whole folded state inside BatchWriteRow (≤ 200 rows and 4 MiB per call), with the
guard as the write condition ``_seq < new seq, or no _seq`` (``SingleColumnCondition(pass_if_missing=True)``):
a row failing it is already newer (a stale replay) and is not an error. Rows that fail for another reason
(throttling, a server error) are retried with backoff; a row still failing stops the batch. There is no
cross-row transaction: the marker row (``<prefix>_apply_progress``) is written after the rows, so a batch cut
short is re-run and the guard turns its replayed rows into no-ops. Dead letters are keyed by
(topic, partition, offset), so writing one twice is harmless.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

from tablestore import (
    BatchGetRowRequest,
    BatchWriteRowRequest,
    CapacityUnit,
    ComparatorType,
    Condition,
    OTSClient,
    PutRowItem,
    ReservedThroughput,
    Row,
    RowExistenceExpectation,
    SingleColumnCondition,
    TableInBatchGetRowItem,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
)
from tablestore.error import OTSClientError, OTSServiceError

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.model import ColumnValue, PkValue, PrimaryKey, TargetRow
from cdcbridge.apply.errors import TargetError
from cdcbridge.apply.target import ApplyTarget, TargetBatch
from cdcbridge.apply.targets.column_types import RESERVED_COLUMNS
from cdcbridge.apply.targets.dead_letters import dead_letter_row
from cdcbridge.config import BridgeConfig

#: BatchWriteRow and BatchGetRow limits of the service (rows per call; data bytes per BatchWriteRow).
WRITE_BATCH_ROWS = 200
WRITE_BATCH_BYTES = 4 * 1024 * 1024
READ_BATCH_ROWS = 100
PROGRESS_TABLE = "_apply_progress"
CONDITION_FAILED = "OTSConditionCheckFail"
_TABLE_NOT_FOUND = "OTSObjectNotExist"


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _value_bytes(value: Any) -> int:
    """A value's size as the service counts a request's data: UTF-8 strings, raw bytes, 8 for numbers."""
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bytes | bytearray):
        return len(value)
    return 1 if isinstance(value, bool) else 8


def item_data_bytes(item: PutRowItem) -> int:
    """The data one PutRow item adds to a BatchWriteRow: its key and column names and values."""
    columns = [*item.row.primary_key, *(item.row.attribute_columns or [])]
    return sum(len(column[0]) + _value_bytes(column[1]) for column in columns)


def write_chunks(items: Sequence[PutRowItem]) -> Iterator[list[PutRowItem]]:
    """Consecutive chunks of at most WRITE_BATCH_ROWS rows and WRITE_BATCH_BYTES of data (a row larger than that
    alone goes in a chunk of its own, and the service's error names it)."""
    chunk: list[PutRowItem] = []
    size = 0
    for item in items:
        item_size = item_data_bytes(item)
        if chunk and (len(chunk) == WRITE_BATCH_ROWS or size + item_size > WRITE_BATCH_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += item_size
    if chunk:
        yield chunk


def _pk_type(value: PkValue) -> str:
    if isinstance(value, bytes):
        return "BINARY"
    return "INTEGER" if isinstance(value, int) else "STRING"


def row_attributes(row: TargetRow) -> list[tuple[str, Any]]:
    """The attribute columns of a PutRow holding the row's whole state."""
    attributes: list[tuple[str, Any]] = [(name, _sdk_value(cell.value)) for name, cell in sorted(row.columns.items())]
    versions = {name: cell.version for name, cell in row.columns.items() if cell.version is not None}
    attributes.append(("_versions", json.dumps(versions, sort_keys=True)))
    if row.seq is not None:
        attributes.append(("_seq", row.seq))
    attributes.append(("_deleted", row.deleted))
    if row.source_ts is not None:
        attributes.append(("_source_ts", row.source_ts))
    return attributes


def _sdk_value(value: Any) -> Any:
    """The SDK writes BINARY only for bytearray (bytes would become STRING)."""
    return bytearray(value) if isinstance(value, bytes) else value


def _our_value(value: Any) -> Any:
    return bytes(value) if isinstance(value, bytearray) else value


def sdk_pk(pk: PrimaryKey) -> list[tuple[str, Any]]:
    return [(name, _sdk_value(value)) for name, value in pk]


def row_from_columns(table: str, pk: PrimaryKey, attributes: Sequence[Sequence[Any]]) -> TargetRow:
    values = {item[0]: _our_value(item[1]) for item in attributes}
    versions = json.loads(values.pop("_versions", None) or "{}")
    seq = values.pop("_seq", None)
    deleted = bool(values.pop("_deleted", False))
    source_ts = values.pop("_source_ts", None)
    columns = {name: ColumnValue(value, versions.get(name)) for name, value in values.items()}
    return TargetRow(table, pk, columns, seq=seq, deleted=deleted, source_ts=source_ts)


def guard_condition(seq: str | None) -> Condition:
    """Write only if the stored ``_seq`` is older (or absent)."""
    if seq is None:
        return Condition(RowExistenceExpectation.IGNORE)
    return Condition(
        RowExistenceExpectation.IGNORE,
        SingleColumnCondition("_seq", seq, ComparatorType.LESS_THAN, pass_if_missing=True),
    )


def sdk_client(config: BridgeConfig) -> OTSClient:
    """A plain SDK client for the target instance (``apply.tablestore_*``, each defaulting to the source's).

    The target writes and reads rows only, so it needs none of the stream APIs or the stream retry policy of the
    bridge's client: the SDK's own retry policy and this target's row retries are what it runs with.
    """
    apply, source = config.apply, config.source
    endpoint = apply.tablestore_endpoint or source.endpoint
    instance = apply.tablestore_instance or source.instance
    own_key = apply.tablestore_access_key_id is not None
    key_id = (apply.tablestore_access_key_id or source.access_key_id).get_secret_value()
    secret = (apply.tablestore_access_key_secret or source.access_key_secret).get_secret_value()
    # Temporary source credentials come with their STS token; the target's own keys have none.
    sts_token = None if own_key or source.sts_token is None else source.sts_token.get_secret_value()
    for name, value in (("endpoint", endpoint), ("instance", instance), ("access_key_id", key_id),
                        ("access_key_secret", secret)):  # fmt: skip
        if not value:
            raise TargetError(
                f"the Tablestore target's {name} is empty",
                fix=f"set apply.tablestore_{name} (or source.{name}, its default)",
            )
    try:
        return OTSClient(endpoint, key_id, secret, instance, region=source.region or None, sts_token=sts_token)
    except OTSClientError as error:
        raise TargetError(
            f"cannot build a Tablestore client for endpoint {endpoint!r}, instance {instance!r}: "
            f"{error.get_error_message()}"
        ) from None


class TablestoreTarget(ApplyTarget):
    """Writes folded rows into Tablestore tables with conditional BatchWriteRow (see the module docstring)."""

    name = "tablestore"

    def __init__(
        self,
        client: OTSClient,
        *,
        table_prefix: str = "",
        dead_letter_table: str = "_dead_letters",
        max_attempts: int = 5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.table_prefix = table_prefix
        self.dead_letter_table = dead_letter_table
        self.max_attempts = max_attempts
        self.sleep = sleep
        self._pk: dict[str, list[tuple[str, str]]] = {}

    @classmethod
    def from_config(cls, config: BridgeConfig) -> TablestoreTarget:
        apply = config.apply
        return cls(
            sdk_client(config), table_prefix=apply.tablestore_table_prefix, dead_letter_table=apply.dead_letter_table
        )

    def target_table(self, table: str) -> str:
        return f"{self.table_prefix}{table}"

    # --- tables -------------------------------------------------------------------------------------------------

    def prepare(self, tables: Collection[str]) -> None:
        self._create_if_missing(self.target_table(PROGRESS_TABLE), [("app_id", "STRING")])
        self._create_if_missing(
            self.target_table(self.dead_letter_table),
            [("topic", "STRING"), ("partition", "INTEGER"), ("offset", "INTEGER")],
        )

    def _create_if_missing(self, name: str, schema: list[tuple[str, str]]) -> None:
        try:
            self.client.create_table(
                TableMeta(name, schema),
                TableOptions(time_to_live=-1, max_version=1),
                ReservedThroughput(CapacityUnit(0, 0)),
            )
        except OTSServiceError as error:
            if error.get_error_code() != "OTSObjectAlreadyExist":
                raise TargetError(f"cannot create Tablestore table {name}: {error.get_error_message()}") from error

    def _table_pk(self, table: str) -> list[tuple[str, str]]:
        if table not in self._pk:
            try:
                described = self.client.describe_table(self.target_table(table))
            except OTSServiceError as error:
                if error.get_error_code() == _TABLE_NOT_FOUND:
                    return []
                raise TargetError(f"cannot describe Tablestore table {self.target_table(table)}") from error
            self._pk[table] = [(item[0], item[1]) for item in described.table_meta.schema_of_primary_key]
        return self._pk[table]

    def pk_names(self, table: str) -> tuple[str, ...] | None:
        return tuple(name for name, _ in self._table_pk(table)) or None

    def refused_rows(self, table: str, rows: Sequence[TargetRow]) -> dict[PrimaryKey, str]:
        reserved = set(RESERVED_COLUMNS)
        return {
            row.pk: f"attribute column {name!r} collides with a bookkeeping column"
            for row in rows
            for name in row.columns
            if name in reserved
        }

    # --- reading ------------------------------------------------------------------------------------------------

    def read_marker(self, table: str, app_id: str) -> BatchMarker | None:
        _, row, _ = self._call(
            "GetRow",
            lambda: self.client.get_row(self.target_table(PROGRESS_TABLE), [("app_id", app_id)], max_version=1),
        )
        if row is None or not row.attribute_columns:
            return None
        values = {item[0]: item[1] for item in row.attribute_columns}
        return BatchMarker(app_id, int(values["batch_id"]))

    def read_rows(self, table: str, keys: Collection[PrimaryKey]) -> dict[PrimaryKey, TargetRow]:
        if not keys or not self._table_pk(table):
            return {}
        name = self.target_table(table)
        rows: dict[PrimaryKey, TargetRow] = {}
        for chunk in _chunks(list(keys), READ_BATCH_ROWS):
            request = BatchGetRowRequest()
            request.add(TableInBatchGetRowItem(name, [sdk_pk(key) for key in chunk], max_version=1))
            response = self._call("BatchGetRow", lambda request=request: self.client.batch_get_row(request))
            for key, item in zip(chunk, response.get_result_by_table(name), strict=True):
                if not item.is_ok:
                    raise TargetError(
                        f"BatchGetRow of {name} failed for {dict(key)}: {item.error_code} {item.error_message}"
                    )
                if item.row is not None and item.row.primary_key:
                    rows[key] = row_from_columns(table, key, item.row.attribute_columns)
        return rows

    # --- writing ------------------------------------------------------------------------------------------------

    def write(self, batch: TargetBatch) -> int:
        written = 0
        for table, rows in batch.rows.items():
            if rows:
                self._ensure_table(table, rows[0])
                items = [PutRowItem(Row(sdk_pk(row.pk), row_attributes(row)), guard_condition(row.seq)) for row in rows]
                written += self._batch_write(self.target_table(table), items)
        if batch.dead_letters:
            items = []
            for letter in batch.dead_letters:
                record = dead_letter_row(letter, batch.marker)
                pk = [("topic", record["topic"] or ""), ("partition", record["partition"] or 0),
                      ("offset", record["offset"] if record["offset"] is not None else -1)]  # fmt: skip
                attributes = [(k, record[k]) for k in ("app_id", "batch_id", "error_type", "error", "message")]
                items.append(PutRowItem(Row(pk, [(k, v) for k, v in attributes if v is not None]), Condition("IGNORE")))
            self._batch_write(self.target_table(self.dead_letter_table), items)
        marker = batch.marker
        self._call(
            "PutRow",
            lambda: self.client.put_row(
                self.target_table(PROGRESS_TABLE), Row([("app_id", marker.app_id)], [("batch_id", marker.batch_id)])
            ),
        )
        return written

    def _ensure_table(self, table: str, row: TargetRow) -> None:
        if self._table_pk(table):
            return
        self._create_if_missing(self.target_table(table), [(name, _pk_type(value)) for name, value in row.pk])
        self._pk.pop(table, None)

    def _batch_write(self, table: str, items: list[PutRowItem]) -> int:
        """Write in chunks of ≤ 200 rows and ≤ 4 MiB; retry rows that failed other than by the guard; returns rows
        written."""
        written = 0
        for chunk in write_chunks(items):
            pending = list(chunk)
            for attempt in range(1, self.max_attempts + 1):
                request = BatchWriteRowRequest()
                request.add(TableInBatchWriteRowItem(table, pending))
                response = self._call("BatchWriteRow", lambda request=request: self.client.batch_write_row(request))
                retry = []
                for item in response.get_put_by_table(table):
                    if item.is_ok:
                        written += 1
                    elif item.error_code != CONDITION_FAILED:
                        retry.append((pending[item.index], item))
                if not retry:
                    break
                if attempt == self.max_attempts:
                    row_item, failure = retry[0]
                    raise TargetError(
                        f"BatchWriteRow to {table}: {len(retry)} rows still failing after {attempt} attempts, first "
                        f"{row_item.row.primary_key}: {failure.error_code} {failure.error_message}"
                    )
                pending = [row_item for row_item, _ in retry]
                self.sleep(min(0.1 * 2**attempt, 5.0))
        return written

    def _call(self, api: str, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except OTSServiceError as error:
            raise TargetError(
                f"Tablestore {api} failed: {error.get_error_code()} {error.get_error_message()}"
            ) from error
        except OTSClientError as error:
            raise TargetError(f"Tablestore {api} failed: {error.get_error_message()}") from error
