"""`cdcbridge traffic` keys follow the table's own primary key, whatever its column types."""

from cdcbridge.harness.traffic import TrafficCounts, key_columns


def test_keys_are_distinct_and_typed_per_column() -> None:
    keys = key_columns([("region", "STRING"), ("id", "INTEGER"), ("blob", "BINARY")], 3)
    assert keys == [
        [("region", "k000000"), ("id", 0), ("blob", b"k000000")],
        [("region", "k000001"), ("id", 1), ("blob", b"k000001")],
        [("region", "k000002"), ("id", 2), ("blob", b"k000002")],
    ]


def test_the_progress_line_counts_each_kind() -> None:
    counts = TrafficCounts()
    counts.writes.update({"put": 3, "delete": 1})
    counts.splits = 2
    assert counts.line() == "4 writes (delete 1, put 3), 0 failed, 2 shard split(s)"
