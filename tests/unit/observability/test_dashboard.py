"""The Grafana dashboard and the Prometheus scrape configuration stay true to the metrics the code exports.

No Grafana or Prometheus runs here: the dashboard's PromQL is parsed for metric names, label matchers, ``by``
clauses and legend placeholders, and each is checked against WorkerMetrics / ApplyMetrics.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cdcbridge.observability.metrics import ApplyMetrics, WorkerMetrics

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "cdcbridge-dashboard.json"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"

#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"job", "instance"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
#: Families of the process / platform / GC collectors every cdcbridge endpoint also serves.
PROCESS_FAMILIES = {
    family.name
    for family in text_string_to_metric_families(WorkerMetrics().render())
    if not family.name.startswith("cdcbridge_")
}


def _declared() -> dict[str, tuple[str, ...]]:
    return {**WorkerMetrics().declared, **ApplyMetrics().declared}


def _expressions() -> list[tuple[str, str, str]]:
    """(panel title, expr, legendFormat) of every query, rows included."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                found.append((inner["title"], target["expr"], target.get("legendFormat", "")))
    return found


def _series_labels(name: str, declared: dict[str, tuple[str, ...]]) -> set[str] | None:
    """Labels a series name carries, or None if no metric of ours exports it."""
    if name in declared:
        return set(declared[name])
    for suffix in HISTOGRAM_SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and base in declared:
            return set(declared[base]) | ({"le"} if suffix == "_bucket" else set())
    family = name.removesuffix("_total")
    if name in PROCESS_FAMILIES or family in PROCESS_FAMILIES:
        return set()
    return None


METRIC_NAME = re.compile(r"\b((?:cdcbridge|process|python)_[a-zA-Z0-9_]+)\b")
SELECTOR = re.compile(r"\b([a-zA-Z_][a-zA-Z0-9_]*)\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
BY_CLAUSE = re.compile(r"\bby\s*\(([^)]*)\)")
LEGEND = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")


def test_the_dashboard_queries_something() -> None:
    expressions = _expressions()
    assert len(expressions) >= 20
    names = {name for _, expr, _ in expressions for name in METRIC_NAME.findall(expr)}
    # The brief's panels: throughput in/out, produce latency, lag per shard, leases, lease events and steals,
    # checkpoints, apply batches and freshness.
    for wanted in (
        "cdcbridge_records_fetched_total",
        "cdcbridge_messages_produced_total",
        "cdcbridge_messages_acked_total",
        "cdcbridge_produce_latency_seconds_bucket",
        "cdcbridge_lag_seconds",
        "cdcbridge_lag_records",
        "cdcbridge_leases_held",
        "cdcbridge_lease_events_total",
        "cdcbridge_checkpoints_total",
        "cdcbridge_apply_batches_total",
        "cdcbridge_apply_freshness_seconds_bucket",
    ):
        assert wanted in names, wanted


@pytest.mark.parametrize(("title", "expr", "legend"), _expressions(), ids=lambda value: str(value)[:60])
def test_every_query_uses_metrics_and_labels_that_exist(title: str, expr: str, legend: str) -> None:
    declared = _declared()
    names = METRIC_NAME.findall(expr)
    assert names, f"{title}: no cdcbridge metric in {expr!r}"
    available: set[str] = set(TARGET_LABELS)
    for name in names:
        labels = _series_labels(name, declared)
        assert labels is not None, f"{title}: {name} is exported by neither WorkerMetrics nor ApplyMetrics"
        available |= labels
    for metric, matchers in SELECTOR.findall(expr):
        labels = _series_labels(metric, declared)
        assert labels is not None, f"{title}: {metric}"
        for label in MATCHER.findall(matchers):
            assert label in labels | TARGET_LABELS, f"{title}: {metric} has no label {label!r}"
    grouped: set[str] = set()
    for clause in BY_CLAUSE.findall(expr):
        for label in (part.strip() for part in clause.split(",")):
            assert label in available, f"{title}: 'by ({clause})' groups by {label!r}, which no series carries"
            grouped.add(label)
    shown = set(LEGEND.findall(legend))
    assert shown <= (grouped if grouped else available), f"{title}: legend {legend!r} names labels the result lacks"


def test_the_table_variable_and_the_datasource_are_wired() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    (metric,) = METRIC_NAME.findall(variables["table"]["definition"])
    assert "table" in WorkerMetrics().declared[metric]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in panels)
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_prometheus_scrapes_every_compose_service_that_serves_metrics() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    config = yaml.safe_load((ROOT / "deploy" / "compose" / "cdcbridge.yaml").read_text())
    port = config["observability"]["metrics_port"]
    assert config["observability"]["metrics_host"] == "0.0.0.0"  # reachable from the prometheus container
    serving = {name for name, spec in compose.items() if spec.get("command", [None])[0] in ("run", "apply")}
    assert serving == {"bridge-1", "bridge-2", "apply"}

    scrape = yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"]
    targets = {target for job in scrape for group in job["static_configs"] for target in group["targets"]}
    assert targets == {f"{name}:{port}" for name in serving}
    # The dashboard's process panels select job=~"cdcbridge.*".
    assert all(job["job_name"].startswith("cdcbridge") for job in scrape)


def test_grafana_provisioning_points_at_the_stack_prometheus_and_the_dashboard_folder() -> None:
    datasources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert [(d["type"], d["url"], d["isDefault"]) for d in datasources] == [
        ("prometheus", "http://prometheus:9090", True)
    ]
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "cdcbridge.yml").read_text())["providers"]
    assert [p["options"]["path"] for p in providers] == ["/var/lib/grafana/dashboards"]
