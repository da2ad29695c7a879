"""Where `cdcbridge bench apply` stores its figures: a run without the throughput sizes keeps its first load and
its trickle as benchmarks of their own, so that neither replaces the figures of a full run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from cdcbridge.cli import cli

FIGURES = {
    "delta_first_load.ratio": 0.5,
    "delta_trickle.p50_s": 2.0,
    "delta_trickle_updates.p50_s": 4.0,
    "delta_freshness.p50_s": 9.0,
    "cores": 2,
}


def _run(tmp_path: Path, monkeypatch: Any, *options: str) -> dict[str, Any]:
    import cdcbridge.harness.bench.apply as apply_bench

    monkeypatch.setattr(apply_bench, "run_apply_bench", lambda **_: dict(FIGURES))
    results = tmp_path / "results.json"
    outcome = CliRunner().invoke(cli, ["bench", "--results", str(results), "apply", *options])
    assert outcome.exit_code == 0, outcome.output
    return {name: entry["figures"] for name, entry in json.loads(results.read_text())["benchmarks"].items()}


def test_a_first_load_and_a_trickle_without_sizes_are_stored_apart(tmp_path, monkeypatch):
    stored = _run(tmp_path, monkeypatch, "--batch-sizes", "")
    assert stored == {
        "apply-first-load": {"delta_first_load.ratio": 0.5, "cores": 2},
        "apply-trickle": {
            "delta_trickle.p50_s": 2.0,
            "delta_trickle_updates.p50_s": 4.0,
            "delta_freshness.p50_s": 9.0,
            "cores": 2,
        },
    }


def test_a_run_with_sizes_is_the_full_apply_benchmark(tmp_path, monkeypatch):
    assert _run(tmp_path, monkeypatch, "--batch-sizes", "10000") == {"apply": FIGURES}


def test_a_trickle_alone_replaces_only_the_trickle(tmp_path, monkeypatch):
    assert list(_run(tmp_path, monkeypatch, "--batch-sizes", "", "--first-load-rows", "0")) == ["apply-trickle"]
