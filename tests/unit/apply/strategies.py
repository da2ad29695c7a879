"""Hypothesis strategies for source histories of one row (shared by the fold properties and the Spark-path oracle
test)."""

from __future__ import annotations

from hypothesis import strategies as st

from cdcbridge.contract import CellOp
from tests.unit.apply.source_model import HELD_VERSION, SourceCell, SourceRecord

# --- source histories ----------------------------------------------------------------------------------------------

plain_values = st.one_of(
    st.integers(-5, 5), st.text(max_size=2), st.booleans(), st.binary(max_size=2), st.floats(-2, 2, allow_nan=False)
)
versions = st.integers(1, 30)


@st.composite
def source_cell(draw: st.DrawFn, name: str, *, put_only: bool) -> SourceCell:
    if put_only:
        ops = [CellOp.PUT]
    elif name == "n":  # the counter column: increments are the interesting, non-idempotent case
        ops = [CellOp.PUT, CellOp.INCREMENT, CellOp.INCREMENT, CellOp.DELETE_ONE_VERSION, CellOp.DELETE_ALL_VERSION]
    else:
        ops = [CellOp.PUT, CellOp.PUT, CellOp.DELETE_ONE_VERSION, CellOp.DELETE_ALL_VERSION]
    op = draw(st.sampled_from(ops))
    if op is CellOp.PUT:
        value = draw(st.integers(-9, 9) if name == "n" else plain_values)
        return SourceCell(name, op, value=value, version=draw(versions))
    if op is CellOp.DELETE_ONE_VERSION:
        return SourceCell(name, op, version=draw(st.one_of(st.just(HELD_VERSION), versions)))
    if op is CellOp.INCREMENT:
        with_result = draw(st.integers(0, 3)) == 0
        return SourceCell(name, op, amount=draw(st.integers(-3, 5)), with_result=with_result)
    return SourceCell(name, op)


@st.composite
def source_record(draw: st.DrawFn) -> SourceRecord:
    action = draw(st.sampled_from(["PUT", "UPDATE", "UPDATE", "DELETE"]))
    if action == "DELETE":
        return SourceRecord(action)
    names = draw(st.lists(st.sampled_from(["a", "b", "n"]), unique=True, max_size=3))
    return SourceRecord(action, [draw(source_cell(name, put_only=action == "PUT")) for name in names])


histories = st.lists(source_record(), min_size=1, max_size=12)


@st.composite
def lookup_points(draw: st.DrawFn, count: int) -> list[int]:
    """Where each UPDATE's image was read back: at or after its own record, never earlier than the previous one."""
    points, floor = [], 0
    for index in range(count):
        point = min(count - 1, max(floor, index + draw(st.integers(0, 2))))
        points.append(point)
        floor = point
    return points
