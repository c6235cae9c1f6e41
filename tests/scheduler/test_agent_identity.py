# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""A node agent proves its node with the service-account token the kubelet projects into its pod,
asked of a real kube-apiserver: the API (in-process, on PostgreSQL) reviews each such token with
the credentials of the chart's API service account (its RBAC rendered from the chart), and takes
the node the API server names in it. Tokens are the API server's own (TokenRequest, bound to the
agent DaemonSet's pod on its node, for the chart's audience, as the kubelet asks for them).
The last test runs the whole way: tmc-agent's pass posts to the API served by uvicorn."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils
from tmc_agent import serve
from tmc_agent.discover import discover
from tmc_agent.settings import AgentSettings

from api.app import create_app
from api.auth import Role, token_hash
from api.settings import Settings
from ledger import nodes as ledger_nodes
from ledger.types import NodeCapacity
from model.resources import GIB
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import ApiToken
from tests.agent import fakehost
from tests.agent.test_serve import FakeNodeApi, FakePods
from tests.agent.test_verification_runs import finished
from tests.fixtures.ledger import hold
from tests.fixtures.service import TOKENS, auth, example
from tests.scheduler.controlplane import (
    NAMESPACE,
    RELEASE,
    SERVICE_ACCOUNTS,
    ControlPlane,
    Unavailable,
    unavailable,
)
from tests.scheduler.controlplane import cluster as c
from tests.services import uvicorn_server

pytestmark = pytest.mark.slow

AUDIENCE = "tmc-api"  # the chart's agent.identity.audience
AGENTS = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNTS['agent']}"
NODES = ("node-a", "node-b")
RUNS = "/v1/workloads/graph500/verification-runs"


@dataclass
class Cluster:
    cp: ControlPlane
    admin: k8s.CoreV1Api
    # Credentials of the chart's API service account, as its pod would have them.
    api_kubeconfig: Path

    def token(
        self,
        account: str,
        pod: Any | None = None,
        audiences: tuple[str, ...] = (AUDIENCE,),
    ) -> str:
        """A token of `account`, bound to `pod` (and so to its node) when given, for
        `audiences`: what the kubelet's projected volume asks the API server for."""
        spec: dict[str, Any] = {"expirationSeconds": 3600, "audiences": list(audiences)}
        if pod is not None:
            spec["boundObjectRef"] = {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": pod.metadata.name,
                "uid": pod.metadata.uid,
            }
        made = self.admin.create_namespaced_service_account_token(
            account, NAMESPACE, {"spec": spec}
        )
        return str(made.status.token)

    def pod(self, name: str, node: str, account: str) -> Any:
        """A pod of `account` on `node` (no kubelet runs it: the token binding needs its
        object only)."""
        body = {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "serviceAccountName": account,
                "automountServiceAccountToken": False,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
        return self.admin.create_namespaced_pod(NAMESPACE, body)


def write_kubeconfig(cp: ControlPlane, token: str) -> Path:
    path = cp.dir / "tmc-api.kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {"server": cp.server, "certificate-authority": str(cp.dir / "ca.crt")},
            }
        ],
        "users": [{"name": "tmc-api", "user": {"token": token}}],
        "contexts": [{"name": "tmc-api", "context": {"cluster": "e2e", "user": "tmc-api"}}],
        "current-context": "tmc-api",
    }
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    try:
        cp = ControlPlane()
    except Unavailable as exc:
        unavailable(exc)
    try:
        cp.start()
        c.install_rbac(cp)  # the release's namespace and the agents' service account
        admin = c.core(cp)
        for node in NODES:
            c.register_node(admin, c.node_object(node))
        # The API's service account and its one right (create tokenreviews), from the chart.
        rendered = c.render_chart({})
        for doc in yaml.safe_load_all(rendered["tmc/templates/api.yaml"]):
            if doc and doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
                k8s_utils.create_from_dict(c.api_client(cp), doc, namespace=NAMESPACE)
        api_account = f"{RELEASE}-tmc-api"
        made = admin.create_namespaced_service_account_token(
            api_account, NAMESPACE, {"spec": {"expirationSeconds": 3600}}
        )
        yield Cluster(cp, admin, write_kubeconfig(cp, str(made.status.token)))
    finally:
        cp.close()


