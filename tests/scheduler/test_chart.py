"""deploy/helm/tmc: `helm lint` and `helm template` through Helm's own Go SDK (the helm-python-sdk
wheel), then every rendered manifest checked against the Kubernetes OpenAPI schema
(kubernetes-validate, strict: unknown fields are errors), and the scheduler configuration's
extender block against kube-scheduler's v1 Extender type."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from prometheus_client import CollectorRegistry

from api.app import tune_worker
from api.deps import Metrics
from scheduler.metrics import (
    MirrorFigures,
    PublishedFigures,
    PublisherMetrics,
    mirror_families,
    published_families,
)
from scheduler.node_reports import REPORTS_NAMESPACE
from scheduler.settings import FeederSettings
from tests.deploy.test_metrics_exported import go_metric_names

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "tmc"
# The label that makes a pod one of tmc's, as every reader of a placement reads it.
TIERED_PODS = json.loads((ROOT / "scheduler" / "conformance" / "tiered_pods.json").read_text())
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


# The extender's path, chosen (the default is the plugin).
EXTENDER: dict[str, Any] = {"scheduler": {"placement": "extender"}}


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
        {"agent": {"enabled": False}},
        {"existingSecret": "db", "bootstrap": {"existingSecret": "mine"}},
        {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
        {"scheduler": {"placement": "extender"}},
        {"dra": {"enabled": True}},
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


def test_placement_renders_one_scheduler_for_the_opted_in_pods() -> None:
    """extender: kube-scheduler with tmc-extender beside it; plugin: tmc-scheduler; the
    publisher in both (the recommendations both read, and the ledger's mirror). Never two
    schedulers answering to the same schedulerName."""
    deployments = {
        placement: {
            d["metadata"]["name"]
            for d in render({"scheduler": {"placement": placement}})
            if d["kind"] == "Deployment"
        }
        for placement in ("extender", "plugin")
    }
    assert {"demo-tmc-scheduler", "demo-tmc-publisher"} <= deployments["extender"]
    assert "demo-tmc-plugin-scheduler" not in deployments["extender"]
    assert {"demo-tmc-plugin-scheduler", "demo-tmc-publisher"} <= deployments["plugin"]
    assert "demo-tmc-scheduler" not in deployments["plugin"]
    scheduler = by_name(render(EXTENDER), "Deployment", "demo-tmc-scheduler")
    containers = {c["name"]: c for c in scheduler["spec"]["template"]["spec"]["containers"]}
    assert containers["extender"]["image"] == "tmc-extender:v1.36.3"
    assert containers["extender"]["command"][0] == "tmc-extender"
    # The extenders' /metrics, through the Service the ServiceMonitor selects.
    service = by_name(render(EXTENDER), "Service", "demo-tmc-extender")
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "scheduler"
    assert service["metadata"]["labels"]["app.kubernetes.io/component"] == "extender"
    plugin = render({"scheduler": {"placement": "plugin"}})
    config = next(
        yaml.safe_load(d["data"]["scheduler-config.yaml"])
        for d in plugin
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "demo-tmc-plugin"
    )
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "tmc-scheduler"
    assert profile["plugins"]["multiPoint"] == {
        "disabled": [{"name": "NodeResourcesFit"}],
        "enabled": [
            {"name": "TmcNodeResourcesFit", "weight": 1},
            {"name": "TmcPlacement", "weight": 1},
        ],
    }
    # The packing score alone ranks nodes by their resources, unless the in-tree ones are asked.
    spreading = [{"name": "TmcNodeResourcesFit"}, {"name": "NodeResourcesBalancedAllocation"}]
    for point in ("preScore", "score"):
        assert profile["plugins"][point] == {"disabled": spreading}
    with_in_tree = render(
        {"scheduler": {"placement": "plugin"}, "plugin": {"inTreeResourceScores": True}}
    )
    config = next(
        yaml.safe_load(d["data"]["scheduler-config.yaml"])
        for d in with_in_tree
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "demo-tmc-plugin"
    )
    assert not {"preScore", "score"} & set(config["profiles"][0]["plugins"])
    with pytest.raises(Exception, match=r"scheduler\.placement must be extender or plugin"):
        render({"scheduler": {"placement": "both"}})


def test_every_component_is_there() -> None:
    """The default places with the plugin (tmc-scheduler and the publisher); the extender's
    path is there when chosen."""
    names = {(d["kind"], d["metadata"]["name"]) for d in render()}
    for component in ("api", "worker", "beat", "plugin-scheduler", "publisher"):
        assert ("Deployment", f"demo-tmc-{component}") in names
    docs = render(EXTENDER)
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for component in ("api", "worker", "beat", "scheduler", "publisher"):
        assert ("Deployment", f"demo-tmc-{component}") in names
    assert ("DaemonSet", "demo-tmc-agent") in names
    role = next(
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "demo-tmc-extender"
    )
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert {"nodes", "pods", "pods/binding"} <= resources


def test_scheduler_configuration_calls_the_extender_with_known_fields() -> None:
    config_map = next(d for d in render(EXTENDER) if d["kind"] == "ConfigMap")
    config = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    # The extender's packing score alone ranks nodes by their resources, unless asked otherwise.
    spreading = [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesBalancedAllocation"}]
    off = {"disabled": spreading}
    assert config["profiles"] == [
        {"schedulerName": "tmc-scheduler", "plugins": {"preScore": off, "score": off}}
    ]
    in_tree = {"scheduler": {"placement": "extender", "inTreeResourceScores": True}}
    config_map = next(d for d in render(in_tree) if d["kind"] == "ConfigMap")
    in_tree_config = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])
    assert in_tree_config["profiles"] == [{"schedulerName": "tmc-scheduler"}]
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
    """The extender's Secret (a private CA, the serving and the client certificate),
    tmc-extender checking callers against it (the scheduler's CN only), and the scheduler
    mounting its half; plain HTTP only when said out loud."""
    docs = render(EXTENDER)
    secret = next(
        d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-extender-tls")
    )
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key", "client.crt", "client.key"}

    command = extender_command(docs)
    assert "--client-ca-file=/etc/tmc/tls/ca.crt" in command
    assert "--client-names=tmc-scheduler" in command
    assert "--insecure-http" not in command
    insecure = extender_command(render({**EXTENDER, "extender": {"tls": {"enabled": False}}}))
    assert "--insecure-http" in insecure  # said out loud, never silent
    assert not [c for c in insecure if c.startswith("--client-ca-file")]


def extender_command(docs: list[dict[str, Any]]) -> list[str]:
    scheduler = by_name(docs, "Deployment", "demo-tmc-scheduler")
    (container,) = [
        c for c in scheduler["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    ]
    command: list[str] = container["command"]
    return command


def test_the_extenders_binds_are_fenced_by_the_placement_lease_with_leader_election() -> None:
    """With leader election, each extender needs the release's placement lease to bind, with
    the timings the operator sets; without it (one replica), no lease."""
    lease = {"leaseDurationSeconds": 20, "renewDeadlineSeconds": 12, "retryPeriodSeconds": 3}
    command = extender_command(
        render({"scheduler": {**EXTENDER["scheduler"], "placementLease": lease}})
    )
    assert "--placement-lease=tmc/tmc-scheduler-placement" in command
    for flag, value in (("duration", "20s"), ("renew-deadline", "12s"), ("retry-period", "3s")):
        assert f"--placement-{'lease-' if flag == 'duration' else ''}{flag}={value}" in command
    alone = extender_command(render({"scheduler": {**EXTENDER["scheduler"], "leaderElect": False}}))
    assert not [c for c in alone if c.startswith("--placement-lease")]


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


def by_name(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_default_install_needs_no_prometheus_operator() -> None:
    """The Prometheus Operator's kinds are opt-in: a cluster without its CRDs installs the chart."""
    assert not [d for d in render() if d["apiVersion"].startswith("monitoring.coreos.com/")]
    docs = render({"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}})
    kinds = sorted(d["kind"] for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/"))
    assert kinds == [
        "PodMonitor", "PodMonitor", "PodMonitor", "PrometheusRule", "ServiceMonitor",
        "ServiceMonitor",
    ]  # fmt: skip
    # The publisher's port, and tmc-scheduler's HTTPS port with the metrics reader's token.
    publisher = by_name(docs, "PodMonitor", "demo-tmc-publisher")
    assert publisher["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    deployment = by_name(docs, "Deployment", "demo-tmc-publisher")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9466}]
    assert env_of(container)["TMC_PUBLISHER_METRICS_PORT"] == "9466"
    (plugin,) = by_name(docs, "PodMonitor", "demo-tmc-plugin-scheduler")["spec"][
        "podMetricsEndpoints"
    ]
    assert plugin["port"] == "https" and plugin["scheme"] == "https"
    assert plugin["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "demo-tmc-metrics-reader-token", "key": "token"},
    }
    token = by_name(docs, "Secret", "demo-tmc-metrics-reader-token")
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {
        "kubernetes.io/service-account.name": "demo-tmc-metrics-reader"
    }
    reader = by_name(docs, "ClusterRole", "demo-tmc-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    scheduler = by_name(docs, "Deployment", "demo-tmc-plugin-scheduler")
    (container,) = scheduler["spec"]["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "https", "containerPort": 10259}]
    # On the extender's path its /metrics carries the engine's series: no tmc-scheduler to scrape.
    on_extender = render(
        {"serviceMonitor": {"enabled": True}, "scheduler": {"placement": "extender"}}
    )
    names = {d["metadata"]["name"] for d in on_extender if d["kind"] == "PodMonitor"}
    assert names == {"demo-tmc-nri", "demo-tmc-publisher"}
    extender = by_name(docs, "ServiceMonitor", "demo-tmc-extender")
    (endpoint,) = extender["spec"]["endpoints"]
    # The extender serves TLS with the chart's CA; the API plain HTTP.
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {
        "name": "demo-tmc-extender-tls",
        "key": "ca.crt",
    }
    assert endpoint["tlsConfig"]["serverName"] == "demo-tmc-extender.tmc.svc"
    api = by_name(docs, "ServiceMonitor", "demo-tmc-api")
    assert api["spec"]["endpoints"][0]["path"] == "/metrics"
    assert "scheme" not in api["spec"]["endpoints"][0]


def test_the_bound_on_published_pairs_per_namespace_is_checked_and_reaches_the_publisher() -> None:
    def publisher_env(values: dict[str, Any]) -> dict[str, Any]:
        deployment = by_name(render(values), "Deployment", "demo-tmc-publisher")
        return env_of(deployment["spec"]["template"]["spec"]["containers"][0])

    assert publisher_env({})["TMC_PUBLISHER_MAX_PAIRS_PER_NAMESPACE"] == "100"
    mine = publisher_env({"plugin": {"maxPairsPerNamespace": 7}})
    assert mine["TMC_PUBLISHER_MAX_PAIRS_PER_NAMESPACE"] == "7"
    for bad in (0, -1, 2.5, 100_001, "ten", None):
        with pytest.raises(Exception, match=r"plugin\.maxPairsPerNamespace must be a whole number"):
            render({"plugin": {"maxPairsPerNamespace": bad}})
    # The publisher tells waiting pods why, and relays the nodes' reports: it may create, list
    # and watch Events (never change or delete one), and read pods (never write one).
    role = by_name(render(), "ClusterRole", "demo-tmc-publisher")
    rules = {r["resources"][0]: r["verbs"] for r in role["rules"] if r["apiGroups"] == [""]}
    assert rules["events"] == ["create", "list", "watch"]
    assert rules["pods"] == ["get", "list", "watch"]


def test_first_tokens_come_from_random_secrets_the_api_stores() -> None:
    """The operator's and the agents' tokens: random Secrets (a fresh render, fresh values; the
    install test checks they survive an upgrade), read by the API's bootstrap init container;
    the agent mounts its token as a file and names the file and the API in its environment."""
    first, second = render(), render()
    operator = by_name(first, "Secret", "demo-tmc-bootstrap")["data"]["operator-token"]
    agent_token = by_name(first, "Secret", "demo-tmc-agent-token")["data"]["token"]
    assert operator != by_name(second, "Secret", "demo-tmc-bootstrap")["data"]["operator-token"]
    assert operator != agent_token
    for encoded in (operator, agent_token):
        token = base64.b64decode(encoded).decode()
        assert token.startswith("tmc_") and len(token) == 47 and token[4:].isalnum()

    api = by_name(first, "Deployment", "demo-tmc-api")["spec"]["template"]["spec"]
    init = {c["name"]: c for c in api["initContainers"]}
    assert list(init) == ["migrate", "bootstrap"]  # tokens after the schema
    bootstrap = init["bootstrap"]
    assert bootstrap["command"][:3] == ["python", "-m", "api.bootstrap"]
    specs = [a for a in bootstrap["command"][3:] if a != "--token"]
    assert specs == [
        "operator=bootstrap-operator:/etc/tmc/bootstrap/operator-token",
        "agent=node-agent:/etc/tmc/agent/token",
    ]
    mounts = {m["name"]: m["mountPath"] for m in bootstrap["volumeMounts"]}
    volumes = {v["name"]: v for v in api["volumes"]}
    assert volumes[next(n for n, p in mounts.items() if p == "/etc/tmc/bootstrap")]["secret"] == {
        "secretName": "demo-tmc-bootstrap",
        "items": [{"key": "operator-token", "path": "operator-token"}],
    }
    assert volumes[next(n for n, p in mounts.items() if p == "/etc/tmc/agent")]["secret"] == {
        "secretName": "demo-tmc-agent-token",
        "items": [{"key": "token", "path": "token"}],
    }
    # The dev-only variable the service refuses in production is never set.
    assert "TMC_BOOTSTRAP_OPERATOR_TOKEN" not in env_of(bootstrap)

    agent = by_name(first, "DaemonSet", "demo-tmc-agent")["spec"]["template"]["spec"]
    container = next(c for c in agent["containers"] if c["name"] == "agent")
    env = env_of(container)
    assert env["TMC_AGENT_SERVICE_URL"] == "http://demo-tmc-api.tmc.svc"
    token_file = Path(env["TMC_AGENT_TOKEN_FILE"])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(token_file.parent))
    volume = next(v for v in agent["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "demo-tmc-agent-token"
    assert volume["secret"]["items"] == [{"key": "token", "path": token_file.name}]

    # Secrets of one's own replace the generated ones.
    own = render(
        {"bootstrap": {"existingSecret": "ops"}, "agent": {"token": {"existingSecret": "ag"}}}
    )
    assert not [d for d in own if d["kind"] == "Secret" and "token" in d["metadata"]["name"]]
    assert not [
        d for d in own if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-bootstrap")
    ]
    api = by_name(own, "Deployment", "demo-tmc-api")["spec"]["template"]["spec"]
    assert {v["name"]: v["secret"]["secretName"] for v in api["volumes"] if "secret" in v} == {
        "bootstrap-token": "ops",
        "agent-token": "ag",
    }


def test_components_without_kubernetes_calls_get_no_api_token() -> None:
    """The worker and beat call no Kubernetes API; the API calls it only to review the agents'
    tokens (TokenReview), so it gets its token, and that one right, only when agents run."""
    for agents in (True, False):
        docs = render({"agent": {"enabled": agents}})
        for component in ("api", "worker", "beat"):
            spec = by_name(docs, "Deployment", f"demo-tmc-{component}")["spec"]["template"]
            spec = spec["spec"]
            assert spec["serviceAccountName"] == "demo-tmc-api"
            assert spec["automountServiceAccountToken"] is (agents and component == "api")
        account = by_name(docs, "ServiceAccount", "demo-tmc-api")
        assert account["automountServiceAccountToken"] is False
        roles = [
            d
            for d in docs
            if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "demo-tmc-api"
        ]
        if not agents:
            assert roles == []
            continue
        assert roles[0]["rules"] == [
            {
                "apiGroups": ["authentication.k8s.io"],
                "resources": ["tokenreviews"],
                "verbs": ["create"],
            }
        ]
        binding = by_name(docs, "ClusterRoleBinding", "demo-tmc-api")
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "demo-tmc-api", "namespace": "tmc"}
        ]


def test_agents_prove_their_node_with_a_projected_token_the_api_reviews() -> None:
    """Each agent pod gets a service-account token for the API's audience, short-lived (the
    kubelet rotates it), at the path the agent reads; the API is told the agents' account and
    that audience."""
    docs = render({"agent": {"identity": {"audience": "tmc.example", "expirationSeconds": 900}}})
    agent = by_name(docs, "DaemonSet", "demo-tmc-agent")["spec"]["template"]["spec"]
    container = next(c for c in agent["containers"] if c["name"] == "agent")
    projected = Path(env_of(container)["TMC_AGENT_PROJECTED_TOKEN_FILE"])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(projected.parent))
    volume = next(v for v in agent["volumes"] if v["name"] == mount["name"])
    assert volume["projected"]["sources"] == [
        {
            "serviceAccountToken": {
                "path": projected.name,
                "audience": "tmc.example",
                "expirationSeconds": 900,
            }
        }
    ]
    assert agent["serviceAccountName"] == "demo-tmc-agent"
    api = by_name(docs, "Deployment", "demo-tmc-api")["spec"]["template"]["spec"]
    env = env_of(api["containers"][0])
    assert env["TMC_KUBERNETES_AGENT_ACCOUNT"] == "system:serviceaccount:tmc:demo-tmc-agent"
    assert env["TMC_KUBERNETES_TOKEN_AUDIENCE"] == "tmc.example"
    # The kubelet asks for 10 minutes at least; a day at most here (a stolen token's life).
    for bad in (60, 100_000, "soon"):
        with pytest.raises(Exception, match="expirationSeconds"):
            render({"agent": {"identity": {"expirationSeconds": bad}}})


def test_the_image_is_the_one_the_build_makes() -> None:
    """`./dev image` tags tmc:<appVersion>; a digest pins it exactly."""
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    images = {
        c["image"]
        for d in render({"scheduler": {"enabled": False}})
        if d["kind"] in ("Deployment", "DaemonSet")
        for c in d["spec"]["template"]["spec"].get("initContainers", [])
        + d["spec"]["template"]["spec"]["containers"]
    }
    # The node DaemonSet's NRI plugin has its own image (deploy/image/nri-image.sh).
    assert images == {f"tmc:{app_version}", f"tmc-nri:{app_version}"}
    digest = "sha256:" + "ab" * 32
    pinned = render({"image": {"repository": "registry.example/tmc", "digest": digest}})
    api = by_name(pinned, "Deployment", "demo-tmc-api")["spec"]["template"]["spec"]
    assert api["containers"][0]["image"] == f"registry.example/tmc@{digest}"


# PromQL's own words: functions, aggregations, keywords, and Prometheus's `up` (set per target).
PROMQL_WORDS = {
    "sum", "rate", "increase", "histogram_quantile", "by", "without", "and", "or", "unless",
    "on", "ignoring", "max", "min", "avg", "count", "up", "absent",
}  # fmt: skip


def go_extender_metrics() -> dict[str, set[str]]:
    """The series tmc-extender's registry holds (the engine's among them), with their label
    names, as the Go package's TestListMetricNames lists them from the registry itself."""
    listed = go_metric_names(ROOT / "scheduler" / "plugin", "./pkg/tmc")
    found: dict[str, set[str]] = {}
    for name, labels in listed.items():
        # A registry's descriptors do not say which are histograms: each name may be read as
        # one, as a scrape shows it.
        found[name] = set(labels)
        found[name + "_bucket"] = set(labels) | {"le"}
        found[name + "_sum"] = found[name + "_count"] = set(labels)
    return found


class _PublisherGauges:
    """The publisher's gauges as a scrape yields them, for a publisher holding nothing."""

    def collect(self) -> Any:
        yield from published_families(PublishedFigures({}, {}, 0.0, 0, 0, 0, 100))
        yield from mirror_families(MirrorFigures(0, 0.0, True, 0))


def publisher_registry() -> CollectorRegistry:
    metrics = PublisherMetrics()
    metrics.registry.register(_PublisherGauges())
    return metrics.registry


def exported_metrics() -> dict[str, set[str]]:
    """Every metric the API's and the extender's /metrics expose, with its label names, taken
    from the very registries the code builds (the Go extender's from its declarations)."""
    registries = [Metrics().registry, publisher_registry()]
    api_process = CollectorRegistry()
    undo = tune_worker(api_process, 0)
    undo()
    registries.append(api_process)
    found: dict[str, set[str]] = {}
    for registry in registries:
        for metric in registry.collect():
            labels: set[str] = set()
            for collector, names in registry._collector_to_names.items():
                if metric.name in names or any(n.startswith(metric.name) for n in names):
                    labels |= set(getattr(collector, "_labelnames", ()))
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
            for suffix in suffixes.get(metric.type, [""]):
                found[metric.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return {**found, **go_extender_metrics()}


def test_every_alert_names_metrics_and_labels_the_code_exports() -> None:
    docs = render({"prometheusRule": {"enabled": True}})
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    known = exported_metrics()
    assert "tmc_extender_requests_total" in known and "tmc_http_requests_total" in known
    # Labels Prometheus adds to every scraped series (the ServiceMonitor's target labels).
    target_labels = {"namespace", "service", "job", "pod", "instance"}
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert len(alerts) >= 8
    for alert in alerts:
        expr = alert["expr"]
        for metric, selector in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}", expr):
            labels = set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", selector))
            if metric == "up":
                assert labels <= target_labels, alert["alert"]
                continue
            if metric.startswith("tmc_nri_"):
                # tmc-nri's registry is listed by its own binary's test, in
                # tests/deploy/test_metrics_exported.py, with these alerts' names and labels.
                continue
            assert metric in known, f"{alert['alert']}: {metric} is not exported by the code"
            assert labels <= known[metric] | target_labels, (alert["alert"], labels)
        words = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\([^()]*\)(?=\s*\()", " ", expr)
        words = re.sub(r"\b(by|without)\s*\([^)]*\)", " ", words)
        for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", words):
            assert word in PROMQL_WORDS or word in known, f"{alert['alert']}: unknown {word!r}"
        assert alert["labels"]["severity"] in ("critical", "warning")
        assert alert["annotations"]["summary"]
    # The catalogue in docs/operations.md lists every exported metric and every alert.
    guide = (CHART.parents[2] / "docs" / "operations.md").read_text()
    for name in known:
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert f"`{family}`" in guide or f"`{name}`" in guide, f"{name} missing in operations.md"
    for alert in alerts:
        assert f"`{alert['alert']}`" in guide, alert["alert"]


def plugin_args(values: dict[str, Any]) -> dict[str, Any]:
    docs = render({**values, "scheduler": {"placement": "plugin"}})
    config = next(
        yaml.safe_load(d["data"]["scheduler-config.yaml"])
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "demo-tmc-plugin"
    )
    (profile,) = config["profiles"]
    args: dict[str, Any] = next(
        p["args"] for p in profile["pluginConfig"] if p["name"] == "TmcPlacement"
    )
    return args


def test_rack_pools_sizes_reach_both_placement_paths() -> None:
    """One place for a shared pool's size: the chart's rackPools, given to tmc-scheduler's
    plugin arguments and to tmc-extender's flags."""
    pools = {"rackPools": {"rack-b": "1Ti", "rack-a": "256Gi"}}
    assert plugin_args(pools)["rackPools"] == {"rack-a": "256Gi", "rack-b": "1Ti"}
    scheduler = by_name(render({**pools, **EXTENDER}), "Deployment", "demo-tmc-scheduler")
    containers = {c["name"]: c for c in scheduler["spec"]["template"]["spec"]["containers"]}
    assert "--rack-pools=rack-a=256Gi,rack-b=1Ti" in containers["extender"]["command"]
    # None given: neither says anything (pools are then their smallest member's claim).
    scheduler = by_name(render(EXTENDER), "Deployment", "demo-tmc-scheduler")
    command = {c["name"]: c for c in scheduler["spec"]["template"]["spec"]["containers"]}
    assert not any(a.startswith("--rack-pools") for a in command["extender"]["command"])


def test_plans_are_named_only_when_the_operator_says_so_on_both_doors() -> None:
    """planByReference (tmc.placement/v3) is off by default: nodes whose tmc-nri predates it
    would apply nothing to such a pod. On, both doors get it."""
    assert "planByReference" not in plugin_args({})
    assert "--plan-by-reference" not in extender_command(render(EXTENDER))
    assert plugin_args({"planByReference": True})["planByReference"] is True
    assert "--plan-by-reference" in extender_command(render({"planByReference": True, **EXTENDER}))


def test_the_dra_publisher_runs_only_with_dra_and_may_touch_nodes_and_slices_only() -> None:
    """dra.enabled: one tmc-dra-publisher (Recreate: never two writing the same slices), from the
    tmc-scheduler image, with the chart's rackPools, as a service account that may read Nodes
    and write ResourceSlices and nothing else; off, none of it renders."""
    off = render({"rackPools": {"rack-a": "256Gi"}})
    assert not [d for d in off if "dra-publisher" in d["metadata"]["name"]]
    docs = render({"dra": {"enabled": True}, "rackPools": {"rack-b": "1Ti", "rack-a": "256Gi"}})
    deployment = by_name(docs, "Deployment", "demo-tmc-dra-publisher")
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "demo-tmc-dra-publisher"
    (container,) = pod["containers"]
    assert container["image"] == "tmc-scheduler:v1.36.3"
    assert container["command"] == [
        "/usr/local/bin/tmc-dra-publisher",
        "--rack-pools=rack-a=256Gi,rack-b=1Ti",
    ]
    role = by_name(docs, "ClusterRole", "demo-tmc-dra-publisher")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"],
        },
    ]
    binding = by_name(docs, "ClusterRoleBinding", "demo-tmc-dra-publisher")
    assert binding["roleRef"]["name"] == "demo-tmc-dra-publisher"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "demo-tmc-dra-publisher", "namespace": "tmc"}
    ]
    by_name(docs, "ServiceAccount", "demo-tmc-dra-publisher")
    # No pools: no flag (the publisher then sizes a pool by its smallest member, as the engine).
    docs = render({"dra": {"enabled": True}})
    command = by_name(docs, "Deployment", "demo-tmc-dra-publisher")["spec"]["template"]["spec"]
    assert command["containers"][0]["command"] == ["/usr/local/bin/tmc-dra-publisher"]


def test_the_dra_publisher_keeps_templates_only_in_tenant_namespaces() -> None:
    """With admission.tenantNamespaceLabels, tmc-dra-publisher keeps a ResourceClaimTemplate per
    recommendation in the namespaces carrying them (--template-namespaces, the same labels) and
    may read recommendations and namespaces and write templates, no more; without, neither."""
    docs = render({"dra": {"enabled": True}})
    assert len(by_name(docs, "ClusterRole", "demo-tmc-dra-publisher")["rules"]) == 2
    tenants = {"tmc.dev/tenant": "yes", "team": "graphs"}
    docs = render({"dra": {"enabled": True}, "admission": {"tenantNamespaceLabels": tenants}})
    pod = by_name(docs, "Deployment", "demo-tmc-dra-publisher")["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"] == [
        "/usr/local/bin/tmc-dra-publisher",
        "--template-namespaces=team=graphs,tmc.dev/tenant=yes",
    ]
    assert by_name(docs, "ClusterRole", "demo-tmc-dra-publisher")["rules"][2:] == [
        {
            "apiGroups": ["tmc.dev"],
            "resources": ["tieredrecommendations"],
            "verbs": ["list", "watch"],
        },
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaimtemplates"],
            "verbs": ["list", "watch", "create", "update", "delete"],
        },
    ]


def test_the_publisher_may_list_and_watch_claims_only_with_dra() -> None:
    """dra.enabled: the publisher's service account (the feeder's) may list and watch
    ResourceClaims, to mirror what the DRA door's claims hold, and nothing else of DRA; off (or
    with no scheduler, so no publisher), no such rule renders."""
    for values in ({}, {"dra": {"enabled": True}, "scheduler": {"enabled": False}}):
        names = [d["metadata"]["name"] for d in render(values)]
        assert "demo-tmc-publisher-claims" not in names, values
    docs = render({"dra": {"enabled": True}})
    role = by_name(docs, "ClusterRole", "demo-tmc-publisher-claims")
    assert role["rules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims"],
            "verbs": ["list", "watch"],
        }
    ]
    binding = by_name(docs, "ClusterRoleBinding", "demo-tmc-publisher-claims")
    assert binding["roleRef"]["name"] == "demo-tmc-publisher-claims"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "demo-tmc-publisher", "namespace": "tmc"}
    ]
    by_name(docs, "ServiceAccount", "demo-tmc-publisher")


