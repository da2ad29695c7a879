"""The CI form of the chaos suite: one cycle of every fault kind on the real stack, then the end-of-run checks on
both topics (MUTATE_LOG and RECORD_IMAGE) and on the target.

Kafka, Apicurio and the emulator are started for this run alone (the broker is restarted during it, which the
session's shared stack must not see); the Spark session is the shared one. The long form is `cdcbridge chaos`
(RELIABILITY.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cdcbridge.harness.chaos.injectors import FaultTimings
from cdcbridge.harness.chaos.run import run_chaos
from cdcbridge.harness.chaos.schedule import ALL_KINDS

#: Faults held briefly: the point here is that each kind fires and is recovered from, not a soak.
SHORT_TIMINGS = FaultTimings(window=(2.0, 3.0), kill_down=(0.0, 1.0), zombie_extra=(1.0, 2.0), kafka_down=(0.5, 1.5))


def test_every_fault_kind_once_loses_nothing_keeps_order_and_target_and_last_images_equal_the_source(
    spark: Any, tmp_path: Path
) -> None:
    report = run_chaos(
        len(ALL_KINDS), None, 2, 20261122, tmp_path / "chaos.json", rate=30.0, rows=150, timings=SHORT_TIMINGS,
        pause_s=(0.5, 1.0), recovery_timeout_s=120.0, catch_up_timeout_s=180.0, work_dir=tmp_path / "work",
        spark=spark,
    )  # fmt: skip
    summary = "\n".join(report.lines()) + f"\n(logs under {tmp_path / 'work'})"

    assert report.faults_by_kind() == {kind.value: 1 for kind in ALL_KINDS}, summary
    assert report.harness_errors == [], summary
    assert report.recoveries == len(ALL_KINDS), summary
    # Every change the stream ever held is in Kafka, trimmed ones included (trims only cut checkpointed data).
    assert report.stream_records > 0 and report.records_trimmed > 0, summary
    assert (report.lost, report.lost_by_trim, report.unexplained_messages) == (0, 0, 0), summary
    assert report.messages >= report.expected_messages, summary
    # The incremental_snapshot fault sent the table's rows again while the stream went on.
    assert report.snapshot_messages > 0 and report.image_snapshot_messages > 0, summary
    assert (report.order_violations, report.keys_in_several_partitions) == (0, 0), summary
    assert report.rows_source > 0 and report.rows_target == report.rows_source, summary
    assert (report.target_mismatches, report.counter_mismatches) == (0, 0), summary
    # The image topic: every change has its image (a delete its tombstone too), per-key order holds, and the last
    # image of every key is the source row (counters included); partial images, if any, were followed by a delete.
    assert report.image_messages >= report.image_expected_messages > report.stream_records, summary
    assert report.image_tombstones > 0, summary
    assert (report.images_lost, report.images_lost_by_trim, report.image_unexplained_messages) == (0, 0, 0), summary
    assert (report.image_order_violations, report.image_keys_in_several_partitions) == (0, 0), summary
    assert report.image_rows == report.rows_source, summary
    assert (report.image_state_mismatches, report.image_counter_mismatches) == (0, 0), summary
    assert report.image_partial_without_delete == 0, summary
    assert report.load["writes_ambiguous"] > 0, summary  # the ambiguous-writes fault did drop answers
    assert report.drained and report.passed, summary
    assert (tmp_path / "chaos.json").exists() and (tmp_path / "chaos.txt").read_text().rstrip().endswith("PASSED")
