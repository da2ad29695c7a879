"""Which batches try the new-key path (:class:`~cdcbridge.apply.spark.new_keys.NewKeyPlanner`)."""

from __future__ import annotations

from cdcbridge.apply.spark.new_keys import NewKeyPlanner


def test_tables_not_written_yet_try_the_new_key_path() -> None:
    assert NewKeyPlanner().worth_trying(["a", "b"])


def test_a_table_whose_last_batch_was_mostly_updates_stops_the_tries_until_it_writes_new_rows_again() -> None:
    planner = NewKeyPlanner()
    planner.learn({"a": (100, 100), "b": (10, 2)})
    assert not planner.worth_trying(["a", "b"])
    assert planner.worth_trying(["a"])
    planner.learn({"b": (10, 5)})  # half new: a first load with some updates
    assert planner.worth_trying(["a", "b"])


def test_a_batch_that_changed_no_row_teaches_nothing() -> None:
    planner = NewKeyPlanner()
    planner.learn({"a": (10, 1)})
    planner.learn({"a": (0, 0)})
    assert not planner.worth_trying(["a"])