def test_the_publisher_mirrors_claims_exactly_when_the_dra_door_is_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """dra.enabled tells the publisher (TMC_MIRROR_DRA_CLAIMS, read by its FeederSettings) to
    list and watch ResourceClaims, the chart granting it that; off, the variable is absent and
    the feeder asks for no claim. The rendered value parses as the setting the feeder takes."""

    def publisher_env(values: dict[str, Any]) -> dict[str, Any]:
        deployment = by_name(render(values), "Deployment", "demo-tmc-publisher")
        return env_of(deployment["spec"]["template"]["spec"]["containers"][0])

    assert "TMC_MIRROR_DRA_CLAIMS" not in publisher_env({})
    assert "TMC_MIRROR_DRA_CLAIMS" not in publisher_env({"dra": {"enabled": False}})
    monkeypatch.delenv("TMC_MIRROR_DRA_CLAIMS", raising=False)
    assert FeederSettings().mirror_dra_claims is False
    on = publisher_env({"dra": {"enabled": True}})["TMC_MIRROR_DRA_CLAIMS"]
    monkeypatch.setenv("TMC_MIRROR_DRA_CLAIMS", on)
    assert FeederSettings().mirror_dra_claims is True


def agent_containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pod = by_name(docs, "DaemonSet", "demo-tmc-agent")["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}


def mounts_of(docs: list[dict[str, Any]], container: dict[str, Any]) -> dict[str, Any]:
    """A container's mounts by path: (host path, read-only)."""
    pod = by_name(docs, "DaemonSet", "demo-tmc-agent")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {
        m["mountPath"]: (volumes[m["name"]]["hostPath"]["path"], m.get("readOnly", False))
        for m in container["volumeMounts"]
        if "hostPath" in volumes[m["name"]]
    }


def agent_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(by_name(docs, "ClusterRole", "demo-tmc-agent")["rules"])


CLAIMS_GET = {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]}


