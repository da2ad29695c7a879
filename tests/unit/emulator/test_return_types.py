"""ReturnType of row writes on the wire: RT_NONE, RT_PK, and RT_AFTER_MODIFY (the atomic counter's new value).

Sent as raw protobuf through the SDK's signed request path, because the Python SDK (6.4.8) cannot ask for
RT_AFTER_MODIFY; the semantics follow Alibaba's Java SDK tests (IncrementRequest).
"""

from __future__ import annotations

from typing import Any

import pytest
import tablestore.protobuf.table_store_pb2 as pb2
from tablestore import CapacityUnit, OTSClient, OTSServiceError, ReservedThroughput, TableMeta, TableOptions

from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.tablestore.plainbuffer import CELL_INCREMENT, PlainCell, decode_row, encode_row

from .conftest import sdk_client

RESPONSES = {"PutRow": pb2.PutRowResponse, "UpdateRow": pb2.UpdateRowResponse, "DeleteRow": pb2.DeleteRowResponse}


@pytest.fixture(scope="module")
def raw(server: EmulatorServer) -> OTSClient:
    client = sdk_client(server)
    client.create_table(TableMeta("counters", [("pk", "STRING")]), TableOptions(), ReservedThroughput(CapacityUnit()))
    for name, response_type in RESPONSES.items():
        client.protocol.encoder.api_encode_map[name] = lambda message: message

        def decode(body: bytes, request_id: str, response_type: type = response_type) -> tuple[object, None]:
            message = response_type()
            message.ParseFromString(body)
            return message, None

        client.protocol.decoder.api_decode_map[name] = decode
    return client


def update(raw: OTSClient, key: str, cells: list[PlainCell], return_type: int, columns: tuple[str, ...] = ()) -> Any:
    request = pb2.UpdateRowRequest(table_name="counters", row_change=encode_row([("pk", key)], cells))
    request.condition.row_existence = pb2.IGNORE
    request.return_content.return_type = return_type
    request.return_content.return_column_names.extend(columns)
    return raw._request_helper("UpdateRow", request)


def increment(name: str, delta: int) -> PlainCell:
    return PlainCell(name, delta, CELL_INCREMENT, None)


def returned(response: Any) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    row = decode_row(response.row)
    return row.primary_key, {cell.name: cell.value for cell in row.cells}


def test_after_modify_returns_the_incremented_values_asked_for(raw: OTSClient) -> None:
    response = update(raw, "a", [increment("price", 10), increment("price_2", 100)], pb2.RT_AFTER_MODIFY, ("price",))
    assert returned(response) == ([("pk", "a")], {"price": 10})  # price_2 was not asked for
    response = update(
        raw, "a", [increment("price", 10), increment("price_2", 100)], pb2.RT_AFTER_MODIFY, ("price", "price_2")
    )
    assert returned(response) == ([("pk", "a")], {"price": 20, "price_2": 200})
    assert all(cell.timestamp is not None for cell in decode_row(response.row).cells)


@pytest.mark.parametrize(
    ("cells", "return_type", "columns"),
    [
        ([increment("price", 1), PlainCell("other", 5, None, None)], pb2.RT_AFTER_MODIFY, ("price", "other")),
        ([increment("price", 1)], pb2.RT_AFTER_MODIFY, ("price", "never_touched")),
        ([PlainCell("other", 5, None, None)], pb2.RT_PK, ("other",)),
    ],
    ids=["a-put-column", "an-untouched-column", "columns-with-RT_PK"],
)
def test_return_columns_must_be_increments_of_the_request(
    raw: OTSClient, cells: list[PlainCell], return_type: int, columns: tuple[str, ...]
) -> None:
    before = update(raw, "b", [increment("price", 1)], pb2.RT_AFTER_MODIFY, ("price",))
    with pytest.raises(OTSServiceError) as raised:
        update(raw, "b", cells, return_type, columns)
    assert (raised.value.get_error_code(), raised.value.get_http_status()) == ("OTSParameterInvalid", 400)
    after = update(raw, "b", [increment("price", 0)], pb2.RT_AFTER_MODIFY, ("price",))
    assert returned(after)[1] == returned(before)[1]  # the refused request changed nothing


def test_rt_none_and_rt_pk(raw: OTSClient) -> None:
    assert not update(raw, "c", [increment("n", 1)], pb2.RT_NONE).HasField("row")
    assert returned(update(raw, "c", [increment("n", 1)], pb2.RT_PK)) == ([("pk", "c")], {})
    put = pb2.PutRowRequest(table_name="counters", row=encode_row([("pk", "d")], [PlainCell("v", 1, None, None)]))
    put.condition.row_existence = pb2.IGNORE
    put.return_content.return_type = pb2.RT_PK
    assert returned(raw._request_helper("PutRow", put)) == ([("pk", "d")], {})
    delete = pb2.DeleteRowRequest(table_name="counters", primary_key=encode_row([("pk", "d")], delete_marker=True))
    delete.condition.row_existence = pb2.IGNORE
    assert not raw._request_helper("DeleteRow", delete).HasField("row")
    delete.return_content.return_type = pb2.RT_PK
    assert returned(raw._request_helper("DeleteRow", delete)) == ([("pk", "d")], {})
