import json
from pathlib import Path

from cdcbridge.harness.bench.results import record_result, render_markdown


def test_results_are_merged_by_name_and_rendered_with_their_command(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "results.json"
    monkeypatch.setattr("sys.argv", ["cdcbridge", "bench", "decode", "--records", "1000"])
    record_result("decode", {"rows_per_s": 123456.7, "check_crc": False}, path)
    record_result("emulator", {"records_per_s": 100.5}, path)
    record_result("decode", {"rows_per_s": 222222.2, "check_crc": False}, path)
    data = json.loads(path.read_text())
    assert set(data["benchmarks"]) == {"decode", "emulator"}
    assert data["benchmarks"]["decode"]["figures"]["rows_per_s"] == 222222.2
    assert data["benchmarks"]["decode"]["command"] == "cdcbridge bench decode --records 1000"
    page = render_markdown(path)
    assert "## decode" in page and "| rows_per_s | 222,222 |" in page
    assert "Command: `cdcbridge bench decode --records 1000`" in page
    assert page.index("## decode") < page.index("## emulator")