def test_the_dra_node_plugin_runs_beside_tmc_nri_only_with_dra() -> None:
    """dra.enabled: tmc-dra-node in the node DaemonSet, from tmc-nri's image, told its node by
    the downward API, with the kubelet's plugin directory and registry at their host paths, the
    CDI directory and resctrl writable; tmc-nri reads its checkpoint from the same directory,
    mounted read-only; the agents' account may get claims and nothing more of DRA. Off, none
    of it renders."""
    off = render()
    assert set(agent_containers(off)) == {"agent", "nri"}
    assert "TMC_NRI_DRA_CHECKPOINT" not in env_of(agent_containers(off)["nri"])
    assert "/var/lib/kubelet/plugins/tmc.dev" not in mounts_of(off, agent_containers(off)["nri"])
    assert CLAIMS_GET not in agent_rules(off)

    docs = render({"dra": {"enabled": True}})
    containers = agent_containers(docs)
    assert set(containers) == {"agent", "nri", "dra-node"}
    node, nri = containers["dra-node"], containers["nri"]
    assert node["image"] == nri["image"] == "tmc-nri:0.1.0"
    assert node["command"] == [
        "/usr/local/bin/tmc-dra-node",
        "--kubelet-dir=/var/lib/kubelet",
        "--cdi-dir=/var/run/cdi",
        "--resctrl=/sys/fs/resctrl",
    ]
    assert env_of(node) == {"TMC_DRA_NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert mounts_of(docs, node) == {
        "/var/lib/kubelet/plugins/tmc.dev": ("/var/lib/kubelet/plugins/tmc.dev", False),
        "/var/lib/kubelet/plugins_registry": ("/var/lib/kubelet/plugins_registry", False),
        "/var/run/cdi": ("/var/run/cdi", False),
        "/sys/fs/resctrl": ("/sys/fs/resctrl", False),
    }
    assert node["securityContext"] == {
        "runAsUser": 0,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert node["resources"] == {
        "requests": {"cpu": "10m", "memory": "32Mi"},
        "limits": {"memory": "128Mi"},
    }
    checkpoint = Path(env_of(nri)["TMC_NRI_DRA_CHECKPOINT"])
    assert checkpoint == Path("/var/lib/kubelet/plugins/tmc.dev/checkpoint.json")
    assert mounts_of(docs, nri)[str(checkpoint.parent)] == (str(checkpoint.parent), True)
    assert agent_rules(docs) == [*agent_rules(off), CLAIMS_GET]
    # The agent's own container is as it was.
    assert containers["agent"] == agent_containers(off)["agent"]


def test_the_dra_node_plugin_follows_its_values() -> None:
    """Another kubelet root and CDI directory move every path, the checkpoint tmc-nri reads
    included; a way count is passed for nodes without CAT; dra.nodePlugin.enabled false, or no
    agent, runs none; for a runtime without NRI, tmc-dra-node runs beside tmc-nri reconcile,
    which reads the same checkpoint (the directory mounted read-only)."""
    docs = render(
        {
            "dra": {
                "enabled": True,
                "nodePlugin": {"kubeletDir": "/data/kubelet/", "cdiDir": "/etc/cdi", "ways": 12},
            }
        }
    )
    node, nri = agent_containers(docs)["dra-node"], agent_containers(docs)["nri"]
    assert node["command"][1:] == [
        "--kubelet-dir=/data/kubelet",
        "--cdi-dir=/etc/cdi",
        "--resctrl=/sys/fs/resctrl",
        "--ways=12",
    ]
    assert set(mounts_of(docs, node)) == {
        "/data/kubelet/plugins/tmc.dev",
        "/data/kubelet/plugins_registry",
        "/etc/cdi",
        "/sys/fs/resctrl",
    }
    assert env_of(nri)["TMC_NRI_DRA_CHECKPOINT"] == "/data/kubelet/plugins/tmc.dev/checkpoint.json"
    assert mounts_of(docs, nri)["/data/kubelet/plugins/tmc.dev"] == (
        "/data/kubelet/plugins/tmc.dev",
        True,
    )

    own = render({"dra": {"enabled": True, "nodePlugin": {"enabled": False}}})
    assert set(agent_containers(own)) == {"agent", "nri"}
    assert "TMC_NRI_DRA_CHECKPOINT" not in env_of(agent_containers(own)["nri"])
    assert CLAIMS_GET not in agent_rules(own)
    # The DeviceClasses and the publisher stay.
    by_name(own, "Deployment", "demo-tmc-dra-publisher")
    no_agent = render({"dra": {"enabled": True}, "agent": {"enabled": False}})
    assert not [d for d in no_agent if d["metadata"]["name"] == "demo-tmc-agent"]
    without_nri = render({"dra": {"enabled": True}, "agent": {"nri": {"enabled": False}}})
    by_container = agent_containers(without_nri)
    assert set(by_container) == {"agent", "reconcile", "dra-node"}
    assert (
        by_container["dra-node"] == agent_containers(render({"dra": {"enabled": True}}))["dra-node"]
    )
    applier = by_container["reconcile"]
    assert (
        env_of(applier)["TMC_NRI_DRA_CHECKPOINT"]
        == "/var/lib/kubelet/plugins/tmc.dev/checkpoint.json"
    )
    assert mounts_of(without_nri, applier)["/var/lib/kubelet/plugins/tmc.dev"] == (
        "/var/lib/kubelet/plugins/tmc.dev",
        True,
    )
    reconcile = render(
        {
            "dra": {"enabled": True, "nodePlugin": {"enabled": False}},
            "agent": {"nri": {"enabled": False}},
        }
    )
    assert set(agent_containers(reconcile)) == {"agent", "reconcile"}


def test_admission_policies_are_on_by_default_and_name_the_components() -> None:
    docs = render()
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {
        d["spec"]["policyName"]: d["spec"]["validationActions"]
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    # Placements are sealed by default: no policy judges the cluster's Bindings.
    assert set(policies) == {
        "demo-tmc-pod-placement",
        "demo-tmc-placed-pod-resize",
        "demo-tmc-agent-own-node",
        "demo-tmc-agent-own-events",
    }
    assert bindings == {name: ["Deny"] for name in policies}
    unsealed = render({"placementSeal": {"enabled": False}})
    policies.update(
        (d["metadata"]["name"], d) for d in unsealed if d["kind"] == "ValidatingAdmissionPolicy"
    )
    assert "demo-tmc-binding-placement" in policies
    for name in ("demo-tmc-pod-placement", "demo-tmc-binding-placement"):
        text = yaml.safe_dump(policies[name])
        assert "system:serviceaccount:tmc:demo-tmc-scheduler" in text
        assert "system:serviceaccount:tmc:demo-tmc-extender" in text
        assert '["tmc:operators"]' in text
    assert render({"admission": {"enabled": False}}) != docs
    assert not [d for d in render({"admission": {"enabled": False}}) if "Admission" in d["kind"]]


def _tmc_placement_args(docs: list[dict[str, Any]]) -> dict[str, Any]:
    config = yaml.safe_load(
        by_name(docs, "ConfigMap", "demo-tmc-plugin")["data"]["scheduler-config.yaml"]
    )
    (profile,) = config["profiles"]
    args: dict[str, Any] = next(
        p["args"] for p in profile["pluginConfig"] if p["name"] == "TmcPlacement"
    )
    return args


def _namespace_selectors(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each policy's namespaceSelector, its own or its bindings' (the two are intersected): the
    one all its bindings agree on."""
    own = {
        d["metadata"]["name"]: d["spec"]["matchConstraints"].get("namespaceSelector")
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy"
    }
    seen: dict[str, list[Any]] = {name: [] for name in own}
    for d in docs:
        if d["kind"] == "ValidatingAdmissionPolicyBinding":
            name = d["spec"]["policyName"]
            narrowed = d["spec"].get("matchResources", {}).get("namespaceSelector")
            assert own[name] is None or narrowed is None, f"{name}: two namespace selectors"
            seen[name].append(narrowed or own[name])
    for name, selectors in seen.items():
        assert selectors and all(s == selectors[0] for s in selectors), (name, selectors)
    return {name: selectors[0] for name, selectors in seen.items()}


def _tenant_labels_everywhere(values: dict[str, Any]) -> dict[str, Any]:
    """What each component is told of tmc's tenant namespaces under these values."""
    plugin = render({**values, "scheduler": {"placement": "plugin"}})
    extender = render({**values, **EXTENDER})
    policies = _namespace_selectors(plugin)
    sched = by_name(extender, "Deployment", "demo-tmc-scheduler")
    containers = {c["name"]: c for c in sched["spec"]["template"]["spec"]["containers"]}
    flags = [a for a in containers["extender"]["command"] if a.startswith("--tenant-namespace")]
    agent = by_name(plugin, "DaemonSet", "demo-tmc-agent")
    nri = next(c for c in agent["spec"]["template"]["spec"]["containers"] if c["name"] == "nri")
    roles = {
        d["metadata"]["name"]: [r for r in d["rules"] if "namespaces" in r["resources"]]
        for d in [*extender, *plugin]
        if d["kind"] == "ClusterRole"
    }
    publisher = by_name(plugin, "Deployment", "demo-tmc-publisher")
    return {
        "policies": policies,
        "plugin": _tmc_placement_args(plugin).get("tenantNamespaceLabels"),
        "extender": flags,
        "nri": env_of(nri).get("TMC_NRI_TENANT_NAMESPACE_LABELS"),
        "publisher": env_of(publisher["spec"]["template"]["spec"]["containers"][0]).get(
            "TMC_TENANT_NAMESPACE_LABELS"
        ),
        "roles": roles,
    }


def test_tenant_namespaces_are_every_namespace_by_default() -> None:
    got = _tenant_labels_everywhere({})
    assert got["policies"] == {
        "demo-tmc-pod-placement": None,
        "demo-tmc-placed-pod-resize": None,
        "demo-tmc-agent-own-node": None,
        "demo-tmc-agent-own-events": DEFAULT_NAMESPACE_ONLY,
    }
    assert got["plugin"] is None and got["extender"] == [] and got["nri"] is None
    assert got["publisher"] is None
    assert got["roles"]["demo-tmc-extender"] == [] and got["roles"]["demo-tmc-agent"] == []
    assert got["roles"]["demo-tmc-publisher"] == []


def test_tenant_namespace_labels_reach_both_policies_and_every_component() -> None:
    """One value: the pod policies' namespaceSelector, tmc-scheduler's argument, tmc-extender's
    and tmc-nri's flag, the publisher's variable, and the namespaces' list/watch for the
    components that read them."""
    labels = {"tmc.dev/tenant": "yes", "team": "hpc"}
    got = _tenant_labels_everywhere({"admission": {"tenantNamespaceLabels": labels}})
    selector = {"matchLabels": labels}
    assert got["policies"]["demo-tmc-pod-placement"] == selector
    assert "demo-tmc-binding-placement" not in got["policies"]  # sealed placements
    unsealed = _namespace_selectors(
        render(
            {"admission": {"tenantNamespaceLabels": labels}, "placementSeal": {"enabled": False}}
        )
    )
    assert unsealed["demo-tmc-binding-placement"] == selector
    assert got["policies"]["demo-tmc-placed-pod-resize"] == selector
    # The agents' own rules are about nodes and their reports, in no tenant's namespace.
    assert got["policies"]["demo-tmc-agent-own-node"] is None
    assert got["policies"]["demo-tmc-agent-own-events"] == DEFAULT_NAMESPACE_ONLY
    assert got["plugin"] == labels
    assert got["extender"] == ["--tenant-namespace-labels=team=hpc,tmc.dev/tenant=yes"]
    assert got["nri"] == "team=hpc,tmc.dev/tenant=yes"
    assert got["publisher"] == "team=hpc,tmc.dev/tenant=yes"
    watch = [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}]
    assert got["roles"]["demo-tmc-extender"] == watch
    assert got["roles"]["demo-tmc-agent"] == watch
    assert got["roles"]["demo-tmc-publisher"] == watch
    # Without the NRI plugin, tmc-nri reconcile lists the namespaces each round: no watch.
    off = render(
        {"admission": {"tenantNamespaceLabels": labels}, "agent": {"nri": {"enabled": False}}}
    )
    agent_role = by_name(off, "ClusterRole", "demo-tmc-agent")
    assert [r for r in agent_role["rules"] if "namespaces" in r["resources"]] == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}
    ]


