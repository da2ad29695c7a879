"""Row operations in the model: put/get/update/delete, versions, increments, conditions, batches, ranges, limits."""

from __future__ import annotations

import pytest

from cdcbridge.emulator.conditions import (
    Comparator,
    CompositeCondition,
    Condition,
    LogicalOperator,
    RowExistence,
    SingleColumnCondition,
)
from cdcbridge.emulator.errors import (
    ConditionCheckFail,
    InvalidPK,
    ObjectNotExist,
    ParameterInvalid,
)
from cdcbridge.emulator.keys import PkType, PrimaryKeyColumn
from cdcbridge.emulator.model import (
    CellChange,
    CellOp,
    Instance,
    Limits,
    ReadOptions,
    RowChange,
    TableOptions,
    WriteKind,
)
from cdcbridge.tablestore.plainbuffer import AUTO_INCREMENT, INF_MAX, INF_MIN

from .conftest import T0_MS, Clock, make_table

ALL = ReadOptions()


def put(instance: Instance, key: int, now_us: int, condition: Condition | None = None, **columns: object) -> None:
    cells = [CellChange(name, value=value) for name, value in columns.items()]
    change = RowChange(WriteKind.PUT, [("id", key)], cells, condition or Condition())
    instance.write_row("t", change, now_us=now_us)


def update(instance: Instance, key: int, now_us: int, *cells: CellChange, condition: Condition | None = None) -> None:
    instance.write_row(
        "t", RowChange(WriteKind.UPDATE, [("id", key)], list(cells), condition or Condition()), now_us=now_us
    )


def columns_of(instance: Instance, key: int, now_us: int, read: ReadOptions = ALL) -> dict[str, object] | None:
    view = instance.get_row("t", [("id", key)], read, now_us=now_us)
    return None if view is None else {name: value for name, value, _ in view.cells}


@pytest.fixture
def table(instance: Instance) -> Instance:
    make_table(instance, stream_hours=None)
    return instance


def test_put_replaces_the_whole_row_and_get_returns_it(table: Instance, clock: Clock) -> None:
    put(table, 1, clock.tick(), a=1, b="x", c=b"\x00", d=1.5, e=True)
    view = table.get_row("t", [("id", 1)], ALL, now_us=clock.tick())
    assert view is not None and view.primary_key == [("id", 1)]
    assert view.cells == [
        ("a", 1, T0_MS + 1),
        ("b", "x", T0_MS + 1),
        ("c", b"\x00", T0_MS + 1),
        ("d", 1.5, T0_MS + 1),
        ("e", True, T0_MS + 1),
    ]
    put(table, 1, clock.tick(), z=9)
    assert columns_of(table, 1, clock.now_us) == {"z": 9}
    assert table.get_row("t", [("id", 2)], ALL, now_us=clock.now_us) is None


def test_columns_to_get_and_column_range(table: Instance, clock: Clock) -> None:
    put(table, 1, clock.tick(), a=1, b=2, c=3)
    assert columns_of(table, 1, clock.now_us, ReadOptions(columns_to_get=("c", "a"))) == {"a": 1, "c": 3}
    assert columns_of(table, 1, clock.now_us, ReadOptions(columns_to_get=("missing",))) is None
    assert columns_of(table, 1, clock.now_us, ReadOptions(columns_to_get=("id",))) == {}
    assert columns_of(table, 1, clock.now_us, ReadOptions(start_column="b", end_column="c")) == {"b": 2}


def test_versions_max_versions_and_time_range(instance: Instance, clock: Clock) -> None:
    make_table(instance, stream_hours=None, options=TableOptions(max_versions=2))
    for value in (1, 2, 3):
        update(instance, 1, clock.tick(), CellChange("v", value=value))
    view = instance.get_row("t", [("id", 1)], ReadOptions(max_versions=5), now_us=clock.now_us)
    assert view is not None
    assert [(v, ts) for _, v, ts in view.cells] == [(3, T0_MS + 3), (2, T0_MS + 2)]  # only 2 kept, newest first
    in_range = ReadOptions(max_versions=None, time_range=(T0_MS + 2, T0_MS + 3))
    assert columns_of(instance, 1, clock.now_us, in_range) == {"v": 2}
    exact = ReadOptions(max_versions=None, specific_time=T0_MS + 3)
    assert columns_of(instance, 1, clock.now_us, exact) == {"v": 3}
    with pytest.raises(ParameterInvalid):
        instance.get_row("t", [("id", 1)], ReadOptions(max_versions=None), now_us=clock.now_us)


