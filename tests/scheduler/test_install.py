# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""docs/install.md, followed on the real control plane: the chart `helm install`ed (Helm's Go SDK)
into a real kube-apiserver, its objects read back, an upgrade that keeps the generated tokens and
certificates, the API's init containers run as the Deployment states them (migrations, then the
bootstrap of the tokens from the chart's Secrets), every component's service account asked of the
real authorizer, and the document's steps to a placed pod (`./dev cluster up` runs the same
functions). There is no kubelet and no controller-manager here: Deployments and DaemonSets are
stored and validated but never get pods; their commands run as local processes instead.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml
from kubernetes import client as k8s
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Role
from api.bootstrap import BootstrapError, TokenSpec, ensure_token, parse_spec, read_token
from tests.scheduler.controlplane import NAMESPACE, RELEASE, Unavailable, unavailable
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import devcluster as dc
from tests.scheduler.test_contract_published import undescribed
from tests.services import wait_until

ROOT = Path(__file__).resolve().parents[2]
FULL = f"{RELEASE}-tmc"


class Installed:
    def __init__(self, state: dc.State, state_path: Path) -> None:
        self.state = state
        self.state_path = state_path
        self.client = dc.admin_client(state.kubeconfig)
        self.core = k8s.CoreV1Api(self.client)

    @property
    def dsn(self) -> str:
        return str(self.state.values["database"]["url"]).replace("postgresql+psycopg", "postgresql")

    def secret(self, name: str, key: str) -> str:
        return dc.secret_value(self.core, name, key)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    state_path = tmp_path_factory.mktemp("cluster") / "state.json"
    try:
        state = dc.up(state_path)
    except Unavailable as exc:
        unavailable(exc)
    yield Installed(state, state_path)
    if state_path.exists():
        dc.down(state_path)


def get_object(client: k8s.ApiClient, doc: dict[str, Any]) -> dict[str, Any]:
    """GET the object a manifest describes, from the API server (any kind the chart has)."""
    api_class, snake = {
        "Deployment": (k8s.AppsV1Api, "deployment"),
        "DaemonSet": (k8s.AppsV1Api, "daemon_set"),
        "Service": (k8s.CoreV1Api, "service"),
        "Secret": (k8s.CoreV1Api, "secret"),
        "ConfigMap": (k8s.CoreV1Api, "config_map"),
        "ServiceAccount": (k8s.CoreV1Api, "service_account"),
        "ClusterRole": (k8s.RbacAuthorizationV1Api, "cluster_role"),
        "ClusterRoleBinding": (k8s.RbacAuthorizationV1Api, "cluster_role_binding"),
        "Role": (k8s.RbacAuthorizationV1Api, "role"),
        "RoleBinding": (k8s.RbacAuthorizationV1Api, "role_binding"),
        "NetworkPolicy": (k8s.NetworkingV1Api, "network_policy"),
        "ValidatingAdmissionPolicy": (
            k8s.AdmissionregistrationV1Api,
            "validating_admission_policy",
        ),
        "ValidatingAdmissionPolicyBinding": (
            k8s.AdmissionregistrationV1Api,
            "validating_admission_policy_binding",
        ),
    }[doc["kind"]]
    api = api_class(client)
    name = doc["metadata"]["name"]
    if doc["kind"].startswith(("Cluster", "ValidatingAdmissionPolicy")):
        raw = getattr(api, f"read_{snake}")(name, _preload_content=False)
    else:
        ns = doc["metadata"].get("namespace") or NAMESPACE
        raw = getattr(api, f"read_namespaced_{snake}")(name, ns, _preload_content=False)
    found: dict[str, Any] = json.loads(raw.data)
    return found


