"""Which batches try the new-key path (:class:`~cdcbridge.apply.spark.new_keys.NewKeyPlanner`), and what counts as a
batch that would have passed its checks (:attr:`~cdcbridge.apply.target.FoldedTable.only_new_keys`)."""

from __future__ import annotations

from typing import Any

from cdcbridge.apply.core.fold import ApplyStats
from cdcbridge.apply.spark.new_keys import NewKeyPlanner
from cdcbridge.apply.target import FoldedTable


def _folded(rows_changed: int, rows_new: int, keys_repeated: int = 0, stale: int = 0) -> FoldedTable:
    rows: Any = None
    stats = ApplyStats(rows_changed=rows_changed, stale=stale)
    return FoldedTable("t", stats, frozenset(), frozenset(), 0, 0, (), rows, frozenset(), rows_new, keys_repeated)


def test_tables_not_written_yet_try_the_new_key_path() -> None:
    assert NewKeyPlanner().worth_trying(["a", "b"])


def test_a_table_whose_last_batch_would_have_failed_the_checks_stops_the_tries_until_one_would_pass() -> None:
    planner = NewKeyPlanner()
    planner.learn({"a": True, "b": False})
    assert not planner.worth_trying(["a", "b"])
    assert planner.worth_trying(["a"])
    planner.learn({"b": True})
    assert planner.worth_trying(["a", "b"])


def test_only_a_batch_of_new_keys_with_one_message_each_and_nothing_stale_would_pass() -> None:
    assert _folded(10, 10).only_new_keys
    assert _folded(0, 0).only_new_keys  # nothing changed, nothing stored
    assert not _folded(10, 9).only_new_keys  # a stored row changed
    assert not _folded(10, 10, keys_repeated=1).only_new_keys
    assert not _folded(10, 10, stale=1).only_new_keys  # a stored row newer than the batch's operation
