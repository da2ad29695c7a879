"""A Delta row's ``_versions`` as the target stores it (:mod:`cdcbridge.apply.targets.delta_versions`): the common
version once, the other cells by name, and every cell's version read back as it was, from maps of earlier job
versions (every versioned cell by name) too."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cdcbridge.apply.core.model import ColumnValue
from cdcbridge.apply.targets.delta_versions import COMMON_VERSION_KEY, cell_version, stored_versions

cells = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d", "e"]),
    st.builds(ColumnValue, st.integers(0, 9), st.one_of(st.none(), st.sampled_from([10, 20, 30]))),
)


@given(cells)
def test_every_cell_reads_back_its_own_version(columns: dict[str, ColumnValue]) -> None:
    stored = stored_versions(columns)
    assert {name: cell_version(stored, name) for name in columns} == {n: c.version for n, c in columns.items()}
    versioned = [cell.version for cell in columns.values() if cell.version is not None]
    assert (COMMON_VERSION_KEY in stored) == bool(versioned)
    assert len(stored) <= len(columns) + 1


def test_the_most_common_version_is_kept_once_and_the_newest_wins_a_tie() -> None:
    row = {"a": ColumnValue(1, 10), "b": ColumnValue(2, 10), "c": ColumnValue(3, 20), "d": ColumnValue(4, None)}
    assert stored_versions(row) == {COMMON_VERSION_KEY: 10, "c": 20, "d": None}
    assert stored_versions({"a": ColumnValue(1, 10), "b": ColumnValue(2, 20)}) == {COMMON_VERSION_KEY: 20, "a": 10}
    assert stored_versions({"a": ColumnValue(1, None)}) == {}


def test_a_map_of_an_earlier_version_reads_as_it_did() -> None:
    earlier = {"a": 10, "b": 20}  # every versioned cell by name, cells without version left out
    assert [cell_version(earlier, name) for name in ("a", "b", "c")] == [10, 20, None]