@dataclass
class Service:
    client: TestClient
    decision: dict[str, Any]

    def run(self, run_id: str) -> dict[str, Any]:
        v = self.decision["verification"]
        return {
            "run_id": run_id,
            "slow_ratio": v["next_slow_ratio"],
            "llc_ways": v["next_llc_ways"],
            "seconds": 120.0,
        }

    def report(self, token: str, run_id: str) -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        return self.client.post(RUNS, json=self.run(run_id), headers=headers)


def service_for(cluster: Cluster, settings: Settings, **extra: Any) -> Iterator[Service]:
    """The API configured for the agents' tokens, with graph500 profiled, recommended, and one
    pod of its decision placed on each node (`pod-on-node-a`, `pod-on-node-b`)."""
    configured = settings.model_copy(
        update={
            "kubernetes_agent_account": AGENTS,
            "kubernetes_token_audience": AUDIENCE,
            "kubeconfig": str(cluster.api_kubeconfig),
            **extra,
        }
    )
    sessions = make_session_factory(make_engine(settings))
    with unit_of_work(sessions) as session:
        for role, token in TOKENS.items():
            session.add(ApiToken(name=f"t-{role}", role=role.value, token_hash=token_hash(token)))
        # A tmc token made for node-a (`tmc token create --role agent --node node-a`).
        session.add(
            ApiToken(name="a", role="agent", token_hash=token_hash("tmc_node_a"), node="node-a")
        )
    with TestClient(create_app(configured), raise_server_exceptions=False) as client:
        headers = {**auth(Role.operator), "Content-Type": "application/json"}
        assert client.post("/v1/profiles", content=example("graph500"), headers=headers).is_success
        answer = client.post(
            "/recommend", headers=auth(Role.scheduler), json={"workload": "graph500"}
        )
        assert answer.status_code == 200, answer.text
        decision = {**answer.json()["recommendation"], "id": answer.json()["id"]}
        v = decision["verification"]
        with unit_of_work(sessions) as session:
            for node in NODES:
                ledger_nodes.register_node(
                    session, NodeCapacity(node, "k", 64, 1024 * GIB, 1024 * GIB, 64, None)
                )
                hold(
                    session,
                    node,
                    f"pod-on-{node}",
                    dram_bytes=GIB,
                    llc_mask=(1 << v["next_llc_ways"]) - 1,
                    recommendation_id=decision["id"],
                    slow_ratio=v["next_slow_ratio"],
                )
        yield Service(client, decision)


@pytest.fixture
def service(cluster: Cluster, settings: Settings) -> Iterator[Service]:
    yield from service_for(cluster, settings)


def is_problem(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return str(response.json()["detail"])


def test_an_agents_projected_token_reports_the_runs_of_its_own_node(
    cluster: Cluster, service: Service
) -> None:
    node_a = cluster.token(SERVICE_ACCOUNTS["agent"], c.agent_pod(cluster.admin, "node-a"))
    created = service.report(node_a, "pod-on-node-a")
    assert created.status_code == 201, created.text
    assert created.json()["run_id"] == "pod-on-node-a"
    # Again (from the kept review this time): the same run, idempotent.
    again = service.report(node_a, "pod-on-node-a")
    assert again.status_code == 200 and again.json()["id"] == created.json()["id"]
    # A pod that ran on another node is not node-a's to report.
    why = is_problem(service.report(node_a, "pod-on-node-b"), 403)
    assert "node node-a" in why and "node-b" in why
    node_b = cluster.token(SERVICE_ACCOUNTS["agent"], c.agent_pod(cluster.admin, "node-b"))
    assert service.report(node_b, "pod-on-node-b").status_code == 201


def test_tokens_that_are_not_a_node_agents_are_refused(cluster: Cluster, service: Service) -> None:
    # Another service account, even one bound to a pod on the node.
    cluster.admin.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "intruder"}})
    intruder_pod = cluster.pod("intruder-on-node-a", "node-a", "intruder")
    intruder = cluster.token("intruder", intruder_pod)
    assert "not the node agents'" in is_problem(service.report(intruder, "pod-on-node-a"), 401)
    # The agents' account, bound to no pod: the API server names no node.
    unbound = cluster.token(SERVICE_ACCOUNTS["agent"])
    assert "names no node" in is_problem(service.report(unbound, "pod-on-node-a"), 401)
    # The agent pod's token for the API server itself (what the kubelet mounts by default).
    for_kubernetes = c.node_bound_token(cluster.cp, "node-a")
    is_problem(service.report(for_kubernetes, "pod-on-node-a"), 401)
    # A token signed by someone else: the API server does not authenticate it.
    good = cluster.token(SERVICE_ACCOUNTS["agent"], c.agent_pod(cluster.admin, "node-a"))
    head, claims, _sig = good.split(".")
    forged = f"{head}.{claims}.AAAA"
    assert "did not authenticate" in is_problem(service.report(forged, "pod-on-node-a"), 401)
    # Garbage: refused at once, without asking the API server.
    started = time.monotonic()
    response = service.report("garbage-token", "pod-on-node-a")
    assert time.monotonic() - started < 0.5
    is_problem(response, 401)
    assert response.headers["www-authenticate"] == "Bearer"
    listed = service.client.get(RUNS, headers=auth(Role.viewer)).json()
    assert listed == []


