"""The chaos report: what was injected, how fast the bridge recovered, and whether anything was lost or reordered.

JSON for machines (`as_dict`), a short text for people (`lines`). `passed` needs, on both topics: nothing lost (by
a fault or by a trim), no per-key order violation; target equal to source (counters included); on the image topic
the last image of every key equal to the source row (counters included) and no partial image left without its
delete; every fault recovered from, the bridge drained at the end, and no harness error.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class FaultCycle:
    index: int
    kind: str
    detail: str
    #: Seconds since the run began when the fault was injected.
    started_at_s: float
    #: From injection until the fault was over (held, then undone).
    fault_seconds: float
    recovered: bool
    #: From the end of the fault until every shard's checkpoint passed a record written after it.
    recovery_seconds: float | None = None
    #: The injector itself failed (a harness problem, not a finding).
    error: str | None = None


@dataclass
class ChaosReport:
    seed: int
    workers: int
    cycles_planned: int
    duration_limit_s: float | None
    load_rate: float
    rows: int
    machine: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    run_seconds: float = 0.0
    cycles: list[FaultCycle] = field(default_factory=list)
    load: dict[str, Any] = field(default_factory=dict)
    #: Every record the stream held during the run (retained at the end plus kept before trims).
    stream_records: int = 0
    expected_messages: int = 0
    records_trimmed: int = 0
    trim_mismatches: int = 0
    messages: int = 0
    duplicates: int = 0
    lost: int = 0
    lost_by_trim: int = 0
    lost_examples: list[str] = field(default_factory=list)
    unexplained_messages: int = 0
    #: Messages incremental snapshots sent (no stream record explains them; order and final state cover them).
    snapshot_messages: int = 0
    image_snapshot_messages: int = 0
    keys: int = 0
    order_violations: int = 0
    order_violation_examples: list[str] = field(default_factory=list)
    keys_in_several_partitions: int = 0
    rows_source: int = 0
    rows_target: int = 0
    target_mismatches: int = 0
    mismatch_examples: list[str] = field(default_factory=list)
    counter_mismatches: int = 0
    #: The RECORD_IMAGE topic (images and tombstones; cdcbridge.harness.chaos.checks for the rules).
    image_expected_messages: int = 0
    image_messages: int = 0
    image_duplicates: int = 0
    image_tombstones: int = 0
    image_partial: int = 0
    image_keys: int = 0
    images_lost: int = 0
    images_lost_by_trim: int = 0
    images_lost_examples: list[str] = field(default_factory=list)
    image_unexplained_messages: int = 0
    image_order_violations: int = 0
    image_order_violation_examples: list[str] = field(default_factory=list)
    image_keys_in_several_partitions: int = 0
    #: Keys whose last image is a live row, against `rows_source`.
    image_rows: int = 0
    image_state_mismatches: int = 0
    image_mismatch_examples: list[str] = field(default_factory=list)
    image_counter_mismatches: int = 0
    image_partial_without_delete: int = 0
    apply: dict[str, Any] = field(default_factory=dict)
    worker_starts: int = 0
    unexpected_worker_exits: list[dict[str, Any]] = field(default_factory=list)
    data_loss_log_lines: int = 0
    data_loss_log_examples: list[str] = field(default_factory=list)
    #: Kafka producers the workers replaced after a message timed out (cdcbridge.kafka.sink).
    producer_replacements: int = 0
    #: Every shard's checkpoint covered its last record once the load stopped.
    drained: bool = False
    #: A signal stopped the fault cycles early (the checks still ran).
    interrupted: bool = False
    harness_errors: list[str] = field(default_factory=list)

    # -- figures --------------------------------------------------------------------------------------------------

    def faults_by_kind(self) -> dict[str, int]:
        return dict(sorted(Counter(cycle.kind for cycle in self.cycles).items()))

    @property
    def recoveries(self) -> int:
        return sum(1 for cycle in self.cycles if cycle.recovered)

    def recovery_stats(self, kind: str | None = None) -> dict[str, Any]:
        """Count, recovered, p50 and max recovery seconds, over every cycle or one kind's."""
        cycles = [cycle for cycle in self.cycles if kind is None or cycle.kind == kind]
        times = [c.recovery_seconds for c in cycles if c.recovered and c.recovery_seconds is not None]
        return {
            "faults": len(cycles),
            "recovered": len(times),
            "recovery_p50_s": round(statistics.median(times), 2) if times else None,
            "recovery_max_s": round(max(times), 2) if times else None,
        }

    def failures(self) -> list[str]:
        """Why the run did not pass (empty when it did)."""
        reasons = []
        if self.lost:
            reasons.append(f"{self.lost} source changes missing in Kafka")
        if self.lost_by_trim:
            loud = "" if self.data_loss_log_lines else "; no worker logged DATA LOSS: a silent loss"
            reasons.append(
                f"{self.lost_by_trim} trimmed source changes missing in Kafka (trims only cut checkpointed data{loud})"
            )
        if self.unexplained_messages:
            reasons.append(f"{self.unexplained_messages} Kafka messages match no source change")
        if self.order_violations:
            reasons.append(f"{self.order_violations} per-key order violations")
        if self.keys_in_several_partitions:
            reasons.append(f"{self.keys_in_several_partitions} keys in more than one partition")
        if self.target_mismatches:
            reasons.append(f"{self.target_mismatches} target rows differ from the source")
        if self.counter_mismatches:
            reasons.append(f"{self.counter_mismatches} rows with counters that differ (an increment applied twice?)")
        reasons += self._image_failures()
        unrecovered = [c for c in self.cycles if not c.recovered]
        if unrecovered:
            reasons.append(f"{len(unrecovered)} faults not recovered from: {', '.join(c.kind for c in unrecovered)}")
        if not self.drained:
            reasons.append("the bridge did not deliver every record once the load stopped")
        if self.trim_mismatches:
            reasons.append(f"{self.trim_mismatches} trims dropped other records than the ledger kept")
        if self.rows_source == 0:
            reasons.append("the source table is empty: the load wrote nothing")
        reasons += [f"harness: {error}" for error in self.harness_errors]
        return reasons

    def _image_failures(self) -> list[str]:
        reasons = []
        if self.images_lost:
            reasons.append(f"{self.images_lost} source changes without their image (or tombstone) in Kafka")
        if self.images_lost_by_trim:
            reasons.append(f"{self.images_lost_by_trim} trimmed source changes without their image (or tombstone)")
        if self.image_unexplained_messages:
            reasons.append(f"{self.image_unexplained_messages} image-topic messages match no source change")
        if self.image_order_violations:
            reasons.append(f"{self.image_order_violations} per-key order violations on the image topic")
        if self.image_keys_in_several_partitions:
            reasons.append(f"{self.image_keys_in_several_partitions} keys in more than one image-topic partition")
        if self.image_state_mismatches:
            reasons.append(f"{self.image_state_mismatches} keys whose last image differs from the source row")
        if self.image_counter_mismatches:
            reasons.append(f"{self.image_counter_mismatches} keys whose last image has other counters than the source")
        if self.image_partial_without_delete:
            reasons.append(f"{self.image_partial_without_delete} partial images not followed by a delete")
        if self.stream_records and not self.image_messages:
            reasons.append("the image topic is empty")
        return reasons

    @property
    def passed(self) -> bool:
        return not self.failures()

    # -- output ---------------------------------------------------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["summary"] = {
            "passed": self.passed,
            "failures": self.failures(),
            "faults": len(self.cycles),
            "faults_by_kind": self.faults_by_kind(),
            "recoveries": self.recoveries,
            **self.recovery_stats(),
            "recovery_by_kind": {kind: self.recovery_stats(kind) for kind in self.faults_by_kind()},
        }
        return data

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=2, default=str) + "\n")

    def lines(self) -> list[str]:
        overall = self.recovery_stats()
        kinds = ", ".join(f"{kind} {count}" for kind, count in self.faults_by_kind().items())
        load = self.load
        lines = [
            f"seed {self.seed}, {self.workers} workers, {len(self.cycles)} fault cycles in {self.run_seconds:.0f}s "
            f"on {self.machine.get('cpus', '?')} cpus ({self.machine.get('cpu_model', '?')})"
            + (" (interrupted)" if self.interrupted else ""),
            f"faults                 {kinds}",
            f"recoveries             {self.recoveries}/{len(self.cycles)}, time to recover p50 "
            f"{_seconds(overall['recovery_p50_s'])}, max {_seconds(overall['recovery_max_s'])}",
            f"source writes          {load.get('attempted', 0)} attempted: {load.get('writes_ok', 0)} ok, "
            f"{load.get('writes_refused', 0)} refused, {load.get('writes_ambiguous', 0)} ambiguous",
            f"stream records         {self.stream_records} ({self.records_trimmed} trimmed after being checkpointed), "
            f"{self.expected_messages} messages expected",
            f"messages in Kafka      {self.messages}: {self.duplicates} duplicates (redelivered), "
            f"over {self.keys} keys",
            f"lost                   {self.lost} (by trim before being read: {self.lost_by_trim}); "
            f"unexplained messages {self.unexplained_messages}",
            f"incremental snapshots  {self.snapshot_messages} mutation / {self.image_snapshot_messages} image messages",
            f"order violations       {self.order_violations} (keys in several partitions: "
            f"{self.keys_in_several_partitions})",
            f"target vs source       {self.rows_target}/{self.rows_source} rows, {self.target_mismatches} mismatches, "
            f"{self.counter_mismatches} counter mismatches",
            f"image topic            {self.image_messages} messages ({self.image_expected_messages} expected, "
            f"{self.image_tombstones} tombstones, {self.image_partial} partial): {self.image_duplicates} duplicates, "
            f"over {self.image_keys} keys",
            f"images lost            {self.images_lost} (by trim: {self.images_lost_by_trim}); unexplained "
            f"{self.image_unexplained_messages}; order violations {self.image_order_violations} (keys in several "
            f"partitions: {self.image_keys_in_several_partitions})",
            f"last image vs source   {self.image_rows}/{self.rows_source} rows, {self.image_state_mismatches} "
            f"mismatches, {self.image_counter_mismatches} counter mismatches, {self.image_partial_without_delete} "
            "partial images without a later delete",
            f"apply job              {self.apply.get('runs', 0)} runs ({self.apply.get('restarts', 0)} restarts "
            f"after failures), {self.apply.get('duplicates_absorbed', 0)} duplicates absorbed",
            f"workers                {self.worker_starts} starts, {len(self.unexpected_worker_exits)} unexpected "
            f"exits; {self.data_loss_log_lines} DATA LOSS log lines; {self.producer_replacements} Kafka producers "
            "replaced after a message timed out",
        ]
        for kind in self.faults_by_kind():
            stats = self.recovery_stats(kind)
            lines.append(
                f"  {kind:<22} {stats['recovered']}/{stats['faults']} recovered, p50 "
                f"{_seconds(stats['recovery_p50_s'])}, max {_seconds(stats['recovery_max_s'])}"
            )
        failures = self.failures()
        lines.append("check                  " + ("PASSED" if not failures else "FAILED: " + "; ".join(failures)))
        lines += [f"  lost: {example}" for example in self.lost_examples[:5]]
        lines += [f"  order: {example}" for example in self.order_violation_examples[:5]]
        lines += [f"  mismatch: {example}" for example in self.mismatch_examples[:5]]
        lines += [f"  image lost: {example}" for example in self.images_lost_examples[:5]]
        lines += [f"  image order: {example}" for example in self.image_order_violation_examples[:5]]
        lines += [f"  image mismatch: {example}" for example in self.image_mismatch_examples[:5]]
        return lines


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def machine_info() -> dict[str, Any]:
    """What the figures were taken on (they depend on it: the machines are small and shared)."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model or platform.processor() or "unknown",
        "memory_gb": memory_gb,
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
