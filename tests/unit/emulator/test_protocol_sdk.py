"""The official SDK (tablestore==6.4.8), unchanged, against an in-thread emulator: tables, rows, conditions,
batches, ranges. Every call here also proves the response headers and signature satisfy the SDK's checks."""

from __future__ import annotations

import itertools

import pytest
from tablestore import (
    INF_MAX,
    INF_MIN,
    PK_AUTO_INCR,
    BatchGetRowRequest,
    BatchWriteRowRequest,
    CapacityUnit,
    ComparatorType,
    CompositeColumnCondition,
    Condition,
    DeleteRowItem,
    LogicalOperator,
    OTSClient,
    OTSServiceError,
    PutRowItem,
    ReservedThroughput,
    ReturnType,
    Row,
    RowExistenceExpectation,
    SingleColumnCondition,
    TableInBatchGetRowItem,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
    UpdateRowItem,
)

_names = itertools.count()


def new_table(client: OTSClient, schema: list[tuple[str, ...]] | None = None, **options: object) -> str:
    name = f"sdk_{next(_names)}"
    client.create_table(
        TableMeta(name, schema or [("gid", "INTEGER"), ("uid", "STRING")]),
        TableOptions(**options),  # type: ignore[arg-type]
        ReservedThroughput(CapacityUnit(0, 0)),
    )
    return name


def error_of(call: object, *args: object, **kwargs: object) -> OTSServiceError:
    with pytest.raises(OTSServiceError) as raised:
        call(*args, **kwargs)  # type: ignore[operator]
    return raised.value


def test_table_lifecycle(client: OTSClient) -> None:
    name = new_table(client, [("p", "STRING"), ("n", "INTEGER", PK_AUTO_INCR)], max_version=3)
    assert name in client.list_table()
    described = client.describe_table(name)
    assert described.table_meta.table_name == name
    assert described.table_meta.schema_of_primary_key == [("p", "STRING"), ("n", "INTEGER", PK_AUTO_INCR)]
    assert described.table_options.max_version == 3 and described.table_options.time_to_live == -1
    assert described.reserved_throughput_details.capacity_unit.read == 0
    updated = client.update_table(name, TableOptions(time_to_live=86400 * 2, max_version=4))
    assert (updated.table_options.time_to_live, updated.table_options.max_version) == (86400 * 2, 4)
    error = error_of(
        client.create_table, TableMeta(name, [("p", "STRING")]), TableOptions(), ReservedThroughput(CapacityUnit(0, 0))
    )
    assert (error.get_error_code(), error.get_http_status()) == ("OTSObjectAlreadyExist", 409)
    client.delete_table(name)
    assert name not in client.list_table()
    error = error_of(client.describe_table, name)
    assert (error.get_error_code(), error.get_http_status()) == ("OTSObjectNotExist", 404)


def test_put_get_update_delete_row(client: OTSClient) -> None:
    name = new_table(client, max_version=2)
    pk = [("gid", 1), ("uid", "u1")]
    consumed, returned = client.put_row(
        name,
        Row(pk, [("i", 1), ("s", "text"), ("f", 1.5), ("b", True), ("x", bytearray(b"\x00\x01"))]),
        return_type=ReturnType.RT_PK,
    )
    assert consumed.write == 1 and returned.primary_key == pk
    _, row, _ = client.get_row(name, pk)
    assert row.primary_key == pk
    assert [(n, v) for n, v, _ in row.attribute_columns] == [
        ("b", True),
        ("f", 1.5),
        ("i", 1),
        ("s", "text"),
        ("x", bytearray(b"\x00\x01")),
    ]
    _, row, _ = client.get_row(name, pk, columns_to_get=["s"])
    assert [c[:2] for c in row.attribute_columns] == [("s", "text")]
    ts = next(t for n, _, t in client.get_row(name, pk)[1].attribute_columns if n == "s")
    client.update_row(
        name,
        Row(
            pk, {"put": [("s", "new")], "increment": [("counter", 5)], "delete_all": ["f"], "delete": [("s", None, ts)]}
        ),
        Condition(RowExistenceExpectation.EXPECT_EXIST),
    )
    _, row, _ = client.get_row(name, pk, max_version=2)
    assert [(n, v) for n, v, _ in row.attribute_columns] == [
        ("b", True),
        ("counter", 5),
        ("i", 1),
        ("s", "new"),
        ("x", bytearray(b"\x00\x01")),
    ]
    client.delete_row(name, Row(pk), None)
    assert client.get_row(name, pk)[1] is None


def test_auto_increment_primary_key_is_returned(client: OTSClient) -> None:
    name = new_table(client, [("p", "STRING"), ("n", "INTEGER", PK_AUTO_INCR)])
    _, first = client.put_row(name, Row([("p", "a"), ("n", PK_AUTO_INCR)], [("v", 1)]), return_type=ReturnType.RT_PK)
    _, second = client.put_row(name, Row([("p", "a"), ("n", PK_AUTO_INCR)], [("v", 2)]), return_type=ReturnType.RT_PK)
    assert first.primary_key[1][1] < second.primary_key[1][1]
    assert client.get_row(name, second.primary_key)[1].attribute_columns[0][1] == 2


