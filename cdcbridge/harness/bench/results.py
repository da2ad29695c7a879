"""Benchmark results: one JSON file, each benchmark under its name with the command and time of its run, and the
BENCHMARKS.md page generated from it and the hand-kept goals (figures are quoted from the file, never typed by hand)."""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import textwrap
import time
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_RESULTS = Path("benchmarks/results.json")
#: The summary's rows (what, figure, goal), kept by hand next to the results file.
GOALS_FILE_NAME = "goals.toml"
#: Dated notes of what was tried and kept or dropped, next to the results file.
HISTORY_FILE_NAME = "history.md"


def machine_description() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory_gib = round(pages / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": memory_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def command_line() -> str:
    """How this run was started, as a user would type it."""
    return "cdcbridge " + " ".join(shlex.quote(arg) for arg in sys.argv[1:])


def record_result(name: str, figures: Mapping[str, Any], path: Path = DEFAULT_RESULTS) -> dict[str, Any]:
    """Store one benchmark's figures (replacing an earlier run of the same benchmark)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {"benchmarks": {}}
    entry = {
        "figures": dict(figures),
        "command": command_line(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_description(),
    }
    data["benchmarks"][name] = entry
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return entry


#: Per benchmark, the figures the page shows, in order, with their labels; the rest stay in results.json only.
#: A key ``<group>.<figure>`` is one cell of a table with a row per group (:data:`GROUP_LABELS`). A benchmark
#: stored as ``<name>-<variant>`` (``failover-fast``) uses the labels of ``<name>``.
FIGURE_LABELS: dict[str, dict[str, str]] = {
    "decode": {
        "records": "records decoded",
        "implementation": "reader (c or python)",
        "rows_per_s_crc_off": "rows/s, CRC off",
        "rows_per_s_crc_on": "rows/s, CRC on",
    },
    "emulator": {
        "rows": "rows written (BatchWriteRow) and read back",
        "batch_size": "rows per BatchWriteRow",
        "rows_per_s": "BatchWriteRow rows/s, through the SDK",
        "server_rows_per_s": "BatchWriteRow rows/s, server side",
        "records_per_s": "GetStreamRecord records/s, through the SDK",
        "server_records_per_s": "GetStreamRecord records/s, server side",
    },
    "failover": {
        "lease_duration_seconds": "lease duration (s)",
        "take_interval_seconds": "take interval (s)",
        "failover_seconds_median": "failover after kill -9, median (s)",
        "failover_seconds_max": "failover after kill -9, worst (s)",
        "handoff_seconds_median": "hand-off on SIGTERM, median (s)",
        "handoff_seconds_max": "hand-off on SIGTERM, worst (s)",
        "rebalance_seconds": "rebalance when a second worker joins 8 shards (s)",
        "ownership_changes_after_convergence": "lease moves after the rebalance settled",
        "records_redelivered": "records delivered twice (failover samples)",
    },
    "apply-table-rows": {
        "table_files": "files before",
        "table_files_after": "files after",
        "rec_per_s": "records/s",
        "first_batch_rec_per_s": "first batch records/s",
        "phase_share.decode": "decode",
        "phase_share.read": "read",
        "phase_share.fold": "fold",
        "phase_share.write": "write",
    },
    "bridge": {
        "records": "source records",
        "formats": "formats",
        "partitions": "partitions",
        "bridge_records_per_s": "bridge records/s",
        "bridge_messages_per_s": "bridge messages/s",
        "ceiling_messages_per_s": "raw produce messages/s (the ceiling)",
        "ratio_bridge_to_ceiling": "bridge / ceiling",
        "bridge_process_cpu_us_per_record": "bridge CPU per record (µs)",
        "ceiling_process_cpu_us_per_message": "raw produce CPU per message (µs)",
        "bridge_process_cpu_per_s": "bridge process CPU (cores)",
    },
    "apply": {
        "spark_master": "Spark master",
        "rec_per_s": "records/s",
        "floor_rec_per_s": "floor records/s",
        "share_of_floor": "share of floor",
        "first_batch_rec_per_s": "first batch records/s",
        "phase_share.decode": "decode",
        "phase_share.read": "read",
        "phase_share.fold": "fold",
        "phase_share.write": "write",
        "rate_per_s": "messages/s sent",
        "p50_s": "p50 (s)",
        "p95_s": "p95 (s)",
        "max_s": "max (s)",
        "kafka_p50_s": "SDK write → Kafka p50 (s)",
        "kafka_p95_s": "SDK write → Kafka p95 (s)",
        "rows_per_s": "first load rows/s",
        "plain_rows_per_s": "plain decode + append rows/s",
        "ratio": "× plain",
    },
}
#: Row labels of grouped figures.
GROUP_LABELS = {
    "delta_100k_batches": "Delta, 100k-record batches",
    "delta_10k_batches": "Delta, 10k-record batches",
    "postgres_100k_batches": "PostgreSQL, 100k-record batches",
    "postgres_10k_batches": "PostgreSQL, 10k-record batches",
    "delta_freshness": "Delta, source commit → target row",
    "delta_first_load": "Delta, first load of an empty table",
    "delta_trickle": "Delta, SDK write → row readable (a row every 0.5 s, whole stack)",
    "delta_trickle_updates": "Delta, SDK update of a stored row → readable (one every 0.5 s, whole stack)",
    "delta_250k_rows": "Delta, 250k-row table",
    "delta_2m_rows": "Delta, 2M-row table",
    "delta_10m_rows": "Delta, 10M-row table",
}
#: What each benchmark's section says under its heading (the grouped columns need it most).
SECTION_NOTES = {
    "apply": "records/s: median of the measured batches. Floor: the same messages decoded, each key's last one kept "
    "and the table rewritten, the least an apply of this design does. decode / read / fold / write: share of a "
    "batch's time.",
    "apply-table-rows": "Per table size: a Delta table filled directly, then 100k-record batches on random keys "
    "applied from Kafka; records/s: the median round's median batch after the first. A cost that follows the batch "
    "keeps the ratio near 1.",
    "bridge": "One worker, emulator → Kafka (Avro, acks=all), against raw produce of the same messages.",
    "failover": "Failover and hand-off: a worker is killed or stopped at a random phase of its peer's take cycle, "
    "until the peer delivers again. Rebalance: a second worker joins one that holds 8 shards, until each holds 4.",
}


@dataclass(frozen=True)
class GoalRow:
    """One row of the page's summary: a benchmark's figure and the goal it is held to (none: shown without one)."""

    benchmark: str
    what: str
    figure: str
    unit: str = ""
    at_least: float | None = None
    at_most: float | None = None
    note: str = ""

    def goal_text(self) -> str:
        if self.at_least is not None:
            return f"≥ {_format_value(self.at_least)} {self.unit}".rstrip()
        if self.at_most is not None:
            return f"≤ {_format_value(self.at_most)} {self.unit}".rstrip()
        return "–"

    def met(self, value: Any) -> bool | None:
        """Whether `value` meets the goal (None: no goal, or no number to judge)."""
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
        if self.at_least is not None:
            return value >= self.at_least
        if self.at_most is not None:
            return value <= self.at_most
        return None


def load_goals(path: Path) -> list[GoalRow]:
    """The summary rows of a goals file (none when it does not exist)."""
    if not path.exists():
        return []
    rows = tomllib.loads(path.read_text()).get("row", [])
    fields = set(GoalRow.__dataclass_fields__)
    for number, row in enumerate(rows, 1):
        if unknown := set(row) - fields:
            raise ValueError(f"{path}: row {number} has unknown keys {sorted(unknown)} (known: {sorted(fields)})")
    return [GoalRow(**row) for row in rows]


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _machine_text(machine: Mapping[str, Any]) -> str:
    return f"{machine['cores']} cores ({machine['cpu']}), {machine['memory_gib']} GiB, Python {machine['python']}."


def _run_date(entry: Mapping[str, Any]) -> str:
    return str(entry.get("finished_at", "?"))[:10]


def _labels_for(name: str) -> dict[str, str] | None:
    return FIGURE_LABELS.get(name) or FIGURE_LABELS.get(name.split("-", 1)[0])


def _wrap(text: str, indent: str = "") -> str:
    """A paragraph in lines of at most 120 characters (the page is read as text as well as rendered)."""
    return textwrap.fill(text, 120, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _summary(goals: list[GoalRow], benchmarks: Mapping[str, Any]) -> list[str]:
    """One row per goal row, then one per stored benchmark no goal row names."""
    rows = []
    for goal in goals:
        entry = benchmarks.get(goal.benchmark)
        if entry is None:
            rows.append([goal.what, "–", goal.goal_text(), "not run", "–"])
            continue
        value = entry["figures"].get(goal.figure)
        if value is None:  # a goal newer than the stored run: no figure, so no date either
            rows.append([goal.what, f"`{entry['command']}`", goal.goal_text(), "not run yet", "–"])
            continue
        rows.append(
            [
                goal.what,
                f"`{entry['command']}`",
                goal.goal_text(),
                f"{_format_value(value)} {goal.unit}".rstrip() + f" ({_run_date(entry)})",
                {True: "yes", False: "**no**", None: "–"}[goal.met(value)],
            ]
        )
    named = {goal.benchmark for goal in goals}
    for name, entry in sorted(benchmarks.items()):
        if name not in named:
            rows.append([name, f"`{entry['command']}`", "–", f"see below ({_run_date(entry)})", "–"])
    lines = _table(["what", "command", "goal", "last run", "met"], rows)
    notes = [f"- {goal.benchmark}: {goal.note}." for goal in goals if goal.note]
    return lines + (["", *(_wrap(note, "  ") for note in notes)] if notes else [])


def _figure_tables(name: str, figures: Mapping[str, Any]) -> list[str]:
    """The shown figures of one run: plain ones as (figure, value) rows, grouped ones as a table with a row per
    group; groups that share a column share a table."""
    labels = _labels_for(name)
    if labels is None:  # a benchmark the page does not know yet: every figure, under its key
        labels = {key: key for key in figures}
    plain: list[list[str]] = []
    groups: dict[str, dict[str, Any]] = {}
    for key, label in labels.items():
        if key in figures:
            plain.append([label, _format_value(figures[key])])
    for key, value in figures.items():
        group, dot, rest = key.partition(".")
        if dot and rest in labels and key not in labels:
            groups.setdefault(group, {})[rest] = value
    lines: list[str] = []
    if plain:
        lines += [*_table(["figure", "value"], plain), ""]
    tables: list[tuple[list[str], list[str]]] = []  # (columns, groups) per table
    for group, values in groups.items():
        for columns, members in tables:
            if set(columns) & set(values):
                columns += [c for c in values if c not in columns]
                members.append(group)
                break
        else:
            tables.append(([*values], [group]))
    for columns, members in tables:
        ordered = [c for c in labels if c in columns]
        rows = [
            [GROUP_LABELS.get(g, g)] + [_format_value(groups[g][c]) if c in groups[g] else "–" for c in ordered]
            for g in members
        ]
        lines += [*_table(["run", *(labels[c] for c in ordered)], rows), ""]
    return lines


def render_markdown(path: Path = DEFAULT_RESULTS) -> str:
    """BENCHMARKS.md: the summary (one row per goal: what, command, goal, last figure, met), then each benchmark's
    last run with the figures a user reads, under the command and date that produced them."""
    benchmarks = json.loads(path.read_text())["benchmarks"]
    goals = load_goals(path.parent / GOALS_FILE_NAME)
    history = path.parent / HISTORY_FILE_NAME
    machines = list({_machine_text(entry["machine"]): entry["machine"] for entry in benchmarks.values()}.values())
    lines = [
        "# Benchmarks",
        "",
        _wrap(
            f"Generated by `cdcbridge bench report` from `{path}` and `{path.parent / GOALS_FILE_NAME}`. Each figure "
            "is the last run of the command named with it. The machines are shared and noisy: ratios measured within "
            "one run hold better than absolute figures."
            + (f" What was tried, kept and dropped: `{history}`." if history.exists() else "")
            + (f" Every run: {_machine_text(machines[0])}" if len(machines) == 1 else "")
        ),
        "",
        *_summary(goals, benchmarks),
        "",
    ]
    order = list(dict.fromkeys([goal.benchmark for goal in goals if goal.benchmark in benchmarks] + sorted(benchmarks)))
    for name in order:
        entry = benchmarks[name]
        about = (_machine_text(entry["machine"]) if len(machines) > 1 else "") + " " + SECTION_NOTES.get(name, "")
        lines += [
            f"## {name}: `{entry['command']}`, {entry['finished_at'].replace('T', ' ').rstrip('Z')} UTC",
            "",
            *([_wrap(about.strip()), ""] if about.strip() else []),
            *_figure_tables(name, entry["figures"]),
        ]
    return "\n".join(lines).rstrip() + "\n"