def test_update_put_delete_one_delete_all(instance: Instance, clock: Clock) -> None:
    make_table(instance, stream_hours=None, options=TableOptions(max_versions=5))
    update(instance, 1, clock.tick(), CellChange("a", value=1, timestamp=T0_MS - 5), CellChange("a", value=2))
    update(instance, 1, clock.tick(), CellChange("b", value="keep"))
    update(instance, 1, clock.tick(), CellChange("a", CellOp.DELETE_ONE_VERSION, timestamp=T0_MS - 5))
    view = instance.get_row("t", [("id", 1)], ReadOptions(max_versions=5), now_us=clock.now_us)
    assert view is not None and [(n, v) for n, v, _ in view.cells] == [("a", 2), ("b", "keep")]
    update(instance, 1, clock.tick(), CellChange("a", CellOp.DELETE_ALL_VERSION))
    assert columns_of(instance, 1, clock.now_us) == {"b": "keep"}
    with pytest.raises(ParameterInvalid):  # deleting one version needs its timestamp
        update(instance, 1, clock.tick(), CellChange("b", CellOp.DELETE_ONE_VERSION))


def test_update_on_a_missing_row_creates_it(table: Instance, clock: Clock) -> None:
    update(table, 7, clock.tick(), CellChange("a", value="new"))
    assert columns_of(table, 7, clock.now_us) == {"a": "new"}


def test_increment_counts_missing_as_zero_and_only_integers(table: Instance, clock: Clock) -> None:
    update(table, 1, clock.tick(), CellChange("n", CellOp.INCREMENT, value=5))
    update(table, 1, clock.tick(), CellChange("n", CellOp.INCREMENT, value=-2))
    assert columns_of(table, 1, clock.now_us) == {"n": 3}
    update(table, 1, clock.tick(), CellChange("s", value="text"))
    with pytest.raises(ParameterInvalid, match="only INTEGER"):
        update(table, 1, clock.tick(), CellChange("s", CellOp.INCREMENT, value=1))
    with pytest.raises(ParameterInvalid):
        update(table, 1, clock.tick(), CellChange("n", CellOp.INCREMENT, value=1.5))
    with pytest.raises(ParameterInvalid, match="overflows"):
        update(table, 1, clock.tick(), CellChange("n", CellOp.INCREMENT, value=(1 << 63) - 1))
    with pytest.raises(ParameterInvalid):  # an incremented column cannot be changed otherwise in the same request
        update(table, 1, clock.tick(), CellChange("n", CellOp.INCREMENT, value=1), CellChange("n", value=0))
    assert columns_of(table, 1, clock.now_us) == {"n": 3, "s": "text"}


def test_delete_row(table: Instance, clock: Clock) -> None:
    put(table, 1, clock.tick(), a=1)
    table.write_row("t", RowChange(WriteKind.DELETE, [("id", 1)]), now_us=clock.tick())
    assert table.get_row("t", [("id", 1)], ALL, now_us=clock.now_us) is None
    # Deleting a missing row is fine with IGNORE, a condition failure with EXPECT_EXIST.
    table.write_row("t", RowChange(WriteKind.DELETE, [("id", 1)]), now_us=clock.tick())
    with pytest.raises(ConditionCheckFail):
        expect = Condition(RowExistence.EXPECT_EXIST)
        table.write_row("t", RowChange(WriteKind.DELETE, [("id", 1)], condition=expect), now_us=clock.tick())


