"""The stream APIs are registered on the SDK's own protocol objects, and its table codecs learn the stream fields."""

from __future__ import annotations

import re

import pytest
import tablestore
import tablestore.protobuf.table_store_pb2 as sdk_pb2
from tablestore import CapacityUnit, OTSClient, ReservedThroughput, TableMeta, TableOptions
from tablestore.protocol import OTSProtocol

from cdcbridge.tablestore.errors import SdkCompatibilityError
from cdcbridge.tablestore.proto import recast, stream_pb2
from cdcbridge.tablestore.sdk_extension import STREAM_APIS, install_stream_apis

STREAM_RECORD = stream_pb2.GetStreamRecordResponse.StreamRecord

#: One realistic request and response per stream API.
EXAMPLES = {
    "ListStream": (
        stream_pb2.ListStreamRequest(table_name="orders"),
        stream_pb2.ListStreamResponse(
            streams=[stream_pb2.Stream(stream_id="s1", table_name="orders", creation_time=1_700_000_000_000_001)]
        ),
    ),
    "DescribeStream": (
        stream_pb2.DescribeStreamRequest(stream_id="s1", inclusive_start_shard_id="b", shard_limit=2),
        stream_pb2.DescribeStreamResponse(
            stream_id="s1",
            expiration_time=24,
            table_name="orders",
            creation_time=5,
            stream_status=stream_pb2.STREAM_ENABLING,
            shards=[stream_pb2.StreamShard(shard_id="b", parent_id="a")],
            next_shard_id="c",
        ),
    ),
    "GetShardIterator": (
        stream_pb2.GetShardIteratorRequest(stream_id="s1", shard_id="b", timestamp=123, token="tok"),
        stream_pb2.GetShardIteratorResponse(shard_iterator="it-1", next_token="tok-2"),
    ),
    "GetStreamRecord": (
        stream_pb2.GetStreamRecordRequest(shard_iterator="it-1", limit=100, table_name="orders"),
        stream_pb2.GetStreamRecordResponse(
            stream_records=[STREAM_RECORD(action_type=stream_pb2.DELETE_ROW, record=b"\x75\0\0\0")],
            next_shard_iterator="it-2",
            may_more_record=False,
        ),
    ),
}


@pytest.fixture
def ots() -> OTSClient:
    return install_stream_apis(OTSClient("http://127.0.0.1:1", "id", "secret", "inst"))


def test_every_stream_api_is_registered(ots: OTSClient) -> None:
    assert set(STREAM_APIS) <= set(ots.protocol.api_list)
    assert set(STREAM_APIS) <= set(ots.protocol.encoder.api_encode_map)
    assert set(STREAM_APIS) <= set(ots.protocol.decoder.api_decode_map)
    assert not set(STREAM_APIS) & set(OTSProtocol.api_list), "the SDK's class-level list must stay untouched"


def test_install_is_idempotent(ots: OTSClient) -> None:
    create_table_encoder = ots.protocol.encoder.api_encode_map["CreateTable"]
    api_count = len(ots.protocol.api_list)
    install_stream_apis(ots)
    assert ots.protocol.encoder.api_encode_map["CreateTable"] is create_table_encoder
    assert len(ots.protocol.api_list) == api_count


@pytest.mark.parametrize("api", sorted(EXAMPLES))
def test_requests_go_through_the_sdk_encoder_unchanged(ots: OTSClient, api: str) -> None:
    request, _ = EXAMPLES[api]
    encoded = ots.protocol.encoder.encode_request(api, request)
    assert type(request).FromString(encoded.SerializeToString()) == request


@pytest.mark.parametrize("api", sorted(EXAMPLES))
def test_responses_decode_through_the_sdk_decoder(ots: OTSClient, api: str) -> None:
    _, response = EXAMPLES[api]
    decoded, proto = ots.protocol.decoder.decode_response(api, response.SerializeToString(), "request-1")
    assert decoded == response
    assert proto is decoded


