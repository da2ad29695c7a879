"""Typed targets: new columns are added with the first value's type; conflicts and collisions refuse the row."""

from __future__ import annotations

from cdcbridge.apply.model import ColumnValue, TargetRow
from cdcbridge.apply.targets.column_types import check_rows, value_type


def row(key: int, **columns) -> TargetRow:
    return TargetRow("t", (("id", key),), {name: ColumnValue(value, 1) for name, value in columns.items()}, seq="1")


def test_value_types_keep_bool_apart_from_int() -> None:
    assert [value_type(v) for v in (True, 1, 1.5, "s", b"b")] == ["boolean", "bigint", "double", "string", "binary"]


def test_new_columns_take_the_first_type_and_later_rows_must_follow_it() -> None:
    check = check_rows([row(1, a=1, b="x"), row(2, a=2.5), row(3, c=True)], {"b": "string"}, {"id": "bigint"})
    assert check.new_columns == {"a": "bigint", "c": "boolean"}
    assert check.refused == {(("id", 2),): "column 'a' holds a double value; the table's column is bigint"}


def test_collisions_with_bookkeeping_primary_key_and_case_are_refused() -> None:
    check = check_rows(
        [row(1, _seq="x"), row(2, ID=1), row(3, Name="a"), row(4, x=1, X=2), row(5, name="ok")],
        {"Name": "string"},
        {"id": "bigint"},
    )
    assert set(check.refused) == {(("id", k),) for k in (1, 2, 4, 5)}
    assert "differs only in case" in check.refused[(("id", 5),)]
    assert check.new_columns == {}


def test_a_new_table_takes_its_primary_key_from_the_first_row() -> None:
    check = check_rows([row(1, a=1), TargetRow("t", (("id", "s"),), {}, seq="1")], {}, None)
    assert check.refused == {
        (("id", "s"),): "primary key column 'id' holds a string value; the table's column is bigint"
    }
