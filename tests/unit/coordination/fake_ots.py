"""A stand-in for tablestore.OTSClient that decides conditions from the *encoded* request.

Each write is encoded with the SDK's own protobuf encoder and its condition is evaluated from the wire form (row
existence + column filter bytes), so the tests prove that what TablestoreLeaseStore builds means, on the wire, what
leases.md §5.2 says. Row data is taken from the SDK objects.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass
from typing import Any

from tablestore import OTSServiceError, Row
from tablestore.encoder import OTSProtoBufferEncoder
from tablestore.protobuf import table_store_filter_pb2 as filter_pb2
from tablestore.protobuf import table_store_pb2 as pb2

_ENCODER = OTSProtoBufferEncoder("utf-8", enable_native=False)


def decode_variant(data: bytes) -> object:
    """Decode a PlainBuffer SQLVariant (the column_value of a SingleColumnValueFilter)."""
    kind = data[0]
    if kind == 0x0:
        return struct.unpack("<q", data[1:9])[0]
    if kind == 0x3:
        (length,) = struct.unpack("<i", data[1:5])
        return data[5 : 5 + length].decode()
    raise AssertionError(f"unexpected variant type {kind:#x}")


def decode_filter(raw: bytes) -> dict[str, Any]:
    """The filter of a condition as plain data: {'and': [...]} or {'column', 'value', 'pass_if_missing', ...}."""
    flt = filter_pb2.Filter()
    flt.ParseFromString(raw)
    if flt.type == filter_pb2.FT_COMPOSITE_COLUMN_VALUE:
        composite = filter_pb2.CompositeColumnValueFilter()
        composite.ParseFromString(flt.filter)
        assert composite.combinator == filter_pb2.LO_AND
        return {"and": [decode_filter(sub.SerializeToString()) for sub in composite.sub_filters]}
    assert flt.type == filter_pb2.FT_SINGLE_COLUMN_VALUE
    single = filter_pb2.SingleColumnValueFilter()
    single.ParseFromString(flt.filter)
    return {
        "column": single.column_name,
        "comparator": single.comparator,
        "value": decode_variant(single.column_value),
        "pass_if_missing": not single.filter_if_missing,
        "latest_version_only": single.latest_version_only,
    }


def _holds(flt: dict[str, Any] | None, row: dict[str, object] | None) -> bool:
    if flt is None:
        return True
    if "and" in flt:
        return all(_holds(sub, row) for sub in flt["and"])
    assert flt["comparator"] == filter_pb2.CT_EQUAL
    current = row or {}
    if flt["column"] not in current:
        return bool(flt["pass_if_missing"])
    return current[flt["column"]] == flt["value"]


@dataclass
class _Fault:
    api: str
    error: Exception
    applied: bool


class FakeOTSClient:
    """Tables of rows keyed by primary-key tuples; enough of OTSClient for TablestoreLeaseStore."""

    def __init__(self, page_size: int = 2) -> None:
        self.tables: dict[str, dict[tuple[Any, ...], dict[str, object]]] = {}
        self.schemas: dict[str, list[tuple[str, str]]] = {}
        self.requests: list[tuple[str, Any]] = []  # (api, decoded protobuf request)
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self._faults: list[_Fault] = []
        self._page = page_size
        self._lock = threading.Lock()
        self.not_ready_polls = 0

    def fail_next(self, api: str, error: Exception, *, applied: bool = False) -> None:
        """The next call of `api` raises `error`; with applied=True the write lands first (a lost response)."""
        self._faults.append(_Fault(api, error, applied))

    # ----- table API --------------------------------------------------------------------------------------

    def describe_table(self, table_name: str) -> Any:
        self.calls.append(("DescribeTable", (table_name,), {}))
        if table_name not in self.tables:
            raise OTSServiceError(404, "OTSObjectNotExist", "Requested table does not exist.")

        class _Meta:
            schema_of_primary_key = self.schemas[table_name]

        class _Response:
            table_meta = _Meta()

        return _Response()

    def create_table(self, table_meta: Any, table_options: Any, reserved_throughput: Any, *args: Any) -> None:
        self.calls.append(("CreateTable", (table_meta, table_options, reserved_throughput), {}))
        self.requests.append(
            (
                "CreateTable",
                _ENCODER.encode_request("CreateTable", table_meta, table_options, reserved_throughput, None, []),
            )
        )
        if table_meta.table_name in self.tables:
            raise OTSServiceError(409, "OTSObjectAlreadyExist", "Requested table already exists.")
        self.tables[table_meta.table_name] = {}
        self.schemas[table_meta.table_name] = list(table_meta.schema_of_primary_key)

    # ----- row API ----------------------------------------------------------------------------------------

    def put_row(self, table_name: str, row: Row, condition: Any = None, *args: Any) -> tuple[Any, None]:
        request = _ENCODER.encode_request("PutRow", table_name, row, condition, None, None)
        self._write("PutRow", table_name, row.primary_key, request, lambda _: dict(row.attribute_columns))
        return None, None

    def update_row(self, table_name: str, row: Row, condition: Any, *args: Any) -> tuple[Any, None]:
        request = _ENCODER.encode_request("UpdateRow", table_name, row, condition, None, None)
        assert set(row.attribute_columns) == {"put"}, "lease updates only put columns"
        self._write(
            "UpdateRow",
            table_name,
            row.primary_key,
            request,
            lambda cur: {**(cur or {}), **dict(row.attribute_columns["put"])},
        )
        return None, None

    def delete_row(self, table_name: str, row: Any, condition: Any = None, *args: Any) -> tuple[Any, None]:
        primary_key = row.primary_key if isinstance(row, Row) else row
        request = _ENCODER.encode_request("DeleteRow", table_name, primary_key, condition, None, None)
        self._write("DeleteRow", table_name, primary_key, request, lambda _: None)
        return None, None

    def get_row(
        self,
        table_name: str,
        primary_key: list[tuple[str, Any]],
        columns_to_get: Any = None,
        column_filter: Any = None,
        max_version: int = 1,
        **kwargs: Any,
    ) -> tuple[Any, Row | None, None]:
        self._maybe_fail("GetRow", None)
        self.calls.append(("GetRow", (table_name, primary_key), {"max_version": max_version}))
        rows = self._table(table_name)
        found = rows.get(tuple(v for _, v in primary_key))
        if found is None:
            return None, None, None
        return None, Row(list(primary_key), [(k, v, 1) for k, v in found.items()]), None

    def get_range(
        self,
        table_name: str,
        direction: str,
        start: list[tuple[str, Any]],
        end: list[tuple[str, Any]],
        columns_to_get: Any = None,
        limit: Any = None,
        column_filter: Any = None,
        max_version: int = 1,
        **kwargs: Any,
    ) -> tuple[Any, Any, list[Row], None]:
        self._maybe_fail("GetRange", None)
        request = _ENCODER.encode_request(
            "GetRange",
            table_name,
            direction,
            start,
            end,
            columns_to_get,
            limit,
            column_filter,
            max_version,
            None,
            None,
            None,
            None,
            None,
        )
        self.requests.append(("GetRange", request))
        assert direction == "FORWARD"
        names = [name for name, _ in start]
        rows = self._table(table_name)
        low = tuple(v for _, v in start)
        high = tuple(v for _, v in end)
        matching = sorted(k for k in rows if _between(k, low, high))
        page, rest = matching[: self._page], matching[self._page :]
        out = [Row(list(zip(names, key, strict=True)), [(n, v, 1) for n, v in rows[key].items()]) for key in page]
        next_start = list(zip(names, rest[0], strict=True)) if rest else None
        return None, next_start, out, None

    # ----- internals --------------------------------------------------------------------------------------

    def _table(self, table_name: str) -> dict[tuple[Any, ...], dict[str, object]]:
        if table_name not in self.tables:
            raise OTSServiceError(404, "OTSObjectNotExist", "Requested table does not exist.")
        return self.tables[table_name]

    def _maybe_fail(self, api: str, apply: Any) -> None:
        for fault in self._faults:
            if fault.api == api:
                self._faults.remove(fault)
                if fault.applied and apply is not None:
                    apply()
                raise fault.error

    def _write(self, api: str, table: str, primary_key: list[tuple[str, Any]], request: Any, change: Any) -> None:
        with self._lock:
            self.requests.append((api, request))
            rows = self._table(table)
            key = tuple(v for _, v in primary_key)

            def apply() -> None:
                if not self._condition_holds(request.condition, rows.get(key)):
                    raise OTSServiceError(403, "OTSConditionCheckFail", "Condition check failed.")
                after = change(rows.get(key))
                if after is None:
                    rows.pop(key, None)
                else:
                    rows[key] = after

            self._maybe_fail(api, apply)
            apply()

    @staticmethod
    def _condition_holds(condition: Any, row: dict[str, object] | None) -> bool:
        if condition.row_existence == pb2.EXPECT_EXIST and row is None:
            return False
        if condition.row_existence == pb2.EXPECT_NOT_EXIST and row is not None:
            return False
        flt = decode_filter(condition.column_condition) if condition.HasField("column_condition") else None
        return _holds(flt, row)


def _between(key: tuple[Any, ...], low: tuple[Any, ...], high: tuple[Any, ...]) -> bool:
    """low <= key < high, component by component, with INF_MIN / INF_MAX bounds."""
    return _compare(key, low) >= 0 and _compare(key, high) < 0


def _compare(key: tuple[Any, ...], bound: tuple[Any, ...]) -> int:
    from tablestore import INF_MAX, INF_MIN

    for k, b in zip(key, bound, strict=True):
        if b is INF_MIN:
            return 1
        if b is INF_MAX:
            return -1
        if k != b:
            return -1 if k < b else 1
    return 0
