"""Column-condition evaluation: every comparator, missing columns, version selection, logic, types."""

from __future__ import annotations

import pytest

from cdcbridge.emulator.conditions import (
    Comparator,
    CompositeCondition,
    Condition,
    LogicalOperator,
    RowExistence,
    SingleColumnCondition,
    check_condition,
    column_condition_matches,
)
from cdcbridge.emulator.errors import ConditionCheckFail

ROW = {"n": [[3, 10], [2, 20], [1, 5]], "s": [[1, "abc"]], "b": [[1, True]], "f": [[1, 1.5]], "x": [[1, b"\x01"]]}


@pytest.mark.parametrize(
    ("comparator", "value", "expected"),
    [
        (Comparator.EQUAL, 10, True),
        (Comparator.EQUAL, 11, False),
        (Comparator.NOT_EQUAL, 11, True),
        (Comparator.GREATER_THAN, 9, True),
        (Comparator.GREATER_THAN, 10, False),
        (Comparator.GREATER_EQUAL, 10, True),
        (Comparator.LESS_THAN, 10, False),
        (Comparator.LESS_THAN, 11, True),
        (Comparator.LESS_EQUAL, 10, True),
        (Comparator.EXIST, None, True),
        (Comparator.NOT_EXIST, None, False),
    ],
)
def test_comparators_on_the_latest_version(comparator: Comparator, value: object, expected: bool) -> None:
    assert column_condition_matches(SingleColumnCondition("n", comparator, value), ROW) is expected


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [("s", "abc", True), ("s", "abd", False), ("b", True, True), ("f", 1.5, True), ("x", b"\x01", True)],
)
def test_equal_on_each_type(column: str, value: object, expected: bool) -> None:
    assert column_condition_matches(SingleColumnCondition(column, Comparator.EQUAL, value), ROW) is expected


def test_cross_type_comparisons_never_match() -> None:
    assert not column_condition_matches(SingleColumnCondition("b", Comparator.EQUAL, 1), ROW)  # bool is not int
    assert not column_condition_matches(SingleColumnCondition("n", Comparator.NOT_EQUAL, "10"), ROW)
    assert not column_condition_matches(SingleColumnCondition("f", Comparator.GREATER_THAN, 1), ROW)


def test_missing_column_uses_pass_if_missing() -> None:
    assert column_condition_matches(SingleColumnCondition("gone", Comparator.EQUAL, 1, pass_if_missing=True), ROW)
    assert not column_condition_matches(SingleColumnCondition("gone", Comparator.EQUAL, 1, pass_if_missing=False), ROW)
    assert column_condition_matches(SingleColumnCondition("gone", Comparator.NOT_EXIST), ROW)
    assert not column_condition_matches(SingleColumnCondition("gone", Comparator.EXIST), ROW)


def test_latest_version_only_false_lets_any_version_match() -> None:
    older = SingleColumnCondition("n", Comparator.EQUAL, 20, latest_version_only=True)
    assert not column_condition_matches(older, ROW)
    any_version = SingleColumnCondition("n", Comparator.EQUAL, 20, latest_version_only=False)
    assert column_condition_matches(any_version, ROW)


def test_not_and_or() -> None:
    yes = SingleColumnCondition("n", Comparator.EQUAL, 10)
    no = SingleColumnCondition("n", Comparator.EQUAL, 0)
    assert column_condition_matches(CompositeCondition(LogicalOperator.NOT, (no,)), ROW)
    assert not column_condition_matches(CompositeCondition(LogicalOperator.AND, (yes, no)), ROW)
    assert column_condition_matches(CompositeCondition(LogicalOperator.OR, (no, yes)), ROW)
    nested = CompositeCondition(
        LogicalOperator.AND,
        (yes, CompositeCondition(LogicalOperator.NOT, (CompositeCondition(LogicalOperator.OR, (no, no)),))),
    )
    assert column_condition_matches(nested, ROW)


def test_row_existence_comes_first() -> None:
    check_condition(Condition(RowExistence.EXPECT_NOT_EXIST), False, {})
    with pytest.raises(ConditionCheckFail):
        check_condition(Condition(RowExistence.EXPECT_EXIST), False, {})
    with pytest.raises(ConditionCheckFail):
        check_condition(Condition(RowExistence.EXPECT_NOT_EXIST), True, ROW)
    with pytest.raises(ConditionCheckFail):
        check_condition(Condition(RowExistence.IGNORE, SingleColumnCondition("n", Comparator.EQUAL, 0)), True, ROW)
