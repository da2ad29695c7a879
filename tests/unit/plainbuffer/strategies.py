"""Hypothesis strategies for PlainBuffer rows covering every value type and cell shape."""

from __future__ import annotations

import struct

from hypothesis import strategies as st

from cdcbridge.tablestore.plainbuffer import (
    AUTO_INCREMENT,
    CELL_DELETE_ALL_VERSION,
    CELL_DELETE_ONE_VERSION,
    CELL_INCREMENT,
    INF_MAX,
    INF_MIN,
    PlainCell,
    PlainRow,
)

names = st.text(st.characters(codec="utf-8"), max_size=16)
int64s = st.integers(-(2**63), 2**63 - 1)
uint32s = st.integers(0, 2**32 - 1)
values = st.one_of(
    int64s,
    st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(st.characters(codec="utf-8"), max_size=40),
    st.binary(max_size=120),
)
pk_values = st.one_of(values, st.sampled_from([INF_MIN, INF_MAX, AUTO_INCREMENT]))
cell_types = st.sampled_from([None, CELL_DELETE_ALL_VERSION, CELL_DELETE_ONE_VERSION, CELL_INCREMENT])
cells = st.builds(PlainCell, names, st.one_of(st.none(), values), cell_types, st.one_of(st.none(), int64s))
sequences = st.one_of(st.none(), st.tuples(uint32s, int64s, uint32s))
rows = st.builds(
    PlainRow,
    st.lists(st.tuples(names, pk_values), max_size=4),
    st.lists(cells, max_size=8),
    st.booleans(),
    sequences,
)


def canonical(value: object) -> object:
    """Floats by their bits, so NaN == NaN and -0.0 != 0.0 in comparisons."""
    return ("f", struct.pack("<d", value)) if isinstance(value, float) else value


def canonical_row(row: PlainRow) -> tuple:
    return (
        [(n, canonical(v)) for n, v in row.primary_key],
        [(c.name, canonical(c.value), c.cell_type, c.timestamp) for c in row.cells],
        row.delete_marker,
        row.sequence,
    )