# "default", where the API server keeps Events about a Node, by the name label it sets on every
# namespace.
DEFAULT_NAMESPACE_ONLY = {"matchLabels": {"kubernetes.io/metadata.name": "default"}}


def test_node_reports_are_written_and_judged_in_default_alone() -> None:
    """tmc-nri's reports are Events about its Node, which live in "default": the only namespace
    its Role lets it write Events in, and the only one the policy holding a node to its own Node
    judges (no other namespace's Events pay for it)."""
    docs = render()
    agent = by_name(docs, "ClusterRole", "demo-tmc-agent")
    assert not [r for r in agent["rules"] if "events" in r["resources"]]
    role = by_name(docs, "Role", "demo-tmc-agent-reports")
    assert role["metadata"]["namespace"] == REPORTS_NAMESPACE
    assert role["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    bound = by_name(docs, "RoleBinding", "demo-tmc-agent-reports")
    assert bound["metadata"]["namespace"] == REPORTS_NAMESPACE
    assert bound["roleRef"]["name"] == "demo-tmc-agent-reports"
    assert bound["subjects"] == [
        {"kind": "ServiceAccount", "name": "demo-tmc-agent", "namespace": "tmc"}
    ]
    policy = by_name(docs, "ValidatingAdmissionPolicy", "demo-tmc-agent-own-events")
    assert policy["spec"]["matchConstraints"]["namespaceSelector"] == DEFAULT_NAMESPACE_ONLY
    # Without tmc-nri, the agents write no Events at all.
    off = render({"agent": {"nri": {"enabled": False}}})
    assert not [d for d in off if d["metadata"]["name"] == "demo-tmc-agent-reports"]


def _resources(rules: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(op, r) for rule in rules for op in rule["operations"] for r in rule["resources"]}


@pytest.mark.parametrize("tenants", [{}, {"tmc.dev/tenant": "yes", "team": "hpc"}])
def test_pod_policies_judge_only_pods_carrying_the_tiered_label(tenants: dict[str, str]) -> None:
    """Pod writes are judged by the pod-placement policy, its binding selecting exactly the
    tiered label (scheduler/conformance/tiered_pods.json); Bindings (which carry no pod labels)
    by the binding-placement policy, selected by none; the two together match every request that
    can write a pod's annotations; the resize policy selects by the label too. With tenant
    namespaces, both are narrowed to them as well. (The binding-placement policy is rendered
    with placementSeal off only: sealed, a Binding's placement holds nothing.)"""
    docs = render(
        {"admission": {"tenantNamespaceLabels": tenants}, "placementSeal": {"enabled": False}}
    )
    tiered = {"matchLabels": {TIERED_PODS["label"]: TIERED_PODS["value"]}}
    namespaces = {"matchLabels": tenants} if tenants else None
    policy = by_name(docs, "ValidatingAdmissionPolicy", "demo-tmc-pod-placement")
    binding_policy = by_name(docs, "ValidatingAdmissionPolicy", "demo-tmc-binding-placement")
    bindings = {
        d["spec"]["policyName"]: d["spec"].get("matchResources", {})
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    pods, binds = bindings["demo-tmc-pod-placement"], bindings["demo-tmc-binding-placement"]
    assert pods["objectSelector"] == tiered
    assert _resources(policy["spec"]["matchConstraints"]["resourceRules"]) == {
        ("CREATE", "pods"),
        ("UPDATE", "pods"),
        ("UPDATE", "pods/status"),
    }
    assert "resourceRules" not in pods
    assert "objectSelector" not in binds
    assert "objectSelector" not in binding_policy["spec"]["matchConstraints"]
    assert _resources(binding_policy["spec"]["matchConstraints"]["resourceRules"]) == {
        ("CREATE", "pods/binding"),
        ("CREATE", "bindings"),
    }
    assert pods.get("namespaceSelector") == namespaces
    assert binds.get("namespaceSelector") == namespaces
    # A Binding without annotations (kube-scheduler's) ends every check at its first term.
    for check in binding_policy["spec"]["validations"]:
        assert check["expression"].startswith("!has(object.metadata.annotations) ||"), check
    # The API server evaluates every message on every request it judges, admitted or not: a
    # message reading a variable would evaluate it again for every tmc pod's write and Binding.
    for judged in (policy, binding_policy):
        for check in judged["spec"]["validations"]:
            assert "variables." not in check.get("messageExpression", ""), check
    # The label is part of what is guarded: a pod's annotations count only while it carries it.
    labelled = (
        f"'{TIERED_PODS['label']}' in {{o}}.metadata.labels"
        f" && {{o}}.metadata.labels['{TIERED_PODS['label']}'] == '{TIERED_PODS['value']}'"
    )
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert labelled.format(o="object") in variables["new"]
    assert labelled.format(o="oldObject") in variables["old"]
    resize = by_name(docs, "ValidatingAdmissionPolicy", "demo-tmc-placed-pod-resize")
    assert resize["spec"]["matchConstraints"]["objectSelector"] == tiered
    assert resize["spec"]["matchConstraints"].get("namespaceSelector") == namespaces
    (placed,) = resize["spec"]["matchConditions"]
    assert labelled.format(o="oldObject") in placed["expression"]


# --- sealed placements ----------------------------------------------------------------------------

SEAL_DIR = "/etc/tmc-placement-seal"


def _seal_mounts(docs: list[dict[str, Any]]) -> dict[str, tuple[str | None, Any]]:
    """Per container that mounts the seal's keys: the Secret its pod's volume names, and the
    key directory it is told (its flag, variable or plugin argument)."""
    got: dict[str, tuple[str | None, Any]] = {}
    for d in docs:
        if d["kind"] not in ("Deployment", "DaemonSet"):
            continue
        spec = d["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for ctr in spec["containers"]:
            mounts = [m for m in ctr.get("volumeMounts", []) if m["name"] == "placement-seal"]
            if not mounts:
                continue
            assert mounts[0]["mountPath"] == SEAL_DIR and mounts[0]["readOnly"] is True
            secret = volumes["placement-seal"]["secret"]["secretName"]
            env = env_of(ctr)
            told = (
                env.get("TMC_PLACEMENT_SEAL_KEYS")
                or env.get("TMC_NRI_PLACEMENT_SEAL_KEYS")
                or env.get("TMC_AGENT_PLACEMENT_SEAL_KEYS")
                or [a for a in ctr.get("command", []) if a.startswith("--placement-seal")]
                or "config"
            )
            got[f"{d['metadata']['name']}/{ctr['name']}"] = (secret, told)
    return got


def test_placements_are_sealed_by_every_component_by_default() -> None:
    """tmc-scheduler and tmc-extender seal with the signing key; the publisher, tmc-nri, tmc-nri
    reconcile and the agent (its verification runs) verify; every one mounts the chart's Secret, which holds a random key of 64
    characters under the signing key's id and is kept when the release goes."""
    plugin = render({"scheduler": {"placement": "plugin"}})
    secret = by_name(plugin, "Secret", "demo-tmc-placement-seal")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert set(secret["data"]) == {"k1"}
    assert len(base64.b64decode(secret["data"]["k1"])) == 64
    args = _tmc_placement_args(plugin)
    assert (args["placementSealKeys"], args["placementSealSigningKey"]) == (SEAL_DIR, "k1")
    name = "demo-tmc-placement-seal"
    assert _seal_mounts(plugin) == {
        "demo-tmc-plugin-scheduler/tmc-scheduler": (name, "config"),
        "demo-tmc-publisher/publisher": (name, SEAL_DIR),
        "demo-tmc-agent/nri": (name, SEAL_DIR),
        "demo-tmc-agent/agent": (name, SEAL_DIR),
    }
    extender = render(EXTENDER)
    assert _seal_mounts(extender)["demo-tmc-scheduler/extender"] == (
        name,
        [f"--placement-seal-keys={SEAL_DIR}", "--placement-seal-signing-key=k1"],
    )
    reconcile = render({"agent": {"nri": {"enabled": False}}})
    assert _seal_mounts(reconcile)["demo-tmc-agent/reconcile"] == (name, SEAL_DIR)


def test_an_operators_secret_and_signing_key_and_sealing_off() -> None:
    own = render({"placementSeal": {"existingSecret": "my-keys", "signingKey": "k2"}})
    assert not [
        d for d in own if d["kind"] == "Secret" and "placement-seal" in d["metadata"]["name"]
    ]
    assert {secret for secret, _ in _seal_mounts(own).values()} == {"my-keys"}
    assert (
        _tmc_placement_args(
            render({"scheduler": {"placement": "plugin"}, "placementSeal": {"signingKey": "k2"}})
        )["placementSealSigningKey"]
        == "k2"
    )
    off = render({"placementSeal": {"enabled": False}, "scheduler": {"placement": "plugin"}})
    assert _seal_mounts(off) == {}
    assert "placementSealKeys" not in _tmc_placement_args(off)
    assert not [
        d for d in off if d["kind"] == "Secret" and "placement-seal" in d["metadata"]["name"]
    ]
    with pytest.raises(Exception, match="DNS label"):
        render({"placementSeal": {"signingKey": "Key_1"}})


def test_accepting_unsealed_placements_for_an_upgrade_reaches_every_reader() -> None:
    """placementSeal.acceptUnsealed (the upgrade from a release that did not seal): every reader
    is told, and the binding-placement policy judges Bindings meanwhile; off by default."""
    values = {"placementSeal": {"acceptUnsealed": True}}
    plugin = render({**values, "scheduler": {"placement": "plugin"}})
    assert _tmc_placement_args(plugin)["placementSealAcceptUnsealed"] is True
    env = {
        name: env_of(c)
        for d in plugin
        if d["kind"] in ("Deployment", "DaemonSet")
        for c in d["spec"]["template"]["spec"]["containers"]
        for name in [f"{d['metadata']['name']}/{c['name']}"]
    }
    assert env["demo-tmc-publisher/publisher"]["TMC_PLACEMENT_SEAL_ACCEPT_UNSEALED"] == "true"
    assert env["demo-tmc-agent/nri"]["TMC_NRI_PLACEMENT_SEAL_ACCEPT_UNSEALED"] == "true"
    assert env["demo-tmc-agent/agent"]["TMC_AGENT_PLACEMENT_SEAL_ACCEPT_UNSEALED"] == "true"
    names = {d["metadata"]["name"] for d in plugin if d["kind"] == "ValidatingAdmissionPolicy"}
    assert "demo-tmc-binding-placement" in names
    extender = by_name(render({**values, **EXTENDER}), "Deployment", "demo-tmc-scheduler")
    (ext,) = [
        c for c in extender["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    ]
    assert "--placement-seal-accept-unsealed" in ext["command"]
    default = render({"scheduler": {"placement": "plugin"}})
    assert "placementSealAcceptUnsealed" not in _tmc_placement_args(default)
    reconcile = render({**values, "agent": {"nri": {"enabled": False}}})
    (rec,) = [c for c in agent_containers(reconcile).values() if c["name"] == "reconcile"]
    assert env_of(rec)["TMC_NRI_PLACEMENT_SEAL_ACCEPT_UNSEALED"] == "true"
