import json
from pathlib import Path

import pytest

from cdcbridge.harness.bench.results import load_goals, record_result, render_markdown

REPO = Path(__file__).resolve().parents[4]


def _section(page: str, heading_start: str) -> str:
    start = page.index(heading_start)
    end = page.find("\n## ", start + 1)
    return page[start : end if end >= 0 else len(page)]


def test_results_are_merged_by_name_with_the_command_and_time_of_their_run(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "results.json"
    monkeypatch.setattr("sys.argv", ["cdcbridge", "bench", "decode", "--records", "1000"])
    record_result("decode", {"rows_per_s_crc_off": 123456, "implementation": "c"}, path)
    record_result("emulator", {"records_per_s": 100.5}, path)
    record_result("decode", {"rows_per_s_crc_off": 222222, "implementation": "c"}, path)
    data = json.loads(path.read_text())
    assert set(data["benchmarks"]) == {"decode", "emulator"}
    decode = data["benchmarks"]["decode"]
    assert decode["figures"]["rows_per_s_crc_off"] == 222222
    assert decode["command"] == "cdcbridge bench decode --records 1000"
    assert decode["finished_at"][:2] == "20" and decode["finished_at"].endswith("Z")


def _write_results(path: Path, benchmarks: dict) -> None:
    machine = {"cores": 2, "cpu": "Test CPU", "memory_gib": 8.0, "python": "3.11.7", "platform": "Linux"}
    data = {
        name: {"command": command, "finished_at": finished, "figures": figures, "machine": machine}
        for name, (command, finished, figures) in benchmarks.items()
    }
    path.write_text(json.dumps({"benchmarks": data}))


GOALS = """
[[row]]
benchmark = "decode"
what = "Stream decode"
figure = "rows_per_s_crc_off"
unit = "rows/s"
at_least = 200_000
note = "the C reader"

[[row]]
benchmark = "failover"
what = "Failover after kill -9"
figure = "failover_max_ratio_to_lease_plus_take"
unit = "× (lease+take)"
at_most = 1.2

[[row]]
benchmark = "bridge"
what = "Bridge worker / raw produce"
figure = "ratio_bridge_to_ceiling"
at_least = 0.6

[[row]]
benchmark = "snapshot"
what = "Snapshot export"
figure = "rows_per_s"
"""


def test_the_summary_has_a_row_per_goal_with_command_goal_last_figure_and_date_and_says_whether_it_is_met(
    tmp_path: Path,
) -> None:
    path = tmp_path / "results.json"
    _write_results(
        path,
        {
            "decode": ("cdcbridge bench decode", "2026-11-22T09:25:57Z", {"rows_per_s_crc_off": 316523}),
            "failover": (
                "cdcbridge bench failover",
                "2026-11-21T10:00:00Z",
                {"failover_max_ratio_to_lease_plus_take": 1.082},
            ),
            "bridge": ("cdcbridge bench bridge", "2026-11-20T19:45:41Z", {"ratio_bridge_to_ceiling": 0.102}),
            "emulator": ("cdcbridge bench emulator", "2026-11-19T08:00:00Z", {"records_per_s": 409022}),
        },
    )
    (tmp_path / "goals.toml").write_text(GOALS)
    page = render_markdown(path)
    assert "| what | command | goal | last run | met |" in page
    assert "| Stream decode | `cdcbridge bench decode` | ≥ 200,000 rows/s | 316,523 rows/s (2026-11-22) | yes |" in page
    assert "| ≤ 1.2 × (lease+take) | 1.08 × (lease+take) (2026-11-21) | yes |" in page
    assert "| Bridge worker / raw produce | `cdcbridge bench bridge` | ≥ 0.6 | 0.102 (2026-11-20) | **no** |" in page
    assert "| Snapshot export | – | – | not run | – |" in page  # a goal row whose benchmark has no run yet
    assert "| emulator | `cdcbridge bench emulator` | – | see below (2026-11-19) | – |" in page  # a run without row
    assert "- decode: the C reader." in page
    # the runs follow in the goals' order, each under the command and time that produced it
    assert page.index("## decode: `cdcbridge bench decode`, 2026-11-22 09:25:57 UTC") < page.index("## failover")
    assert page.index("## bridge:") < page.index("## emulator:")
    assert "Every run: 2 cores (Test CPU), 8.0 GiB, Python 3.11.7." in page


def test_runs_show_only_labelled_figures_and_grouped_keys_become_one_table_with_readable_rows(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    figures = {
        "cores": 2,
        "spark_master": "local[2]",
        "delta_100k_batches.rec_per_s": 32683,
        "delta_100k_batches.floor_rec_per_s": 54511,
        "delta_100k_batches.share_of_floor": 0.6,
        "delta_100k_batches.messages": 415147,
        "postgres_100k_batches.rec_per_s": 19110,
        "delta_freshness.p50_s": 3.43,
        "delta_freshness.p95_s": 5.25,
    }
    _write_results(path, {"apply": ("cdcbridge bench apply", "2026-11-24T08:41:37Z", figures)})
    apply = _section(render_markdown(path), "## apply")
    assert "| Spark master | local[2] |" in apply
    assert "| run | records/s | floor records/s | share of floor |" in apply
    assert "| Delta, 100k-record batches | 32,683 | 54,511 | 0.6 |" in apply
    assert "| PostgreSQL, 100k-record batches | 19,110 | – | – |" in apply  # no floor for PostgreSQL
    assert "| run | p50 (s) | p95 (s) |" in apply and "| Delta, source commit → target row | 3.43 | 5.25 |" in apply
    assert "415,147" not in apply and "| cores" not in apply  # figures without a label stay in results.json
    assert "delta_100k_batches" not in apply


def test_a_benchmark_without_labels_shows_every_figure_under_its_key_and_a_variant_uses_its_base_labels(
    tmp_path: Path,
) -> None:
    path = tmp_path / "results.json"
    _write_results(
        path,
        {
            "soak": ("cdcbridge bench soak", "2026-11-24T08:00:00Z", {"a.b": 1, "hours": 2.5}),
            "failover-fast": ("cdcbridge bench failover --fast", "2026-11-24T09:00:00Z", {"handoff_seconds_max": 1.2}),
        },
    )
    page = render_markdown(path)
    assert "| a.b | 1 |" in page and "| hours | 2.5 |" in page
    assert "| hand-off on SIGTERM, worst (s) | 1.2 |" in _section(page, "## failover-fast")


def test_a_goal_row_with_an_unknown_key_is_refused_with_the_row_named(tmp_path: Path) -> None:
    goals = tmp_path / "goals.toml"
    goals.write_text('[[row]]\nbenchmark = "decode"\nwhat = "x"\nfigure = "y"\nat_lest = 1\n')
    with pytest.raises(ValueError, match=r"row 1 has unknown keys \['at_lest'\]"):
        load_goals(goals)


def test_the_repository_page_fits_two_screens_and_names_the_run_of_every_figure() -> None:
    page = render_markdown(REPO / "benchmarks" / "results.json")
    lines = page.splitlines()
    assert len(lines) <= 150  # about two screens of a 63-row terminal (with the apply-trickle and first-load sections)
    data = json.loads((REPO / "benchmarks" / "results.json").read_text())["benchmarks"]
    for name, entry in data.items():
        assert f"## {name}: `{entry['command']}`, {entry['finished_at'][:10]}" in page
    goals = load_goals(REPO / "benchmarks" / "goals.toml")
    assert goals and all(goal.benchmark in data for goal in goals)
    for goal in goals:  # a figure with the date of its run, or a goal its benchmark has not measured yet
        if goal.figure in data[goal.benchmark]["figures"]:
            assert f"({data[goal.benchmark]['finished_at'][:10]})" in page
        else:
            command = data[goal.benchmark]["command"]
            assert f"| {goal.what} | `{command}` | {goal.goal_text()} | not run yet | – |" in page
    assert "Session" not in page and "alternating" not in page  # the diary lives in benchmarks/history.md
