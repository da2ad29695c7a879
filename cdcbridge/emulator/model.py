"""The emulated Tablestore instance: tables, rows with cell versions, conditional writes, reads and streams.

Plain Python, no HTTP and no protobuf (moto's `models.py`). Every call takes the current time `now_us` from its
caller, reads the clock nowhere else, and changes nothing when it raises; so a journal of successful calls with
their `now_us` replays to the same state, and tests need no sleeping. Not thread-safe: the server serialises calls.

Writes on a table with a stream append one record per successful row mutation, in commit order, to the open shard
that owns the key's hash. The record is encoded to PlainBuffer once, here. Its sequence is (epoch, commit µs,
row index within the commit); a table's commit clock is strictly increasing, so sequences are too.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, replace
from enum import StrEnum
from typing import Any

from cdcbridge.emulator.conditions import (
    IGNORE,
    ColumnCondition,
    Condition,
    RowExistence,
    check_condition,
    column_condition_matches,
    validate_column_condition,
)
from cdcbridge.emulator.errors import (
    EmulatorError,
    InvalidPK,
    ObjectAlreadyExist,
    ObjectNotExist,
    ParameterInvalid,
    TrimmedDataAccess,
)
from cdcbridge.emulator.keys import (
    HIGHEST,
    INT64_MAX,
    INT64_MIN,
    LOWEST,
    Key,
    KeySchema,
    PrimaryKeyColumn,
    key_hash,
    validate_column_name,
)
from cdcbridge.emulator.limits import (
    Limits,
    check_attribute_value,
    check_columns_per_write,
    check_columns_to_get,
    check_defined_column_count,
    check_request_data_size,
    check_rows_per_batch,
    check_timestamp,
    row_data_size,
    row_data_upper_bound,
    value_size,
)
from cdcbridge.emulator.streams import (
    RecordBatch,
    Stream,
    StreamAction,
    StreamDescription,
    StreamRecord,
    decode_iterator,
    validate_expiration_hours,
)
from cdcbridge.tablestore.plainbuffer import (
    AUTO_INCREMENT,
    CELL_DELETE_ALL_VERSION,
    CELL_DELETE_ONE_VERSION,
    CELL_INCREMENT,
    PlainCell,
    encode_row,
)

#: The `epoch` part of every record sequence (the service's meaning is undocumented; a constant keeps order).
STREAM_EPOCH = 1
DEFINED_COLUMN_TYPES = frozenset({"INTEGER", "DOUBLE", "BOOLEAN", "STRING", "BINARY"})


@dataclass(frozen=True, slots=True)
class TableOptions:
    """`time_to_live` in seconds (-1 = forever), `max_time_deviation` in seconds."""

    time_to_live: int = -1
    max_versions: int = 1
    max_time_deviation: int = 86400
    allow_update: bool = True


@dataclass(frozen=True, slots=True)
class StreamSpec:
    enabled: bool
    expiration_hours: int | None = None
    origin_columns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamDetails:
    """What DescribeTable reports about the table's stream (all zero / None when disabled)."""

    enabled: bool
    stream_id: str | None = None
    expiration_hours: int = 0
    last_enable_time_us: int = 0
    origin_columns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TableDescription:
    name: str
    primary_key: tuple[PrimaryKeyColumn, ...]
    defined_columns: tuple[tuple[str, str], ...]
    options: TableOptions
    reserved_read: int
    reserved_write: int
    created_at_us: int
    stream: StreamDetails

    @property
    def created_at_s(self) -> int:
        return self.created_at_us // 1_000_000


class WriteKind(StrEnum):
    PUT = "PUT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"


class CellOp(StrEnum):
    PUT = "PUT"
    DELETE_ONE_VERSION = "DELETE_ONE_VERSION"
    DELETE_ALL_VERSION = "DELETE_ALL_VERSION"
    INCREMENT = "INCREMENT"


@dataclass(slots=True)
class CellChange:
    """One attribute operation of a write. PutRow cells are all PUT; `timestamp` (ms) None = server time."""

    name: str
    op: CellOp = CellOp.PUT
    value: Any = None
    timestamp: int | None = None


