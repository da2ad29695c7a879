"""StreamClient over the real SDK request path (signing, response checks, retries) against a scripted endpoint."""

from __future__ import annotations

import pytest
import tablestore.protobuf.table_store_pb2 as sdk_pb2
from tablestore import CapacityUnit, ReservedThroughput, TableMeta, TableOptions

from cdcbridge.changes import Cell, RecordAction, Sequence
from cdcbridge.contract import CellOp
from cdcbridge.tablestore.client import StreamClient
from cdcbridge.tablestore.connection import build_ots_client
from cdcbridge.tablestore.errors import (
    ConnectionFailedError,
    CorruptRecordError,
    StreamServiceError,
    TableNotFoundError,
    TrimmedDataError,
)
from cdcbridge.tablestore.models import ShardInfo, StreamInfo, StreamStatus, TableStreamDetails
from cdcbridge.tablestore.plainbuffer import CELL_DELETE_ALL_VERSION, CELL_DELETE_ONE_VERSION, PlainCell, encode_row
from cdcbridge.tablestore.proto import recast, stream_pb2
from tests.unit.tablestore.conftest import ACCESS_KEY_ID, ACCESS_KEY_SECRET
from tests.unit.tablestore.fake_tablestore import DROP, FakeTablestore, SeenRequest, error_reply, ok

StreamRecord = stream_pb2.GetStreamRecordResponse.StreamRecord


# -- streams and shards ----------------------------------------------------------------------------------------------


