"""The stream messages match the wire contract (Java SDK proto) and interoperate with the SDK's older messages."""

from __future__ import annotations

import pytest
import tablestore.protobuf.table_store_pb2 as sdk_pb2
from google.protobuf.descriptor import FieldDescriptor as F

from cdcbridge.tablestore.proto import recast, stream_pb2

REQUIRED, OPTIONAL, REPEATED = F.LABEL_REQUIRED, F.LABEL_OPTIONAL, F.LABEL_REPEATED

#: message → {field: (number, type, label)}, transcribed from the Java SDK's ots_internal_api.proto.
WIRE_CONTRACT = {
    "StreamSpecification": {
        "enable_stream": (1, F.TYPE_BOOL, REQUIRED),
        "expiration_time": (2, F.TYPE_INT32, OPTIONAL),
        "columns_to_get": (3, F.TYPE_STRING, REPEATED),
    },
    "StreamDetails": {
        "enable_stream": (1, F.TYPE_BOOL, REQUIRED),
        "stream_id": (2, F.TYPE_STRING, OPTIONAL),
        "expiration_time": (3, F.TYPE_INT32, OPTIONAL),
        "last_enable_time": (4, F.TYPE_INT64, OPTIONAL),
        "column_to_get": (5, F.TYPE_STRING, REPEATED),
    },
    "ListStreamRequest": {"table_name": (1, F.TYPE_STRING, OPTIONAL)},
    "ListStreamResponse": {"streams": (1, F.TYPE_MESSAGE, REPEATED)},
    "Stream": {
        "stream_id": (1, F.TYPE_STRING, REQUIRED),
        "table_name": (2, F.TYPE_STRING, REQUIRED),
        "creation_time": (3, F.TYPE_INT64, REQUIRED),
    },
    "StreamShard": {
        "shard_id": (1, F.TYPE_STRING, REQUIRED),
        "parent_id": (2, F.TYPE_STRING, OPTIONAL),
        "parent_sibling_id": (3, F.TYPE_STRING, OPTIONAL),
    },
    "DescribeStreamRequest": {
        "stream_id": (1, F.TYPE_STRING, REQUIRED),
        "inclusive_start_shard_id": (2, F.TYPE_STRING, OPTIONAL),
        "shard_limit": (3, F.TYPE_INT32, OPTIONAL),
        "support_timeseries_data_table": (4, F.TYPE_BOOL, OPTIONAL),
    },
    "DescribeStreamResponse": {
        "stream_id": (1, F.TYPE_STRING, REQUIRED),
        "expiration_time": (2, F.TYPE_INT32, REQUIRED),
        "table_name": (3, F.TYPE_STRING, REQUIRED),
        "creation_time": (4, F.TYPE_INT64, REQUIRED),
        "stream_status": (5, F.TYPE_ENUM, REQUIRED),
        "shards": (6, F.TYPE_MESSAGE, REPEATED),
        "next_shard_id": (7, F.TYPE_STRING, OPTIONAL),
        "is_timeseries_data_table": (8, F.TYPE_BOOL, OPTIONAL),
    },
    "GetShardIteratorRequest": {
        "stream_id": (1, F.TYPE_STRING, REQUIRED),
        "shard_id": (2, F.TYPE_STRING, REQUIRED),
        "timestamp": (3, F.TYPE_INT64, OPTIONAL),
        "token": (4, F.TYPE_STRING, OPTIONAL),
    },
    "GetShardIteratorResponse": {
        "shard_iterator": (1, F.TYPE_STRING, REQUIRED),
        "next_token": (2, F.TYPE_STRING, OPTIONAL),
    },
    "GetStreamRecordRequest": {
        "shard_iterator": (1, F.TYPE_STRING, REQUIRED),
        "limit": (2, F.TYPE_INT32, OPTIONAL),
        "table_name": (3, F.TYPE_STRING, OPTIONAL),
    },
    "GetStreamRecordResponse": {
        "stream_records": (1, F.TYPE_MESSAGE, REPEATED),
        "next_shard_iterator": (2, F.TYPE_STRING, OPTIONAL),
        "consumed": (3, F.TYPE_MESSAGE, OPTIONAL),
        "may_more_record": (4, F.TYPE_BOOL, OPTIONAL),
    },
    "GetStreamRecordResponse.StreamRecord": {
        "action_type": (1, F.TYPE_ENUM, REQUIRED),
        "record": (2, F.TYPE_BYTES, REQUIRED),
        "origin_record": (3, F.TYPE_BYTES, OPTIONAL),
    },
}


def _message_type(dotted: str):
    message = stream_pb2
    for part in dotted.split("."):
        message = getattr(message, part)
    return message


@pytest.mark.parametrize("name", sorted(WIRE_CONTRACT))
def test_fields_match_the_java_wire_contract(name: str) -> None:
    descriptor = _message_type(name).DESCRIPTOR
    actual = {field.name: (field.number, field.type, field.label) for field in descriptor.fields}
    assert actual == WIRE_CONTRACT[name]


def test_enums_match_the_wire_values() -> None:
    assert (stream_pb2.STREAM_ENABLING, stream_pb2.STREAM_ACTIVE) == (1, 2)
    assert (stream_pb2.PUT_ROW, stream_pb2.UPDATE_ROW, stream_pb2.DELETE_ROW) == (1, 2, 3)


def test_messages_do_not_clash_with_the_sdk_descriptors() -> None:
    assert stream_pb2.DESCRIPTOR.package != sdk_pb2.DESCRIPTOR.package


def test_sdk_messages_parse_what_we_write_for_the_fields_they_know() -> None:
    ours = stream_pb2.DescribeStreamResponse(
        stream_id="s1",
        expiration_time=24,
        table_name="t",
        creation_time=1_700_000_000_000_000,
        stream_status=stream_pb2.STREAM_ACTIVE,
        shards=[stream_pb2.StreamShard(shard_id="b", parent_id="a", parent_sibling_id="c")],
        next_shard_id="z",
        is_timeseries_data_table=False,
    )
    theirs = sdk_pb2.DescribeStreamResponse()
    theirs.ParseFromString(ours.SerializeToString())
    assert (theirs.stream_id, theirs.expiration_time, theirs.table_name) == ("s1", 24, "t")
    assert theirs.shards[0].parent_sibling_id == "c"
    assert theirs.next_shard_id == "z"


def test_recast_keeps_fields_the_sdk_schema_lacks_through_an_sdk_message() -> None:
    ours = stream_pb2.StreamDetails(
        enable_stream=True, stream_id="sid", expiration_time=7, last_enable_time=99, column_to_get=["a", "b"]
    )
    response = sdk_pb2.DescribeTableResponse()
    response.stream_details.CopyFrom(recast(ours, sdk_pb2.StreamDetails))
    wire = response.SerializePartialToString()

    parsed = sdk_pb2.DescribeTableResponse()
    parsed.ParseFromString(wire)
    assert recast(parsed.stream_details, stream_pb2.StreamDetails) == ours


def test_stream_record_round_trips_with_origin_record_and_may_more_record() -> None:
    response = stream_pb2.GetStreamRecordResponse(
        stream_records=[
            stream_pb2.GetStreamRecordResponse.StreamRecord(
                action_type=stream_pb2.UPDATE_ROW, record=b"\x75\x00", origin_record=b"\x75\x01"
            )
        ],
        next_shard_iterator="it",
        consumed=stream_pb2.ConsumedCapacity(capacity_unit=stream_pb2.CapacityUnit(read=1)),
        may_more_record=True,
    )
    parsed = stream_pb2.GetStreamRecordResponse.FromString(response.SerializeToString())
    assert parsed == response