@dataclass(slots=True)
class RowChange:
    """One row write: PutRow, UpdateRow or DeleteRow (also one item of BatchWriteRow).

    `return_primary_key` is ReturnType RT_PK; `return_columns` (not None) is RT_AFTER_MODIFY: the answer carries the
    primary key and the new values of these columns, which must be columns the same UpdateRow increments.
    """

    kind: WriteKind
    primary_key: list[tuple[str, Any]]
    cells: list[CellChange] = field(default_factory=list)
    condition: Condition = IGNORE
    return_primary_key: bool = False
    return_columns: tuple[str, ...] | None = None

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        """Journals written before a field was added replay with that field's default (pickle's slot state)."""
        slots = state[1]
        for name, spec in self.__dataclass_fields__.items():
            if name in slots:
                object.__setattr__(self, name, slots[name])
            elif spec.default_factory is not MISSING:
                object.__setattr__(self, name, spec.default_factory())
            else:
                object.__setattr__(self, name, spec.default)


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """Result of one row write: the primary key and returned cells (name, value, timestamp_ms) when asked for,
    or the error that stopped this row."""

    primary_key: list[tuple[str, Any]] | None = None
    error: EmulatorError | None = None
    cells: Sequence[tuple[str, Any, int]] = ()


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What a read returns. `time_range` is [start_ms, end_ms); at least one of max_versions / time_range /
    specific_time must be given, as the service requires."""

    columns_to_get: tuple[str, ...] = ()
    max_versions: int | None = 1
    time_range: tuple[int, int] | None = None
    specific_time: int | None = None
    column_filter: ColumnCondition | None = None
    start_column: str | None = None
    end_column: str | None = None


@dataclass(frozen=True, slots=True)
class RowView:
    """A row as reads return it: full primary key, then cells (name, value, timestamp_ms) by name, newest first."""

    primary_key: list[tuple[str, Any]]
    cells: list[tuple[str, Any, int]]


@dataclass(frozen=True, slots=True)
class RangeResult:
    rows: list[RowView]
    next_start_primary_key: list[tuple[str, Any]] | None


@dataclass(frozen=True, slots=True)
class SplitPoints:
    """ComputeSplitPointsBySize: the table's primary-key schema and the keys that start the 2nd..nth split."""

    primary_key: list[PrimaryKeyColumn]
    points: list[list[tuple[str, Any]]]


@dataclass(frozen=True, slots=True)
class StreamInfo:
    stream_id: str
    table_name: str
    creation_time_us: int


class Row:
    """Attribute columns of one row: name -> [[timestamp_ms, value], ...], newest first."""

    __slots__ = ("columns",)

    def __init__(self, columns: dict[str, list[list[Any]]] | None = None) -> None:
        self.columns: dict[str, list[list[Any]]] = columns if columns is not None else {}

    def __reduce__(self) -> tuple[object, ...]:
        return (Row, (self.columns,))


class Table:
    """State of one table. The sorted key list for range scans is rebuilt lazily after keys come or go."""

    def __init__(
        self,
        name: str,
        schema: KeySchema,
        defined_columns: tuple[tuple[str, str], ...],
        options: TableOptions,
        reserved: tuple[int, int],
        created_at_us: int,
    ) -> None:
        self.name = name
        self.schema = schema
        self.defined_columns = defined_columns
        self.options = options
        self.reserved = reserved
        self.created_at_us = created_at_us
        self.rows: dict[Key, Row] = {}
        self.stream: Stream | None = None
        self.last_commit_us = 0
        self.last_auto_increment = 0
        self._sorted_keys: list[Key] | None = []

    def sorted_keys(self) -> list[Key]:
        if self._sorted_keys is None:
            self._sorted_keys = sorted(self.rows)
        return self._sorted_keys

    def key_set_changed(self) -> None:
        self._sorted_keys = None

    def next_commit_us(self, now_us: int) -> int:
        self.last_commit_us = max(now_us, self.last_commit_us + 1)
        return self.last_commit_us

    def next_auto_increment(self, now_us: int) -> int:
        self.last_auto_increment = max(now_us, self.last_auto_increment + 1)
        return self.last_auto_increment

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_sorted_keys"] = None
        return state


@dataclass(slots=True)
class _PlannedRow:
    """A validated row write, computed from the current state before anything changes."""

    table: Table
    kind: WriteKind
    key: Key
    columns: dict[str, list[list[Any]]] | None  # the row's new columns (PUT / UPDATE); None for DELETE
    record_cells: list[PlainCell]
    return_primary_key: bool
    origin_cells: list[PlainCell] | None = None
    returned_cells: list[tuple[str, Any, int]] | None = None  # RT_AFTER_MODIFY: the asked columns' new values