def test_row_existence_conditions_write_nothing_on_failure(table: Instance, clock: Clock) -> None:
    put(table, 1, clock.tick(), Condition(RowExistence.EXPECT_NOT_EXIST), a=1)
    with pytest.raises(ConditionCheckFail) as raised:
        put(table, 1, clock.tick(), Condition(RowExistence.EXPECT_NOT_EXIST), a=2)
    assert raised.value.http_status == 403 and raised.value.message == "Condition check failed."
    with pytest.raises(ConditionCheckFail):
        update(table, 2, clock.tick(), CellChange("a", value=1), condition=Condition(RowExistence.EXPECT_EXIST))
    assert columns_of(table, 1, clock.now_us) == {"a": 1}
    assert table.get_row("t", [("id", 2)], ALL, now_us=clock.now_us) is None


def test_column_conditions_single_and_composite(table: Instance, clock: Clock) -> None:
    put(table, 1, clock.tick(), counter=5, owner="w1", stealer="")
    counter_is_5 = SingleColumnCondition("counter", Comparator.EQUAL, 5, pass_if_missing=False)
    update(table, 1, clock.tick(), CellChange("counter", value=6), condition=Condition(column_condition=counter_is_5))
    with pytest.raises(ConditionCheckFail):  # lost the race: the counter moved on
        update(
            table, 1, clock.tick(), CellChange("owner", value="w2"), condition=Condition(column_condition=counter_is_5)
        )
    steal = CompositeCondition(
        LogicalOperator.AND,
        (
            SingleColumnCondition("owner", Comparator.EQUAL, "w1"),
            SingleColumnCondition("stealer", Comparator.EQUAL, ""),
        ),
    )
    update(
        table,
        1,
        clock.tick(),
        CellChange("stealer", value="w2"),
        condition=Condition(RowExistence.EXPECT_EXIST, steal),
    )
    assert columns_of(table, 1, clock.now_us) == {"counter": 6, "owner": "w1", "stealer": "w2"}
    with pytest.raises(ConditionCheckFail):
        update(table, 1, clock.tick(), CellChange("stealer", value="w3"), condition=Condition(column_condition=steal))


def test_conditions_reject_malformed_trees(table: Instance, clock: Clock) -> None:
    single = SingleColumnCondition("a", Comparator.EQUAL, 1)
    for bad in (
        CompositeCondition(LogicalOperator.NOT, (single, single)),
        CompositeCondition(LogicalOperator.AND, (single,)),
        CompositeCondition(LogicalOperator.OR, tuple([single] * 33)),
    ):
        with pytest.raises(ParameterInvalid):
            put(table, 1, clock.tick(), Condition(column_condition=bad), a=1)
    assert table.get_row("t", [("id", 1)], ALL, now_us=clock.now_us) is None


def test_primary_key_validation(table: Instance, clock: Clock) -> None:
    for key, error in (
        ([("id", "1")], InvalidPK),
        ([("other", 1)], InvalidPK),
        ([("id", 1), ("x", 2)], InvalidPK),
        ([("id", True)], InvalidPK),
        ([("id", INF_MIN)], ParameterInvalid),
        ([("id", AUTO_INCREMENT)], ParameterInvalid),
        ([("id", 1 << 63)], ParameterInvalid),
    ):
        with pytest.raises(error):
            table.write_row("t", RowChange(WriteKind.PUT, key, [CellChange("a", value=1)]), now_us=clock.tick())
    with pytest.raises(ParameterInvalid):  # attribute named like a primary key column
        put(table, 1, clock.tick(), id=1)
    with pytest.raises(ObjectNotExist):
        table.write_row("nope", RowChange(WriteKind.PUT, [("id", 1)]), now_us=clock.tick())


