"""Every series the Grafana dashboard (deploy/grafana/tmc.json) and the chart's PrometheusRule
name is one that something tmc runs exports: the API's, scraped from a real service on
PostgreSQL and Redis (two workers adding up their metrics, as the chart runs it) after traffic
that makes its labelled series appear; the publisher's, scraped from a real
`python -m scheduler.publisher` on a real API server after a pod made it publish; tmc-nri's and
tmc-extender's (whose registry holds the engine's series that tmc-scheduler serves too), listed
by `go test` from the registries those binaries build; and Prometheus's own `up`. Label names used in selectors and
groupings are checked too, against the series' labels and those Prometheus adds to a target."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import httpx
import kubernetes_validate  # type: ignore[import-untyped]
import psycopg
import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.auth import Role
from api.settings import Settings
from model.resources import GIB
from tests.fixtures.service import TOKENS, example
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as plugin_path
from tests.services import PostgresServer, free_port, uvicorn_server, wait_until

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "tmc"
DASHBOARD = CHART / "files" / "grafana" / "tmc.json"
POINTER = ROOT / "deploy" / "grafana" / "tmc.json"
GO_CACHE = Path(os.environ.get("TMC_K8S_CACHE", Path.home() / ".cache" / "tmc-k8s"))

# Labels Prometheus gives every scraped series (the ServiceMonitor's target labels), and `le`.
TARGET_LABELS = frozenset({"namespace", "service", "job", "pod", "instance", "container", "le"})
# PromQL's own words: functions, aggregations, keywords; Grafana's interval variables.
PROMQL_WORDS = frozenset(
    {
        "sum", "rate", "irate", "increase", "histogram_quantile", "max", "min", "avg", "count",
        "by", "without", "and", "or", "unless", "on", "ignoring", "group_left", "group_right",
        "bool", "offset", "clamp_min", "clamp_max", "abs", "topk", "bottomk", "time", "vector",
        "label_values", "delta", "deriv", "avg_over_time", "max_over_time", "min_over_time",
        "absent",
    }
)  # fmt: skip
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Exported:
    """Series names with their label names. `samples`: exact sample names (the API, scraped).
    `families`: Go metric names from registry descriptors, which carry no type, so that a
    family `F` also stands for `F_bucket`, `F_sum` and `F_count`."""

    samples: dict[str, frozenset[str]]
    families: dict[str, frozenset[str]]

    def labels_of(self, name: str) -> frozenset[str] | None:
        if name == "up":
            return frozenset()
        if name in self.samples:
            return self.samples[name]
        if name in self.families:
            return self.families[name]
        for part in HISTOGRAM_PARTS:
            if name.endswith(part) and name.removesuffix(part) in self.families:
                return self.families[name.removesuffix(part)]
        return None


def used_series(expr: str) -> Iterator[tuple[str, frozenset[str]]]:
    """(series, label names it is filtered or grouped by) for each series a PromQL expression (or
    a Grafana `label_values(...)` query) names."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals: regexes, label values
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges, e.g. [$__rate_interval]
    grouped: set[str] = set()
    for clause in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        grouped |= {w for w in re.findall(r"[a-zA-Z_]\w*", clause)}
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    # Grafana's label_values(series, label): the label is grouped by, the series is the query.
    for variable in re.findall(r"label_values\([^,]*,\s*([a-zA-Z_]\w*)\s*\)", expr):
        grouped.add(variable)
    expr = re.sub(r"label_values\(([^,]*),[^)]*\)", r"\1", expr)
    # A selector's label names go with the series it follows.
    for match in re.finditer(r"([a-zA-Z_:][\w:]*)?\s*(\{[^}]*\})?", expr):
        name, selector = match.group(1), match.group(2) or ""
        if not name:
            continue
        rest = expr[match.end() :].lstrip()
        if name in PROMQL_WORDS or (not selector and rest.startswith("(")):
            continue
        labels = set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", selector))
        yield name, frozenset(labels | grouped)


def unexported(where: str, exprs: Iterable[str], exported: Exported) -> list[str]:
    problems = []
    for expr in exprs:
        for name, labels in used_series(expr):
            known = exported.labels_of(name)
            if known is None:
                problems.append(f"{where}: {name} is exported by nothing tmc runs")
            elif not labels <= known | TARGET_LABELS:
                problems.append(f"{where}: {name} has no label {sorted(labels - known)}")
    return problems


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            exprs.append(query["query"])
    return exprs