def test_a_request_of_the_wrong_type_is_refused(ots: OTSClient) -> None:
    with pytest.raises(TypeError, match="ListStream takes a ListStreamRequest"):
        ots.protocol.encoder.encode_request("ListStream", stream_pb2.DescribeStreamRequest(stream_id="x"))


def test_update_table_carries_the_stream_spec_with_columns_to_get(ots: OTSClient) -> None:
    spec = stream_pb2.StreamSpecification(enable_stream=True, expiration_time=12, columns_to_get=["a"])
    request = ots.protocol.encoder.encode_request("UpdateTable", "orders", None, None, stream_spec=spec)
    wire = request.SerializeToString()

    as_sdk = sdk_pb2.UpdateTableRequest.FromString(wire)
    assert as_sdk.table_name == "orders"
    assert recast(as_sdk.stream_spec, stream_pb2.StreamSpecification) == spec


def test_update_table_without_stream_spec_is_the_sdk_request(ots: OTSClient) -> None:
    request = ots.protocol.encoder.encode_request("UpdateTable", "orders", TableOptions(max_version=2), None)
    assert not request.HasField("stream_spec")
    assert request.table_options.max_versions == 2


def test_create_table_carries_the_stream_spec(ots: OTSClient) -> None:
    spec = stream_pb2.StreamSpecification(enable_stream=True, expiration_time=24)
    meta = TableMeta("orders", [("id", "STRING")])
    request = ots.protocol.encoder.encode_request(
        "CreateTable", meta, TableOptions(), ReservedThroughput(CapacityUnit(0, 0)), None, [], stream_spec=spec
    )
    parsed = sdk_pb2.CreateTableRequest.FromString(request.SerializeToString())
    assert parsed.table_meta.table_name == "orders"
    assert (parsed.stream_spec.enable_stream, parsed.stream_spec.expiration_time) == (True, 24)


def _describe_table_response(details: stream_pb2.StreamDetails | None) -> bytes:
    response = sdk_pb2.DescribeTableResponse()
    response.table_meta.table_name = "orders"
    response.table_meta.primary_key.add(name="id", type=sdk_pb2.STRING)
    response.reserved_throughput_details.capacity_unit.read = 0
    response.reserved_throughput_details.last_increase_time = 0
    response.table_options.max_versions = 1
    if details is not None:
        response.stream_details.CopyFrom(recast(details, sdk_pb2.StreamDetails))
    return response.SerializeToString()


def test_describe_table_result_exposes_stream_details(ots: OTSClient) -> None:
    details = stream_pb2.StreamDetails(
        enable_stream=True, stream_id="s1", expiration_time=24, last_enable_time=7, column_to_get=["x"]
    )
    result, _ = ots.protocol.decoder.decode_response("DescribeTable", _describe_table_response(details), "r")
    assert result.table_meta.table_name == "orders", "the SDK's own decoding still runs"
    assert result.stream_details == details


def test_describe_table_result_without_stream_details_says_none(ots: OTSClient) -> None:
    result, _ = ots.protocol.decoder.decode_response("DescribeTable", _describe_table_response(None), "r")
    assert result.stream_details is None


def test_update_table_result_exposes_stream_details(ots: OTSClient) -> None:
    response = sdk_pb2.UpdateTableResponse()
    response.reserved_throughput_details.capacity_unit.read = 0
    response.reserved_throughput_details.last_increase_time = 0
    response.table_options.max_versions = 1
    response.stream_details.enable_stream = False
    result, _ = ots.protocol.decoder.decode_response("UpdateTable", response.SerializeToString(), "r")
    assert result.stream_details == stream_pb2.StreamDetails(enable_stream=False)


def test_a_non_sdk_object_is_refused() -> None:
    with pytest.raises(SdkCompatibilityError, match=re.escape("tablestore==6.4.8")):
        install_stream_apis(object())


def test_an_untested_sdk_version_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tablestore, "__version__", "9.9.9")
    with pytest.warns(RuntimeWarning, match="built against tablestore 6.4.8, found 9.9.9"):
        install_stream_apis(OTSClient("http://127.0.0.1:1", "id", "secret", "inst"))
