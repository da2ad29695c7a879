"""Contract of the emulator, checked ONLY through the official SDK (`tablestore` OTSClient) and our StreamClient.

Whatever passes here is what the bridge relies on: rows written with the SDK show up as stream records with the
right action, cells and increasing sequence; split and merge produce children with parent ids and close their
parents; trimmed positions fail typed; conditional writes fail without writing or recording anything; signatures
are checked; batch and range calls work; a caught-up read returns the same iterator.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from tablestore import (
    INF_MAX,
    INF_MIN,
    BatchGetRowRequest,
    BatchWriteRowRequest,
    CapacityUnit,
    ComparatorType,
    CompositeColumnCondition,
    Condition,
    DeleteRowItem,
    Direction,
    LogicalOperator,
    OTSClient,
    OTSServiceError,
    PutRowItem,
    ReservedThroughput,
    Row,
    RowExistenceExpectation,
    SingleColumnCondition,
    TableInBatchGetRowItem,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
    UpdateRowItem,
)

from cdcbridge.changes import Cell, ChangeRecord, RecordAction
from cdcbridge.contract import CellOp
from cdcbridge.emulator.server import EmulatorServer
from cdcbridge.harness.emulator_admin import EmulatorAdmin
from cdcbridge.tablestore import (
    AuthError,
    ConnectionFailedError,
    ServerBusyError,
    ShardNotFoundError,
    StreamClient,
    StreamNotFoundError,
    StreamStatus,
    TrimmedDataError,
    build_ots_client,
)
from cdcbridge.tablestore.retry import StreamRetryPolicy

pytestmark = pytest.mark.integration

INSTANCE = "cdcbridge"
ACCESS_KEY_ID = "emulator-id"
ACCESS_KEY_SECRET = "emulator-secret"
IGNORE = Condition(RowExistenceExpectation.IGNORE)
_table_numbers = itertools.count()


# -- fixtures and helpers --------------------------------------------------------------------------------------------


def _start(**options: object) -> EmulatorServer:
    server = EmulatorServer(
        host="127.0.0.1", port=0, data_dir=None, credentials={ACCESS_KEY_ID: ACCESS_KEY_SECRET}, **options
    )
    server.start()
    return server


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorServer]:
    server = _start()
    try:
        yield server
    finally:
        server.stop()


def _client(server: EmulatorServer, **options: object) -> OTSClient:
    policy = StreamRetryPolicy(max_retry_times=2, max_retry_delay=0.05)
    return build_ots_client(server.url, INSTANCE, ACCESS_KEY_ID, ACCESS_KEY_SECRET, retry_policy=policy, **options)


@pytest.fixture(scope="module")
def ots(emulator: EmulatorServer) -> OTSClient:
    return _client(emulator)


@pytest.fixture(scope="module")
def streams(ots: OTSClient) -> StreamClient:
    return StreamClient(ots)


def _admin(server: EmulatorServer) -> EmulatorAdmin:
    return EmulatorAdmin(server.url, timeout=10)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class StreamTable:
    name: str
    stream_id: str


def _create_table(ots: OTSClient, name: str) -> None:
    ots.create_table(
        TableMeta(name, [("id", "STRING"), ("n", "INTEGER")]),
        TableOptions(time_to_live=-1, max_version=3),
        ReservedThroughput(CapacityUnit(0, 0)),
    )


def _wait_active(streams: StreamClient, stream_id: str) -> None:
    deadline = time.monotonic() + 10
    while streams.describe_stream(stream_id).status is not StreamStatus.ACTIVE:
        assert time.monotonic() < deadline, f"stream {stream_id} never became ACTIVE"
        time.sleep(0.05)


@pytest.fixture
def table(ots: OTSClient, streams: StreamClient) -> StreamTable:
    """A fresh table with its stream on (24 h) and active."""
    name = f"contract_{next(_table_numbers)}"
    _create_table(ots, name)
    details = streams.enable_stream(name, 24)
    assert details.enabled and details.stream_id
    _wait_active(streams, details.stream_id)
    return StreamTable(name, details.stream_id)


def _only_shard(streams: StreamClient, table: StreamTable) -> str:
    shards = streams.list_all_shards(table.stream_id)
    assert len(shards) == 1, shards
    return shards[0].shard_id


@dataclass
class ShardRead:
    records: list[ChangeRecord]
    last_iterator: str | None  # None: the shard is closed and fully read


def _read_shard(
    streams: StreamClient, table: StreamTable, shard_id: str, iterator: str | None = None, limit: int = 3
) -> ShardRead:
    """Read until the shard closes (iterator None) or is caught up (no records, same iterator)."""
    iterator = iterator or streams.get_shard_iterator(table.stream_id, shard_id)
    records: list[ChangeRecord] = []
    for _ in range(1000):
        page = streams.get_stream_record(iterator, limit=limit, table=table.name, shard_id=shard_id)
        records.extend(page.records)
        if page.next_shard_iterator is None:
            return ShardRead(records, None)
        if not page.records and page.next_shard_iterator == iterator:
            return ShardRead(records, iterator)
        iterator = page.next_shard_iterator
    raise AssertionError(f"shard {shard_id} never ended nor caught up")


def _pk(key: str, n: int = 1) -> list[tuple[str, object]]:
    return [("id", key), ("n", n)]


def _assert_increasing(records: list[ChangeRecord]) -> None:
    sequences = [record.sequence for record in records]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences), sequences


# -- stream settings -------------------------------------------------------------------------------------------------


def test_enable_list_describe_and_disable(ots: OTSClient, streams: StreamClient) -> None:
    name = f"contract_{next(_table_numbers)}"
    _create_table(ots, name)
    assert not streams.describe_table_stream(name).enabled
    assert streams.list_stream(name) == []

    details = streams.enable_stream(name, 24)
    assert (details.enabled, details.expiration_hours) == (True, 24)
    assert details.last_enable_time_us and details.last_enable_time_us > 0
    assert [s.stream_id for s in streams.list_stream(name)] == [details.stream_id]
    assert details.stream_id in {s.stream_id for s in streams.list_stream()}
    _wait_active(streams, details.stream_id)

    description = streams.describe_stream(details.stream_id)
    assert (description.table_name, description.expiration_hours) == (name, 24)
    assert len(description.shards) == 1 and description.shards[0].parent_ids == ()
    assert description.next_shard_id is None
    assert streams.describe_table_stream(name) == details

    streams.disable_stream(name)
    assert not streams.describe_table_stream(name).enabled
    assert streams.list_stream(name) == []


def test_create_table_with_stream_lists_it_at_once(ots: OTSClient, streams: StreamClient) -> None:
    name = f"contract_{next(_table_numbers)}"
    streams.create_table_with_stream(
        TableMeta(name, [("id", "STRING")]), TableOptions(), ReservedThroughput(CapacityUnit(0, 0)), 12
    )
    listed = streams.list_stream(name)
    assert len(listed) == 1 and listed[0].table_name == name
    assert streams.describe_table_stream(name).expiration_hours == 12


def test_unknown_stream_and_shard_are_typed(streams: StreamClient, table: StreamTable) -> None:
    with pytest.raises(StreamNotFoundError):
        streams.describe_stream("no-such-stream")
    with pytest.raises(ShardNotFoundError):
        streams.get_shard_iterator(table.stream_id, "no-such-shard")


# -- row mutations as records ----------------------------------------------------------------------------------------


def test_row_mutations_become_records_in_order(ots: OTSClient, streams: StreamClient, table: StreamTable) -> None:
    shard = _only_shard(streams, table)
    before = _now_ms()
    v1, v2 = before - 60_000, before - 30_000  # explicit versions, inside the table's allowed time deviation
    ots.put_row(table.name, Row(_pk("a"), [("v", 1, v1), ("s", "x", v1), ("gone", True, v1)]))
    ots.put_row(table.name, Row(_pk("a"), [("counter", 10, v1)]))
    ots.update_row(
        table.name,
        Row(_pk("a"), {"put": [("v", 2, v2)], "delete": [("s", None, v1)], "delete_all": ["gone"]}),
        IGNORE,
    )
    ots.update_row(
        table.name, Row(_pk("a"), {"increment": [("counter", 5)]}), Condition(RowExistenceExpectation.IGNORE)
    )
    ots.delete_row(table.name, Row(_pk("a")), Condition(RowExistenceExpectation.IGNORE))
    after = _now_ms()

    read = _read_shard(streams, table, shard)
    records = read.records
    assert [r.action for r in records] == [
        RecordAction.PUT,
        RecordAction.PUT,
        RecordAction.UPDATE,
        RecordAction.UPDATE,
        RecordAction.DELETE,
    ]
    assert all(r.primary_key == _pk("a") and r.table == table.name and r.shard_id == shard for r in records)
    assert records[0].cells == [
        Cell("v", CellOp.PUT, 1, v1),
        Cell("s", CellOp.PUT, "x", v1),
        Cell("gone", CellOp.PUT, True, v1),
    ]
    assert records[1].cells == [Cell("counter", CellOp.PUT, 10, v1)]
    update = {cell.name: cell for cell in records[2].cells}
    assert update["v"] == Cell("v", CellOp.PUT, 2, v2)
    assert (update["s"].op, update["s"].timestamp_ms) == (CellOp.DELETE_ONE_VERSION, v1)
    assert update["gone"].op is CellOp.DELETE_ALL_VERSION
    [increment] = records[3].cells
    assert (increment.name, increment.op, increment.value) == ("counter", CellOp.PUT, 15), "the resulting value"
    assert increment.timestamp_ms is not None and before <= increment.timestamp_ms <= after + 1000
    assert records[4].cells == []
    _assert_increasing(records)
    assert all(before - 1000 <= r.timestamp_ms <= after + 1000 for r in records)
    assert read.last_iterator is not None, "an open shard never ends"


def test_increments_as_deltas_record_the_delta() -> None:
    server = _start(increments_as_deltas=True)
    try:
        ots = _client(server)
        streams = StreamClient(ots)
        name = "deltas"
        _create_table(ots, name)
        table = StreamTable(name, streams.enable_stream(name, 24).stream_id or "")
        _wait_active(streams, table.stream_id)
        ots.put_row(name, Row(_pk("k"), [("counter", 10)]))
        ots.update_row(name, Row(_pk("k"), {"increment": [("counter", 5)]}), IGNORE)
        records = _read_shard(streams, table, _only_shard(streams, table)).records
        assert [(c.name, c.op, c.value) for c in records[1].cells] == [("counter", CellOp.INCREMENT, 5)]
        _, row, _ = ots.get_row(name, _pk("k"), max_version=1)
        assert row.attribute_columns[0][:2] == ("counter", 15)
    finally:
        server.stop()


def test_caught_up_read_returns_the_same_iterator(ots: OTSClient, streams: StreamClient, table: StreamTable) -> None:
    shard = _only_shard(streams, table)
    ots.put_row(table.name, Row(_pk("a"), [("v", 1)]))
    read = _read_shard(streams, table, shard)
    assert len(read.records) == 1
    page = streams.get_stream_record(read.last_iterator or "", table=table.name, shard_id=shard)
    assert page.records == [] and page.next_shard_iterator == read.last_iterator

    ots.put_row(table.name, Row(_pk("b"), [("v", 2)]))
    later = streams.get_stream_record(read.last_iterator or "", table=table.name, shard_id=shard)
    assert [r.primary_key for r in later.records] == [_pk("b")], "an iterator is a durable position"


# -- shards: split, merge, trim --------------------------------------------------------------------------------------

KEYS = [f"key-{i:03d}" for i in range(24)]


def test_split_closes_the_parent_and_children_hold_later_changes(
    emulator: EmulatorServer, ots: OTSClient, streams: StreamClient, table: StreamTable
) -> None:
    parent = _only_shard(streams, table)
    ots.put_row(table.name, Row(_pk("before"), [("v", 0)]))
    children = _admin(emulator).split(table.name, parent)
    assert isinstance(children, list) and len(children) == 2
    for key in KEYS:
        ots.put_row(table.name, Row(_pk(key), [("v", 1)]))

    shards = {shard.shard_id: shard for shard in streams.list_all_shards(table.stream_id)}
    assert set(shards) == {parent, *children}
    assert all(shards[child].parent_id == parent and shards[child].parent_sibling_id is None for child in children)
    paged = streams.list_all_shards(table.stream_id, shard_limit=1)
    assert {shard.shard_id for shard in paged} == set(shards), "paging sees every shard"

    parent_read = _read_shard(streams, table, parent)
    assert parent_read.last_iterator is None, "a split parent ends"
    assert [r.primary_key for r in parent_read.records] == [_pk("before")]

    child_keys: list[str] = []
    for child in children:
        child_read = _read_shard(streams, table, child)
        assert child_read.last_iterator is not None, "children stay open"
        _assert_increasing(child_read.records)
        child_keys += [str(r.primary_key[0][1]) for r in child_read.records]
    assert sorted(child_keys) == KEYS, "every later change is in exactly one child"


def test_merge_makes_a_child_of_two_parents(
    emulator: EmulatorServer, ots: OTSClient, streams: StreamClient, table: StreamTable
) -> None:
    first, second = _admin(emulator).split(table.name, _only_shard(streams, table))
    merged = _admin(emulator).merge(table.name, first, second)
    for key in KEYS[:5]:
        ots.put_row(table.name, Row(_pk(key), [("v", 1)]))

    shards = {shard.shard_id: shard for shard in streams.list_all_shards(table.stream_id)}
    assert (shards[merged].parent_id, shards[merged].parent_sibling_id) == (first, second)
    assert _read_shard(streams, table, first).last_iterator is None
    assert _read_shard(streams, table, second).last_iterator is None
    merged_read = _read_shard(streams, table, merged)
    assert sorted(str(r.primary_key[0][1]) for r in merged_read.records) == KEYS[:5]


def test_trimmed_positions_raise_trimmed_data(
    emulator: EmulatorServer, ots: OTSClient, streams: StreamClient, table: StreamTable
) -> None:
    shard = _only_shard(streams, table)
    oldest = streams.get_shard_iterator(table.stream_id, shard)
    ots.put_row(table.name, Row(_pk("old"), [("v", 1)]))
    _admin(emulator).trim(table.name, _now_ms() + 1)

    with pytest.raises(TrimmedDataError):
        streams.get_stream_record(oldest, table=table.name, shard_id=shard)
    ots.put_row(table.name, Row(_pk("new"), [("v", 2)]))
    fresh = _read_shard(streams, table, shard)
    assert [r.primary_key for r in fresh.records] == [_pk("new")], "a fresh iterator starts after the trimmed data"


# -- conditional writes ----------------------------------------------------------------------------------------------


def _new_records(streams: StreamClient, table: StreamTable, shard: str, iterator: str) -> ShardRead:
    return _read_shard(streams, table, shard, iterator=iterator)


def _assert_condition_fails(call) -> None:
    with pytest.raises(OTSServiceError) as caught:
        call()
    assert (caught.value.get_error_code(), caught.value.get_http_status()) == ("OTSConditionCheckFail", 403)


def test_row_existence_conditions(ots: OTSClient, streams: StreamClient, table: StreamTable) -> None:
    shard = _only_shard(streams, table)
    expect_new = Condition(RowExistenceExpectation.EXPECT_NOT_EXIST)
    ots.put_row(table.name, Row(_pk("lease"), [("owner", "w1")]), expect_new)
    mark = _read_shard(streams, table, shard)
    assert len(mark.records) == 1

    _assert_condition_fails(lambda: ots.put_row(table.name, Row(_pk("lease"), [("owner", "w2")]), expect_new))
    _assert_condition_fails(
        lambda: ots.update_row(
            table.name, Row(_pk("nobody"), {"put": [("v", 1)]}), Condition(RowExistenceExpectation.EXPECT_EXIST)
        )
    )
    _assert_condition_fails(
        lambda: ots.delete_row(table.name, Row(_pk("nobody")), Condition(RowExistenceExpectation.EXPECT_EXIST))
    )
    _, row, _ = ots.get_row(table.name, _pk("lease"), max_version=1)
    assert row.attribute_columns[0][:2] == ("owner", "w1"), "a failed write writes nothing"
    _, missing, _ = ots.get_row(table.name, _pk("nobody"), max_version=1)
    assert missing is None
    assert _new_records(streams, table, shard, mark.last_iterator or "").records == [], "and records nothing"


def test_column_conditions(ots: OTSClient, streams: StreamClient, table: StreamTable) -> None:
    shard = _only_shard(streams, table)
    ots.put_row(table.name, Row(_pk("lease"), [("counter", 1), ("owner", "w1")]))
    mark = _read_shard(streams, table, shard)

    def renew(expected_counter: int, new_counter: int) -> None:
        condition = Condition(
            RowExistenceExpectation.EXPECT_EXIST,
            SingleColumnCondition("counter", expected_counter, ComparatorType.EQUAL, pass_if_missing=False),
        )
        ots.update_row(table.name, Row(_pk("lease"), {"put": [("counter", new_counter)]}), condition)

    renew(1, 2)
    _assert_condition_fails(lambda: renew(1, 3))

    steal = CompositeColumnCondition(LogicalOperator.AND)
    steal.add_sub_condition(SingleColumnCondition("owner", "w1", ComparatorType.EQUAL))
    steal.add_sub_condition(SingleColumnCondition("stealer", "", ComparatorType.EQUAL, pass_if_missing=True))
    ots.update_row(
        table.name,
        Row(_pk("lease"), {"put": [("stealer", "w2")]}),
        Condition(RowExistenceExpectation.EXPECT_EXIST, steal),
    )
    either = CompositeColumnCondition(LogicalOperator.OR)
    either.add_sub_condition(SingleColumnCondition("owner", "w9", ComparatorType.EQUAL))
    either.add_sub_condition(SingleColumnCondition("counter", 100, ComparatorType.GREATER_EQUAL))
    _assert_condition_fails(
        lambda: ots.update_row(
            table.name,
            Row(_pk("lease"), {"put": [("owner", "w9")]}),
            Condition(RowExistenceExpectation.EXPECT_EXIST, either),
        )
    )

    later = _new_records(streams, table, shard, mark.last_iterator or "").records
    assert [[(c.name, c.value) for c in r.cells] for r in later] == [[("counter", 2)], [("stealer", "w2")]]


# -- authentication --------------------------------------------------------------------------------------------------


def test_a_wrong_secret_is_rejected(emulator: EmulatorServer) -> None:
    wrong = OTSClient(emulator.url, ACCESS_KEY_ID, "not-the-secret", INSTANCE)
    with pytest.raises(OTSServiceError) as caught:
        wrong.list_table()
    assert (caught.value.get_error_code(), caught.value.get_http_status()) == ("OTSAuthFailed", 403)
    with pytest.raises(AuthError):
        StreamClient(build_ots_client(emulator.url, INSTANCE, "unknown-id", ACCESS_KEY_SECRET)).list_stream()


def test_v4_signing_is_accepted(emulator: EmulatorServer, table: StreamTable) -> None:
    v4 = StreamClient(_client(emulator, region="cn-hangzhou"))
    assert table.stream_id in {s.stream_id for s in v4.list_stream(table.name)}


# -- batch and range -------------------------------------------------------------------------------------------------


def test_batch_write_batch_get_and_get_range(ots: OTSClient, streams: StreamClient, table: StreamTable) -> None:
    shard = _only_shard(streams, table)
    ots.put_row(table.name, Row(_pk("c"), [("v", 3)]))
    ots.put_row(table.name, Row(_pk("d"), [("v", 4)]))
    mark = _read_shard(streams, table, shard)

    write = BatchWriteRowRequest()  # one operation per row: the service refuses duplicated keys in a batch
    write.add(
        TableInBatchWriteRowItem(
            table.name,
            [
                PutRowItem(Row(_pk("a"), [("v", 1)]), IGNORE),
                PutRowItem(Row(_pk("b"), [("v", 2)]), IGNORE),
                UpdateRowItem(Row(_pk("c"), {"put": [("w", "x")]}), IGNORE),
                DeleteRowItem(Row(_pk("d")), IGNORE),
            ],
        )
    )
    assert ots.batch_write_row(write).is_all_succeed()

    read = BatchGetRowRequest()
    read.add(TableInBatchGetRowItem(table.name, [_pk("a"), _pk("b"), _pk("c"), _pk("d")], max_version=1))
    items = ots.batch_get_row(read).get_result_by_table(table.name)
    assert len(items) == 4 and all(item.is_ok for item in items)
    found = {item.row.primary_key[0][1]: item.row for item in items if item.row is not None}
    assert set(found) == {"a", "b", "c"}
    assert sorted(c[:2] for c in found["c"].attribute_columns) == [("v", 3), ("w", "x")]

    start, end = [("id", INF_MIN), ("n", INF_MIN)], [("id", INF_MAX), ("n", INF_MAX)]
    _, next_start, rows, _ = ots.get_range(table.name, Direction.FORWARD, start, end, limit=2)
    assert [row.primary_key for row in rows] == [_pk("a"), _pk("b")] and next_start == _pk("c")
    _, next_start, rows, _ = ots.get_range(table.name, Direction.FORWARD, next_start, end, max_version=1)
    assert [row.primary_key for row in rows] == [_pk("c")] and next_start is None

    records = _new_records(streams, table, shard, mark.last_iterator or "").records
    assert [(r.action, r.primary_key[0][1]) for r in records] == [
        (RecordAction.PUT, "a"),
        (RecordAction.PUT, "b"),
        (RecordAction.UPDATE, "c"),
        (RecordAction.DELETE, "d"),
    ]
    _assert_increasing(records)


# -- injected faults -------------------------------------------------------------------------------------------------


@pytest.fixture
def faults(emulator: EmulatorServer) -> Iterator[None]:
    try:
        yield
    finally:
        _admin(emulator).clear_faults()


def test_transient_faults_are_retried_and_persistent_ones_typed(
    emulator: EmulatorServer, ots: OTSClient, streams: StreamClient, table: StreamTable, faults: None
) -> None:
    shard = _only_shard(streams, table)
    ots.put_row(table.name, Row(_pk("a"), [("v", 1)]))
    iterator = streams.get_shard_iterator(table.stream_id, shard)
    rules = [
        {"api": "GetStreamRecord", "error_code": "OTSServerBusy", "count": 2},
        {"api": "DescribeStream", "error_code": "OTSFlowControl", "count": 1},
    ]
    _admin(emulator).set_faults(rules)
    assert len(streams.get_stream_record(iterator, table=table.name, shard_id=shard).records) == 1
    assert streams.describe_stream(table.stream_id).stream_id == table.stream_id

    _admin(emulator).set_faults([{"api": "GetStreamRecord", "error_code": "OTSServerBusy"}])
    with pytest.raises(ServerBusyError):
        streams.get_stream_record(iterator)
    _admin(emulator).set_faults([{"api": "GetStreamRecord", "drop_response": True, "count": 1}])
    again = streams.get_stream_record(iterator, table=table.name, shard_id=shard)
    assert [r.primary_key for r in again.records] == [_pk("a")], "a read whose answer was lost is resent"

    _admin(emulator).set_faults([{"api": "GetStreamRecord", "drop_response": True}])
    with pytest.raises(ConnectionFailedError):
        StreamClient(ots, transport_retries=1, sleep=lambda _: None).get_stream_record(iterator)