def alert_expressions(chart: Path) -> list[str]:
    with helm.Chart.load(str(chart)) as loaded:
        rendered = loaded.render(
            {"prometheusRule": {"enabled": True}}, name="demo", namespace="tmc"
        )
    docs = [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    return [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]


def go_metric_names(module: Path, package: str) -> dict[str, frozenset[str]]:
    """The metric names and label names a Go binary's registry holds, written by the package's
    TestListMetricNames; with the control plane's Go toolchain and caches, as ./dev test's Go
    steps use them."""
    go = shutil.which("go") or str(GO_CACHE / "go-venv" / "bin" / "go")
    assert Path(go).exists(), "no Go toolchain: tests/scheduler/controlplane/build.sh installs one"
    handle, name = tempfile.mkstemp(suffix=".jsonl")
    os.close(handle)
    out = Path(name)
    env = {
        **os.environ,
        "GOMODCACHE": str(GO_CACHE / "gomodcache"),
        "GOCACHE": str(GO_CACHE / "gocache"),
        "GOPATH": str(GO_CACHE / "gopath"),
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-buildvcs=false",
        "CGO_ENABLED": "0",
        "TMC_METRIC_NAMES": str(out),
    }
    try:
        subprocess.run(
            [go, "test", "-count=1", "-run", "^TestListMetricNames$", package],
            cwd=module,
            env=env,
            check=True,
            capture_output=True,
            timeout=600,
        )
        lines = out.read_text().splitlines()
    finally:
        out.unlink(missing_ok=True)
    return {
        entry["name"]: frozenset(entry["labels"]) for entry in (json.loads(line) for line in lines)
    }


def api_series_after_traffic(settings: Settings, postgres: PostgresServer, tmp: Path) -> Exported:
    """The API's /metrics as the chart runs it (two workers, PROMETHEUS_MULTIPROC_DIR), after
    recommendations (a stored decision and a repeat), a plan, an error and a stranding node."""
    operator = {"Authorization": f"Bearer {TOKENS[Role.operator]}"}
    agent = {"Authorization": f"Bearer {TOKENS[Role.agent]}"}
    scheduler = {"Authorization": f"Bearer {TOKENS[Role.scheduler]}"}
    assert settings.redis_url is not None
    env = {
        "TMC_ENVIRONMENT": "test",
        "TMC_DATABASE_URL": settings.database_url,
        "TMC_REDIS_URL": settings.redis_url,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp),
    }
    machine = {"cpus": 8, "dram_bytes": 16 * GIB, "slow_bytes": 64 * GIB, "llc_ways": 16}
    with (
        uvicorn_server(env, workers=2, spread="reuseport") as base,
        httpx.Client(base_url=base, timeout=60) as http,
    ):
        http.post(
            "/v1/profiles",
            content=example("graph500"),
            headers={**agent, "Content-Type": "application/json"},
        ).raise_for_status()
        http.put(
            "/v1/cluster/host-kinds", headers=operator, json={"name": "k", "machine": machine}
        ).raise_for_status()
        http.put(
            "/v1/cluster/nodes", headers=operator, json={"name": "n", "host_kind": "k", **machine}
        ).raise_for_status()
        with psycopg.connect(postgres.dsn()) as conn:  # every CPU and most DRAM: stranding
            conn.execute(
                "INSERT INTO reservations (id, pod_uid, namespace, pod_name, node_name, vcpus,"
                " dram_bytes, slow_bytes, slow_from_pool, llc_mask, created_at) VALUES"
                f" ('r1', 'u1', 'ns', 'p1', 'n', 8, {15 * GIB}, 0, false, 1, now())"
            )
        for _ in range(4):  # over both workers: a stored decision, then repeats
            got = http.post(
                "/recommend",
                headers=scheduler,
                json={"workload": "graph500", "objective": "cheapest"},
            )
            assert got.status_code == 200, got.text
        plan = {
            "classes": [
                {
                    "name": "a",
                    "arrivals_per_hour": 60,
                    "options": [{"vcpus": 1, "dram_bytes": 8 * GIB, "slow_bytes": 0,
                                 "llc_ways": 2, "seconds": 3600, "cost": 1.0}],
                }
            ],
            "kinds": [{"name": "k", "cpus": 12, "dram_bytes": 24 * GIB,
                       "local_slow_bytes": 128 * GIB, "llc_ways": 48}],
            "fill": 1.0,
        }  # fmt: skip
        assert http.post("/v1/planner/capacity", headers=operator, json=plan).status_code == 200
        assert http.get("/v1/workloads").status_code == 401
        text = http.get("/metrics").text
    return Exported(scraped_samples(text), {})


def scraped_samples(text: str) -> dict[str, frozenset[str]]:
    samples: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, set()).update(sample.labels)
    return {k: frozenset(v) for k, v in samples.items()}


# The publisher's own series (scheduler/metrics.py): what the publisher's scrape must hold.
PUBLISHER_PREFIXES = ("tmc_published_", "tmc_publisher_", "tmc_mirror_", "tmc_pods_placed")