class Instance:
    """All tables and streams of one emulated instance (any instance name maps here)."""

    def __init__(self, *, increments_as_deltas: bool = False, limits: Limits | None = None) -> None:
        self.increments_as_deltas = increments_as_deltas
        self.limits = limits or Limits()
        self.tables: dict[str, Table] = {}
        self.last_stream_time_us = 0

    # -- tables -------------------------------------------------------------------------------------------------

    def table(self, name: str) -> Table:
        table = self.tables.get(name)
        if table is None:
            raise ObjectNotExist(f"Requested table does not exist: {name!r}.")
        return table

    def create_table(
        self,
        name: str,
        primary_key: Sequence[PrimaryKeyColumn],
        *,
        now_us: int,
        defined_columns: Iterable[tuple[str, str]] = (),
        options: TableOptions | None = None,
        reserved: tuple[int, int] = (0, 0),
        stream: StreamSpec | None = None,
    ) -> TableDescription:
        validate_column_name(name, "table")
        if name in self.tables:
            raise ObjectAlreadyExist(f"Requested table already exists: {name!r}.")
        schema = KeySchema(primary_key)
        defined = tuple((n, t) for n, t in defined_columns)
        check_defined_column_count(len(defined))
        for column_name, column_type in defined:
            validate_column_name(column_name)
            if column_type not in DEFINED_COLUMN_TYPES or column_name in schema.names:
                raise ParameterInvalid(f"Invalid defined column {column_name!r} of type {column_type!r}.")
        options = _validated_options(options or TableOptions())
        if stream is not None and stream.enabled:
            validate_expiration_hours(stream.expiration_hours)
        table = Table(name, schema, defined, options, reserved, now_us)
        self.tables[name] = table
        if stream is not None and stream.enabled:
            self._enable_stream(table, stream, now_us)
        return self.describe_table(name)

    def describe_table(self, name: str) -> TableDescription:
        table = self.table(name)
        stream = table.stream
        details = (
            StreamDetails(
                True, stream.stream_id, stream.expiration_hours, stream.creation_time_us, stream.origin_columns
            )
            if stream is not None
            else StreamDetails(False)
        )
        return TableDescription(
            name=table.name,
            primary_key=table.schema.columns,
            defined_columns=table.defined_columns,
            options=table.options,
            reserved_read=table.reserved[0],
            reserved_write=table.reserved[1],
            created_at_us=table.created_at_us,
            stream=details,
        )

    def list_tables(self) -> list[str]:
        return sorted(self.tables)

    def update_table(
        self,
        name: str,
        *,
        now_us: int,
        options: Mapping[str, Any] | None = None,
        reserved: tuple[int | None, int | None] | None = None,
        stream: StreamSpec | None = None,
    ) -> TableDescription:
        """Change options (only the given fields), reserved throughput, or enable / disable the stream.
        Enabling an enabled stream keeps it and updates its expiration; a disable then enable is a new stream."""
        table = self.table(name)
        new_options = table.options
        if options:
            unknown = set(options) - set(TableOptions.__dataclass_fields__)
            if unknown:
                raise ParameterInvalid(f"Unknown table options {sorted(unknown)}.")
            new_options = _validated_options(replace(table.options, **options))
        if stream is not None and stream.enabled:
            validate_expiration_hours(stream.expiration_hours)
        if stream is not None and not stream.enabled and stream.expiration_hours:
            raise ParameterInvalid("Do not set an expiration time when disabling a stream.")
        table.options = new_options
        if reserved is not None:
            read, write = reserved
            table.reserved = (
                table.reserved[0] if read is None else read,
                table.reserved[1] if write is None else write,
            )
        if stream is not None:
            if stream.enabled and table.stream is None:
                self._enable_stream(table, stream, now_us)
            elif stream.enabled and table.stream is not None:
                assert stream.expiration_hours is not None
                table.stream.expiration_hours = stream.expiration_hours
                table.stream.origin_columns = stream.origin_columns
            elif not stream.enabled:
                table.stream = None
        return self.describe_table(name)

    def delete_table(self, name: str) -> None:
        self.table(name)
        del self.tables[name]

    def _enable_stream(self, table: Table, spec: StreamSpec, now_us: int) -> None:
        assert spec.expiration_hours is not None
        self.last_stream_time_us = max(now_us, self.last_stream_time_us + 1)
        created = self.last_stream_time_us
        table.stream = Stream(
            f"{table.name}_{created}", table.name, created, spec.expiration_hours, spec.origin_columns
        )

    # -- writes -------------------------------------------------------------------------------------------------

    def write_row(self, table_name: str, change: RowChange, *, now_us: int) -> WriteOutcome:
        """PutRow / UpdateRow / DeleteRow: raises the row's error (nothing written), else commits one record."""
        table = self.table(table_name)
        planned = self._plan(table, change, now_us)
        return self._commit([planned], now_us)[0]

    def batch_write(self, items: Sequence[tuple[str, RowChange]], *, now_us: int) -> list[WriteOutcome]:
        """BatchWriteRow: each row succeeds or fails on its own; successful rows commit together (one commit
        time per table, row index = order within it). Malformed batches fail as a whole."""
        if not items:
            raise ParameterInvalid("BatchWriteRow needs at least one row.")
        check_rows_per_batch(len(items), self.limits.max_batch_write_rows)
        limit = self.limits.max_request_data_bytes
        bounds = [_data_upper_bound(change) for _, change in items]
        if sum(bounds) > limit:
            check_request_data_size("BatchWriteRow", sum(_data_size(change) for _, change in items), limit)
        seen: set[tuple[str, tuple[Any, ...]]] = set()
        for table_name, change in items:
            identity = (table_name, tuple(_hashable(v) for _, v in change.primary_key))
            if identity in seen and AUTO_INCREMENT not in (v for _, v in change.primary_key):
                raise ParameterInvalid(f"Duplicated primary key in BatchWriteRow for table {table_name!r}.")
            seen.add(identity)
        outcomes: list[WriteOutcome | None] = []
        planned: list[_PlannedRow] = []
        for (table_name, change), bound in zip(items, bounds, strict=True):
            try:
                planned.append(self._plan(self.table(table_name), change, now_us, bound))
                outcomes.append(None)
            except EmulatorError as error:
                outcomes.append(WriteOutcome(error=error))
        committed = iter(self._commit(planned, now_us))
        return [outcome if outcome is not None else next(committed) for outcome in outcomes]

    def _plan(self, table: Table, change: RowChange, now_us: int, data_bound: int | None = None) -> _PlannedRow:
        """Validate one row write against the current state; `data_bound` is its data-size bound if known."""
        now_ms = now_us // 1000
        kind = change.kind
        key = table.schema.write_key(change.primary_key, allow_auto_increment=kind is WriteKind.PUT)
        if change.condition.column_condition is not None:
            validate_column_condition(change.condition.column_condition)
        if AUTO_INCREMENT in key:
            if change.condition.row_existence is not RowExistence.IGNORE:
                raise ParameterInvalid("A row with an AUTO_INCREMENT primary key needs the condition IGNORE.")
            row = None
        else:
            row = table.rows.get(key)
        old_columns = row.columns if row is not None else {}
        check_condition(change.condition, row is not None, old_columns)
        self._check_size(change, data_bound)
        origin_cells = None
        if table.stream is not None and table.stream.origin_columns and row is not None:
            origin_cells = _latest_cells(old_columns, table.stream.origin_columns)
        return_columns = _checked_return_columns(change)
        returned = None if return_columns is None else []
        if kind is WriteKind.DELETE:
            if change.cells:
                raise ParameterInvalid("DeleteRow takes a primary key only.")
            return _PlannedRow(table, kind, key, None, [], change.return_primary_key, origin_cells, returned)
        if kind is WriteKind.PUT:
            columns, record_cells = self._plan_put(table, change.cells, now_ms)
        else:
            if not table.options.allow_update:
                raise ParameterInvalid(f"Table {table.name!r} does not allow UpdateRow (allow_update is false).")
            columns, record_cells = self._plan_update(table, old_columns, change.cells, now_ms)
            if return_columns is not None:
                returned = [(name, columns[name][0][1], columns[name][0][0]) for name in return_columns]
        return _PlannedRow(table, kind, key, columns, record_cells, change.return_primary_key, origin_cells, returned)

    def _check_size(self, change: RowChange, data_bound: int | None) -> None:
        """Columns per write, value lengths and the request's data size (documented limits, limits.py)."""
        limits = self.limits
        check_columns_per_write(len(change.cells), limits.max_columns_per_write)
        if data_bound is None:
            data_bound = _data_upper_bound(change)
        if data_bound <= min(limits.max_attribute_value_bytes, limits.max_request_data_bytes):
            return  # no single value can be too long, nor the whole row
        for cell in change.cells:
            if cell.op is CellOp.PUT:
                check_attribute_value(cell.name, cell.value, limits.max_attribute_value_bytes)
        if change.kind is not WriteKind.DELETE and data_bound > limits.max_request_data_bytes:
            api_name = "PutRow" if change.kind is WriteKind.PUT else "UpdateRow"
            check_request_data_size(api_name, _data_size(change), limits.max_request_data_bytes)

    def _check_attribute(self, table: Table, cell: CellChange) -> None:
        validate_column_name(cell.name)
        if cell.name in table.schema.names:
            raise ParameterInvalid(f"Attribute column {cell.name!r} has the name of a primary key column.")

    def _timestamp(self, table: Table, cell: CellChange, now_ms: int) -> int:
        if cell.timestamp is None:
            return now_ms
        ts = cell.timestamp
        check_timestamp(ts)
        deviation_ms = table.options.max_time_deviation * 1000
        if abs(ts - now_ms) > deviation_ms:
            raise ParameterInvalid(
                f"The timestamp {ts} of column {cell.name!r} is out of range: it may deviate from the server time "
                f"by at most {table.options.max_time_deviation} s (table option max_time_deviation)."
            )
        return ts

    def _plan_put(
        self, table: Table, cells: Sequence[CellChange], now_ms: int
    ) -> tuple[dict[str, list[list[Any]]], list[PlainCell]]:
        columns: dict[str, list[list[Any]]] = {}
        record_cells = []
        for cell in cells:
            self._check_attribute(table, cell)
            if cell.op is not CellOp.PUT:
                raise ParameterInvalid(f"PutRow column {cell.name!r} must be a plain put, not {cell.op}.")
            value = _attribute_value(cell.name, cell.value)
            ts = self._timestamp(table, cell, now_ms)
            _put_version(columns.setdefault(cell.name, []), ts, value)
            record_cells.append(PlainCell(cell.name, value, None, ts))
        _trim_versions(columns, columns, table.options.max_versions)
        return columns, record_cells

    def _plan_update(
        self, table: Table, old: Mapping[str, list[list[Any]]], cells: Sequence[CellChange], now_ms: int
    ) -> tuple[dict[str, list[list[Any]]], list[PlainCell]]:
        if not cells:
            raise ParameterInvalid("UpdateRow needs at least one column to change.")
        incremented = {cell.name for cell in cells if cell.op is CellOp.INCREMENT}
        for name in incremented:
            if sum(1 for cell in cells if cell.name == name) > 1:
                raise ParameterInvalid(f"Column {name!r} is incremented and changed otherwise in the same request.")
        columns = {name: list(versions) for name, versions in old.items()}
        touched: set[str] = set()
        record_cells = []
        for cell in cells:
            self._check_attribute(table, cell)
            touched.add(cell.name)
            if cell.op is CellOp.PUT:
                value = _attribute_value(cell.name, cell.value)
                ts = self._timestamp(table, cell, now_ms)
                _put_version(columns.setdefault(cell.name, []), ts, value)
                record_cells.append(PlainCell(cell.name, value, None, ts))
            elif cell.op is CellOp.DELETE_ONE_VERSION:
                if cell.timestamp is None:
                    raise ParameterInvalid(f"Deleting one version of column {cell.name!r} needs its timestamp.")
                ts = cell.timestamp
                versions = columns.get(cell.name)
                if versions:
                    remaining = [v for v in versions if v[0] != ts]
                    if remaining:
                        columns[cell.name] = remaining
                    else:
                        del columns[cell.name]
                record_cells.append(PlainCell(cell.name, None, CELL_DELETE_ONE_VERSION, ts))
            elif cell.op is CellOp.DELETE_ALL_VERSION:
                columns.pop(cell.name, None)
                record_cells.append(PlainCell(cell.name, None, CELL_DELETE_ALL_VERSION, None))
            else:
                record_cells.append(self._plan_increment(table, columns, cell, now_ms))
        _trim_versions(columns, touched, table.options.max_versions)
        return columns, record_cells

    def _plan_increment(
        self, table: Table, columns: dict[str, list[list[Any]]], cell: CellChange, now_ms: int
    ) -> PlainCell:
        delta = cell.value
        if type(delta) is not int or not INT64_MIN <= delta <= INT64_MAX:
            raise ParameterInvalid(f"The increment of column {cell.name!r} must be an int64, got {delta!r}.")
        versions = columns.get(cell.name)
        current = versions[0][1] if versions else 0
        if type(current) is not int:
            raise ParameterInvalid(
                f"Column {cell.name!r} holds a {type(current).__name__}; only INTEGER columns can be incremented."
            )
        result = current + delta
        if not INT64_MIN <= result <= INT64_MAX:
            raise ParameterInvalid(f"Incrementing column {cell.name!r} by {delta} overflows int64.")
        ts = now_ms
        _put_version(columns.setdefault(cell.name, []), ts, result)
        if self.increments_as_deltas:
            return PlainCell(cell.name, delta, CELL_INCREMENT, ts)
        return PlainCell(cell.name, result, None, ts)

    def _commit(self, planned: Sequence[_PlannedRow], now_us: int) -> list[WriteOutcome]:
        """Apply validated rows; nothing here can fail. One commit time per table, row index per table."""
        commit_times: dict[str, int] = {}
        row_indexes: dict[str, int] = {}
        outcomes = []
        for item in planned:
            table = item.table
            key = item.key
            if AUTO_INCREMENT in key:
                key = tuple(table.next_auto_increment(now_us) if v is AUTO_INCREMENT else v for v in key)
            if item.kind is WriteKind.DELETE:
                if table.rows.pop(key, None) is not None:
                    table.key_set_changed()
            else:
                assert item.columns is not None
                row = table.rows.get(key)
                if row is None:
                    table.rows[key] = Row(item.columns)
                    table.key_set_changed()
                else:
                    row.columns = item.columns
            pairs = table.schema.pairs(key)
            if table.stream is not None:
                if table.name not in commit_times:
                    commit_times[table.name] = table.next_commit_us(now_us)
                    row_indexes[table.name] = 0
                    table.stream.expire(now_us)  # retention also bounds memory when nobody reads
                sequence = (STREAM_EPOCH, commit_times[table.name], row_indexes[table.name])
                row_indexes[table.name] += 1
                self._append_record(table, item, key, pairs, sequence)
            if item.returned_cells is not None:
                outcomes.append(WriteOutcome(primary_key=pairs, cells=item.returned_cells))
            else:
                outcomes.append(WriteOutcome(primary_key=pairs if item.return_primary_key else None))
        return outcomes

    def _append_record(
        self, table: Table, item: _PlannedRow, key: Key, pairs: list[tuple[str, Any]], sequence: tuple[int, int, int]
    ) -> None:
        assert table.stream is not None
        if item.kind is WriteKind.DELETE:
            action = StreamAction.DELETE_ROW
            payload = encode_row(pairs, (), delete_marker=True, sequence=sequence)
        else:
            action = StreamAction.PUT_ROW if item.kind is WriteKind.PUT else StreamAction.UPDATE_ROW
            payload = encode_row(pairs, item.record_cells, sequence=sequence)
        origin = encode_row(pairs, item.origin_cells) if item.origin_cells else None
        table.stream.append(key_hash(key), StreamRecord(sequence, action, payload, origin))

    # -- reads --------------------------------------------------------------------------------------------------

    def get_row(
        self, table_name: str, primary_key: Sequence[tuple[str, Any]], read: ReadOptions, *, now_us: int
    ) -> RowView | None:
        table = self.table(table_name)
        _validate_read(read, self.limits)
        key = table.schema.read_key(primary_key)
        row = table.rows.get(key)
        return None if row is None else _row_view(table, key, row, read, now_us // 1000)

    def batch_get(
        self,
        items: Sequence[tuple[str, Sequence[Sequence[tuple[str, Any]]], ReadOptions]],
        *,
        now_us: int,
    ) -> list[list[RowView | EmulatorError | None]]:
        """BatchGetRow: per table, per key a row, None (absent) or the error of that key."""
        total = sum(len(keys) for _, keys, _ in items)
        if total == 0:
            raise ParameterInvalid("BatchGetRow needs at least one primary key.")
        check_rows_per_batch(total, self.limits.max_batch_get_rows)
        results: list[list[RowView | EmulatorError | None]] = []
        for table_name, keys, read in items:
            _validate_read(read, self.limits)
            table_results: list[RowView | EmulatorError | None] = []
            for primary_key in keys:
                try:
                    table_results.append(self.get_row(table_name, primary_key, read, now_us=now_us))
                except (ObjectNotExist, InvalidPK, ParameterInvalid) as error:
                    table_results.append(error)
            results.append(table_results)
        return results

    def get_range(
        self,
        table_name: str,
        *,
        forward: bool,
        inclusive_start: Sequence[tuple[str, Any]],
        exclusive_end: Sequence[tuple[str, Any]],
        read: ReadOptions,
        limit: int | None = None,
        now_us: int,
    ) -> RangeResult:
        """Rows in [start, end) (forward) or (end, start] walking down (backward); `next_start_primary_key` is
        the key to continue from when the limit or the response size stopped the scan."""
        table = self.table(table_name)
        _validate_read(read, self.limits)
        start = table.schema.bound_key(inclusive_start)
        end = table.schema.bound_key(exclusive_end)
        if forward and start > end:
            raise ParameterInvalid("Begin key must be less than end key in FORWARD direction.")
        if not forward and start < end:
            raise ParameterInvalid("Begin key must be more than end key in BACKWARD direction.")
        if limit is not None and limit <= 0:
            raise ParameterInvalid("The limit must be greater than 0.")
        max_rows = min(limit or self.limits.max_range_rows, self.limits.max_range_rows)
        keys = table.sorted_keys()
        now_ms = now_us // 1000
        rows: list[RowView] = []
        size = 0
        if forward:
            index, step = bisect.bisect_left(keys, start), 1
        else:
            index, step = bisect.bisect_right(keys, start) - 1, -1
        while 0 <= index < len(keys):
            key = keys[index]
            if (forward and not key < end) or (not forward and not key > end):
                return RangeResult(rows, None)
            if len(rows) >= max_rows or size >= self.limits.max_range_bytes:
                return RangeResult(rows, table.schema.pairs(key))
            view = _row_view(table, key, table.rows[key], read, now_ms)
            if view is not None:
                rows.append(view)
                size += sum(_value_size(v) + len(n) for n, v, _ in view.cells)
            index += step
        return RangeResult(rows, None)

    def compute_split_points(self, table_name: str, split_size_bytes: int) -> SplitPoints:
        """Cut the key range into consecutive splits of about `split_size_bytes` of row data each (primary key and
        every cell version), as the service does for ComputeSplitPointsBySize; a split point is the first key of
        the split it starts. Rows are never cut, so a split holds at least one row."""
        table = self.table(table_name)
        if split_size_bytes <= 0:
            raise ParameterInvalid(f"split size must be positive, got {split_size_bytes} bytes.")
        points: list[list[tuple[str, Any]]] = []
        accumulated = 0
        for key in table.sorted_keys():
            if accumulated >= split_size_bytes:
                points.append(table.schema.pairs(key))
                accumulated = 0
            accumulated += _row_size(key, table.rows[key])
        return SplitPoints(list(table.schema.columns), points)

    # -- streams ------------------------------------------------------------------------------------------------

    def _streams(self) -> dict[str, Stream]:
        return {t.stream.stream_id: t.stream for t in self.tables.values() if t.stream is not None}

    def stream(self, stream_id: str) -> Stream:
        stream = self._streams().get(stream_id)
        if stream is None:
            raise ObjectNotExist(f"Requested stream does not exist: {stream_id!r}.")
        return stream

    def table_stream(self, table_name: str) -> Stream:
        stream = self.table(table_name).stream
        if stream is None:
            raise ParameterInvalid(f"Table {table_name!r} has no stream enabled.")
        return stream

    def list_streams(self, table_name: str | None = None) -> list[StreamInfo]:
        if table_name is not None:
            streams = [self.table(table_name).stream]
        else:
            streams = [self.tables[name].stream for name in sorted(self.tables)]
        return [StreamInfo(s.stream_id, s.table_name, s.creation_time_us) for s in streams if s is not None]

    def describe_stream(
        self,
        stream_id: str,
        *,
        inclusive_start_shard_id: str | None = None,
        shard_limit: int | None = None,
        now_us: int,
    ) -> StreamDescription:
        stream = self.stream(stream_id)
        stream.expire(now_us)
        return stream.describe(inclusive_start_shard_id, shard_limit)

    def get_shard_iterator(self, stream_id: str, shard_id: str, *, timestamp_us: int | None = None, now_us: int) -> str:
        stream = self.stream(stream_id)
        stream.expire(now_us)
        return stream.iterator(shard_id, timestamp_us)

    def get_stream_records(self, iterator: str, limit: int | None = None, *, now_us: int) -> RecordBatch:
        stream_id, shard_id, offset = decode_iterator(iterator)
        stream = self._streams().get(stream_id)
        if stream is None:
            raise TrimmedDataAccess()
        stream.expire(now_us)
        return stream.read(shard_id, offset, limit)

    # -- administration (tests and the admin endpoints) ---------------------------------------------------------

    def split_shard(self, table_name: str, shard_id: str, *, now_us: int) -> list[str]:
        return self.table_stream(table_name).split(shard_id, now_us)

    def merge_shards(self, table_name: str, shard_id: str, sibling_shard_id: str, *, now_us: int) -> str:
        return self.table_stream(table_name).merge(shard_id, sibling_shard_id, now_us)

    def trim_stream(self, table_name: str, before_ms: int) -> int:
        """Drop the stream records committed before `before_ms` (as if retention had passed them)."""
        return self.table_stream(table_name).trim(before_ms * 1000)


# -- helpers --------------------------------------------------------------------------------------------------------


def _validated_options(options: TableOptions) -> TableOptions:
    if options.time_to_live != -1 and options.time_to_live < 86400:
        raise ParameterInvalid(f"time_to_live must be -1 (forever) or at least 86400 s, got {options.time_to_live}.")
    if options.max_versions < 1:
        raise ParameterInvalid("The maximum versions cannot be less than or equal to 0.")
    if options.max_time_deviation < 1:
        raise ParameterInvalid(f"max_time_deviation must be positive, got {options.max_time_deviation}.")
    return options


def _checked_return_columns(change: RowChange) -> tuple[str, ...] | None:
    """RT_AFTER_MODIFY: every column asked for must be incremented by this UpdateRow (as the service requires).
    Returns them without repeats, or None without RT_AFTER_MODIFY."""
    if change.return_columns is None:
        return None
    incremented = {cell.name for cell in change.cells if cell.op is CellOp.INCREMENT}
    for name in change.return_columns:
        if name not in incremented:
            raise ParameterInvalid(
                f"The return column {name!r} is not an increment column of this request: ReturnType "
                "RT_AFTER_MODIFY returns the new values of columns the same UpdateRow increments."
            )
    return tuple(dict.fromkeys(change.return_columns))


def _hashable(value: Any) -> Any:
    return bytes(value) if isinstance(value, bytearray) else value


_value_size = value_size


def _data_size(change: RowChange) -> int:
    return row_data_size(change.primary_key, change.cells)


def _data_upper_bound(change: RowChange) -> int:
    return row_data_upper_bound(change.primary_key, change.cells)


def _row_size(key: Key, row: Row) -> int:
    """Bytes of a row as split sizes count them: primary-key values, then every cell version (name + value)."""
    size = sum(_value_size(value) for value in key)
    for name, versions in row.columns.items():
        size += len(name) * len(versions) + sum(_value_size(value) for _, value in versions)
    return size


def _attribute_value(name: str, value: Any) -> Any:
    if value is None:
        raise ParameterInvalid(f"Column {name!r} needs a value.")
    kind = type(value)
    if kind is int:
        if not INT64_MIN <= value <= INT64_MAX:
            raise ParameterInvalid(f"The value of column {name!r} is out of the int64 range.")
        return value
    if kind is float:
        if math.isnan(value) or math.isinf(value):
            raise ParameterInvalid(f"The value of column {name!r} must be a finite double.")
        return value
    if kind is bool or kind is str or kind is bytes:
        return value
    if kind is bytearray:
        return bytes(value)
    raise ParameterInvalid(f"Column {name!r} has a value of unsupported type {kind.__name__}.")


def _put_version(versions: list[list[Any]], ts: int, value: Any) -> None:
    """Insert [ts, value] keeping newest-first order; the same timestamp overwrites."""
    for index, version in enumerate(versions):
        if version[0] == ts:
            versions[index] = [ts, value]
            return
        if version[0] < ts:
            versions.insert(index, [ts, value])
            return
    versions.append([ts, value])


def _trim_versions(columns: dict[str, list[list[Any]]], names: Iterable[str], max_versions: int) -> None:
    for name in names:
        versions = columns.get(name)
        if versions is not None and len(versions) > max_versions:
            del versions[max_versions:]


def _latest_cells(columns: Mapping[str, list[list[Any]]], names: Iterable[str]) -> list[PlainCell]:
    return [PlainCell(n, columns[n][0][1], None, columns[n][0][0]) for n in names if columns.get(n)]


def _validate_read(read: ReadOptions, limits: Limits) -> None:
    if read.max_versions is None and read.time_range is None and read.specific_time is None:
        raise ParameterInvalid("No version condition is specified while querying row.")
    if read.max_versions is not None and read.max_versions < 1:
        raise ParameterInvalid(f"Invalid max versions: {read.max_versions}. Reason: Max versions must be positive.")
    check_columns_to_get(len(read.columns_to_get), limits.max_columns_to_get)
    if read.time_range is not None and read.time_range[0] >= read.time_range[1]:
        raise ParameterInvalid(f"Invalid time range {read.time_range}: start must be below end.")
    if read.column_filter is not None:
        validate_column_condition(read.column_filter)


def _row_view(table: Table, key: Key, row: Row, read: ReadOptions, now_ms: int) -> RowView | None:
    """The row as a read returns it, or None when the filter rejects it or none of the asked columns exist."""
    if read.column_filter is not None and not column_condition_matches(read.column_filter, row.columns):
        return None
    wanted = set(read.columns_to_get)
    wanted_attributes = wanted - set(table.schema.names)
    ttl = table.options.time_to_live
    oldest = now_ms - ttl * 1000 if ttl > 0 else None
    cells = []
    for name in sorted(row.columns):
        if wanted_attributes and name not in wanted_attributes:
            continue
        if wanted and not wanted_attributes:
            break
        if read.start_column is not None and name < read.start_column:
            continue
        if read.end_column is not None and name >= read.end_column:
            break
        taken = 0
        for ts, value in row.columns[name]:
            if oldest is not None and ts < oldest:
                break
            if read.time_range is not None and not read.time_range[0] <= ts < read.time_range[1]:
                continue
            if read.specific_time is not None and ts != read.specific_time:
                continue
            cells.append((name, value, ts))
            taken += 1
            if read.max_versions is not None and taken >= read.max_versions:
                break
    if wanted_attributes and not cells and not (wanted & set(table.schema.names)):
        return None
    return RowView(table.schema.pairs(key), cells)


__all__ = [
    "HIGHEST",
    "LOWEST",
    "CellChange",
    "CellOp",
    "Instance",
    "Limits",
    "RangeResult",
    "ReadOptions",
    "RowChange",
    "RowView",
    "SplitPoints",
    "StreamDetails",
    "StreamInfo",
    "StreamSpec",
    "TableDescription",
    "TableOptions",
    "WriteKind",
    "WriteOutcome",
]
