"""Table lifecycle in the model: create, describe, list, update (options, throughput, stream), delete."""

from __future__ import annotations

import pytest

from cdcbridge.emulator.errors import ObjectAlreadyExist, ObjectNotExist, ParameterInvalid
from cdcbridge.emulator.keys import PkType, PrimaryKeyColumn
from cdcbridge.emulator.model import Instance, StreamSpec, TableOptions

from .conftest import T0_US, make_table


def test_create_describe_list_delete(instance: Instance) -> None:
    make_table(instance, "b", stream_hours=None)
    make_table(instance, "a", stream_hours=None, defined_columns=[("score", "DOUBLE")], reserved=(1, 2))
    assert instance.list_tables() == ["a", "b"]
    described = instance.describe_table("a")
    assert described.primary_key == (PrimaryKeyColumn("id", PkType.INTEGER),)
    assert described.defined_columns == (("score", "DOUBLE"),)
    assert (described.reserved_read, described.reserved_write) == (1, 2)
    assert described.options == TableOptions()
    assert described.created_at_s == T0_US // 1_000_000
    assert not described.stream.enabled and described.stream.stream_id is None
    instance.delete_table("a")
    assert instance.list_tables() == ["b"]
    with pytest.raises(ObjectNotExist):
        instance.describe_table("a")


def test_create_twice_is_object_already_exist(instance: Instance) -> None:
    make_table(instance)
    with pytest.raises(ObjectAlreadyExist) as raised:
        make_table(instance)
    assert raised.value.code == "OTSObjectAlreadyExist" and raised.value.http_status == 409


@pytest.mark.parametrize(
    "columns",
    [
        [],
        [PrimaryKeyColumn(f"k{i}", PkType.INTEGER) for i in range(5)],
        [PrimaryKeyColumn("a", PkType.INTEGER), PrimaryKeyColumn("a", PkType.STRING)],
        [PrimaryKeyColumn("auto", PkType.INTEGER, auto_increment=True)],
        [PrimaryKeyColumn("p", PkType.STRING), PrimaryKeyColumn("auto", PkType.STRING, auto_increment=True)],
        [PrimaryKeyColumn("bad name", PkType.INTEGER)],
    ],
)
def test_invalid_primary_key_schemas_are_rejected(instance: Instance, columns: list[PrimaryKeyColumn]) -> None:
    with pytest.raises(ParameterInvalid):
        instance.create_table("t", columns, now_us=T0_US)


def test_invalid_table_name_and_options(instance: Instance) -> None:
    with pytest.raises(ParameterInvalid):
        instance.create_table("9lives", [PrimaryKeyColumn("id", PkType.INTEGER)], now_us=T0_US)
    with pytest.raises(ParameterInvalid):
        make_table(instance, options=TableOptions(max_versions=0))
    with pytest.raises(ParameterInvalid):
        make_table(instance, options=TableOptions(time_to_live=60))
    assert instance.list_tables() == []


def test_update_options_and_throughput_keep_unset_fields(instance: Instance) -> None:
    make_table(instance, options=TableOptions(max_versions=3), reserved=(5, 6))
    described = instance.update_table("t", now_us=T0_US, options={"time_to_live": 86400}, reserved=(None, 9))
    assert described.options == TableOptions(time_to_live=86400, max_versions=3)
    assert (described.reserved_read, described.reserved_write) == (5, 9)
    with pytest.raises(ParameterInvalid):
        instance.update_table("t", now_us=T0_US, options={"colour": 1})


def test_stream_enable_disable_reenable_gives_a_new_stream(instance: Instance) -> None:
    make_table(instance, stream_hours=None)
    assert instance.list_streams() == []
    first = instance.update_table("t", now_us=T0_US + 10, stream=StreamSpec(True, 24)).stream
    assert first.enabled and first.expiration_hours == 24 and first.last_enable_time_us == T0_US + 10
    assert [s.stream_id for s in instance.list_streams("t")] == [first.stream_id]
    # Enabling again keeps the stream and takes the new expiration.
    again = instance.update_table("t", now_us=T0_US + 20, stream=StreamSpec(True, 48)).stream
    assert again.stream_id == first.stream_id and again.expiration_hours == 48
    disabled = instance.update_table("t", now_us=T0_US + 30, stream=StreamSpec(False)).stream
    assert not disabled.enabled
    assert instance.list_streams() == []
    with pytest.raises(ObjectNotExist):
        instance.describe_stream(first.stream_id, now_us=T0_US + 30)
    second = instance.update_table("t", now_us=T0_US + 40, stream=StreamSpec(True, 24)).stream
    assert second.stream_id != first.stream_id


@pytest.mark.parametrize("hours", [None, 0, 169])
def test_stream_expiration_must_be_in_range(instance: Instance, hours: int | None) -> None:
    make_table(instance, stream_hours=None)
    with pytest.raises(ParameterInvalid):
        instance.update_table("t", now_us=T0_US, stream=StreamSpec(True, hours))
    assert instance.describe_table("t").stream.enabled is False
    with pytest.raises(ParameterInvalid):
        instance.create_table(
            "u", [PrimaryKeyColumn("id", PkType.INTEGER)], now_us=T0_US, stream=StreamSpec(True, hours)
        )
    assert instance.list_tables() == ["t"]


def test_list_streams_of_all_tables_and_of_a_missing_table(instance: Instance) -> None:
    make_table(instance, "a")
    make_table(instance, "b", stream_hours=None)
    make_table(instance, "c", now_us=T0_US + 5)
    assert [s.table_name for s in instance.list_streams()] == ["a", "c"]
    with pytest.raises(ObjectNotExist):
        instance.list_streams("zz")


def test_delete_table_removes_its_stream(instance: Instance) -> None:
    make_table(instance)
    stream_id = instance.list_streams()[0].stream_id
    instance.delete_table("t")
    with pytest.raises(ObjectNotExist):
        instance.describe_stream(stream_id, now_us=T0_US)
