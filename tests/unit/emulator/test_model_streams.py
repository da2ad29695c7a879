"""Streams in the model: record contents, sequences, iterators, split/merge lineage, trimming and retention."""

from __future__ import annotations

import pytest

from cdcbridge.emulator.conditions import Condition, RowExistence
from cdcbridge.emulator.errors import ConditionCheckFail, ObjectNotExist, ParameterInvalid, TrimmedDataAccess
from cdcbridge.emulator.model import CellChange, CellOp, Instance, ReadOptions, RowChange, StreamSpec, WriteKind
from cdcbridge.emulator.streams import StreamAction, decode_iterator, encode_iterator
from cdcbridge.tablestore.plainbuffer import (
    CELL_DELETE_ALL_VERSION,
    CELL_DELETE_ONE_VERSION,
    CELL_INCREMENT,
    PlainCell,
    PlainRow,
    decode_row,
)

from .conftest import T0_MS, T0_US, Clock, make_table

HOUR_US = 3600 * 1_000_000


def stream_id(instance: Instance, table: str = "t") -> str:
    return instance.list_streams(table)[0].stream_id


def shard_ids(instance: Instance, now_us: int) -> list[str]:
    return [s.shard_id for s in instance.describe_stream(stream_id(instance), now_us=now_us).shards]


def read_shard(instance: Instance, shard_id: str, now_us: int) -> list[tuple[StreamAction, PlainRow]]:
    iterator: str | None = instance.get_shard_iterator(stream_id(instance), shard_id, now_us=now_us)
    records = []
    while iterator is not None:
        batch = instance.get_stream_records(iterator, 1000, now_us=now_us)
        records.extend((r.action, decode_row(r.payload)) for r in batch.records)
        if not batch.records and batch.next_iterator == iterator:
            break
        iterator = batch.next_iterator
    return records


def write(instance: Instance, kind: WriteKind, key: int, now_us: int, *cells: CellChange) -> None:
    instance.write_row("t", RowChange(kind, [("id", key)], list(cells)), now_us=now_us)


@pytest.fixture
def streamed(instance: Instance) -> Instance:
    make_table(instance)
    return instance


def test_record_contents_per_action(streamed: Instance, clock: Clock) -> None:
    write(streamed, WriteKind.PUT, 1, clock.tick(), CellChange("a", value=1), CellChange("b", value="x"))
    write(
        streamed,
        WriteKind.UPDATE,
        1,
        clock.tick(),
        CellChange("a", value=2),
        CellChange("b", CellOp.DELETE_ONE_VERSION, timestamp=T0_MS + 1),
        CellChange("c", CellOp.DELETE_ALL_VERSION),
        CellChange("n", CellOp.INCREMENT, value=5),
    )
    write(streamed, WriteKind.DELETE, 1, clock.tick())
    records = read_shard(streamed, shard_ids(streamed, clock.now_us)[0], clock.now_us)
    assert [action for action, _ in records] == [StreamAction.PUT_ROW, StreamAction.UPDATE_ROW, StreamAction.DELETE_ROW]
    put, upd, delete = (row for _, row in records)
    assert put.primary_key == [("id", 1)]
    assert put.cells == [PlainCell("a", 1, None, T0_MS + 1), PlainCell("b", "x", None, T0_MS + 1)]
    assert upd.cells == [
        PlainCell("a", 2, None, T0_MS + 2),
        PlainCell("b", None, CELL_DELETE_ONE_VERSION, T0_MS + 1),
        PlainCell("c", None, CELL_DELETE_ALL_VERSION, None),
        PlainCell("n", 5, None, T0_MS + 2),  # the increment as a PUT of the resulting value
    ]
    assert delete.cells == [] and delete.delete_marker
    assert [row.sequence for row in (put, upd, delete)] == [
        (1, T0_US + 1000, 0),
        (1, T0_US + 2000, 0),
        (1, T0_US + 3000, 0),
    ]


def test_increments_as_deltas(clock: Clock) -> None:
    instance = Instance(increments_as_deltas=True)
    make_table(instance)
    write(instance, WriteKind.UPDATE, 1, clock.tick(), CellChange("n", CellOp.INCREMENT, value=3))
    write(instance, WriteKind.UPDATE, 1, clock.tick(), CellChange("n", CellOp.INCREMENT, value=4))
    rows = [row for _, row in read_shard(instance, shard_ids(instance, clock.now_us)[0], clock.now_us)]
    assert [row.cells for row in rows] == [
        [PlainCell("n", 3, CELL_INCREMENT, T0_MS + 1)],
        [PlainCell("n", 4, CELL_INCREMENT, T0_MS + 2)],
    ]
    view = instance.get_row("t", [("id", 1)], ReadOptions(), now_us=clock.now_us)
    assert view is not None and view.cells[0][1] == 7


def test_failed_writes_leave_no_record(streamed: Instance, clock: Clock) -> None:
    with pytest.raises(ConditionCheckFail):
        streamed.write_row(
            "t",
            RowChange(WriteKind.PUT, [("id", 1)], condition=Condition(RowExistence.EXPECT_EXIST)),
            now_us=clock.tick(),
        )
    with pytest.raises(ParameterInvalid):
        write(streamed, WriteKind.UPDATE, 1, clock.tick(), CellChange("s", CellOp.INCREMENT, value="x"))
    assert read_shard(streamed, shard_ids(streamed, clock.now_us)[0], clock.now_us) == []


