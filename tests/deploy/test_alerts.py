"""The chart's alerts fire when they should: each rule of the rendered PrometheusRule is given a
series that fires it and one that does not, and Prometheus's own rule tester (`promtool test
rules`, Debian's prometheus package; ./dev installs it) evaluates them. An alert added to the
chart without a case here fails the test, as does a case whose alert no longer fires."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "tmc"
NS = "tmc"
FULL = "demo-tmc"


def rendered_rule(values: dict[str, Any]) -> dict[str, Any]:
    with helm.Chart.load(str(CHART)) as loaded:
        rendered = loaded.render(
            {"prometheusRule": {"enabled": True}, **values}, name="demo", namespace=NS
        )
    docs = [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]
    rule: dict[str, Any] = next(d for d in docs if d["kind"] == "PrometheusRule")
    return rule


def labels(**kw: str) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in {"namespace": NS, **kw}.items()) + "}"


SCHEDULER_POD = f"{FULL}-plugin-scheduler-7d9f-abcde"
AGENT_POD = f"{FULL}-agent-x2k4p"
NRI_JOB = f"{NS}/{FULL}-nri"
PUBLISHER_POD = f"{FULL}-publisher-5c8b-fghij"

# Per alert: (series that fire it, the labels the alert carries, series that must not fire it).
# Series are promtool's input_series: a selector and values every 1m.
Case = tuple[list[dict[str, str]], dict[str, str], list[dict[str, str]]]


def counter(name: str, per_minute: int, **kw: str) -> dict[str, str]:
    return {"series": name + labels(**kw), "values": f"0+{per_minute}x30"}


def gauge(name: str, value: float, **kw: str) -> dict[str, str]:
    return {"series": name + labels(**kw), "values": f"{value}x30"}


def slow(name: str, **kw: str) -> list[dict[str, str]]:
    """A histogram whose observations all took between 1 and 10 s."""
    return [counter(name, 0, le="1", **kw), counter(name, 10, le="10", **kw),
            counter(name, 10, le="+Inf", **kw)]  # fmt: skip


def fast(name: str, **kw: str) -> list[dict[str, str]]:
    """A histogram whose observations all took under 0.01 s."""
    return [counter(name, 10, le="0.01", **kw), counter(name, 10, le="10", **kw),
            counter(name, 10, le="+Inf", **kw)]  # fmt: skip


EXTENDER = f"{FULL}-extender"
API = f"{FULL}-api"

CASES: dict[str, Case] = {
    "TmcExtenderDown": (
        [gauge("up", 0, service=EXTENDER)],
        {"namespace": NS, "service": EXTENDER},
        [gauge("up", 1, service=EXTENDER)],
    ),
    "TmcExtenderErrors": (
        [
            counter("tmc_extender_requests_total", 10, outcome="error"),
            counter("tmc_extender_requests_total", 10, outcome="ok"),
        ],
        {},
        [
            counter("tmc_extender_requests_total", 0, outcome="error"),
            counter("tmc_extender_requests_total", 10, outcome="ok"),
        ],
    ),
    "TmcExtenderUnauthorised": (
        [counter("tmc_extender_requests_total", 1, outcome="unauthorised")],
        {"namespace": NS, "outcome": "unauthorised"},
        [counter("tmc_extender_requests_total", 0, outcome="unauthorised")],
    ),
    "TmcExtenderSlow": (
        slow("tmc_extender_request_duration_seconds_bucket", verb="bind"),
        {"verb": "bind"},
        fast("tmc_extender_request_duration_seconds_bucket", verb="bind"),
    ),
    "TmcBindingSlow": (
        slow("tmc_extender_bind_phase_seconds_bucket", phase="binding"),
        {},
        fast("tmc_extender_bind_phase_seconds_bucket", phase="binding"),
    ),
    "TmcBindErrors": (
        [
            counter("tmc_placement_binds_total", 5, outcome="error"),
            counter("tmc_placement_binds_total", 5, outcome="bound"),
        ],
        {},
        [
            counter("tmc_placement_binds_total", 0, outcome="error"),
            counter("tmc_placement_binds_total", 5, outcome="bound"),
        ],
    ),
    "TmcFallbackPlacements": (
        [counter("tmc_placement_binds_total", 1, outcome="bound", placement="fallback")],
        {},
        [counter("tmc_placement_binds_total", 1, outcome="bound", placement="recommended")],
    ),
    "TmcSchedulerDown": (
        [gauge("up", 0, pod=SCHEDULER_POD)],
        {},
        [gauge("up", 1, pod=SCHEDULER_POD), gauge("up", 0, pod=f"{FULL}-plugin-scheduler-2")],
    ),
    "TmcNodePluginDown": (
        [gauge("up", 0, job=NRI_JOB, pod=AGENT_POD)],
        {"namespace": NS, "job": NRI_JOB, "pod": AGENT_POD},
        [gauge("up", 1, job=NRI_JOB, pod=AGENT_POD)],
    ),
    "TmcPlacementsUnapplied": (
        [counter("tmc_nri_unapplied_total", 1, pod=AGENT_POD, what="llc-mask")],
        {"pod": AGENT_POD},
        [
            counter("tmc_nri_unapplied_total", 0, pod=AGENT_POD, what="llc-mask"),
            counter("tmc_nri_unapplied_total", 1, pod=AGENT_POD, what="refused"),
        ],
    ),
    "TmcPlacementsRefusedByNode": (
        [counter("tmc_nri_containers_total", 1, pod=AGENT_POD, outcome="refused")],
        {"pod": AGENT_POD},
        [counter("tmc_nri_containers_total", 1, pod=AGENT_POD, outcome="adjusted")],
    ),
    "TmcPublisherDown": (
        [gauge("up", 0, pod=PUBLISHER_POD)],
        {"namespace": NS, "pod": PUBLISHER_POD},
        [gauge("up", 1, pod=PUBLISHER_POD)],
    ),
    "TmcMirrorBehind": (
        [gauge("tmc_mirror_oldest_pending_seconds", 600)],
        {},
        [gauge("tmc_mirror_oldest_pending_seconds", 1)],
    ),
    "TmcPublishedStale": (
        [gauge("tmc_published_oldest_decision_seconds", 10**6)],
        {},
        [gauge("tmc_published_oldest_decision_seconds", 10)],
    ),
    "TmcNamespaceAtBound": (
        [gauge("tmc_publisher_pairs_waiting_for_bound", 2)],
        {},
        [gauge("tmc_publisher_pairs_waiting_for_bound", 0)],
    ),
    "TmcApiDown": (
        [gauge("up", 0, service=API)],
        {"namespace": NS, "service": API},
        [gauge("up", 1, service=API)],
    ),
    "TmcApiErrors": (
        [
            counter("tmc_http_requests_total", 5, status="500"),
            counter("tmc_http_requests_total", 5, status="200"),
        ],
        {},
        [counter("tmc_http_requests_total", 5, status="200")],
    ),
    "TmcRecommendSlow": (
        slow("tmc_http_request_duration_seconds_bucket", route="/recommend"),
        {},
        fast("tmc_http_request_duration_seconds_bucket", route="/recommend"),
    ),
    "TmcUtilizationNotCached": (
        [counter("tmc_recommendations_total", 5, utilization_source="database")],
        {},
        [counter("tmc_recommendations_total", 5, utilization_source="redis")],
    ),
}


def alert_test(rule: dict[str, Any], name: str, series: list[dict[str, str]], fires: bool) -> Any:
    """A promtool test case: `series` for 30 minutes, the alert checked at 25 (past every
    rule's `for`); firing with the case's labels, or not at all."""
    found = next(r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == name)
    exp = []
    if fires:
        _, extra, _ = CASES[name]
        shown = {
            key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: extra[m.group(1)], text)
            for key, text in found.get("annotations", {}).items()
        }
        exp = [{"exp_labels": {**found.get("labels", {}), **extra}, "exp_annotations": shown}]
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [{"eval_time": "25m", "alertname": name, "exp_alerts": exp}],
    }


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is not installed: ./dev installs Debian's prometheus package"
    return found


@pytest.mark.parametrize(
    "values",
    [
        {"scheduler": {"placement": "plugin"}},
        {"scheduler": {"placement": "extender"}},
    ],
    ids=["plugin", "extender"],
)
def test_every_alert_fires_on_its_series_and_only_then(
    values: dict[str, Any], tmp_path: Path
) -> None:
    rule = rendered_rule(values)
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert not set(alerts) - set(CASES), f"alerts without a case here: {set(alerts) - set(CASES)}"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    tests = []
    for name in alerts:
        firing, _, quiet = CASES[name]
        tests.append(alert_test(rule, name, firing, fires=True))
        tests.append(alert_test(rule, name, quiet, fires=False))
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests})
    )
    done = subprocess.run(
        [promtool(), "test", "rules", "tests.yaml"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_node_and_scheduler_alerts_are_rendered() -> None:
    """The conditions that strand or unconfigure pods have an alert on the path in use."""
    plugin = rendered_rule({"scheduler": {"placement": "plugin"}})
    names = {r["alert"] for g in plugin["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert {
        "TmcSchedulerDown",
        "TmcNodePluginDown",
        "TmcPlacementsUnapplied",
        "TmcPlacementsRefusedByNode",
        "TmcPublisherDown",
    } <= names
    extender = rendered_rule({"scheduler": {"placement": "extender"}})
    names = {r["alert"] for g in extender["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert "TmcExtenderDown" in names and "TmcSchedulerDown" not in names