def publisher_series(postgres: PostgresServer) -> dict[str, frozenset[str]]:
    """The publisher's /metrics, scraped from `python -m scheduler.publisher` with the chart's
    RBAC on a real API server and the test's PostgreSQL, once a pending pod made it publish a
    pair (a workload with no profile: a fallback object, with its reason)."""
    plane = plugin_path.start_plugin_plane()
    try:
        proc = plugin_path.PublisherProcess(plane, postgres.url, metrics_port=free_port())
        proc.start()
        try:
            proc.wait_ready()
            api = c.core(plane)
            ns = c.new_namespace(api, "metrics")
            c.create_pods(api, [c.opted_in_pod("p", "no-profile-here")], ns)
            # Published (its object, then its status written, then held): the fallback counted.
            wait_until(
                lambda: "tmc_published_fallbacks" in scraped_samples(proc.metrics()),
                30,
                "the pair published as a fallback",
            )
            assert ("no-profile-here", "cheapest") in plugin_path.recommendations(plane)
            return scraped_samples(proc.metrics())
        finally:
            proc.stop()
    finally:
        plane.close()


def everything_exported(settings: Settings, postgres: PostgresServer, tmp: Path) -> Exported:
    api = api_series_after_traffic(settings, postgres, tmp)
    publisher = publisher_series(postgres)
    assert "tmc_published_recommendations" in publisher and "tmc_mirror_lag_seconds_bucket" in (
        publisher
    )
    # The publisher tunes its collection once its first listing is in (api.collection).
    assert publisher.get("tmc_gc_pause_seconds_count") == frozenset({"generation"})
    nri = go_metric_names(ROOT / "node" / "nri", "./internal/tmcnri")
    extender = go_metric_names(ROOT / "scheduler" / "plugin", "./pkg/tmc")
    assert "tmc_nri_containers_total" in nri and "tmc_extender_requests_total" in extender
    assert "tmc_placement_binds_total" in extender
    samples = dict(api.samples)
    for name, labels in publisher.items():  # both log decisions: tmc_decisions_logged_total
        samples[name] = samples.get(name, frozenset()) | labels
    return Exported(samples, {**nri, **extender})


@pytest.fixture
def exported(
    client: TestClient, settings: Settings, postgres: PostgresServer, tmp_path: Path
) -> Exported:
    # `client` seeds the API tokens the traffic uses.
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    return everything_exported(settings, postgres, metrics)


def test_dashboard_and_alerts_name_only_exported_series(exported: Exported) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries, alerts = dashboard_queries(dashboard), alert_expressions(CHART)
    assert len(queries) >= 20 and len(alerts) >= 8
    assert unexported("dashboard", queries, exported) == []
    assert unexported("alerts", alerts, exported) == []
    # What an operator watches is on the dashboard: every family tmc exports for it.
    on_dashboard = {name for q in queries for name, _ in used_series(q)}
    for wanted in (
        "tmc_cluster_utilization_ratio", "tmc_nodes", "tmc_nodes_stranding",
        "tmc_nodes_stranding_by_resource", "tmc_profiles_pending_fit",
        "tmc_decisions_logged_total", "tmc_http_requests_total",
        "tmc_http_request_duration_seconds_bucket", "tmc_plans_total",
        "tmc_extender_requests_total", "tmc_extender_request_duration_seconds_bucket",
        "tmc_extender_bind_phase_seconds_bucket", "tmc_nri_containers_total",
        "tmc_nri_unapplied_total", "tmc_nri_create_container_seconds_bucket",
        "tmc_placement_binds_total", "tmc_placement_bind_seconds_bucket",
        "tmc_published_recommendations", "tmc_published_fallbacks",
        "tmc_published_oldest_decision_seconds", "tmc_publisher_decisions_total",
        "tmc_mirror_oldest_pending_seconds", "tmc_mirror_lag_seconds_bucket",
        "tmc_mirror_pending_changes", "tmc_pods_placed_fallback",
        "tmc_publisher_pairs_waiting_for_bound", "tmc_publisher_pairs_refused_total",
    ):  # fmt: skip
        assert wanted in on_dashboard, wanted


