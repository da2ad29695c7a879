"""The Delta target's driver-side key bounds: what a file's statistics allow it to hold, and a commit's actions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cdcbridge.apply.targets.delta_key_bounds import DeltaKeyBounds, TableFiles, key_bounds


def _stats(lows: dict[str, Any], highs: dict[str, Any]) -> str:
    return json.dumps({"numRecords": 3, "minValues": lows, "maxValues": highs, "tightBounds": True})


def test_an_integer_key_is_held_only_within_the_file_bounds():
    bounds = key_bounds(_stats({"id": 10, "name": "a"}, {"id": 20, "name": "z"}), ["id"])
    assert bounds is not None
    assert [bounds.may_hold((("id", n),)) for n in (9, 10, 15, 20, 21)] == [False, True, True, True, False]


def test_a_compound_key_must_lie_within_every_column_bounds():
    bounds = key_bounds(_stats({"region": "eu", "id": 1}, {"region": "us", "id": 5}), ["region", "id"])
    assert bounds is not None
    assert bounds.may_hold((("region", "fr"), ("id", 3)))
    assert not bounds.may_hold((("region", "fr"), ("id", 6)))
    assert not bounds.may_hold((("region", "zz"), ("id", 3)))


@pytest.mark.parametrize(
    ("stats", "why"),
    [
        (None, "no statistics"),
        ("not json", "unreadable statistics"),
        (_stats({}, {}), "no key column in the statistics"),
        (_stats({"id": "a" * 32}, {"id": "a" * 32 + "\U0010ffff"}), "a string bound Delta may have truncated"),
    ],
)
def test_a_file_without_usable_bounds_may_hold_any_key(stats, why):
    bounds = key_bounds(stats, ["id"])
    assert bounds is None or bounds.may_hold((("id", "b" * 40),)), why


def test_a_binary_key_has_no_bounds_so_any_file_may_hold_it():
    bounds = key_bounds(_stats({"id": 1}, {"id": 2}), ["id"])
    assert bounds is not None and bounds.may_hold((("id", b"\x00"),))


def test_short_string_bounds_exclude_keys_outside_them():
    bounds = key_bounds(_stats({"id": "k0100"}, {"id": "k0199"}), ["id"])
    assert bounds is not None
    assert bounds.may_hold((("id", "k0150"),)) and not bounds.may_hold((("id", "k0200"),))


def test_a_commit_removes_before_it_adds_so_a_deletion_vector_update_keeps_its_file():
    files = TableFiles(3, {"a.parquet": key_bounds(_stats({"id": 0}, {"id": 9}), ["id"])})
    files.apply_actions(
        [
            {"add": {"path": "a.parquet", "stats": _stats({"id": 0}, {"id": 9})}},
            {"remove": {"path": "a.parquet"}},
            {"add": {"path": "b.parquet", "stats": _stats({"id": 10}, {"id": 19})}},
            {"commitInfo": {}},
        ],
        ["id"],
    )
    assert set(files.files) == {"a.parquet", "b.parquet"}
    assert files.may_hold_any([(("id", 12),)]) and not files.may_hold_any([(("id", 25),)])
    files.apply_actions([{"remove": {"path": "b.parquet"}}], ["id"])
    assert not files.may_hold_any([(("id", 12),)])


def test_the_file_list_keeps_the_table_size_without_a_spark_job():
    files = TableFiles(0, {})
    files.apply_actions(
        [
            {"add": {"path": "a.parquet", "size": 1000}},
            {"add": {"path": "b.parquet", "size": 250, "stats": _stats({"id": 0}, {"id": 9})}},
        ],
        ["id"],
    )
    assert (len(files.files), files.size_bytes) == (2, 1250)
    # a deletion-vector update re-adds the file at its size; a compaction replaces it
    files.apply_actions([{"remove": {"path": "a.parquet"}}, {"add": {"path": "a.parquet", "size": 1000}}], ["id"])
    files.apply_actions([{"remove": {"path": "b.parquet"}}, {"add": {"path": "c.parquet", "size": 40}}], ["id"])
    assert (sorted(files.files), files.size_bytes) == (["a.parquet", "c.parquet"], 1040)


def test_a_table_without_files_holds_no_key_and_one_without_statistics_may_hold_all():
    assert not TableFiles(0, {}).may_hold_any([(("id", 1),)])
    assert TableFiles(0, {"x.parquet": None}).may_hold_any([(("id", 1),)])


class _Snapshot:
    def __init__(self, version: int) -> None:
        self._version = version

    def version(self) -> int:
        return self._version


def test_a_log_that_cannot_be_followed_is_rebuilt_from_the_snapshot(monkeypatch):
    bounds = DeltaKeyBounds(spark=None)  # type: ignore[arg-type]
    rebuilt: list[int] = []

    def rebuild(snapshot: Any, pk_names: Any) -> TableFiles:
        rebuilt.append(snapshot.version())
        return TableFiles(snapshot.version(), {})

    def lost_commit(known: TableFiles, snapshot: Any, pk_names: Any) -> None:
        raise LookupError("commit 2 is missing from the log")

    monkeypatch.setattr(bounds, "_rebuild", rebuild)
    monkeypatch.setattr(bounds, "_bring_forward", lost_commit)
    assert bounds.files("t", _Snapshot(1), ["id"]).version == 1
    assert bounds.files("t", _Snapshot(1), ["id"]).version == 1  # known: neither rebuilt nor followed
    assert bounds.files("t", _Snapshot(4), ["id"]).version == 4
    assert rebuilt == [1, 4]


def test_each_file_keeps_its_add_action_for_a_read_of_that_file_alone():
    files = TableFiles(0, {})
    stats = _stats({"id": 0}, {"id": 9})
    vector = {"storageType": "u", "pathOrInlineDv": "ab", "offset": 1, "sizeInBytes": 34, "cardinality": 2}
    files.apply_actions(
        [
            {"add": {"path": "a.parquet", "size": 10, "stats": stats, "deletionVector": vector}},
            {"add": {"path": "b.parquet", "size": 20, "stats": _stats({"id": 10}, {"id": 19})}},
        ],
        ["id"],
    )
    assert json.loads(files.adds["a.parquet"]) == {
        "add": {"path": "a.parquet", "size": 10, "stats": stats, "deletionVector": vector}
    }
    assert files.holding([(("id", 3),), (("id", 30),)]) == ["a.parquet"]
    assert files.holding([(("id", 3),), (("id", 12),)]) == ["a.parquet", "b.parquet"]
    files.apply_actions([{"remove": {"path": "a.parquet"}}], ["id"])
    assert set(files.adds) == {"b.parquet"} and files.holding([(("id", 3),)]) == []


def test_only_files_whose_bounds_meet_the_written_ones_may_share_a_key_with_them():
    files = TableFiles(version=3, files={}, sizes={}, adds={})
    files.files = {
        "low": key_bounds(_stats({"region": "eu", "id": 1}, {"region": "us", "id": 99}), ["region", "id"]),
        "high": key_bounds(_stats({"region": "eu", "id": 100}, {"region": "us", "id": 199}), ["region", "id"]),
        "other regions": key_bounds(_stats({"region": "ap", "id": 200}, {"region": "bz", "id": 300}), ["region", "id"]),
        "unbounded": None,
    }
    newer = key_bounds(_stats({"region": "eu", "id": 150}, {"region": "us", "id": 250}), ["region", "id"])
    assert files.overlapping([newer]) == ["high", "unbounded"]  # "other regions" reaches id 250, not region eu
    assert files.overlapping([None]) == ["low", "high", "other regions", "unbounded"]
    assert files.overlapping([]) == []  # nothing written: nothing to check