def test_batch_rows_share_a_commit_time_with_increasing_row_index(streamed: Instance, clock: Clock) -> None:
    write(streamed, WriteKind.PUT, 0, clock.tick())
    now = clock.now_us  # same wall time as the previous commit: the commit clock still moves forward
    outcomes = streamed.batch_write(
        [
            ("t", RowChange(WriteKind.PUT, [("id", 1)])),
            ("t", RowChange(WriteKind.PUT, [("id", 0)], condition=Condition(RowExistence.EXPECT_NOT_EXIST))),
            ("t", RowChange(WriteKind.PUT, [("id", 2)])),
        ],
        now_us=now,
    )
    assert outcomes[1].error is not None
    rows = [row for _, row in read_shard(streamed, shard_ids(streamed, now)[0], now)]
    assert [row.sequence for row in rows] == [(1, now, 0), (1, now + 1, 0), (1, now + 1, 1)]
    assert [row.primary_key[0][1] for row in rows] == [0, 1, 2]


def test_iterator_is_deterministic_and_stable_when_caught_up(streamed: Instance, clock: Clock) -> None:
    shard = shard_ids(streamed, clock.now_us)[0]
    sid = stream_id(streamed)
    first = streamed.get_shard_iterator(sid, shard, now_us=clock.now_us)
    assert first == streamed.get_shard_iterator(sid, shard, now_us=clock.now_us) and first.isascii()
    empty = streamed.get_stream_records(first, now_us=clock.now_us)
    assert empty.records == [] and empty.next_iterator == first
    for key in range(5):
        write(streamed, WriteKind.PUT, key, clock.tick())
    batch = streamed.get_stream_records(first, 3, now_us=clock.now_us)
    assert len(batch.records) == 3 and decode_iterator(batch.next_iterator or "")[2] == 3
    rest = streamed.get_stream_records(batch.next_iterator or "", now_us=clock.now_us)
    assert len(rest.records) == 2
    assert (
        streamed.get_stream_records(rest.next_iterator or "", now_us=clock.now_us).next_iterator == rest.next_iterator
    )


def test_record_limits(streamed: Instance, clock: Clock) -> None:
    streamed.batch_write([("t", RowChange(WriteKind.PUT, [("id", i)])) for i in range(200)], now_us=clock.tick())
    for i in range(6):
        streamed.batch_write(
            [("t", RowChange(WriteKind.PUT, [("id", 1000 * (i + 1) + j)])) for j in range(200)], now_us=clock.tick()
        )
    iterator = streamed.get_shard_iterator(
        stream_id(streamed), shard_ids(streamed, clock.now_us)[0], now_us=clock.now_us
    )
    assert len(streamed.get_stream_records(iterator, now_us=clock.now_us).records) == 100
    assert len(streamed.get_stream_records(iterator, 5000, now_us=clock.now_us).records) == 1000
    with pytest.raises(ParameterInvalid):
        streamed.get_stream_records(iterator, 0, now_us=clock.now_us)


def test_bad_iterators(streamed: Instance, clock: Clock) -> None:
    with pytest.raises(ParameterInvalid):
        streamed.get_stream_records("not an iterator!", now_us=clock.now_us)
    with pytest.raises(TrimmedDataAccess):  # a stream that is gone
        streamed.get_stream_records(encode_iterator("gone_1", "shard-000001", 0), now_us=clock.now_us)
    with pytest.raises(TrimmedDataAccess):  # a shard that does not exist
        streamed.get_stream_records(encode_iterator(stream_id(streamed), "shard-999999", 0), now_us=clock.now_us)
    with pytest.raises(ObjectNotExist):
        streamed.get_shard_iterator(stream_id(streamed), "shard-999999", now_us=clock.now_us)


def test_split_closes_the_parent_and_routes_keys_to_children(streamed: Instance, clock: Clock) -> None:
    parent = shard_ids(streamed, clock.now_us)[0]
    write(streamed, WriteKind.PUT, 1, clock.tick())
    parent_iterator = streamed.get_shard_iterator(stream_id(streamed), parent, now_us=clock.now_us)
    children = streamed.split_shard("t", parent, now_us=clock.tick())
    assert len(children) == 2
    for key in range(2, 40):
        write(streamed, WriteKind.PUT, key, clock.tick())
    described = streamed.describe_stream(stream_id(streamed), now_us=clock.now_us)
    lineage = {s.shard_id: (s.parent_id, s.parent_sibling_id) for s in described.shards}
    assert lineage == {parent: (None, None), children[0]: (parent, None), children[1]: (parent, None)}
    # The parent ends: its last read returns no next iterator.
    batch = streamed.get_stream_records(parent_iterator, now_us=clock.now_us)
    assert len(batch.records) == 1 and batch.next_iterator is None
    counts = [len(read_shard(streamed, child, clock.now_us)) for child in children]
    assert sum(counts) == 38 and all(counts)  # both halves of the hash space got keys
    with pytest.raises(ParameterInvalid):
        streamed.split_shard("t", parent, now_us=clock.tick())


