"""The apply benchmark's arithmetic: steady-state rate per batch size, freshness per message, flat figures."""

from __future__ import annotations

from cdcbridge.apply.core.marker import BatchMarker
from cdcbridge.apply.core.model import TargetRow
from cdcbridge.apply.job import ApplySummary
from cdcbridge.apply.target import TargetBatch
from cdcbridge.formats import BridgeTableFormat
from cdcbridge.harness.bench.apply import CommitClock, _latencies, _throughput_figures, flatten, warmup_runs
from cdcbridge.harness.bench.apply_workload import bridge_messages, generate_records

from .memory_target import MemoryTarget


def test_the_rate_is_the_median_of_full_batches_after_the_first() -> None:
    summary = ApplySummary(batch_times=[(0, 1000, 10.0), (1, 1000, 1.0), (2, 1000, 2.0), (3, 1000, 4.0), (4, 10, 1.0)])
    figures = _throughput_figures(summary, 1000)
    assert figures["rec_per_s"] == 500 and figures["batches_measured"] == 3 and figures["first_batch_rec_per_s"] == 100


def test_freshness_is_the_time_until_a_write_brings_the_row_to_the_messages_seq() -> None:
    records = generate_records("t", keys=1, records=2, seed=0)
    messages, _ = bridge_messages(records, BridgeTableFormat(), topic_prefix="p")
    first, second = messages
    clock = CommitClock(MemoryTarget())
    pk = (("region", "r0"), ("id", 0))
    clock.commits = [(105.0, [(pk, first.value["seq"]["seq_key"])]), (109.0, [(pk, second.value["seq"]["seq_key"])])]
    assert _latencies([(100.0, first), (101.0, second)], clock) == [5.0, 8.0]
    clock.commits = clock.commits[:1]
    assert _latencies([(100.0, first), (101.0, second)], clock) == [5.0]


def test_the_commit_clock_passes_writes_through() -> None:
    inner = MemoryTarget()
    clock = CommitClock(inner)
    row = TargetRow("t", (("id", 1),), {}, seq="1")
    assert clock.write(TargetBatch(BatchMarker("a", 0), {"t": [row]})) == 1
    assert clock.read_marker("t", "a") == BatchMarker("a", 0) and clock.commits[0][1] == [((("id", 1),), "1")]


def test_the_warm_up_runs_every_batch_size_smallest_first_and_can_be_turned_off() -> None:
    assert warmup_runs((100_000, 10_000, 10_000), 4) == [(10_000, 4), (100_000, 4)]
    assert warmup_runs((10_000,), 2) == [(10_000, 2)]
    assert warmup_runs((10_000, 100_000), 0) == []


def test_figures_are_flattened_for_the_results_table() -> None:
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def test_the_commit_clock_keeps_the_spark_path_and_notes_the_rows_it_wrote() -> None:
    from types import SimpleNamespace

    from cdcbridge.apply.target import SparkFoldTarget
    from cdcbridge.harness.bench.apply import SparkCommitClock, commit_clock

    class SparkMemory(MemoryTarget, SparkFoldTarget):
        def current_rows(self, tables, grouped, keys_at_most=None):
            return None

        def refusal(self, folded):
            return None

        def write_folded(self, marker, tables):
            return {table: 1 for table in tables}

    assert type(commit_clock(MemoryTarget())) is CommitClock
    clock = commit_clock(SparkMemory())
    assert isinstance(clock, SparkCommitClock) and isinstance(clock, SparkFoldTarget)
    written = {"pk": [{"n": "id", "v": (None, "k", None)}], "seq": "0042"}
    rows = SimpleNamespace(select=lambda *names: SimpleNamespace(collect=lambda: [written]))
    assert clock.write_folded(BatchMarker("a", 0), {"t": SimpleNamespace(rows=rows)}) == {"t": 1}
    assert clock.commits[0][1] == [((("id", "k"),), "0042")]


def test_the_floor_figures_give_the_apply_rate_as_a_share_of_the_floors_steady_rate() -> None:
    from cdcbridge.harness.bench.apply import _floor_figures

    floor = [(1000, 10.0), (1000, 0.05), (1000, 0.02), (1000, 0.04), (10, 1.0)]  # steady: the median, 25k/s
    assert _floor_figures(floor, 1000, 12_500) == {"floor_rec_per_s": 25_000, "share_of_floor": 0.5}
    assert _floor_figures(floor[:1], 1000, 12_500) == {"floor_rec_per_s": None, "share_of_floor": None}
    assert _floor_figures(floor, 1000, None)["share_of_floor"] is None


def test_table_sizes_are_named_in_thousands_or_millions_and_compared_largest_to_smallest() -> None:
    from cdcbridge.harness.bench.apply import rows_label, table_size_ratio

    assert [rows_label(n) for n in (250_000, 2_000_000, 10_000_000, 1500)] == ["250k", "2m", "10m", "1500"]
    figures = {"delta_250k_rows": {"rec_per_s": 10_000}, "delta_10m_rows": {"rec_per_s": 7_500}}
    assert table_size_ratio(figures, (10_000_000, 250_000)) == 0.75
    assert table_size_ratio({"delta_250k_rows": {"rec_per_s": 10_000}}, (250_000, 10_000_000)) is None


def test_the_table_size_round_reported_is_the_one_of_the_median_ratio_with_the_spread_beside_it() -> None:
    from cdcbridge.harness.bench.apply import median_table_rows_round

    rounds = [
        {"delta_250k_rows": {"rec_per_s": 30_000}, "ratio_large_to_small": 0.6},
        {"delta_250k_rows": {"rec_per_s": 20_000}, "ratio_large_to_small": 0.9},
        {"delta_250k_rows": {"rec_per_s": 25_000}, "ratio_large_to_small": 0.7},
    ]
    median = median_table_rows_round(rounds)
    assert median["delta_250k_rows"] == {"rec_per_s": 25_000}
    assert (median["ratio_large_to_small"], median["ratio_lowest"], median["ratio_highest"]) == (0.7, 0.6, 0.9)
    assert median["rounds"] == 3
    assert median_table_rows_round(rounds[:2])["ratio_large_to_small"] == 0.6  # an even count: the lower middle
    unmeasured = median_table_rows_round([{"ratio_large_to_small": None}])
    assert unmeasured == {"ratio_large_to_small": None, "rounds": 1}


def test_preloaded_keys_are_updated_and_deleted_from_their_first_record() -> None:
    from cdcbridge.changes import RecordAction

    fresh = generate_records("t", keys=1_000_000, records=2000, seed=3)
    preloaded = generate_records("t", keys=1_000_000, records=2000, seed=3, preloaded=1_000_000)
    assert [r.action for r in fresh].count(RecordAction.PUT) > 1990  # nearly every key is new: its first record puts it
    actions = [r.action for r in preloaded]
    assert actions.count(RecordAction.UPDATE) > 1000 and actions.count(RecordAction.DELETE) > 50


def test_without_preloaded_keys_the_workload_is_unchanged() -> None:
    records = generate_records("t", keys=50, records=500, seed=9)
    assert repr(records) == repr(generate_records("t", keys=50, records=500, seed=9, preloaded=0))
    live: set = set()
    for record in records:  # a key's first record, and its first after a delete, puts the row
        key = tuple(record.primary_key)
        if key not in live:
            assert record.action.name == "PUT"
        if record.action.name == "DELETE":
            live.discard(key)
        else:
            live.add(key)
