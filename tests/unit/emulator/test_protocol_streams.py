"""Stream APIs on the wire (raw protobuf through the SDK's signed request path) and the admin split/trim."""

from __future__ import annotations

import time
from typing import Any

import pytest
import tablestore.protobuf.table_store_pb2 as pb2
from tablestore import OTSClient, OTSServiceError, Row

from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.emulator_admin import EmulatorAdmin, EmulatorAdminError
from cdcbridge.tablestore.plainbuffer import decode_row
from cdcbridge.tablestore.proto import recast, stream_pb2

from .conftest import raw_client


@pytest.fixture(scope="module")
def admin(server: EmulatorServer) -> EmulatorAdmin:
    return EmulatorAdmin(server.url, timeout=10)


@pytest.fixture(scope="module")
def raw(server: EmulatorServer) -> OTSClient:
    return raw_client(server)


def create_streamed_table(raw: OTSClient, name: str, columns: tuple[str, ...] = ()) -> None:
    request = pb2.CreateTableRequest()
    request.table_meta.table_name = name
    request.table_meta.primary_key.add(name="id", type=pb2.INTEGER)
    request.reserved_throughput.capacity_unit.read = 0
    request.reserved_throughput.capacity_unit.write = 0
    spec = stream_pb2.StreamSpecification(enable_stream=True, expiration_time=24, columns_to_get=columns)
    request.stream_spec.CopyFrom(recast(spec, pb2.StreamSpecification))
    raw._request_helper("CreateTable", request)


def describe_stream_details(raw: OTSClient, name: str) -> stream_pb2.StreamDetails:
    response = raw._request_helper("DescribeTable", pb2.DescribeTableRequest(table_name=name))
    return recast(response.stream_details, stream_pb2.StreamDetails)


def read_all(raw: OTSClient, stream_id: str, shard_id: str) -> tuple[list[Any], str | None]:
    iterator = raw._request_helper(
        "GetShardIterator", stream_pb2.GetShardIteratorRequest(stream_id=stream_id, shard_id=shard_id)
    ).shard_iterator
    records: list[Any] = []
    while True:
        response = raw._request_helper("GetStreamRecord", stream_pb2.GetStreamRecordRequest(shard_iterator=iterator))
        records.extend(response.stream_records)
        if not response.HasField("next_shard_iterator"):
            return records, None
        if response.next_shard_iterator == iterator:
            return records, iterator
        iterator = response.next_shard_iterator


def test_stream_read_split_trim_and_disable(
    server: EmulatorServer, raw: OTSClient, client: OTSClient, admin: EmulatorAdmin
) -> None:
    create_streamed_table(raw, "streamed", columns=("v",))
    details = describe_stream_details(raw, "streamed")
    assert details.enable_stream and details.expiration_time == 24 and details.last_enable_time > 0
    assert list(details.column_to_get) == ["v"]
    listed = raw._request_helper("ListStream", stream_pb2.ListStreamRequest(table_name="streamed")).streams
    assert [s.stream_id for s in listed] == [details.stream_id]

    client.put_row("streamed", Row([("id", 1)], [("v", "a")]))
    client.update_row("streamed", Row([("id", 1)], {"put": [("v", "b")]}), None)
    client.delete_row("streamed", Row([("id", 1)]), None)
    described = raw._request_helper("DescribeStream", stream_pb2.DescribeStreamRequest(stream_id=details.stream_id))
    assert described.stream_status == stream_pb2.STREAM_ACTIVE and described.table_name == "streamed"
    (shard,) = described.shards
    records, caught_up = read_all(raw, details.stream_id, shard.shard_id)
    assert caught_up is not None
    assert [r.action_type for r in records] == [stream_pb2.PUT_ROW, stream_pb2.UPDATE_ROW, stream_pb2.DELETE_ROW]
    assert [decode_row(r.record).primary_key for r in records] == [[("id", 1)]] * 3
    assert [c.value for c in decode_row(records[1].record).cells] == ["b"]
    assert not records[0].HasField("origin_record")
    assert [c.value for c in decode_row(records[1].origin_record).cells] == ["a"]

    children = admin.split("streamed", shard.shard_id)
    client.put_row("streamed", Row([("id", 2)], [("v", "c")]))
    _, end = read_all(raw, details.stream_id, shard.shard_id)
    assert end is None  # the closed parent, fully read: no next iterator
    described = raw._request_helper(
        "DescribeStream", stream_pb2.DescribeStreamRequest(stream_id=details.stream_id, shard_limit=2)
    )
    assert [s.shard_id for s in described.shards] == [shard.shard_id, children[0]]
    assert described.shards[1].parent_id == shard.shard_id and described.next_shard_id == children[1]
    assert sum(len(read_all(raw, details.stream_id, child)[0]) for child in children) == 1

    assert admin.merge("streamed", children[0], children[1]) not in children
    assert admin.trim("streamed", 2**62) == 4
    with pytest.raises(OTSServiceError) as raised:
        read_all(raw, details.stream_id, children[0])
    assert raised.value.get_error_code() == "OTSObjectNotExist"  # fully trimmed closed shard is gone

    request = pb2.UpdateTableRequest(table_name="streamed")
    request.stream_spec.enable_stream = False
    updated = raw._request_helper("UpdateTable", request)
    assert not updated.stream_details.enable_stream
    assert not raw._request_helper("ListStream", stream_pb2.ListStreamRequest()).streams