def test_merge_adjacent_shards(streamed: Instance, clock: Clock) -> None:
    parent = shard_ids(streamed, clock.now_us)[0]
    left, right = streamed.split_shard("t", parent, now_us=clock.tick())
    child = streamed.merge_shards("t", right, left, now_us=clock.tick())
    described = streamed.describe_stream(stream_id(streamed), now_us=clock.now_us)
    merged = next(s for s in described.shards if s.shard_id == child)
    assert (merged.parent_id, merged.parent_sibling_id) == (right, left)
    left2, right2 = streamed.split_shard("t", child, now_us=clock.tick())
    a, _b = streamed.split_shard("t", left2, now_us=clock.tick())
    with pytest.raises(ParameterInvalid, match="not adjacent"):
        streamed.merge_shards("t", a, right2, now_us=clock.tick())
    with pytest.raises(ParameterInvalid, match="closed"):
        streamed.merge_shards("t", left, right, now_us=clock.tick())


def test_describe_stream_paging(streamed: Instance, clock: Clock) -> None:
    first = shard_ids(streamed, clock.now_us)[0]
    streamed.split_shard("t", first, now_us=clock.tick())  # 3 shards
    sid = stream_id(streamed)
    page = streamed.describe_stream(sid, shard_limit=2, now_us=clock.now_us)
    assert len(page.shards) == 2 and page.next_shard_id is not None
    rest = streamed.describe_stream(
        sid, inclusive_start_shard_id=page.next_shard_id, shard_limit=2, now_us=clock.now_us
    )
    assert len(rest.shards) == 1 and rest.next_shard_id is None
    assert [s.shard_id for s in page.shards + rest.shards] == shard_ids(streamed, clock.now_us)
    assert page.expiration_hours == 24 and page.table_name == "t" and page.creation_time_us == T0_US


def test_trim_drops_old_records_and_old_positions_fail(streamed: Instance, clock: Clock) -> None:
    shard = shard_ids(streamed, clock.now_us)[0]
    sid = stream_id(streamed)
    start = streamed.get_shard_iterator(sid, shard, now_us=clock.now_us)
    write(streamed, WriteKind.PUT, 1, clock.tick(1_000_000))
    write(streamed, WriteKind.PUT, 2, clock.tick(1_000_000))
    assert streamed.trim_stream("t", before_ms=clock.now_us // 1000) == 1
    with pytest.raises(TrimmedDataAccess):
        streamed.get_stream_records(start, now_us=clock.now_us)
    fresh = streamed.get_shard_iterator(sid, shard, now_us=clock.now_us)
    assert [r.action for r in streamed.get_stream_records(fresh, now_us=clock.now_us).records] == [StreamAction.PUT_ROW]


def test_retention_expires_records_and_fully_read_closed_shards(streamed: Instance, clock: Clock) -> None:
    parent = shard_ids(streamed, clock.now_us)[0]
    write(streamed, WriteKind.PUT, 1, clock.tick())
    children = streamed.split_shard("t", parent, now_us=clock.tick())
    later = clock.now_us + 24 * HOUR_US + 1000
    assert sorted(shard_ids(streamed, later)) == sorted(children)  # the expired, closed parent is gone
    with pytest.raises(ObjectNotExist):
        streamed.get_shard_iterator(stream_id(streamed), parent, now_us=later)


def test_shard_iterator_at_a_timestamp(streamed: Instance, clock: Clock) -> None:
    for key in range(3):
        write(streamed, WriteKind.PUT, key, clock.tick())
    shard = shard_ids(streamed, clock.now_us)[0]
    iterator = streamed.get_shard_iterator(stream_id(streamed), shard, timestamp_us=T0_US + 2000, now_us=clock.now_us)
    keys = [
        decode_row(r.payload).primary_key for r in streamed.get_stream_records(iterator, now_us=clock.now_us).records
    ]
    assert keys == [[("id", 1)], [("id", 2)]]


def test_origin_record_carries_the_pre_image_of_chosen_columns(instance: Instance, clock: Clock) -> None:
    make_table(instance, stream_hours=None)
    instance.update_table("t", now_us=clock.tick(), stream=StreamSpec(True, 24, ("a",)))
    assert instance.describe_table("t").stream.origin_columns == ("a",)
    write(instance, WriteKind.PUT, 1, clock.tick(), CellChange("a", value=1), CellChange("b", value=2))
    write(instance, WriteKind.UPDATE, 1, clock.tick(), CellChange("a", value=3))
    sid = stream_id(instance)
    shard = shard_ids(instance, clock.now_us)[0]
    records = instance.get_stream_records(
        instance.get_shard_iterator(sid, shard, now_us=clock.now_us), now_us=clock.now_us
    )
    first, second = records.records
    assert first.origin is None  # the row did not exist before
    assert second.origin is not None and decode_row(second.origin).cells == [PlainCell("a", 1, None, T0_MS + 2)]
