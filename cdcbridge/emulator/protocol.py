"""Wire layer (moto's `responses.py`): decode a protobuf request, call the model, encode the protobuf answer.

Table and row APIs use the SDK's own `table_store_pb2`; stream APIs and the newer stream fields use our
`stream_pb2`. Rows travel as PlainBuffer through our codec. Answers fill every `required` field, because the
Python protobuf runtime refuses to serialise a message without them and the SDK's decoders read them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import tablestore.protobuf.table_store_filter_pb2 as filter_pb2
import tablestore.protobuf.table_store_pb2 as pb2
from google.protobuf.message import DecodeError, Message

from cdcbridge.emulator.backend import Backend
from cdcbridge.emulator.conditions import (
    ColumnCondition,
    Comparator,
    CompositeCondition,
    Condition,
    LogicalOperator,
    RowExistence,
    SingleColumnCondition,
)
from cdcbridge.emulator.errors import EmulatorError, ParameterInvalid
from cdcbridge.emulator.keys import PkType, PrimaryKeyColumn
from cdcbridge.emulator.model import (
    CellChange,
    CellOp,
    RangeResult,
    ReadOptions,
    RowChange,
    RowView,
    SplitPoints,
    StreamSpec,
    TableDescription,
    TableOptions,
    WriteKind,
    WriteOutcome,
)
from cdcbridge.tablestore.plainbuffer import (
    CELL_DELETE_ALL_VERSION,
    CELL_DELETE_ONE_VERSION,
    CELL_INCREMENT,
    PlainBufferError,
    PlainCell,
    PlainRow,
    decode_column_value,
    decode_row,
    encode_row,
    encode_rows,
)
from cdcbridge.tablestore.proto import recast, stream_pb2

M = TypeVar("M", bound=Message)

#: ComputeSplitPointsBySize counts `split_size` in units of 100 MB unless the request names another unit.
SPLIT_SIZE_UNIT = 100 * 1024 * 1024

_PK_TYPES = {pb2.INTEGER: PkType.INTEGER, pb2.STRING: PkType.STRING, pb2.BINARY: PkType.BINARY}
_PK_TYPES[pb2.PK_BOOLEAN] = PkType.BOOLEAN
_PB_PK_TYPES = {v: k for k, v in _PK_TYPES.items()}
_DEFINED_TYPES = {
    pb2.DCT_INTEGER: "INTEGER",
    pb2.DCT_DOUBLE: "DOUBLE",
    pb2.DCT_BOOLEAN: "BOOLEAN",
    pb2.DCT_STRING: "STRING",
    pb2.DCT_BLOB: "BINARY",
}
_PB_DEFINED_TYPES = {v: k for k, v in _DEFINED_TYPES.items()}
_WRITE_KINDS = {pb2.PUT: WriteKind.PUT, pb2.UPDATE: WriteKind.UPDATE, pb2.DELETE: WriteKind.DELETE}
_CELL_OPS = {
    None: CellOp.PUT,
    CELL_DELETE_ONE_VERSION: CellOp.DELETE_ONE_VERSION,
    CELL_DELETE_ALL_VERSION: CellOp.DELETE_ALL_VERSION,
    CELL_INCREMENT: CellOp.INCREMENT,
}


def parse(message_type: type[M], body: bytes) -> M:
    """Parse a request; malformed bytes or missing required fields are OTSParameterInvalid, as on the service."""
    message = message_type()
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise ParameterInvalid(f"Malformed {message_type.__name__}: {exc}.") from exc
    if not message.IsInitialized():
        missing = ", ".join(message.FindInitializationErrors())
        raise ParameterInvalid(f"{message_type.__name__} lacks required field(s): {missing}.")
    return message


def _plain_row(data: bytes, what: str) -> PlainRow:
    try:
        return decode_row(data)
    except PlainBufferError as exc:
        raise ParameterInvalid(f"Invalid PlainBuffer in {what}: {exc}") from exc


def _consumed(message: Any, read: int = 0, write: int = 0) -> None:
    message.capacity_unit.read = read
    message.capacity_unit.write = write


# -- conditions ---------------------------------------------------------------------------------------------------


def _column_condition(raw: bytes) -> ColumnCondition:
    return _filter_message(parse(filter_pb2.Filter, raw))


def _filter_message(message: Any) -> ColumnCondition:
    if message.type == filter_pb2.FT_SINGLE_COLUMN_VALUE:
        single = parse(filter_pb2.SingleColumnValueFilter, message.filter)
        if single.HasField("value_trans_rule"):
            raise ParameterInvalid("Column conditions with a regex value rule are not supported by the emulator.")
        value = None
        if single.column_value:
            try:
                value = decode_column_value(single.column_value)
            except PlainBufferError as exc:
                raise ParameterInvalid(f"Invalid column value in condition on {single.column_name!r}: {exc}") from exc
        return SingleColumnCondition(
            column=single.column_name,
            comparator=Comparator(single.comparator),
            value=value,
            pass_if_missing=not single.filter_if_missing,
            latest_version_only=single.latest_version_only,
        )
    if message.type == filter_pb2.FT_COMPOSITE_COLUMN_VALUE:
        composite = parse(filter_pb2.CompositeColumnValueFilter, message.filter)
        return CompositeCondition(
            LogicalOperator(composite.combinator), tuple(_filter_message(sub) for sub in composite.sub_filters)
        )
    raise ParameterInvalid(f"Filter type {message.type} is not supported by the emulator.")


def _condition(message: Any) -> Condition:
    column_condition = None
    if message.HasField("column_condition") and message.column_condition:
        column_condition = _column_condition(message.column_condition)
    return Condition(RowExistence(message.row_existence), column_condition)


# -- rows ---------------------------------------------------------------------------------------------------------


def _row_change(kind: WriteKind, data: bytes, condition: Any, return_content: Any) -> RowChange:
    row = _plain_row(data, f"the {kind.value.lower()} row")
    cells = []
    for cell in row.cells:
        op = _CELL_OPS.get(cell.cell_type)
        if op is None or (kind is WriteKind.PUT and op is not CellOp.PUT):
            raise ParameterInvalid(f"Cell {cell.name!r} has an invalid cell type {cell.cell_type} for {kind.value}.")
        cells.append(CellChange(cell.name, op, cell.value, cell.timestamp))
    return_type = return_content.return_type
    return_columns = tuple(return_content.return_column_names)
    if return_columns and return_type != pb2.RT_AFTER_MODIFY:
        raise ParameterInvalid("return_column_names can only be given with ReturnType RT_AFTER_MODIFY.")
    return RowChange(
        kind=kind,
        primary_key=row.primary_key,
        cells=cells,
        condition=_condition(condition),
        return_primary_key=return_type == pb2.RT_PK,
        return_columns=return_columns if return_type == pb2.RT_AFTER_MODIFY else None,
    )


def _read_options(message: Any) -> ReadOptions:
    time_range = None
    specific_time = None
    if message.HasField("time_range"):
        tr = message.time_range
        if tr.HasField("specific_time"):
            specific_time = tr.specific_time
        elif tr.HasField("start_time") and tr.HasField("end_time"):
            time_range = (tr.start_time, tr.end_time)
        else:
            raise ParameterInvalid("A time range needs start_time and end_time, or specific_time.")
    return ReadOptions(
        columns_to_get=tuple(message.columns_to_get),
        max_versions=message.max_versions if message.HasField("max_versions") else None,
        time_range=time_range,
        specific_time=specific_time,
        column_filter=_column_condition(message.filter) if message.HasField("filter") and message.filter else None,
        start_column=message.start_column if message.HasField("start_column") else None,
        end_column=message.end_column if message.HasField("end_column") else None,
    )


def _encode_view(view: RowView | None) -> bytes:
    if view is None:
        return b""
    return encode_row(view.primary_key, [PlainCell(name, value, None, ts) for name, value, ts in view.cells])


def _write_row_result(message: Any, outcome: WriteOutcome) -> None:
    if outcome.primary_key is not None:
        message.row = encode_row(outcome.primary_key, [PlainCell(n, v, None, ts) for n, v, ts in outcome.cells])


# -- tables -------------------------------------------------------------------------------------------------------


def _table_options(message: Any) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if message.HasField("time_to_live"):
        options["time_to_live"] = message.time_to_live
    if message.HasField("max_versions"):
        options["max_versions"] = message.max_versions
    if message.HasField("deviation_cell_version_in_sec"):
        options["max_time_deviation"] = message.deviation_cell_version_in_sec
    if message.HasField("allow_update"):
        options["allow_update"] = message.allow_update
    return options


def _stream_spec(message: Any) -> StreamSpec:
    spec = recast(message, stream_pb2.StreamSpecification)
    return StreamSpec(
        enabled=spec.enable_stream,
        expiration_hours=spec.expiration_time if spec.HasField("expiration_time") else None,
        origin_columns=tuple(spec.columns_to_get),
    )


def _fill_table_state(response: Any, description: TableDescription) -> None:
    """reserved_throughput_details, table_options and stream_details (DescribeTable and UpdateTable)."""
    details = response.reserved_throughput_details
    details.capacity_unit.read = description.reserved_read
    details.capacity_unit.write = description.reserved_write
    details.last_increase_time = description.created_at_s
    options = description.options
    response.table_options.time_to_live = options.time_to_live
    response.table_options.max_versions = options.max_versions
    response.table_options.deviation_cell_version_in_sec = options.max_time_deviation
    response.table_options.allow_update = options.allow_update
    stream = stream_pb2.StreamDetails(enable_stream=description.stream.enabled)
    if description.stream.enabled:
        assert description.stream.stream_id is not None
        stream.stream_id = description.stream.stream_id
        stream.expiration_time = description.stream.expiration_hours
        stream.last_enable_time = description.stream.last_enable_time_us
        stream.column_to_get.extend(description.stream.origin_columns)
    else:
        stream.expiration_time = 0
        stream.last_enable_time = 0
    response.stream_details.CopyFrom(recast(stream, pb2.StreamDetails))


class ProtocolHandler:
    """Maps API names to handlers `(body) -> response bytes`; errors propagate as EmulatorError."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.handlers: dict[str, Callable[[bytes], bytes]] = {
            "CreateTable": self.create_table,
            "DescribeTable": self.describe_table,
            "ListTable": self.list_table,
            "UpdateTable": self.update_table,
            "DeleteTable": self.delete_table,
            "PutRow": self.put_row,
            "GetRow": self.get_row,
            "UpdateRow": self.update_row,
            "DeleteRow": self.delete_row,
            "BatchGetRow": self.batch_get_row,
            "BatchWriteRow": self.batch_write_row,
            "GetRange": self.get_range,
            "ComputeSplitPointsBySize": self.compute_split_points_by_size,
            "ListStream": self.list_stream,
            "DescribeStream": self.describe_stream,
            "GetShardIterator": self.get_shard_iterator,
            "GetStreamRecord": self.get_stream_record,
        }

    @property
    def api_names(self) -> frozenset[str]:
        return frozenset(self.handlers)

    def handle(self, api_name: str, body: bytes) -> bytes:
        return self.handlers[api_name](body)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.backend.call(method, *args, **kwargs)

    # -- tables ---------------------------------------------------------------------------------------------------

    def create_table(self, body: bytes) -> bytes:
        request = parse(pb2.CreateTableRequest, body)
        meta = request.table_meta
        primary_key = []
        for column in meta.primary_key:
            if column.type not in _PK_TYPES:
                raise ParameterInvalid(f"Primary key {column.name!r} has an unsupported type {column.type}.")
            auto = column.HasField("option") and column.option == pb2.AUTO_INCREMENT
            primary_key.append(PrimaryKeyColumn(column.name, _PK_TYPES[column.type], auto))
        defined = [(c.name, _DEFINED_TYPES.get(c.type, str(c.type))) for c in meta.defined_column]
        options = TableOptions(**_table_options(request.table_options)) if request.HasField("table_options") else None
        cu = request.reserved_throughput.capacity_unit
        self._call(
            "create_table",
            meta.table_name,
            primary_key,
            defined_columns=defined,
            options=options,
            reserved=(cu.read, cu.write),
            stream=_stream_spec(request.stream_spec) if request.HasField("stream_spec") else None,
        )
        return pb2.CreateTableResponse().SerializeToString()

    def describe_table(self, body: bytes) -> bytes:
        request = parse(pb2.DescribeTableRequest, body)
        description: TableDescription = self._call("describe_table", request.table_name)
        response = pb2.DescribeTableResponse()
        response.table_meta.table_name = description.name
        for column in description.primary_key:
            schema = response.table_meta.primary_key.add(name=column.name, type=_PB_PK_TYPES[column.type])
            if column.auto_increment:
                schema.option = pb2.AUTO_INCREMENT
        for name, kind in description.defined_columns:
            response.table_meta.defined_column.add(name=name, type=_PB_DEFINED_TYPES[kind])
        _fill_table_state(response, description)
        extra = stream_pb2.DescribeTableResponseExtra(
            table_status=stream_pb2.TABLE_ACTIVE, creation_time=description.created_at_us
        )
        return response.SerializeToString() + extra.SerializeToString()

    def list_table(self, body: bytes) -> bytes:
        parse(pb2.ListTableRequest, body)
        return pb2.ListTableResponse(table_names=self._call("list_tables")).SerializeToString()

    def update_table(self, body: bytes) -> bytes:
        request = parse(pb2.UpdateTableRequest, body)
        reserved = None
        if request.HasField("reserved_throughput"):
            cu = request.reserved_throughput.capacity_unit
            reserved = (cu.read if cu.HasField("read") else None, cu.write if cu.HasField("write") else None)
        description = self._call(
            "update_table",
            request.table_name,
            options=_table_options(request.table_options) if request.HasField("table_options") else None,
            reserved=reserved,
            stream=_stream_spec(request.stream_spec) if request.HasField("stream_spec") else None,
        )
        response = pb2.UpdateTableResponse()
        _fill_table_state(response, description)
        return response.SerializeToString()

    def delete_table(self, body: bytes) -> bytes:
        request = parse(pb2.DeleteTableRequest, body)
        self._call("delete_table", request.table_name)
        return pb2.DeleteTableResponse().SerializeToString()

    # -- single rows ----------------------------------------------------------------------------------------------

    def _write(self, table_name: str, change: RowChange, response: Any) -> bytes:
        outcome: WriteOutcome = self._call("write_row", table_name, change)
        _consumed(response.consumed, write=1)
        _write_row_result(response, outcome)
        return response.SerializeToString()

    def put_row(self, body: bytes) -> bytes:
        request = parse(pb2.PutRowRequest, body)
        change = _row_change(WriteKind.PUT, request.row, request.condition, request.return_content)
        return self._write(request.table_name, change, pb2.PutRowResponse())

    def update_row(self, body: bytes) -> bytes:
        request = parse(pb2.UpdateRowRequest, body)
        change = _row_change(WriteKind.UPDATE, request.row_change, request.condition, request.return_content)
        return self._write(request.table_name, change, pb2.UpdateRowResponse())

    def delete_row(self, body: bytes) -> bytes:
        request = parse(pb2.DeleteRowRequest, body)
        change = _row_change(WriteKind.DELETE, request.primary_key, request.condition, request.return_content)
        return self._write(request.table_name, change, pb2.DeleteRowResponse())

    def get_row(self, body: bytes) -> bytes:
        request = parse(pb2.GetRowRequest, body)
        key = _plain_row(request.primary_key, "the primary key").primary_key
        view = self._call("get_row", request.table_name, key, _read_options(request))
        response = pb2.GetRowResponse(row=_encode_view(view))
        _consumed(response.consumed, read=1)
        return response.SerializeToString()

    # -- batches and ranges ---------------------------------------------------------------------------------------

    def batch_get_row(self, body: bytes) -> bytes:
        request = parse(pb2.BatchGetRowRequest, body)
        items = []
        for table in request.tables:
            keys = [_plain_row(raw, "a BatchGetRow primary key").primary_key for raw in table.primary_key]
            items.append((table.table_name, keys, _read_options(table)))
        results = self._call("batch_get", items)
        response = pb2.BatchGetRowResponse()
        for table, rows in zip(request.tables, results, strict=True):
            table_response = response.tables.add(table_name=table.table_name)
            for result in rows:
                row = table_response.rows.add()
                if isinstance(result, EmulatorError):
                    row.is_ok = False
                    row.error.code = result.code
                    row.error.message = result.message
                else:
                    row.is_ok = True
                    _consumed(row.consumed, read=1)
                    row.row = _encode_view(result)
        return response.SerializeToString()

    def batch_write_row(self, body: bytes) -> bytes:
        request = parse(pb2.BatchWriteRowRequest, body)
        items = []
        for table in request.tables:
            for row in table.rows:
                if row.type not in _WRITE_KINDS:
                    raise ParameterInvalid(f"Unknown operation type {row.type} in BatchWriteRow.")
                change = _row_change(_WRITE_KINDS[row.type], row.row_change, row.condition, row.return_content)
                items.append((table.table_name, change))
        outcomes = iter(self._call("batch_write", items))
        response = pb2.BatchWriteRowResponse()
        for table in request.tables:
            table_response = response.tables.add(table_name=table.table_name)
            for _ in table.rows:
                outcome: WriteOutcome = next(outcomes)
                row = table_response.rows.add()
                if outcome.error is not None:
                    row.is_ok = False
                    row.error.code = outcome.error.code
                    row.error.message = outcome.error.message
                else:
                    row.is_ok = True
                    _consumed(row.consumed, write=1)
                    _write_row_result(row, outcome)
        return response.SerializeToString()

    def get_range(self, body: bytes) -> bytes:
        request = parse(pb2.GetRangeRequest, body)
        result: RangeResult = self._call(
            "get_range",
            request.table_name,
            forward=request.direction == pb2.FORWARD,
            inclusive_start=_plain_row(request.inclusive_start_primary_key, "the start key").primary_key,
            exclusive_end=_plain_row(request.exclusive_end_primary_key, "the end key").primary_key,
            read=_read_options(request),
            limit=request.limit if request.HasField("limit") else None,
        )
        rows = [
            PlainRow(view.primary_key, [PlainCell(n, v, None, ts) for n, v, ts in view.cells]) for view in result.rows
        ]
        response = pb2.GetRangeResponse(rows=encode_rows(rows) if rows else b"")
        _consumed(response.consumed, read=max(1, len(rows)))
        if result.next_start_primary_key is not None:
            response.next_start_primary_key = encode_row(result.next_start_primary_key)
        return response.SerializeToString()

    def compute_split_points_by_size(self, body: bytes) -> bytes:
        """Split points as PlainBuffer primary keys (with header, as the SDKs read them) and one location hint
        repeated for every split: the emulator is one machine."""
        request = parse(pb2.ComputeSplitPointsBySizeRequest, body)
        unit = request.split_size_unit_in_byte if request.HasField("split_size_unit_in_byte") else SPLIT_SIZE_UNIT
        if unit <= 0:
            raise ParameterInvalid(f"split_size_unit_in_byte must be positive, got {unit}.")
        result: SplitPoints = self._call("compute_split_points", request.table_name, request.split_size * unit)
        response = pb2.ComputeSplitPointsBySizeResponse()
        _consumed(response.consumed, read=1)
        for column in result.primary_key:
            response.schema.add(name=column.name, type=_PB_PK_TYPES[column.type])
        response.split_points.extend(encode_row(point) for point in result.points)
        response.locations.add(location="cdcbridge-emulator", repeat=len(result.points) + 1)
        return response.SerializeToString()

    # -- streams --------------------------------------------------------------------------------------------------

    def list_stream(self, body: bytes) -> bytes:
        request = parse(stream_pb2.ListStreamRequest, body)
        table = request.table_name if request.HasField("table_name") else None
        response = stream_pb2.ListStreamResponse()
        for info in self._call("list_streams", table):
            response.streams.add(
                stream_id=info.stream_id, table_name=info.table_name, creation_time=info.creation_time_us
            )
        return response.SerializeToString()

    def describe_stream(self, body: bytes) -> bytes:
        request = parse(stream_pb2.DescribeStreamRequest, body)
        description = self._call(
            "describe_stream",
            request.stream_id,
            inclusive_start_shard_id=(
                request.inclusive_start_shard_id if request.HasField("inclusive_start_shard_id") else None
            ),
            shard_limit=request.shard_limit if request.HasField("shard_limit") else None,
        )
        response = stream_pb2.DescribeStreamResponse(
            stream_id=description.stream_id,
            expiration_time=description.expiration_hours,
            table_name=description.table_name,
            creation_time=description.creation_time_us,
            stream_status=stream_pb2.STREAM_ACTIVE,
        )
        for shard in description.shards:
            message = response.shards.add(shard_id=shard.shard_id)
            if shard.parent_id is not None:
                message.parent_id = shard.parent_id
            if shard.parent_sibling_id is not None:
                message.parent_sibling_id = shard.parent_sibling_id
        if description.next_shard_id is not None:
            response.next_shard_id = description.next_shard_id
        return response.SerializeToString()

    def get_shard_iterator(self, body: bytes) -> bytes:
        request = parse(stream_pb2.GetShardIteratorRequest, body)
        iterator = self._call(
            "get_shard_iterator",
            request.stream_id,
            request.shard_id,
            timestamp_us=request.timestamp if request.HasField("timestamp") else None,
        )
        return stream_pb2.GetShardIteratorResponse(shard_iterator=iterator).SerializeToString()

    def get_stream_record(self, body: bytes) -> bytes:
        request = parse(stream_pb2.GetStreamRecordRequest, body)
        batch = self._call(
            "get_stream_records", request.shard_iterator, request.limit if request.HasField("limit") else None
        )
        response = stream_pb2.GetStreamRecordResponse()
        add = response.stream_records.add
        for record in batch.records:
            if record.origin is None:
                add(action_type=record.action, record=record.payload)
            else:
                add(action_type=record.action, record=record.payload, origin_record=record.origin)
        if batch.next_iterator is not None:
            response.next_shard_iterator = batch.next_iterator
        response.may_more_record = batch.may_more_record
        _consumed(response.consumed, read=max(1, len(batch.records)))
        return response.SerializeToString()
