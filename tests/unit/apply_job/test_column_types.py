"""Typed targets: new columns are added with the first value's type; conflicts and collisions refuse the row."""

from __future__ import annotations

from cdcbridge.apply.core.model import ColumnValue, TargetRow
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


def test_the_column_set_check_agrees_with_the_row_check_when_nothing_is_refused() -> None:
    """The Spark path's check sees only distinct (column, type) pairs and pk signatures; where check_rows refuses
    nothing, it adds the same columns."""
    from cdcbridge.apply.targets.column_types import check_column_set

    rows = [row(1, a=1, b="x"), row(2, a=5), row(3, c=True)]
    pairs = {(name, value_type(cell.value)) for r in rows for name, cell in r.columns.items()}
    check = check_column_set(pairs, {"b": "string"}, {"id": "bigint"}, {(("id", "bigint"),)})
    assert (
        check.new_columns
        == check_rows(rows, {"b": "string"}, {"id": "bigint"}).new_columns
        == {
            "a": "bigint",
            "c": "boolean",
        }
    )
    assert check_column_set(set(), {}, None, {(("id", "string"),)}).new_columns == {}


def test_the_column_set_check_names_what_might_be_refused() -> None:
    from cdcbridge.apply.targets.column_types import check_column_set

    table, pk = {"b": "string"}, {"id": "bigint"}
    signature = {(("id", "bigint"),)}
    assert "differ in spelling or type" in check_column_set({("a", "bigint"), ("a", "double")}, table, pk, signature)
    assert "differ in spelling or type" in check_column_set({("a", "bigint"), ("A", "bigint")}, table, pk, signature)
    assert "does not match the table's column" in check_column_set({("b", "bigint")}, table, pk, signature)
    assert "does not match the table's column" in check_column_set({("B", "string")}, table, pk, signature)
    assert "collides" in check_column_set({("_SEQ", "string")}, table, pk, signature)
    assert "collides" in check_column_set({("Id", "string")}, table, pk, signature)
    assert "differ from the table's" in check_column_set(set(), table, pk, {(("id", "string"),)})
    assert "disagree on the primary key" in check_column_set(set(), {}, None, {(("id", "bigint"),), (("k", "string"),)})