def test_stream_errors(raw: OTSClient) -> None:
    with pytest.raises(OTSServiceError) as raised:
        raw._request_helper("GetStreamRecord", stream_pb2.GetStreamRecordRequest(shard_iterator="garbage!"))
    assert (raised.value.get_error_code(), raised.value.get_http_status()) == ("OTSParameterInvalid", 400)
    with pytest.raises(OTSServiceError) as raised:
        raw._request_helper("DescribeStream", stream_pb2.DescribeStreamRequest(stream_id="nope"))
    assert raised.value.get_error_code() == "OTSObjectNotExist"


def test_admin_errors_are_json(admin: EmulatorAdmin) -> None:
    for route, body, status, code in (
        ("split", {"table": "missing", "shard_id": "x"}, 404, "OTSObjectNotExist"),
        ("split", {"table": "missing"}, 400, "BadRequest"),
        ("nothing", {}, 404, "NotFound"),
    ):
        with pytest.raises(EmulatorAdminError) as raised:
            admin.request("POST", route, body)
        assert (raised.value.status, raised.value.code) == (status, code)  # read from the JSON error body
    assert admin.health()["status"] == "ok"


def test_describe_table_sends_status_and_creation_time(raw: OTSClient) -> None:
    """SDK 4.x (what tablestore-streamclient 1.0.0 declares) requires table_status; 5.x reads creation_time (µs)."""
    before_us = time.time_ns() // 1000
    create_streamed_table(raw, "described")
    response = raw._request_helper("DescribeTable", pb2.DescribeTableRequest(table_name="described"))
    extra = recast(response, stream_pb2.DescribeTableResponseExtra)
    assert extra.HasField("table_status") and extra.table_status == stream_pb2.TABLE_ACTIVE
    assert before_us - 1_000_000 <= extra.creation_time <= time.time_ns() // 1000
    assert extra.creation_time == recast(response, stream_pb2.DescribeTableResponseExtra).creation_time


def test_get_stream_record_says_whether_more_records_wait(raw: OTSClient, client: OTSClient) -> None:
    create_streamed_table(raw, "paged")
    for key in range(3):
        client.put_row("paged", Row([("id", key)], [("v", key)]))
    details = describe_stream_details(raw, "paged")
    (shard,) = raw._request_helper(
        "DescribeStream", stream_pb2.DescribeStreamRequest(stream_id=details.stream_id)
    ).shards
    iterator = raw._request_helper(
        "GetShardIterator", stream_pb2.GetShardIteratorRequest(stream_id=details.stream_id, shard_id=shard.shard_id)
    ).shard_iterator
    pages = []
    for _ in range(3):
        page = raw._request_helper(
            "GetStreamRecord", stream_pb2.GetStreamRecordRequest(shard_iterator=iterator, limit=2)
        )
        assert page.HasField("may_more_record")
        pages.append((len(page.stream_records), page.may_more_record))
        iterator = page.next_shard_iterator
    assert pages == [(2, True), (1, False), (0, False)]
