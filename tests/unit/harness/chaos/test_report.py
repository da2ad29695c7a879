"""The chaos report: pass/fail reasons, recovery figures, JSON and text (no servers)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cdcbridge.harness.chaos.report import ChaosReport, FaultCycle, machine_info
from cdcbridge.harness.chaos.workers import DATA_LOSS_LINE, PRODUCER_REPLACED_LINE, WorkerPool
from cdcbridge.kafka.sink import PRODUCER_REPLACED


def passing_report() -> ChaosReport:
    report = ChaosReport(seed=7, workers=2, cycles_planned=3, duration_limit_s=None, load_rate=40.0, rows=200,
                         machine={"cpus": 2, "cpu_model": "test cpu"})  # fmt: skip
    report.cycles = [
        FaultCycle(1, "worker_kill", "kill -9 w1", 3.0, 1.5, True, 7.0),
        FaultCycle(2, "shard_split", "split s1", 20.0, 0.1, True, 2.0),
        FaultCycle(3, "worker_kill", "kill -9 w2", 40.0, 1.0, True, 9.0),
    ]
    report.rows_source = report.rows_target = 190
    report.stream_records, report.messages, report.duplicates = 1000, 1040, 40
    report.image_messages, report.image_duplicates, report.image_rows = 1100, 30, 190
    report.drained = True
    return report


def test_a_clean_run_passes_with_recovery_figures_overall_and_per_kind() -> None:
    report = passing_report()
    assert report.passed and report.failures() == []
    assert report.faults_by_kind() == {"shard_split": 1, "worker_kill": 2}
    assert report.recoveries == 3
    assert report.recovery_stats() == {"faults": 3, "recovered": 3, "recovery_p50_s": 7.0, "recovery_max_s": 9.0}
    assert report.recovery_stats("worker_kill")["recovery_p50_s"] == 8.0


def test_every_finding_is_a_named_failure() -> None:
    report = passing_report()
    report.lost, report.lost_by_trim, report.order_violations, report.target_mismatches = 2, 1, 3, 4
    report.counter_mismatches, report.unexplained_messages, report.keys_in_several_partitions = 5, 6, 1
    report.images_lost, report.images_lost_by_trim, report.image_unexplained_messages = 7, 8, 9
    report.image_order_violations, report.image_keys_in_several_partitions = 10, 2
    report.image_state_mismatches, report.image_counter_mismatches, report.image_partial_without_delete = 11, 12, 13
    report.cycles.append(FaultCycle(4, "kafka_restart", "SIGKILL", 60.0, 20.0, False))
    report.drained = False
    report.harness_errors.append("cycle 4: boom")
    failures = " | ".join(report.failures())
    for needle in ("2 source changes missing", "1 trimmed source changes", "3 per-key order", "4 target rows",
                   "5 rows with counters", "6 Kafka messages match no", "1 keys in more than one", "kafka_restart",
                   "did not deliver", "harness: cycle 4", "7 source changes without their image",
                   "8 trimmed source changes without their image", "9 image-topic messages match no",
                   "10 per-key order violations on the image topic", "2 keys in more than one image-topic",
                   "11 keys whose last image differs", "12 keys whose last image has other counters",
                   "13 partial images not followed by a delete"):  # fmt: skip
        assert needle in failures
    assert not report.passed
    assert report.recovery_stats()["recovered"] == 3


def test_json_and_text_carry_the_seed_counts_and_verdict(tmp_path: Path) -> None:
    report = passing_report()
    path = tmp_path / "out" / "chaos.json"
    report.write_json(path)
    data = json.loads(path.read_text())
    assert data["seed"] == 7 and data["lost"] == 0 and data["order_violations"] == 0
    assert data["summary"]["passed"] is True
    assert data["summary"]["faults_by_kind"] == {"shard_split": 1, "worker_kill": 2}
    assert data["summary"]["recovery_by_kind"]["worker_kill"]["recovery_max_s"] == 9.0
    text = "\n".join(report.lines())
    assert "seed 7, 2 workers, 3 fault cycles" in text
    assert "time to recover p50 7.0s, max 9.0s" in text
    assert "image topic            1100 messages" in text
    assert "last image vs source   190/190 rows, 0 mismatches" in text
    assert text.splitlines()[-1].endswith("PASSED")


def test_an_empty_image_topic_fails_the_run() -> None:
    report = passing_report()
    report.image_messages = 0
    assert report.failures() == ["the image topic is empty"]


def test_the_machine_is_described() -> None:
    info = machine_info()
    assert info["cpus"] and info["python"] and len(info["load_average_at_start"]) == 3


def test_a_replaced_producer_is_counted_from_the_sinks_own_warning_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The chaos checks find the sink's warning in worker logs by the sink's own wording, and say how many."""
    with caplog.at_level(logging.WARNING, logger="cdcbridge.kafka.sink"):
        logging.getLogger("cdcbridge.kafka.sink").warning(
            "%s (librdkafka …); its %d unacknowledged messages …", PRODUCER_REPLACED, 3
        )
    log = tmp_path / "w1.log"
    loss = "2026-11-27T18:54:05Z ERROR DATA LOSS: shard s1 trimmed"
    log.write_text("2026-11-27T18:54:04Z INFO something else\n" + "\n".join(r.getMessage() for r in caplog.records))
    (tmp_path / "w2.log").write_text(loss + "\n")
    logs = [log, tmp_path / "never-started.log", tmp_path / "w2.log"]
    pool = WorkerPool(tmp_path / "cdcbridge.yaml", tmp_path, size=1, log_paths=logs)
    replaced, lost = pool.log_lines(PRODUCER_REPLACED_LINE, DATA_LOSS_LINE)
    assert (replaced, lost) == ([caplog.records[0].getMessage()], [loss])
    report = passing_report()
    report.producer_replacements = 1
    assert "0 DATA LOSS log lines; 1 Kafka producers replaced after a message timed out" in "\n".join(report.lines())
    assert report.passed  # a replacement is how the bridge recovers, not a finding