def test_tmc_tokens_work_as_before(service: Service) -> None:
    assert service.report("tmc_node_a", "pod-on-node-a").status_code == 201
    # The shared agent token names no node: it reports no run.
    why = is_problem(service.report(TOKENS[Role.agent], "pod-on-node-b"), 403)
    assert "names no node" in why
    unknown = service.report("tmc_not_minted", "pod-on-node-b")
    assert "unknown or revoked" in is_problem(unknown, 401)


def test_a_deleted_agent_pods_token_stops_working(cluster: Cluster, settings: Settings) -> None:
    """Nothing kept (cache 0 s): the API server's word at each request, so the token of a pod
    that is gone is refused at once."""
    for service in service_for(cluster, settings, token_review_cache_seconds=0):
        pod = cluster.pod(
            f"{SERVICE_ACCOUNTS['agent']}-replaced", "node-a", SERVICE_ACCOUNTS["agent"]
        )
        token = cluster.token(SERVICE_ACCOUNTS["agent"], pod)
        assert service.report(token, "pod-on-node-a").status_code == 201
        cluster.admin.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
        for _ in range(50):  # the pod's removal reaches the authenticator's cache
            if service.report(token, "pod-on-node-a").status_code == 401:
                break
            time.sleep(0.2)
        is_problem(service.report(token, "pod-on-node-a"), 401)


def test_the_agent_reports_its_nodes_run_with_its_projected_token(
    cluster: Cluster, settings: Settings, tmp_path: Path
) -> None:
    """End to end: tmc-agent's pass (its projected token file holds the token the kubelet
    would put there) → the API served by uvicorn → the API server's review → a stored run. The
    shared tmc token beside it names no node and would be refused: the projected one is sent."""
    assert settings.redis_url is not None
    env = {
        "TMC_ENVIRONMENT": "test",
        "TMC_DATABASE_URL": settings.database_url,
        "TMC_REDIS_URL": settings.redis_url,
        "TMC_KUBERNETES_AGENT_ACCOUNT": AGENTS,
        "TMC_KUBERNETES_TOKEN_AUDIENCE": AUDIENCE,
        "TMC_KUBECONFIG": str(cluster.api_kubeconfig),
    }
    for service in service_for(cluster, settings):
        sessions = make_session_factory(make_engine(settings))
        with unit_of_work(sessions) as session:
            # The pod the agent saw finish, as the engine placed it on node-a.
            hold(
                session,
                "node-a",
                "0000-good",
                pod_name="verify-graph500",
                dram_bytes=4 << 30,
                slow_bytes=12 << 30,
                llc_mask=0xF,
                recommendation_id=service.decision["id"],
                slow_ratio=0.75,
            )
        projected = tmp_path / "tmc-api" / "token"
        projected.parent.mkdir()
        projected.write_text(
            cluster.token(SERVICE_ACCOUNTS["agent"], c.agent_pod(cluster.admin, "node-a"))
        )
        shared = tmp_path / "token"
        shared.write_text(TOKENS[Role.agent])
        paths = fakehost.optane_host(tmp_path / "host")
        pods = FakePods(finished("0000-good", "verify-graph500"))
        with uvicorn_server(env) as base:
            agent_settings = AgentSettings(
                node_name="node-a",
                paths=paths,
                plan_dir=tmp_path / "plans",
                service_url=base,
                projected_token_file=projected,
                token_file=shared,
            )
            agent = serve.Agent(agent_settings, FakeNodeApi(), pods, discover(paths))
            outcomes = agent.report_runs(agent.sync().finished)
        assert outcomes == {"default/verify-graph500": "verification run of 90.500 s reported"}
        listed = service.client.get(RUNS, headers=auth(Role.viewer)).json()
        assert [r["run_id"] for r in listed] == ["0000-good"]
