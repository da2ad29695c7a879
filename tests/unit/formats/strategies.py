"""Hypothesis strategies for change records covering every action, cell op and value type."""

from __future__ import annotations

from hypothesis import strategies as st

from cdcbridge.changes import Cell, ChangeRecord, RecordAction, Sequence
from cdcbridge.contract import CellOp

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
NAMES = st.text(min_size=1, max_size=12)
PK_VALUES = st.one_of(INT64, st.text(max_size=20), st.binary(max_size=20))
CELL_VALUES = st.one_of(st.booleans(), INT64, st.floats(allow_nan=False), st.text(max_size=20), st.binary(max_size=20))
VERSIONS = st.one_of(st.none(), st.integers(min_value=0, max_value=2**53))
# Realistic commit times: readers turn timestamp-millis into datetimes, which end at year 9999.
SEQUENCES = st.builds(
    Sequence,
    epoch=st.integers(min_value=0, max_value=10**10 - 1),
    timestamp_us=st.integers(min_value=0, max_value=253_402_300_799_999_999),
    row_index=st.integers(min_value=0, max_value=10**10 - 1),
)


@st.composite
def cells(draw: st.DrawFn, ops: list[CellOp]) -> Cell:
    op = draw(st.sampled_from(ops))
    name = draw(NAMES)
    if op is CellOp.PUT:
        return Cell(name, op, draw(CELL_VALUES), draw(VERSIONS))
    if op is CellOp.INCREMENT:
        return Cell(name, op, draw(INT64), draw(VERSIONS))
    if op is CellOp.DELETE_ONE_VERSION:
        return Cell(name, op, None, draw(st.integers(min_value=0, max_value=2**53)))
    return Cell(name, op, None, None)


@st.composite
def change_records(draw: st.DrawFn, actions: list[RecordAction] | None = None) -> ChangeRecord:
    action = draw(st.sampled_from(actions or list(RecordAction)))
    if action is RecordAction.PUT:
        record_cells = draw(st.lists(cells([CellOp.PUT]), max_size=6))
    elif action is RecordAction.UPDATE:
        record_cells = draw(st.lists(cells(list(CellOp)), max_size=8))
    else:
        record_cells = []
    pk_names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    return ChangeRecord(
        table=draw(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)),
        action=action,
        primary_key=[(name, draw(PK_VALUES)) for name in pk_names],
        cells=record_cells,
        sequence=draw(SEQUENCES),
        shard_id=draw(st.text(max_size=10)),
    )


#: A row read back from the source, or None for "the row is gone".
CURRENT_ROWS = st.one_of(st.none(), st.dictionaries(NAMES, st.tuples(CELL_VALUES, VERSIONS), max_size=6))
