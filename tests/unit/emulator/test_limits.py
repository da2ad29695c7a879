"""Documented service limits: each is enforced with the service's error code, HTTP status and message shape.

The expected messages are the ones Alibaba's own SDK tests assert against the real service (RestrictedItemTest).
"""

from __future__ import annotations

import pytest
from tablestore import OTSClient, OTSServiceError, Row

from cdcbridge.emulator.errors import EmulatorError
from cdcbridge.emulator.keys import PkType, PrimaryKeyColumn
from cdcbridge.emulator.limits import (
    MAX_ATTRIBUTE_VALUE_BYTES,
    MAX_COLUMNS_PER_WRITE,
    MAX_DEFINED_COLUMNS,
    MAX_REQUEST_DATA_BYTES,
    Limits,
)
from cdcbridge.emulator.model import CellChange, CellOp, Instance, ReadOptions, RowChange, WriteKind

from .conftest import Clock, make_table

STRING_PK = (PrimaryKeyColumn("pk_0", PkType.STRING),)


def refused(error: pytest.ExceptionInfo[EmulatorError]) -> tuple[str, int, str]:
    return error.value.code, error.value.http_status, error.value.message


def put(instance: Instance, key: object, clock: Clock, **cells: object) -> None:
    change = RowChange(WriteKind.PUT, [("pk_0", key)], [CellChange(n, value=v) for n, v in cells.items()])
    instance.write_row("t", change, now_us=clock.tick())


@pytest.fixture
def strings(instance: Instance) -> Instance:
    make_table(instance, pk=STRING_PK, stream_hours=None)
    return instance


def test_documented_values() -> None:
    limits = Limits()
    assert (limits.max_attribute_value_bytes, limits.max_pk_value_bytes) == (2 * 1024 * 1024, 1024)
    assert (limits.max_batch_write_rows, limits.max_batch_get_rows) == (200, 100)
    assert (limits.max_columns_per_write, limits.max_request_data_bytes) == (1024, 4 * 1024 * 1024)
    assert (limits.max_range_rows, limits.max_range_bytes) == (5000, 4 * 1024 * 1024)


@pytest.mark.parametrize("value", ["a" * (MAX_ATTRIBUTE_VALUE_BYTES + 1), b"\x00" * (MAX_ATTRIBUTE_VALUE_BYTES + 1)])
def test_attribute_values_above_2_mb_are_refused(strings: Instance, clock: Clock, value: object) -> None:
    put(strings, "ok", clock, attr="a" * MAX_ATTRIBUTE_VALUE_BYTES)  # exactly 2 MB is allowed
    with pytest.raises(EmulatorError) as raised:
        put(strings, "k", clock, attr=value)
    assert refused(raised) == (
        "OTSParameterInvalid",
        400,
        "The length of attribute column: 'attr' exceeds the MaxLength:2097152 with CurrentLength:2097153.",
    )
    update = RowChange(WriteKind.UPDATE, [("pk_0", "k")], [CellChange("attr", CellOp.PUT, value)])
    with pytest.raises(EmulatorError, match="MaxLength:2097152"):
        strings.write_row("t", update, now_us=clock.tick())


def test_primary_key_values_above_1_kb_are_refused(strings: Instance, clock: Clock) -> None:
    put(strings, "k" * 1024, clock, a=1)
    with pytest.raises(EmulatorError) as raised:
        put(strings, "k" * 1025, clock, a=1)
    assert refused(raised) == (
        "OTSParameterInvalid",
        400,
        "The length of primary key column: 'pk_0' exceeds the MaxLength:1024 with CurrentLength:1025.",
    )


def test_primary_key_column_count(instance: Instance, clock: Clock) -> None:
    columns = [PrimaryKeyColumn(f"pk_{i}", PkType.INTEGER) for i in range(5)]
    with pytest.raises(EmulatorError) as raised:
        instance.create_table("t", columns, now_us=clock.now_us)
    assert refused(raised) == (
        "OTSParameterInvalid",
        400,
        "The number of primary key columns must be in range: [1, 4].",
    )


def test_attribute_columns_per_write(strings: Instance, clock: Clock) -> None:
    put(strings, "k", clock, **{f"attr_{i}": i for i in range(MAX_COLUMNS_PER_WRITE)})
    with pytest.raises(EmulatorError) as raised:
        put(strings, "k", clock, **{f"attr_{i}": i for i in range(MAX_COLUMNS_PER_WRITE + 1)})
    assert refused(raised) == (
        "OTSParameterInvalid",
        400,
        "The number of attribute columns exceeds the limit, limit count: 1024, column count: 1025.",
    )


def test_columns_to_get_per_read(strings: Instance, clock: Clock) -> None:
    read = ReadOptions(columns_to_get=tuple(f"attr_{i:06d}" for i in range(MAX_COLUMNS_PER_WRITE + 1)))
    with pytest.raises(EmulatorError) as raised:
        strings.get_row("t", [("pk_0", "k")], read, now_us=clock.now_us)
    assert refused(raised) == (
        "OTSParameterInvalid",
        400,
        "The number of columns from the request exceeds the limit, limit count: 1024, column count: 1025.",
    )