def test_conditional_writes(client: OTSClient) -> None:
    name = new_table(client)
    pk = [("gid", 1), ("uid", "lease")]
    client.put_row(
        name, Row(pk, [("LeaseCounter", 1), ("LeaseOwner", "w1")]), Condition(RowExistenceExpectation.EXPECT_NOT_EXIST)
    )
    error = error_of(client.put_row, name, Row(pk, [("x", 1)]), Condition(RowExistenceExpectation.EXPECT_NOT_EXIST))
    assert (error.get_error_code(), error.get_http_status()) == ("OTSConditionCheckFail", 403)
    renew = Condition(
        RowExistenceExpectation.EXPECT_EXIST,
        SingleColumnCondition("LeaseCounter", 1, ComparatorType.EQUAL, pass_if_missing=False),
    )
    client.update_row(name, Row(pk, {"put": [("LeaseCounter", 2)]}), renew)
    assert error_of(client.update_row, name, Row(pk, {"put": [("LeaseCounter", 3)]}), renew).get_error_code() == (
        "OTSConditionCheckFail"
    )
    steal = CompositeColumnCondition(LogicalOperator.AND)
    steal.add_sub_condition(SingleColumnCondition("LeaseOwner", "w1", ComparatorType.EQUAL))
    steal.add_sub_condition(SingleColumnCondition("LeaseStealer", "", ComparatorType.EQUAL, pass_if_missing=True))
    client.update_row(
        name, Row(pk, {"put": [("LeaseStealer", "w2")]}), Condition(RowExistenceExpectation.IGNORE, steal)
    )
    assert (
        error_of(
            client.update_row,
            name,
            Row(pk, {"put": [("LeaseStealer", "w3")]}),
            Condition(RowExistenceExpectation.IGNORE, steal),
        ).get_error_code()
        == "OTSConditionCheckFail"
    )
    greater = SingleColumnCondition("LeaseCounter", 1, ComparatorType.GREATER_THAN)
    client.delete_row(name, Row(pk), Condition(RowExistenceExpectation.IGNORE, greater))
    assert client.get_row(name, pk)[1] is None


def test_invalid_requests_are_parameter_errors(client: OTSClient) -> None:
    name = new_table(client)
    wrong_type = error_of(client.put_row, name, Row([("gid", "1"), ("uid", "u")], [("a", 1)]))
    assert (wrong_type.get_error_code(), wrong_type.get_http_status()) == ("OTSInvalidPK", 400)
    client.put_row(name, Row([("gid", 1), ("uid", "u")], [("s", "text")]))
    bad_increment = error_of(client.update_row, name, Row([("gid", 1), ("uid", "u")], {"increment": [("s", 1)]}), None)
    assert bad_increment.get_error_code() == "OTSParameterInvalid"


def test_batch_write_and_batch_get(client: OTSClient) -> None:
    name = new_table(client)
    client.put_row(name, Row([("gid", 0), ("uid", "a")], [("v", 0)]))
    items = [
        PutRowItem(Row([("gid", 1), ("uid", "a")], [("v", 1)]), Condition(RowExistenceExpectation.IGNORE)),
        PutRowItem(Row([("gid", 0), ("uid", "a")], [("v", 9)]), Condition(RowExistenceExpectation.EXPECT_NOT_EXIST)),
        UpdateRowItem(Row([("gid", 2), ("uid", "a")], {"put": [("v", 2)]}), Condition(RowExistenceExpectation.IGNORE)),
        DeleteRowItem(Row([("gid", 3), ("uid", "a")]), Condition(RowExistenceExpectation.IGNORE)),
    ]
    request = BatchWriteRowRequest()
    request.add(TableInBatchWriteRowItem(name, items))
    response = client.batch_write_row(request)
    assert not response.is_all_succeed()
    puts = response.get_put_by_table(name)
    assert [r.is_ok for r in puts] == [True, False] and puts[1].error_code == "OTSConditionCheckFail"
    assert [r.is_ok for r in response.get_update_by_table(name)] == [True]
    assert [r.is_ok for r in response.get_delete_by_table(name)] == [True]

    get = BatchGetRowRequest()
    keys = [[("gid", g), ("uid", "a")] for g in range(4)]
    get.add(TableInBatchGetRowItem(name, keys, max_version=1))
    rows = client.batch_get_row(get).get_result_by_table(name)
    assert [r.is_ok for r in rows] == [True] * 4
    values = [r.row.attribute_columns[0][1] if r.row is not None else None for r in rows]
    assert values == [0, 1, 2, None]


def test_get_range_paging_and_directions(client: OTSClient) -> None:
    name = new_table(client)
    request = BatchWriteRowRequest()
    request.add(
        TableInBatchWriteRowItem(
            name, [PutRowItem(Row([("gid", g), ("uid", u)], [("v", f"{g}{u}")]), None) for g in range(3) for u in "ab"]
        )
    )
    assert client.batch_write_row(request).is_all_succeed()
    start, end = [("gid", INF_MIN), ("uid", INF_MIN)], [("gid", INF_MAX), ("uid", INF_MAX)]
    seen = []
    while start is not None:
        _, start, rows, _ = client.get_range(name, "FORWARD", start, end, limit=4)
        seen.extend(r.primary_key for r in rows)
        start = list(start) if start else None
    assert seen == [[("gid", g), ("uid", u)] for g in range(3) for u in "ab"]
    _, next_key, rows, _ = client.get_range(
        name, "BACKWARD", [("gid", 1), ("uid", INF_MAX)], [("gid", 0), ("uid", "a")]
    )
    assert next_key is None and [r.attribute_columns[0][1] for r in rows] == ["1b", "1a", "0b"]
    _, _, rows, _ = client.get_range(
        name,
        "FORWARD",
        [("gid", INF_MIN), ("uid", INF_MIN)],
        end,
        column_filter=SingleColumnCondition("v", "2a", ComparatorType.EQUAL),
    )
    assert [r.primary_key for r in rows] == [[("gid", 2), ("uid", "a")]]
    _, next_key, rows, _ = client.get_range(
        name, "FORWARD", [("gid", 5), ("uid", INF_MIN)], [("gid", 6), ("uid", INF_MIN)]
    )
    assert rows == [] and next_key is None
