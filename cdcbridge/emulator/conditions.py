"""Conditional-write and read-filter rules: row existence, single-column and composite column conditions.

Plain Python, no wire format: the protocol layer decodes the SDK's `Condition` / `Filter` protobufs into these.
The same column conditions serve as read filters (GetRow / GetRange `column_filter`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from cdcbridge.emulator.errors import ConditionCheckFail, ParameterInvalid

#: A column's versions as the model stores them: [timestamp_ms, value] pairs, newest first.
Versions = Sequence[Sequence[Any]]

#: At most this many single conditions in one composite condition tree (the service limit).
MAX_SUB_CONDITIONS = 32


class RowExistence(IntEnum):
    """Numbers as in the protobuf `RowExistenceExpectation`."""

    IGNORE = 0
    EXPECT_EXIST = 1
    EXPECT_NOT_EXIST = 2


class Comparator(IntEnum):
    """Numbers as in the protobuf `ComparatorType` (CT_*)."""

    EQUAL = 1
    NOT_EQUAL = 2
    GREATER_THAN = 3
    GREATER_EQUAL = 4
    LESS_THAN = 5
    LESS_EQUAL = 6
    EXIST = 7
    NOT_EXIST = 8


class LogicalOperator(IntEnum):
    """Numbers as in the protobuf `LogicalOperator` (LO_*)."""

    NOT = 1
    AND = 2
    OR = 3


_COMPARE: dict[Comparator, Callable[[Any, Any], bool]] = {
    Comparator.EQUAL: operator.eq,
    Comparator.NOT_EQUAL: operator.ne,
    Comparator.GREATER_THAN: operator.gt,
    Comparator.GREATER_EQUAL: operator.ge,
    Comparator.LESS_THAN: operator.lt,
    Comparator.LESS_EQUAL: operator.le,
}


@dataclass(frozen=True, slots=True)
class SingleColumnCondition:
    """`column <comparator> value`. A missing column yields `pass_if_missing`; with `latest_version_only=False`
    any stored version may satisfy the comparison."""

    column: str
    comparator: Comparator
    value: Any = None
    pass_if_missing: bool = True
    latest_version_only: bool = True


@dataclass(frozen=True, slots=True)
class CompositeCondition:
    """NOT (exactly one sub-condition), AND / OR (two or more)."""

    operator: LogicalOperator
    conditions: tuple[ColumnCondition, ...]


ColumnCondition = SingleColumnCondition | CompositeCondition


@dataclass(frozen=True, slots=True)
class Condition:
    """What a write expects: the row-existence check comes first, then the column condition (if any)."""

    row_existence: RowExistence = RowExistence.IGNORE
    column_condition: ColumnCondition | None = None


IGNORE = Condition()


def validate_column_condition(condition: ColumnCondition) -> None:
    """Reject malformed trees before anything is evaluated (ParameterInvalid names the problem)."""
    if _count_and_check(condition) > MAX_SUB_CONDITIONS:
        raise ParameterInvalid(f"A column condition may hold at most {MAX_SUB_CONDITIONS} sub-conditions.")


def _count_and_check(condition: ColumnCondition) -> int:
    if isinstance(condition, SingleColumnCondition):
        if not condition.column:
            raise ParameterInvalid("The column name of a single column condition must not be empty.")
        if condition.comparator not in (Comparator.EXIST, Comparator.NOT_EXIST) and condition.value is None:
            raise ParameterInvalid(f"The single column condition on {condition.column!r} needs a value.")
        return 1
    count = len(condition.conditions)
    if condition.operator is LogicalOperator.NOT and count != 1:
        raise ParameterInvalid(f"The logical operator NOT takes exactly one sub-condition, got {count}.")
    if condition.operator in (LogicalOperator.AND, LogicalOperator.OR) and count < 2:
        raise ParameterInvalid(
            f"The logical operator {condition.operator.name} takes at least two sub-conditions, got {count}."
        )
    return sum(_count_and_check(sub) for sub in condition.conditions)


def column_condition_matches(condition: ColumnCondition, columns: Mapping[str, Versions]) -> bool:
    """Evaluate a column condition against a row's columns (empty mapping when the row does not exist)."""
    if isinstance(condition, SingleColumnCondition):
        return _single_matches(condition, columns.get(condition.column))
    results = (column_condition_matches(sub, columns) for sub in condition.conditions)
    if condition.operator is LogicalOperator.NOT:
        return not next(results)
    if condition.operator is LogicalOperator.AND:
        return all(results)
    return any(results)


def _single_matches(condition: SingleColumnCondition, versions: Versions | None) -> bool:
    present = bool(versions)
    if condition.comparator is Comparator.EXIST:
        return present
    if condition.comparator is Comparator.NOT_EXIST:
        return not present
    if not present:
        return condition.pass_if_missing
    assert versions is not None
    compare = _COMPARE[condition.comparator]
    candidates = versions[:1] if condition.latest_version_only else versions
    return any(_same_type(value, condition.value) and compare(value, condition.value) for _, value in candidates)


def _same_type(left: Any, right: Any) -> bool:
    """Tablestore compares values of one type only (bool is not an integer there); other pairs never match."""
    return type(left) is type(right)


def check_condition(condition: Condition, row_exists: bool, columns: Mapping[str, Versions]) -> None:
    """Raise ConditionCheckFail unless the row's current state satisfies `condition`."""
    if condition.row_existence is RowExistence.EXPECT_EXIST and not row_exists:
        raise ConditionCheckFail()
    if condition.row_existence is RowExistence.EXPECT_NOT_EXIST and row_exists:
        raise ConditionCheckFail()
    if condition.column_condition is not None and not column_condition_matches(condition.column_condition, columns):
        raise ConditionCheckFail()