def test_a_series_nobody_exports_is_caught(exported: Exported, tmp_path: Path) -> None:
    """Planted in temp copies of the dashboard and of the chart: each check fails."""
    dashboard = json.loads(DASHBOARD.read_text())
    dashboard["panels"][1]["targets"][0]["expr"] = 'sum(rate(tmc_pods_misplaced_total{a="b"}[5m]))'
    assert unexported("dashboard", dashboard_queries(dashboard), exported) == [
        "dashboard: tmc_pods_misplaced_total is exported by nothing tmc runs"
    ]
    # A real series with a label it does not have, and a histogram part of a counter.
    dashboard = json.loads(DASHBOARD.read_text())
    dashboard["panels"][1]["targets"][0]["expr"] = "sum by (verb) (tmc_nri_containers_total)"
    assert unexported("dashboard", dashboard_queries(dashboard), exported) == [
        "dashboard: tmc_nri_containers_total has no label ['verb']"
    ]
    dashboard["panels"][1]["targets"][0]["expr"] = "rate(tmc_http_requests_total_bucket[5m])"
    assert unexported("dashboard", dashboard_queries(dashboard), exported) != []
    # The publisher's: a label its series lacks, and its series once the running publisher's
    # scrape is taken away (they are known from nothing else).
    dashboard["panels"][1]["targets"][0]["expr"] = 'max(tmc_mirror_pending_changes{state="x"})'
    assert unexported("dashboard", dashboard_queries(dashboard), exported) == [
        "dashboard: tmc_mirror_pending_changes has no label ['state']"
    ]
    without = Exported(
        {k: v for k, v in exported.samples.items() if not k.startswith(PUBLISHER_PREFIXES)},
        exported.families,
    )
    missing = unexported("dashboard", dashboard_queries(json.loads(DASHBOARD.read_text())), without)
    assert "dashboard: tmc_mirror_oldest_pending_seconds is exported by nothing tmc runs" in missing
    assert "alerts: tmc_published_oldest_decision_seconds is exported by nothing tmc runs" in (
        unexported("alerts", alert_expressions(CHART), without)
    )

    chart = tmp_path / "tmc"
    shutil.copytree(CHART, chart)
    rule = chart / "templates" / "prometheusrule.yaml"
    text = rule.read_text()
    planted = text.replace(
        'expr: up{namespace="{{ $ns }}", service="{{ $full }}-api"} == 0',
        'expr: max(tmc_api_up_ratio{namespace="{{ $ns }}"}) == 0',
    )
    assert planted != text
    rule.write_text(planted)
    assert unexported("alerts", alert_expressions(chart), exported) == [
        "alerts: tmc_api_up_ratio is exported by nothing tmc runs"
    ]


def test_expressions_are_parsed_into_their_series() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, verb) (rate(tmc_extender_request_duration_seconds"
        '_bucket{namespace=~"$namespace", verb!="x"}[$__rate_interval]))) > 1 and on (pod) up'
    )
    assert sorted(used_series(expr)) == [
        (
            "tmc_extender_request_duration_seconds_bucket",
            frozenset({"le", "verb", "namespace", "pod"}),
        ),
        ("up", frozenset({"le", "verb", "pod"})),
    ]
    assert list(used_series("label_values(tmc_http_requests_total, namespace)")) == [
        ("tmc_http_requests_total", frozenset({"namespace"}))
    ]


def test_the_chart_provisions_the_one_dashboard_for_grafanas_sidecar() -> None:
    assert POINTER.is_symlink() and POINTER.resolve() == DASHBOARD.resolve()
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "tmc-overview"
    sources = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", [])}
    assert sources == {"${datasource}"}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}  # the grid's 24 columns, each panel its own cells
    for panel in dashboard["panels"]:
        at = panel["gridPos"]
        assert at["x"] + at["w"] <= 24, panel["title"]
        for x in range(at["x"], at["x"] + at["w"]):
            for y in range(at["y"], at["y"] + at["h"]):
                assert (x, y) not in cells, (panel["title"], cells[x, y])
                cells[x, y] = panel["title"]

    def configmaps(values: dict[str, Any]) -> list[dict[str, Any]]:
        with helm.Chart.load(str(CHART)) as chart:
            rendered = chart.render(values, name="demo", namespace="tmc")
        docs = [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]
        return [d for d in docs if d["metadata"]["name"] == "demo-tmc-grafana-dashboard"]

    assert configmaps({}) == []
    (default,) = configmaps({"grafana": {"dashboard": {"enabled": True}}})
    assert default["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert default["metadata"]["namespace"] == "tmc"
    assert json.loads(default["data"]["tmc.json"]) == dashboard
    (custom,) = configmaps(
        {
            "grafana": {
                "dashboard": {
                    "enabled": True,
                    "label": "dashboards.example/grafana",
                    "labelValue": "tmc",
                    "namespace": "monitoring",
                    "annotations": {"grafana_folder": "tmc"},
                }
            }
        }
    )
    assert custom["metadata"]["labels"]["dashboards.example/grafana"] == "tmc"
    assert custom["metadata"]["namespace"] == "monitoring"
    assert custom["metadata"]["annotations"] == {"grafana_folder": "tmc"}
    for configmap in (default, custom):
        kubernetes_validate.validate(configmap, "1.36.0", strict=True)
