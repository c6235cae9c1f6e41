"""deploy/helm/tmc: `helm lint` and `helm template` through Helm's own Go SDK (the helm-python-sdk
wheel), then every rendered manifest checked against the Kubernetes OpenAPI schema
(kubernetes-validate, strict: unknown fields are errors), and the scheduler configuration's
extender block against kube-scheduler's v1 Extender type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "tmc"
K8S_VERSION = "1.36.0"
# k8s.io/kube-scheduler/config/v1 Extender, ExtenderManagedResource, ExtenderTLSConfig.
EXTENDER_FIELDS = {
    "urlPrefix",
    "filterVerb",
    "preemptVerb",
    "prioritizeVerb",
    "weight",
    "bindVerb",
    "enableHTTPS",
    "tlsConfig",
    "httpTimeout",
    "nodeCacheCapable",
    "managedResources",
    "ignorable",
}


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values or {}, name="demo", namespace="tmc")
    return [doc for text in rendered.values() for doc in yaml.safe_load_all(text) if doc]


def test_helm_lint_finds_no_errors() -> None:
    result = helm.lint(str(CHART))
    assert result["errors"] == []
    assert all(m["severity"] <= 1 for m in result["messages"]), result["messages"]  # info only


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"agent": {"enabled": False}, "serviceMonitor": {"enabled": False}},
        {"existingSecret": "db"},
    ],
)
def test_rendered_manifests_match_the_kubernetes_schema(values: dict[str, Any]) -> None:
    docs = render(values)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ClusterRole", "ConfigMap"} <= kinds
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: not in the core schema (checked below)
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_every_component_is_there() -> None:
    docs = render()
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for component in ("api", "worker", "beat", "extender", "scheduler"):
        assert ("Deployment", f"demo-tmc-{component}") in names
    assert ("DaemonSet", "demo-tmc-agent") in names
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    role = next(
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "demo-tmc-extender"
    )
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert {"nodes", "pods", "pods/binding"} <= resources


def test_scheduler_configuration_calls_the_extender_with_known_fields() -> None:
    config_map = next(d for d in render() if d["kind"] == "ConfigMap")
    config = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["profiles"] == [{"schedulerName": "tmc-scheduler"}]
    (extender,) = config["extenders"]
    assert set(extender) <= EXTENDER_FIELDS
    assert extender["urlPrefix"] == "https://demo-tmc-extender.tmc.svc:8888/scheduler"
    # Mutual TLS by default: the scheduler presents the chart's client certificate.
    assert extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {
        "certFile": "/etc/tmc/extender-tls/client.crt",
        "keyFile": "/etc/tmc/extender-tls/client.key",
        "caFile": "/etc/tmc/extender-tls/ca.crt",
    }
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert extender["managedResources"] == [{"name": "tmc.dev/tiered", "ignoredByScheduler": True}]
    assert extender["nodeCacheCapable"] is True and extender["ignorable"] is False


def test_authentication_is_on_by_default() -> None:
    """The extender's Secret (a private CA, the serving and the client certificate), the
    extender reading it, the scheduler mounting its half, and a NetworkPolicy."""
    docs = render()
    secret = next(
        d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-extender-tls")
    )
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key", "client.crt", "client.key"}
    extender = next(
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "demo-tmc-extender"
    )
    env = {
        e["name"]: e.get("value")
        for e in extender["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TMC_EXTENDER_CLIENT_CA_FILE"] == "/etc/tmc/tls/ca.crt"
    assert env["TMC_EXTENDER_CLIENT_NAMES"] == '["tmc-scheduler"]'
    assert "TMC_EXTENDER_INSECURE_HTTP" not in env
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    (rule,) = policy["spec"]["ingress"]
    assert (
        rule["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "scheduler"
    )
    insecure = render({"extender": {"tls": {"enabled": False}}})
    extender = next(
        d
        for d in insecure
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "demo-tmc-extender"
    )
    env = {
        e["name"]: e.get("value")
        for e in extender["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TMC_EXTENDER_INSECURE_HTTP"] == "true"  # said out loud, never silent


def test_every_extender_field_is_explained() -> None:
    """Each key of the extender block has a comment on the lines just above it."""
    lines = (CHART / "files" / "scheduler-config.yaml").read_text().splitlines()
    start = lines.index("extenders:")
    for i, line in enumerate(lines[start + 1 :], start + 1):
        key = line.strip().lstrip("- ").split(":")[0]
        if key in EXTENDER_FIELDS and key != "urlPrefix":
            assert lines[i - 1].strip().startswith("#"), f"{key} has no comment"


def test_the_docs_show_the_tested_example_pod() -> None:
    """docs/scheduler.md shows deploy/examples/tiered-pod.yaml verbatim (the e2e test creates it)."""
    root = CHART.parents[2]
    manifest = (root / "deploy" / "examples" / "tiered-pod.yaml").read_text()
    assert f"```yaml\n{manifest}```" in (root / "docs" / "scheduler.md").read_text()