def test_every_object_of_the_chart_is_in_the_api_server(installed: Installed) -> None:
    rendered = c.render_chart(installed.state.values)
    docs = [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]
    assert len(docs) >= 25
    for doc in docs:
        live = get_object(installed.client, doc)
        assert live["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE, doc["kind"]
    apps = k8s.AppsV1Api(installed.client)
    deployments = {d.metadata.name for d in apps.list_namespaced_deployment(NAMESPACE).items}
    assert deployments == {
        f"{FULL}-{n}" for n in ("api", "worker", "beat", "plugin-scheduler", "publisher")
    }
    (agent,) = apps.list_namespaced_daemon_set(NAMESPACE).items
    assert agent.metadata.name == f"{FULL}-agent"
    # No controller-manager, no kubelet: the workloads are stored but never get a pod. The only
    # pods are the agents' per node, which the harness registers so that each agent's token is
    # bound to its node (cluster.node_bound_token), as the DaemonSet's pods would be.
    pods = installed.core.list_namespaced_pod(NAMESPACE).items
    nodes = {n.metadata.name for n in installed.core.list_node().items}
    assert sorted(str(p.spec.node_name) for p in pods) == sorted(str(n) for n in nodes)
    assert all(p.spec.service_account_name == f"{FULL}-agent" for p in pods)


def test_kubectl_explain_has_a_description_for_every_field(installed: Installed) -> None:
    """What `kubectl explain tieredrecommendation` reads: the API server's OpenAPI v3 document
    of tmc's group, built from the installed CRD. Every field of the kind says what it is."""
    api = installed.client
    request = api.param_serialize(
        "GET", "/openapi/v3/apis/tmc.dev/v1alpha1", auth_settings=["BearerToken"]
    )
    schemas = json.loads(api.call_api(*request).read())["components"]["schemas"]
    (kind,) = [
        s
        for s in schemas.values()
        if {"group": "tmc.dev", "version": "v1alpha1", "kind": "TieredRecommendation"}
        in s.get("x-kubernetes-group-version-kind", [])
    ]
    assert kind["description"].strip()
    assert {"spec", "status"} <= set(kind["properties"])
    assert undescribed(kind) == []


def test_generated_tokens_and_certificates_survive_an_upgrade(installed: Installed) -> None:
    before = {
        (name, key): installed.secret(name, key)
        for name, key in (
            (f"{FULL}-bootstrap", "operator-token"),
            (f"{FULL}-agent-token", "token"),
            (f"{FULL}-extender-tls", "ca.crt"),
            (f"{FULL}-extender-tls", "client.key"),
            (f"{FULL}-placement-seal", "k1"),
        )
    }
    for (_, key), value in before.items():
        if "token" in key:
            assert re.fullmatch(r"tmc_[A-Za-z0-9]{43}", value)
    values = {**installed.state.values, "api": {"replicas": 1, "workers": 3}}
    release = dc.upgrade_chart(installed.state.kubeconfig, values)
    assert release["revision"] == 2 and release["status"] == "deployed"
    after = {(name, key): installed.secret(name, key) for name, key in before}
    assert after == before
    spec = dc.api_pod_spec(installed.client)
    assert spec["containers"][0]["command"][-1] == "3"  # the upgrade did change the Deployment
    # A new signing key is added beside the old one, which is kept (placementSeal rotation).
    rotated = {**values, "placementSeal": {"signingKey": "k2"}}
    assert dc.upgrade_chart(installed.state.kubeconfig, rotated)["revision"] == 3
    assert (
        installed.secret(f"{FULL}-placement-seal", "k1") == before[f"{FULL}-placement-seal", "k1"]
    )
    assert len(installed.secret(f"{FULL}-placement-seal", "k2")) == 64


def tokens_in(dsn: str) -> dict[str, tuple[str, bool]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT name, role, revoked_at FROM api_tokens").fetchall()
    return {r[0]: (r[1], r[2] is not None) for r in rows}


def test_the_api_init_containers_stored_the_tokens_idempotently(
    installed: Installed, tmp_path: Path
) -> None:
    """The bootstrap init container ran at `up`; running the init containers again (a restarted
    pod) and twice at once (two replicas) stores nothing twice; a revoked token stays revoked."""
    assert tokens_in(installed.dsn) == {
        "bootstrap-operator": ("operator", False),
        "node-agent": ("agent", False),
    }
    env = {"TMC_DATABASE_URL": installed.state.values["database"]["url"]}
    dc.run_init_containers(installed.client, env, tmp_path / "again")
    spec = dc.api_pod_spec(installed.client)
    (bootstrap,) = [i for i in spec["initContainers"] if i["name"] == "bootstrap"]
    args = [
        a.replace("/etc/tmc/bootstrap", str(tmp_path / "again" / "bootstrap-token")).replace(
            "/etc/tmc/agent", str(tmp_path / "again" / "agent-token")
        )
        for a in bootstrap["command"][3:]
    ]
    replicas = [
        subprocess.Popen(
            [sys.executable, "-m", "api.bootstrap", *args],
            cwd=ROOT,
            env={**os.environ, **env},
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    for proc in replicas:
        assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    assert len(tokens_in(installed.dsn)) == 2
    with psycopg.connect(installed.dsn, autocommit=True) as conn:
        conn.execute("UPDATE api_tokens SET revoked_at = now() WHERE name = 'node-agent'")
    try:
        dc.run_init_containers(installed.client, env, tmp_path / "third")
        assert tokens_in(installed.dsn)["node-agent"] == ("agent", True)
    finally:
        with psycopg.connect(installed.dsn, autocommit=True) as conn:
            conn.execute("UPDATE api_tokens SET revoked_at = NULL WHERE name = 'node-agent'")


def test_a_newcomer_follows_the_document_to_a_placed_pod(installed: Installed) -> None:
    """docs/install.md's steps after `helm install`: the operator token from its Secret, a
    profile uploaded with the agents' token, the example pod applied, placed, and explained."""
    guide = (ROOT / "docs" / "install.md").read_text()
    api = installed.state.api_url
    operator = installed.secret(f"{FULL}-bootstrap", "operator-token")
    agent = installed.secret(f"{FULL}-agent-token", "token")
    assert f"get secret {FULL}-bootstrap -o jsonpath='{{.data.operator-token}}'" in guide
    # Step: the API answers the operator (and nobody without a token).
    assert httpx.get(f"{api}/v1/workloads").status_code == 401
    assert httpx.get(f"{api}/v1/workloads", headers=bearer(operator)).status_code == 200
    # Step: the workload's profile, uploaded with the agents' token (what tmc-agent does).
    assert "/v1/profiles" in guide and "agent-token" in guide
    bundle = (ROOT / "examples" / "graph500.json").read_bytes()
    headers = {**bearer(agent), "Content-Type": "application/json"}
    upload = httpx.post(f"{api}/v1/profiles", content=bundle, headers=headers, timeout=30)
    assert upload.status_code in (200, 201), upload.text
    # The agents' token uploads and does nothing else.
    assert httpx.get(f"{api}/v1/workloads", headers=bearer(agent)).status_code == 403
    # Step: the example pod.
    assert "kubectl apply -f deploy/examples/tiered-pod.yaml" in guide
    body = c.example_pod()
    installed.core.create_namespaced_pod("default", body)
    name = body["metadata"]["name"]
    pods = c.bound_pods(installed.core, [name], "default", timeout=90)
    annotations = pods[name].metadata.annotations
    placement = json.loads(annotations["tmc.dev/placement"])
    assert placement["node"] == pods[name].spec.node_name
    assert placement["workload"] == "graph500"
    # Step: the decision, read through the API with the operator token.
    rec = httpx.get(
        f"{api}/v1/recommendations/{placement['recommendation_id']}", headers=bearer(operator)
    )
    assert rec.status_code == 200, rec.text
    installed.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# What each component's code calls (tmc-extender and tmc-scheduler in scheduler/plugin, the
# publisher through scheduler/kube.py, profiler-agent/tmc_agent/serve.py; the API reviews the
# agents' tokens, api/node_identity.py; worker and beat call nothing), and what it must not be
# able to do. No tmc component patches a pod: the Binding carries the placement.
ALLOWED = {
    "extender": [
        ("list", "nodes", ""),
        ("watch", "nodes", ""),
        ("get", "pods", ""),
        ("list", "pods", ""),
        ("watch", "pods", ""),
        ("create", "pods", "binding"),
        ("create", "events.events.k8s.io", ""),
    ],
    "agent": [("patch", "nodes", ""), ("list", "pods", "")],
    "scheduler": [
        ("create", "pods", "binding"),
        ("watch", "pods", ""),
        ("list", "nodes", ""),
        # The plugin: its informer reads the published recommendations (the Binding carries
        # the placement: it never patches a pod).
        ("watch", "tieredrecommendations.tmc.dev", ""),
    ],
    "publisher": [
        ("list", "nodes", ""),
        ("watch", "pods", ""),
        ("create", "tieredrecommendations.tmc.dev", ""),
        ("update", "tieredrecommendations.tmc.dev", ""),
        ("patch", "tieredrecommendations.tmc.dev", "status"),
        # Objects no live pod has named for the grace period are deleted.
        ("delete", "tieredrecommendations.tmc.dev", ""),
        # Nodes' reports are put on their pods, once each pod is read to be on that node.
        ("watch", "events", ""),
        ("get", "pods", ""),
        ("create", "events", ""),
    ],
    "api": [("create", "tokenreviews.authentication.k8s.io", "")],
}
DENIED = {
    "extender": [
        ("get", "nodes", ""),
        ("patch", "nodes", ""),
        ("patch", "pods", ""),
        ("delete", "pods", ""),
        ("update", "pods", ""),
        ("create", "pods", ""),
        ("get", "secrets", ""),
        ("list", "configmaps", ""),
    ],
    "agent": [
        ("get", "nodes", ""),
        ("list", "nodes", ""),
        ("get", "pods", ""),
        ("watch", "pods", ""),
        ("patch", "pods", ""),
        ("create", "pods", "binding"),
        ("get", "secrets", ""),
        # tmc-dra-node's read, granted with dra.enabled only (this install has no DRA door).
        ("get", "resourceclaims.resource.k8s.io", ""),
    ],
    "scheduler": [
        ("patch", "pods", ""),
        ("get", "secrets", ""),
        ("delete", "nodes", ""),
        ("update", "tieredrecommendations.tmc.dev", ""),
    ],
    "publisher": [
        ("get", "nodes", ""),
        ("patch", "pods", ""),
        ("create", "pods", "binding"),
        ("get", "secrets", ""),
    ],
    "api": [
        ("get", "pods", ""),
        ("list", "nodes", ""),
        ("get", "secrets", ""),
        # It reviews tokens; it neither mints them nor asks who may do what.
        ("create", "serviceaccounts", "token"),
        ("create", "subjectaccessreviews.authorization.k8s.io", ""),
    ],
}


def allowed(installed: Installed, component: str, verb: str, resource: str, sub: str) -> bool:
    return account_may(installed.client, f"{FULL}-{component}", verb, resource, sub)


def account_may(client: Any, account: str, verb: str, resource: str, sub: str = "") -> bool:
    """Whether the real authorizer lets the release's service account `account` do `verb` on
    `resource` ("plural.group", "plural" for the core group) in the default namespace."""
    auth = k8s.AuthorizationV1Api(client)
    review = auth.create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{NAMESPACE}:{account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
                "resourceAttributes": {
                    "verb": verb,
                    "group": resource.partition(".")[2],
                    "resource": resource.partition(".")[0],
                    "subresource": sub,
                    "namespace": "default",
                },
            },
        }
    )
    return bool(review.status.allowed)


@pytest.mark.parametrize("component", sorted(ALLOWED))
def test_each_service_account_may_do_what_its_code_calls_and_no_more(
    installed: Installed, component: str
) -> None:
    """The installed chart's RBAC, asked of the real authorizer for every Deployment's and
    DaemonSet's service account."""
    apps = k8s.AppsV1Api(installed.client)
    workloads: list[Any] = [
        *apps.list_namespaced_deployment(NAMESPACE).items,
        *apps.list_namespaced_daemon_set(NAMESPACE).items,
    ]
    accounts = {w.spec.template.spec.service_account_name for w in workloads}
    # The extender's account is the chart's for scheduler.placement: extender; this install
    # places through the plugin, so no workload runs as it.
    assert accounts == {f"{FULL}-{n}" for n in ALLOWED if n != "extender"}
    for verb, resource, sub in ALLOWED[component]:
        assert allowed(installed, component, verb, resource, sub), (verb, resource, sub)
    for verb, resource, sub in DENIED[component]:
        assert not allowed(installed, component, verb, resource, sub), (verb, resource, sub)
    if component == "scheduler":  # its leader-election lease, in the release's namespace only
        auth = k8s.AuthorizationV1Api(installed.client)
        review = auth.create_subject_access_review(
            {
                "spec": {
                    "user": f"system:serviceaccount:{NAMESPACE}:{FULL}-scheduler",
                    "resourceAttributes": {
                        "verb": "update",
                        "group": "coordination.k8s.io",
                        "resource": "leases",
                        "namespace": NAMESPACE,
                    },
                }
            }
        )
        assert review.status.allowed


def test_down_stops_every_process_up_started(installed: Installed) -> None:
    pids = dict(installed.state.pids)
    assert all(Path(f"/proc/{pid}").exists() for pid in pids.values())
    dc.down(installed.state_path)
    wait_until(
        lambda: not [p for p in pids.values() if Path(f"/proc/{p}").exists() and not zombie(p)],
        30,
        "every process stopped",
    )
    assert not Path(installed.state.dir).exists()


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return False


# --- python -m api.bootstrap on bad input: one clear line, nothing stored -----------------------


def test_bootstrap_refuses_bad_token_files(tmp_path: Path) -> None:
    with pytest.raises(BootstrapError, match="cannot read"):
        read_token(tmp_path / "missing")
    for text in ("", "short", "tmc_" + "x" * 300, "tmc_abc def ghi jkl mno pqr stu"):
        (tmp_path / "t").write_text(text)
        with pytest.raises(BootstrapError, match="not a token"):
            read_token(tmp_path / "t")
    (tmp_path / "t").write_text("tmc_" + "a" * 43 + "\n")
    assert read_token(tmp_path / "t") == "tmc_" + "a" * 43  # a trailing newline is fine
    with pytest.raises(BootstrapError, match="unknown role 'root'"):
        parse_spec("root=x:/a")
    with pytest.raises(BootstrapError, match="ROLE=NAME:PATH"):
        parse_spec("operator=/a")
    assert parse_spec("agent=node-agent:/etc/tmc/agent/token") == TokenSpec(
        Role.agent, "node-agent", Path("/etc/tmc/agent/token")
    )
    done = subprocess.run(
        [sys.executable, "-m", "api.bootstrap", "--token", f"operator=x:{tmp_path / 'missing'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMC_DATABASE_URL": "sqlite:///" + str(tmp_path / "never.db")},
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"tmc bootstrap: {tmp_path / 'missing'}: cannot read the token file (No such file or "
        "directory)"
    ]
    assert not (tmp_path / "never.db").exists()  # every file is checked before the database


def test_one_token_cannot_change_role(sessions: sessionmaker[Session], tmp_path: Path) -> None:
    token = "tmc_" + base64.b32encode(os.urandom(25)).decode()
    spec = TokenSpec(Role.agent, "node-agent", tmp_path / "t")
    assert ensure_token(sessions, spec, token) == "created"
    assert ensure_token(sessions, spec, token) == "present"
    with pytest.raises(BootstrapError, match="stored with role 'agent'"):
        ensure_token(sessions, TokenSpec(Role.operator, "op", tmp_path / "t"), token)