def test_user_timestamps_must_be_within_the_allowed_deviation(table: Instance, clock: Clock) -> None:
    now_us = clock.tick()
    update(table, 1, now_us, CellChange("a", value=1, timestamp=now_us // 1000 - 86_400_000))
    update(table, 1, now_us, CellChange("a", value=1, timestamp=now_us // 1000 + 86_400_000))
    with pytest.raises(ParameterInvalid, match="max_time_deviation"):
        update(table, 1, now_us, CellChange("a", value=1, timestamp=now_us // 1000 - 86_400_001))


def test_time_to_live_hides_old_versions(instance: Instance, clock: Clock) -> None:
    make_table(instance, stream_hours=None, options=TableOptions(time_to_live=86400))
    put(instance, 1, clock.tick(), a=1)
    assert columns_of(instance, 1, clock.now_us + 86_399_000_000) == {"a": 1}
    assert columns_of(instance, 1, clock.now_us + 86_401_000_000) == {}


def test_auto_increment_primary_key(instance: Instance, clock: Clock) -> None:
    pk = (PrimaryKeyColumn("part", PkType.STRING), PrimaryKeyColumn("seq", PkType.INTEGER, auto_increment=True))
    make_table(instance, stream_hours=None, pk=pk)
    change = RowChange(WriteKind.PUT, [("part", "p"), ("seq", AUTO_INCREMENT)], [CellChange("a", value=1)])
    change.return_primary_key = True
    first = instance.write_row("t", change, now_us=clock.tick())
    second = instance.write_row("t", change, now_us=clock.now_us)
    assert first.primary_key is not None and second.primary_key is not None
    assert first.primary_key[1][1] < second.primary_key[1][1]
    with pytest.raises(ParameterInvalid):  # only PutRow may ask for a generated key
        instance.write_row("t", RowChange(WriteKind.UPDATE, change.primary_key, change.cells), now_us=clock.tick())


def test_row_size_and_column_count_limits(clock: Clock) -> None:
    instance = Instance(limits=Limits(max_request_data_bytes=100, max_columns_per_write=3))
    make_table(instance, stream_hours=None)
    with pytest.raises(ParameterInvalid, match="total data size of PutRow request"):
        put(instance, 1, clock.tick(), a="x" * 101)
    with pytest.raises(ParameterInvalid, match="number of attribute columns"):
        put(instance, 1, clock.tick(), a=1, b=2, c=3, d=4)
    put(instance, 1, clock.tick(), a="x" * 50)


def test_batch_write_rows_fail_independently(table: Instance, clock: Clock) -> None:
    put(table, 1, clock.tick(), a=1)
    outcomes = table.batch_write(
        [
            (
                "t",
                RowChange(
                    WriteKind.PUT, [("id", 1)], [CellChange("a", value=2)], Condition(RowExistence.EXPECT_NOT_EXIST)
                ),
            ),
            ("t", RowChange(WriteKind.PUT, [("id", 2)], [CellChange("a", value=2)], return_primary_key=True)),
            ("missing", RowChange(WriteKind.DELETE, [("id", 3)])),
            ("t", RowChange(WriteKind.UPDATE, [("id", 3)], [CellChange("b", value="x")])),
        ],
        now_us=clock.tick(),
    )
    assert [o.error.code if o.error else None for o in outcomes] == [
        "OTSConditionCheckFail",
        None,
        "OTSObjectNotExist",
        None,
    ]
    assert outcomes[1].primary_key == [("id", 2)] and outcomes[3].primary_key is None
    assert columns_of(table, 1, clock.now_us) == {"a": 1}
    assert columns_of(table, 2, clock.now_us) == {"a": 2}
    assert columns_of(table, 3, clock.now_us) == {"b": "x"}


def test_batch_write_rejects_duplicates_and_oversized_batches(table: Instance, clock: Clock) -> None:
    change = RowChange(WriteKind.PUT, [("id", 1)], [CellChange("a", value=1)])
    with pytest.raises(ParameterInvalid, match="Duplicated"):
        table.batch_write([("t", change), ("t", change)], now_us=clock.tick())
    with pytest.raises(ParameterInvalid, match="upper limit"):
        table.batch_write([("t", RowChange(WriteKind.PUT, [("id", i)])) for i in range(201)], now_us=clock.tick())
    assert table.get_row("t", [("id", 1)], ALL, now_us=clock.now_us) is None


def test_batch_get(table: Instance, clock: Clock) -> None:
    put(table, 1, clock.tick(), a=1)
    results = table.batch_get(
        [("t", [[("id", 1)], [("id", 2)], [("id", "bad")]], ALL), ("missing", [[("id", 1)]], ALL)], now_us=clock.now_us
    )
    first, second = results
    assert first[0] is not None and not isinstance(first[0], Exception) and first[0].cells[0][:2] == ("a", 1)
    assert first[1] is None
    assert getattr(first[2], "code", None) == "OTSInvalidPK"
    assert getattr(second[0], "code", None) == "OTSObjectNotExist"


@pytest.fixture
def two_key_table(instance: Instance, clock: Clock) -> Instance:
    pk = (PrimaryKeyColumn("g", PkType.INTEGER), PrimaryKeyColumn("s", PkType.STRING))
    make_table(instance, stream_hours=None, pk=pk)
    for g in (1, 2, 3):
        for s in ("a", "b", "é"):
            change = RowChange(WriteKind.PUT, [("g", g), ("s", s)], [CellChange("v", value=f"{g}{s}")])
            instance.write_row("t", change, now_us=clock.tick())
    return instance


def keys_of(result: object) -> list[tuple[int, str]]:
    return [(view.primary_key[0][1], view.primary_key[1][1]) for view in result.rows]  # type: ignore[attr-defined]


def test_get_range_forward_backward_bounds_and_paging(two_key_table: Instance, clock: Clock) -> None:
    table = two_key_table
    result = table.get_range(
        "t",
        forward=True,
        inclusive_start=[("g", 1), ("s", "b")],
        exclusive_end=[("g", 3), ("s", INF_MIN)],
        read=ALL,
        now_us=clock.now_us,
    )
    assert keys_of(result) == [(1, "b"), (1, "é"), (2, "a"), (2, "b"), (2, "é")]
    assert result.next_start_primary_key is None
    page = table.get_range(
        "t",
        forward=True,
        inclusive_start=[("g", INF_MIN), ("s", INF_MIN)],
        exclusive_end=[("g", INF_MAX), ("s", INF_MAX)],
        read=ALL,
        limit=4,
        now_us=clock.now_us,
    )
    assert keys_of(page) == [(1, "a"), (1, "b"), (1, "é"), (2, "a")]
    assert page.next_start_primary_key == [("g", 2), ("s", "b")]
    backward = table.get_range(
        "t",
        forward=False,
        inclusive_start=[("g", 2), ("s", INF_MAX)],
        exclusive_end=[("g", 1), ("s", "a")],
        read=ALL,
        limit=3,
        now_us=clock.now_us,
    )
    assert keys_of(backward) == [(2, "é"), (2, "b"), (2, "a")]
    assert backward.next_start_primary_key == [("g", 1), ("s", "é")]


def test_get_range_filter_and_invalid_direction(two_key_table: Instance, clock: Clock) -> None:
    only_b = ReadOptions(column_filter=SingleColumnCondition("v", Comparator.EQUAL, "2b"))
    result = two_key_table.get_range(
        "t",
        forward=True,
        inclusive_start=[("g", INF_MIN), ("s", INF_MIN)],
        exclusive_end=[("g", INF_MAX), ("s", INF_MAX)],
        read=only_b,
        now_us=clock.now_us,
    )
    assert keys_of(result) == [(2, "b")]
    with pytest.raises(ParameterInvalid):
        two_key_table.get_range(
            "t",
            forward=True,
            inclusive_start=[("g", 3), ("s", INF_MIN)],
            exclusive_end=[("g", 1), ("s", INF_MIN)],
            read=ALL,
            now_us=clock.now_us,
        )


def test_get_range_sees_rows_written_after_a_scan(two_key_table: Instance, clock: Clock) -> None:
    whole = {
        "forward": True,
        "inclusive_start": [("g", INF_MIN), ("s", INF_MIN)],
        "exclusive_end": [("g", INF_MAX), ("s", INF_MAX)],
        "read": ALL,
    }
    assert len(two_key_table.get_range("t", now_us=clock.now_us, **whole).rows) == 9  # type: ignore[arg-type]
    two_key_table.write_row("t", RowChange(WriteKind.PUT, [("g", 0), ("s", "z")]), now_us=clock.tick())
    two_key_table.write_row("t", RowChange(WriteKind.DELETE, [("g", 3), ("s", "a")]), now_us=clock.tick())
    rows = two_key_table.get_range("t", now_us=clock.now_us, **whole).rows  # type: ignore[arg-type]
    assert keys_of(type("R", (), {"rows": rows})())[0] == (0, "z") and len(rows) == 9