def test_put_and_update_data_size_per_request(strings: Instance, clock: Clock) -> None:
    # pk name + pk value + column names + values (+ 8 per given timestamp), as the service counts.
    half = MAX_ATTRIBUTE_VALUE_BYTES
    cells = [CellChange("a", value="x" * half), CellChange("b", value="y" * half)]
    size = len("pk_0") + 1 + 2 + 2 * half
    assert size > MAX_REQUEST_DATA_BYTES
    for kind, api in ((WriteKind.PUT, "PutRow"), (WriteKind.UPDATE, "UpdateRow")):
        with pytest.raises(EmulatorError) as raised:
            strings.write_row("t", RowChange(kind, [("pk_0", "k")], cells), now_us=clock.tick())
        assert refused(raised) == (
            "OTSParameterInvalid",
            400,
            f"The total data size of {api} request exceeds the limit, limit size: 4194304, data size: {size}.",
        )


def test_batch_write_data_size_per_request(instance: Instance, clock: Clock) -> None:
    """Alibaba's case: three rows whose sizes add up to 4 MB + 1 byte."""
    make_table(instance, pk=(PrimaryKeyColumn("pk", PkType.STRING),), stream_hours=None)
    name = "k" * 50
    rows = []
    for index, length in enumerate((1397945, 1397943, 1397943)):
        cell = CellChange(name, value="a" * length, timestamp=clock.now_us // 1000)
        rows.append(("t", RowChange(WriteKind.PUT, [("pk", "v" * 96 + f"{index:02d}")], [cell])))
    with pytest.raises(EmulatorError) as raised:
        instance.batch_write(rows, now_us=clock.now_us)
    assert refused(raised) == (
        "OTSParameterInvalid",
        400,
        "The total data size of BatchWriteRow request exceeds the limit, limit size: 4194304, data size: 4194305.",
    )
    rows[0] = ("t", RowChange(WriteKind.PUT, rows[0][1].primary_key, [CellChange(name, value="a")]))
    assert all(outcome.error is None for outcome in instance.batch_write(rows, now_us=clock.tick()))


def test_rows_per_batch(strings: Instance, clock: Clock) -> None:
    writes = [("t", RowChange(WriteKind.PUT, [("pk_0", str(i))], [CellChange("a", value=1)])) for i in range(201)]
    with pytest.raises(EmulatorError) as raised:
        strings.batch_write(writes, now_us=clock.tick())
    assert refused(raised) == ("OTSParameterInvalid", 400, "Rows count exceeds the upper limit: 200.")
    keys = [[("pk_0", str(i))] for i in range(101)]
    with pytest.raises(EmulatorError) as raised:
        strings.batch_get([("t", keys, ReadOptions())], now_us=clock.now_us)
    assert refused(raised) == ("OTSParameterInvalid", 400, "Rows count exceeds the upper limit: 100.")


def test_names(instance: Instance, clock: Clock) -> None:
    for bad in ("1abc", "a" * 256, "with-dash", ""):
        with pytest.raises(EmulatorError) as raised:
            instance.create_table(bad, list(STRING_PK), now_us=clock.now_us)
        assert refused(raised) == ("OTSParameterInvalid", 400, f"Invalid table name: '{bad}'.")
    make_table(instance, "a" * 255, pk=STRING_PK, stream_hours=None)
    make_table(instance, pk=STRING_PK, stream_hours=None)
    with pytest.raises(EmulatorError) as raised:
        put(instance, "k", clock, **{"bad-name": 1})
    assert refused(raised) == ("OTSParameterInvalid", 400, "Invalid column name: 'bad-name'.")


def test_defined_columns(instance: Instance, clock: Clock) -> None:
    defined = [(f"c{i}", "STRING") for i in range(MAX_DEFINED_COLUMNS + 1)]
    with pytest.raises(EmulatorError) as raised:
        instance.create_table("t", list(STRING_PK), now_us=clock.now_us, defined_columns=defined)
    assert refused(raised) == ("OTSParameterInvalid", 400, "The number of defined columns must be in range: [0, 32].")


def test_versions_and_timestamps(strings: Instance, clock: Clock) -> None:
    with pytest.raises(EmulatorError) as raised:
        strings.get_row("t", [("pk_0", "k")], ReadOptions(max_versions=0), now_us=clock.now_us)
    assert refused(raised) == (
        "OTSParameterInvalid",
        400,
        "Invalid max versions: 0. Reason: Max versions must be positive.",
    )
    change = RowChange(WriteKind.PUT, [("pk_0", "k")], [CellChange("a", value=1, timestamp=-1)])
    with pytest.raises(EmulatorError) as raised:
        strings.write_row("t", change, now_us=clock.tick())
    assert refused(raised) == ("OTSParameterInvalid", 400, "Timestamp must be in range [0, INT64_MAX/1000).")


def test_a_3_mb_string_through_the_sdk_is_refused(client: OTSClient) -> None:
    from tablestore import CapacityUnit, ReservedThroughput, TableMeta, TableOptions

    client.create_table(TableMeta("limits", [("id", "INTEGER")]), TableOptions(), ReservedThroughput(CapacityUnit()))
    with pytest.raises(OTSServiceError) as raised:
        client.put_row("limits", Row([("id", 1)], [("big", "x" * 3 * 1024 * 1024)]))
    error = raised.value
    assert (error.get_error_code(), error.get_http_status()) == ("OTSParameterInvalid", 400)
    assert "exceeds the MaxLength:2097152 with CurrentLength:3145728" in error.get_error_message()
    assert client.get_row("limits", [("id", 1)], max_version=1)[1] is None