def test_list_stream_for_one_table(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script(
        "ListStream",
        ok(stream_pb2.ListStreamResponse(streams=[stream_pb2.Stream(stream_id="s1", table_name="t", creation_time=9)])),
    )
    assert stream_client.list_stream("t") == [StreamInfo("s1", "t", 9)]
    assert fake.seen("ListStream")[0].parse(stream_pb2.ListStreamRequest).table_name == "t"


def test_list_stream_of_the_instance_sends_no_table(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script("ListStream", ok(stream_pb2.ListStreamResponse()))
    assert stream_client.list_stream() == []
    assert not fake.seen("ListStream")[0].parse(stream_pb2.ListStreamRequest).HasField("table_name")


def _describe_response(shards: list[stream_pb2.StreamShard], next_shard_id: str | None = None):
    response = stream_pb2.DescribeStreamResponse(
        stream_id="s1",
        expiration_time=24,
        table_name="t",
        creation_time=1_700_000_000_000_000,
        stream_status=stream_pb2.STREAM_ACTIVE,
        shards=shards,
    )
    if next_shard_id is not None:
        response.next_shard_id = next_shard_id
    return response


def test_describe_stream_maps_shards_and_lineage(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script(
        "DescribeStream",
        ok(
            _describe_response(
                [
                    stream_pb2.StreamShard(shard_id="a"),
                    stream_pb2.StreamShard(shard_id="b", parent_id="a"),
                    stream_pb2.StreamShard(shard_id="c", parent_id="a", parent_sibling_id="x"),
                ]
            )
        ),
    )
    description = stream_client.describe_stream("s1", inclusive_start_shard_id="a", shard_limit=3)
    assert description.status is StreamStatus.ACTIVE
    assert (description.table_name, description.expiration_hours, description.next_shard_id) == ("t", 24, None)
    assert description.shards == (ShardInfo("a"), ShardInfo("b", "a"), ShardInfo("c", "a", "x"))
    assert description.shards[2].parent_ids == ("a", "x")
    sent = fake.seen("DescribeStream")[0].parse(stream_pb2.DescribeStreamRequest)
    assert (sent.stream_id, sent.inclusive_start_shard_id, sent.shard_limit) == ("s1", "a", 3)


def test_list_all_shards_pages_through_next_shard_id(fake: FakeTablestore, stream_client: StreamClient) -> None:
    pages = {"": (["a", "b"], "c"), "c": (["c", "d"], "e"), "e": (["e"], None)}

    def page(request: SeenRequest):
        start = request.parse(stream_pb2.DescribeStreamRequest).inclusive_start_shard_id
        ids, next_id = pages[start]
        return ok(_describe_response([stream_pb2.StreamShard(shard_id=i) for i in ids], next_id))

    fake.script("DescribeStream", page)
    shards = stream_client.list_all_shards("s1", shard_limit=2)
    assert [shard.shard_id for shard in shards] == ["a", "b", "c", "d", "e"]
    starts = [r.parse(stream_pb2.DescribeStreamRequest).inclusive_start_shard_id for r in fake.seen("DescribeStream")]
    assert starts == ["", "c", "e"]


def test_list_all_shards_stops_on_a_server_that_repeats_itself(
    fake: FakeTablestore, stream_client: StreamClient
) -> None:
    fake.script("DescribeStream", ok(_describe_response([stream_pb2.StreamShard(shard_id="a")], "a")))
    with pytest.raises(StreamServiceError, match="keeps answering next_shard_id=a"):
        stream_client.list_all_shards("s1")
    assert len(fake.seen("DescribeStream")) == 2


def test_get_shard_iterator_at_the_oldest_record(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script("GetShardIterator", ok(stream_pb2.GetShardIteratorResponse(shard_iterator="it-0")))
    assert stream_client.get_shard_iterator("s1", "sh") == "it-0"
    sent = fake.seen("GetShardIterator")[0].parse(stream_pb2.GetShardIteratorRequest)
    assert (sent.stream_id, sent.shard_id, sent.HasField("timestamp")) == ("s1", "sh", False)


def test_get_shard_iterator_by_timestamp_follows_tokens(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script(
        "GetShardIterator",
        ok(stream_pb2.GetShardIteratorResponse(shard_iterator="it-1", next_token="t1")),
        ok(stream_pb2.GetShardIteratorResponse(shard_iterator="it-2", next_token="t2")),
        ok(stream_pb2.GetShardIteratorResponse(shard_iterator="it-3")),
    )
    assert stream_client.get_shard_iterator("s1", "sh", timestamp_us=1234) == "it-3"
    sent = [r.parse(stream_pb2.GetShardIteratorRequest) for r in fake.seen("GetShardIterator")]
    assert [(r.timestamp, r.token) for r in sent] == [(1234, ""), (1234, "t1"), (1234, "t2")]


# -- records ---------------------------------------------------------------------------------------------------------

PK = [("id", "row-1"), ("n", 7)]


def _records_response(*records: StreamRecord, next_iterator: str | None = "it-next", may_more: bool | None = None):
    response = stream_pb2.GetStreamRecordResponse(stream_records=list(records))
    if next_iterator is not None:
        response.next_shard_iterator = next_iterator
    if may_more is not None:
        response.may_more_record = may_more
    return ok(response)


def test_get_stream_record_decodes_put_update_and_delete(fake: FakeTablestore, stream_client: StreamClient) -> None:
    put = encode_row(PK, [("a", 1, 1000), ("b", "x", 1000)], sequence=(1, 1_000_000, 0))
    update = encode_row(
        PK,
        [
            ("a", 2, 2000),
            PlainCell("b", None, CELL_DELETE_ONE_VERSION, 1000),
            PlainCell("c", None, CELL_DELETE_ALL_VERSION, None),
        ],
        sequence=(1, 2_000_000, 0),
    )
    delete = encode_row(PK, [], delete_marker=True, sequence=(1, 3_000_000, 0))
    fake.script(
        "GetStreamRecord",
        _records_response(
            StreamRecord(action_type=stream_pb2.PUT_ROW, record=put),
            StreamRecord(action_type=stream_pb2.UPDATE_ROW, record=update, origin_record=b"pre-image"),
            StreamRecord(action_type=stream_pb2.DELETE_ROW, record=delete),
            may_more=True,
        ),
    )
    page = stream_client.get_stream_record("it-0", limit=10, table="orders", shard_id="sh-1")

    assert [r.action for r in page.records] == [RecordAction.PUT, RecordAction.UPDATE, RecordAction.DELETE]
    assert all(r.table == "orders" and r.shard_id == "sh-1" and r.primary_key == PK for r in page.records)
    assert page.records[0].cells == [Cell("a", CellOp.PUT, 1, 1000), Cell("b", CellOp.PUT, "x", 1000)]
    assert page.records[1].cells == [
        Cell("a", CellOp.PUT, 2, 2000),
        Cell("b", CellOp.DELETE_ONE_VERSION, None, 1000),
        Cell("c", CellOp.DELETE_ALL_VERSION, None, None),
    ]
    assert page.records[2].cells == []
    assert [r.sequence for r in page.records] == [Sequence(1, t, 0) for t in (1_000_000, 2_000_000, 3_000_000)]
    assert page.records[1].extra["origin_record"] == b"pre-image"
    assert "origin_record" not in page.records[0].extra
    assert (page.next_shard_iterator, page.may_more_record, page.shard_closed) == ("it-next", True, False)
    sent = fake.seen("GetStreamRecord")[0].parse(stream_pb2.GetStreamRecordRequest)
    assert (sent.shard_iterator, sent.limit, sent.HasField("table_name")) == ("it-0", 10, False)


def test_a_closed_shard_has_no_next_iterator(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script("GetStreamRecord", _records_response(next_iterator=None))
    page = stream_client.get_stream_record("it-last")
    assert page.records == [] and page.next_shard_iterator is None and page.shard_closed
    assert page.may_more_record is None


def _corrupt_put() -> bytes:
    record = bytearray(encode_row(PK, [("a", 1, 1000)], sequence=(1, 5, 0)))
    record[-1] ^= 0xFF  # the row checksum
    return bytes(record)


def test_a_corrupt_record_is_a_typed_error(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script(
        "GetStreamRecord", _records_response(StreamRecord(action_type=stream_pb2.PUT_ROW, record=_corrupt_put()))
    )
    with pytest.raises(CorruptRecordError, match="shard 'sh-9'") as caught:
        stream_client.get_stream_record("it", table="orders", shard_id="sh-9")
    assert "record #0" in str(caught.value)


def test_check_crc_off_reads_past_a_checksum_error(fake: FakeTablestore) -> None:
    fake.script(
        "GetStreamRecord", _records_response(StreamRecord(action_type=stream_pb2.PUT_ROW, record=_corrupt_put()))
    )
    lenient = StreamClient(build_ots_client(fake.url, "i", ACCESS_KEY_ID, ACCESS_KEY_SECRET), check_crc=False)
    assert lenient.get_stream_record("it").records[0].cells == [Cell("a", CellOp.PUT, 1, 1000)]


def test_a_trimmed_iterator_raises_trimmed_data(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script("GetStreamRecord", error_reply(404, "OTSTrimmedDataAccess", "Requested stream data is already trimmed"))
    with pytest.raises(TrimmedDataError):
        stream_client.get_stream_record("old", shard_id="sh")
    assert len(fake.seen("GetStreamRecord")) == 1


# -- table stream settings -------------------------------------------------------------------------------------------


def _update_table_response(details: stream_pb2.StreamDetails | None):
    response = sdk_pb2.UpdateTableResponse()
    response.reserved_throughput_details.capacity_unit.read = 0
    response.reserved_throughput_details.last_increase_time = 1
    response.table_options.max_versions = 1
    if details is not None:
        response.stream_details.CopyFrom(recast(details, sdk_pb2.StreamDetails))
    return ok(response)


def _describe_table_response(details: stream_pb2.StreamDetails | None):
    response = sdk_pb2.DescribeTableResponse()
    response.table_meta.table_name = "t"
    response.table_meta.primary_key.add(name="id", type=sdk_pb2.STRING)
    response.reserved_throughput_details.capacity_unit.read = 0
    response.reserved_throughput_details.last_increase_time = 1
    response.table_options.max_versions = 1
    if details is not None:
        response.stream_details.CopyFrom(recast(details, sdk_pb2.StreamDetails))
    return ok(response)


ENABLED = stream_pb2.StreamDetails(
    enable_stream=True, stream_id="s1", expiration_time=24, last_enable_time=5, column_to_get=["a"]
)


def test_enable_stream_sends_the_spec_and_returns_the_details(
    fake: FakeTablestore, stream_client: StreamClient
) -> None:
    fake.script("UpdateTable", _update_table_response(ENABLED))
    details = stream_client.enable_stream("t", 24, columns_to_get=("a",))
    assert details == TableStreamDetails(True, "s1", 24, 5, ("a",))
    sent = fake.seen("UpdateTable")[0].parse(sdk_pb2.UpdateTableRequest)
    assert sent.table_name == "t"
    assert recast(sent.stream_spec, stream_pb2.StreamSpecification) == stream_pb2.StreamSpecification(
        enable_stream=True, expiration_time=24, columns_to_get=["a"]
    )


def test_enable_stream_falls_back_to_describe_table(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script("UpdateTable", _update_table_response(None))
    fake.script("DescribeTable", _describe_table_response(ENABLED))
    assert stream_client.enable_stream("t", 24).stream_id == "s1"


def test_enable_stream_needs_a_positive_expiration(stream_client: StreamClient) -> None:
    with pytest.raises(ValueError, match="expiration_hours must be positive"):
        stream_client.enable_stream("t", 0)


def test_disable_stream_sends_a_disabling_spec_without_expiration(
    fake: FakeTablestore, stream_client: StreamClient
) -> None:
    fake.script("UpdateTable", _update_table_response(stream_pb2.StreamDetails(enable_stream=False)))
    stream_client.disable_stream("t")
    spec = fake.seen("UpdateTable")[0].parse(sdk_pb2.UpdateTableRequest).stream_spec
    assert (spec.enable_stream, spec.HasField("expiration_time")) == (False, False)


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        (ENABLED, TableStreamDetails(True, "s1", 24, 5, ("a",))),
        (stream_pb2.StreamDetails(enable_stream=False), TableStreamDetails(False)),
        (None, TableStreamDetails(False)),
    ],
)
def test_describe_table_stream(
    fake: FakeTablestore, stream_client: StreamClient, details: stream_pb2.StreamDetails | None, expected
) -> None:
    fake.script("DescribeTable", _describe_table_response(details))
    assert stream_client.describe_table_stream("t") == expected


def test_describe_table_stream_of_a_missing_table(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script("DescribeTable", error_reply(404, "OTSObjectNotExist", "Requested table does not exist."))
    with pytest.raises(TableNotFoundError, match="table nope does not exist"):
        stream_client.describe_table_stream("nope")


def test_create_table_with_stream(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script("CreateTable", ok(sdk_pb2.CreateTableResponse()))
    stream_client.create_table_with_stream(
        TableMeta("t", [("id", "STRING")]), TableOptions(), ReservedThroughput(CapacityUnit(0, 0)), 48
    )
    sent = fake.seen("CreateTable")[0].parse(sdk_pb2.CreateTableRequest)
    assert (sent.table_meta.table_name, sent.stream_spec.enable_stream, sent.stream_spec.expiration_time) == (
        "t",
        True,
        48,
    )


# -- signing ---------------------------------------------------------------------------------------------------------


def test_v4_signing_with_a_region(fake: FakeTablestore) -> None:
    fake.script("ListStream", ok(stream_pb2.ListStreamResponse()))
    client = StreamClient(build_ots_client(fake.url, "i", ACCESS_KEY_ID, ACCESS_KEY_SECRET, region="cn-hangzhou"))
    assert client.list_stream() == []
    headers = fake.seen("ListStream")[0].headers
    assert headers["x-ots-signregion"] == "cn-hangzhou" and "x-ots-signaturev4" in headers
    assert "x-ots-signature" not in headers


def test_requests_carry_the_instance_and_a_v2_signature(fake: FakeTablestore, stream_client: StreamClient) -> None:
    fake.script("ListStream", ok(stream_pb2.ListStreamResponse()))
    stream_client.list_stream()
    headers = fake.seen("ListStream")[0].headers
    assert headers["x-ots-instancename"] == "cdcbridge" and "x-ots-signature" in headers


# -- lost connections ------------------------------------------------------------------------------------------------


@pytest.fixture
def pauses() -> list[float]:
    return []


@pytest.fixture
def recording_client(fake: FakeTablestore, pauses: list[float]) -> StreamClient:
    ots = build_ots_client(fake.url, "i", ACCESS_KEY_ID, ACCESS_KEY_SECRET)
    return StreamClient(ots, transport_retries=2, sleep=pauses.append)


def test_a_read_whose_connection_dropped_is_resent(
    fake: FakeTablestore, recording_client: StreamClient, pauses: list[float]
) -> None:
    fake.script("GetStreamRecord", DROP, _records_response(next_iterator="it-1"))
    assert recording_client.get_stream_record("it-0").next_shard_iterator == "it-1"
    assert len(fake.seen("GetStreamRecord")) == 2
    assert pauses == [0.1]


def test_a_connection_that_keeps_dropping_is_a_connection_error(
    fake: FakeTablestore, recording_client: StreamClient, pauses: list[float]
) -> None:
    fake.script("DescribeStream", DROP)
    dropped = r"lost the connection to Tablestore \(.*\) during DescribeStream on stream s1; check the network"
    with pytest.raises(ConnectionFailedError, match=dropped):
        recording_client.describe_stream("s1")
    assert len(fake.seen("DescribeStream")) == 3
    assert pauses == [0.1, 0.2]


def test_a_write_whose_connection_dropped_is_not_resent(
    fake: FakeTablestore, recording_client: StreamClient, pauses: list[float]
) -> None:
    fake.script("UpdateTable", DROP)
    with pytest.raises(ConnectionFailedError):
        recording_client.disable_stream("t")
    assert len(fake.seen("UpdateTable")) == 1 and pauses == []
