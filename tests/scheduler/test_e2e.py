# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""End to end with a real control plane, every hop its own process: etcd, kube-apiserver and
kube-scheduler (the chart's own KubeSchedulerConfiguration, the chart's RBAC), the extender
(`python -m scheduler`) on a real PostgreSQL ledger, and `tmc-agent serve` per fake node (fake
sysfs/resctrl/cgroup trees: the hardware this machine lacks).

The control plane is built from Go modules by controlplane/build.sh (cached outside the
repository). Where it cannot be built the tests skip with the reason, except in CI (CI=true),
where that is a failure: these tests are what proves the cluster half.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils
from sqlalchemy.orm import Session, sessionmaker

from api.settings import Settings
from model.node_contract import Placement, parse_plan_file
from store.db import make_engine, make_session_factory
from tests.fixtures.database import empty_tables
from tests.scheduler.conftest import upload_example
from tests.scheduler.controlplane import NAMESPACE, SERVICE_ACCOUNTS, ControlPlane, Unavailable
from tests.scheduler.controlplane import cluster as c
from tests.services import PostgresServer, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    try:
        cp = ControlPlane()
    except Unavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run the real control plane: {exc}")
        pytest.skip(f"no real control plane here: {exc}")
    cp.start()
    c.install_rbac(cp)
    yield cp
    cp.close()


class Stack:
    """The running placement path of one test module."""

    def __init__(self, cp: ControlPlane, pg: PostgresServer) -> None:
        self.cp = cp
        self.pg = pg
        self.api = c.core(cp)
        self.nodes = c.default_nodes(cp)
        self.extender = c.ExtenderProcess(cp, pg.url)
        self.sessions: sessionmaker[Session] = make_session_factory(
            make_engine(Settings(environment="test", database_url=pg.url))
        )

    @property
    def dsn(self) -> str:
        return self.pg.dsn()

    def logs(self) -> str:
        names = ["extender", "kube-scheduler"] + [f"agent-{n.name}" for n in self.nodes]
        return c.dump_logs(self.cp, names)


@pytest.fixture(scope="module")
def stack(plane: ControlPlane, postgres: PostgresServer) -> Iterator[Stack]:
    empty_tables(postgres.dsn())
    s = Stack(plane, postgres)
    for node in s.nodes:
        c.register_node(s.api, c.node_object(node.name))
        node.start_agent()
    c.wait_published(s.api, [n.name for n in s.nodes])
    upload_example(s.sessions, "graph500")
    s.extender.start()
    plane.start_scheduler(c.scheduler_config(plane, s.extender.url))
    yield s
    for node in s.nodes:
        node.stop_agent()
    s.extender.stop()
    plane.stop_process("kube-scheduler")


@pytest.fixture
def ns(stack: Stack, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace per test; its pods are deleted (and their reservations released) after it."""
    name = c.new_namespace(stack.api, request.node.name.replace("_", "-")[:50].strip("-"))
    yield name
    stack.api.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    wait_until(
        lambda: not any(k.startswith(name + "/") for k in c.reservations(stack.dsn)),
        60,
        f"reservations of {name} released",
    )


def placed(stack: Stack, names: list[str], ns: str, timeout: float = 90) -> dict[str, Any]:
    """The pods once all are bound; on a timeout, the components' logs say why."""
    try:
        return c.bound_pods(stack.api, names, ns, timeout)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{stack.logs()}") from exc


def node_of(stack: Stack, name: str) -> c.FakeNode:
    return next(n for n in stack.nodes if n.name == name)


def test_the_example_pod_is_placed_and_its_plan_reaches_the_node(stack: Stack, ns: str) -> None:
    """deploy/examples/tiered-pod.yaml: recommended, filtered, prioritized, bound, annotated;
    the agent of its node applies the per-structure plan and the CAT mask; deleting the pod
    releases the reservation and removes the resctrl group and the plan file."""
    body = c.example_pod()
    c.create_pods(stack.api, [body], ns)
    name = body["metadata"]["name"]
    pod = placed(stack, [name], ns)[name]
    placement = Placement.from_annotations(pod.metadata.annotations)
    assert placement is not None
    assert placement.fallback is None, placement.fallback
    assert placement.node == pod.spec.node_name
    assert placement.objective == "slo:5%"
    assert placement.recommendation_id
    # The per-structure plan: graph500's tagged structures with their fast and slow bytes.
    assert len(placement.plan) >= 2
    conf = placement.configuration
    assert sum(s.fast_bytes for s in placement.plan) == conf.dram_bytes
    assert sum(s.slow_bytes for s in placement.plan) == conf.slow_bytes
    held = c.reservations(stack.dsn)[f"{ns}/{name}"]
    assert held["node"] == placement.node and int(held["mask"]) == placement.llc_mask_bits

    # The decision log has the same decision.
    with psycopg.connect(stack.dsn) as conn:
        row = conn.execute(
            "SELECT slow_ratio, llc_ways FROM recommendations WHERE id = %s",
            (placement.recommendation_id,),
        ).fetchone()
    assert row is not None and row[1] == conf.llc_ways
    # kube-scheduler's requests were read as bytes, never parsed name by name.
    metrics = stack.extender.metrics()
    assert 'tmc_extender_node_lists_total{read="bytes"}' in metrics
    assert 'tmc_extender_node_lists_total{read="parsed"}' not in metrics

    node = node_of(stack, placement.node)
    uid = pod.metadata.uid
    cgroup = node.kubelet_starts(uid, threads=[4242, 4243])
    plan_path = node.plans / f"{uid}.plan"
    group = node.resctrl / f"tmc-pod-{uid}"
    try:
        wait_until(
            lambda: plan_path.exists() and (group / "schemata").exists(),
            30,
            "the agent applying it",
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{stack.logs()}") from exc
    plan = parse_plan_file(plan_path.read_text())
    assert plan.fast_bytes == {s.tag: s.fast_bytes for s in placement.plan}
    assert plan.slow_bytes == {s.tag: s.slow_bytes for s in placement.plan}
    assert (group / "schemata").read_text().strip() == "L3:" + ";".join(
        f"{d}={placement.llc_mask_bits:x}" for d in (0, 1)
    )
    wait_until(lambda: "4242" in (group / "tasks").read_text(), 30, "threads in the group")
    wait_until(
        lambda: (
            (cgroup / "memory.max").read_text().strip() == str(conf.dram_bytes + conf.slow_bytes)
        ),
        30,
        "memory.max",
    )

    stack.api.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    wait_until(lambda: f"{ns}/{name}" not in c.reservations(stack.dsn), 30, "release")
    wait_until(lambda: not plan_path.exists() and not group.exists(), 30, "the agent cleaning up")


def test_fallbacks_and_disjoint_masks(stack: Stack, ns: str) -> None:
    names = [f"g{i}" for i in range(6)] + ["unprofiled", "anonymous"]
    bodies = [
        c.opted_in_pod(
            n, "graph500" if n.startswith("g") else ("nope" if n == "unprofiled" else None)
        )
        for n in names
    ]
    c.create_pods(stack.api, bodies, ns)
    pods = placed(stack, names, ns)
    held = c.reservations(stack.dsn)
    assert {k for k in held if k.startswith(ns + "/")} == {f"{ns}/{n}" for n in names}
    assert c.overcommitted(stack.dsn) == []
    for name, p in pods.items():
        placement = Placement.from_annotations(p.metadata.annotations)
        assert placement is not None and placement.node == p.spec.node_name
        assert (placement.fallback is None) == name.startswith("g")
        if placement.fallback is not None:
            assert placement.plan == [] and placement.configuration.slow_bytes == 0
        if placement.configuration.slow_bytes > 0:
            assert p.spec.node_name != "dram-only"


def test_extender_killed_mid_burst_and_restarted(stack: Stack, ns: str) -> None:
    """SIGKILL while binds are in flight, a pod deleted and a ledger row lost while it is down:
    after the restart no pod is bound twice, nothing leaks, the lost row is restored."""
    names = [f"b{i}" for i in range(24)]
    creator = threading.Thread(
        target=c.create_pods,
        args=(stack.api, [c.opted_in_pod(n, "graph500") for n in names], ns),
    )
    creator.start()
    wait_until(
        lambda: sum(1 for k in c.reservations(stack.dsn) if k.startswith(ns + "/")) >= 4,
        60,
        "some binds",
    )
    stack.extender.kill()
    creator.join()
    bound_now = [p for p in stack.api.list_namespaced_pod(ns).items if p.spec.node_name]
    assert bound_now, "some pods were bound before the kill"
    gone, lost = str(bound_now[0].metadata.name), str(bound_now[-1].metadata.name)
    stack.api.delete_namespaced_pod(gone, ns, grace_period_seconds=0)
    with psycopg.connect(stack.dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM reservations WHERE namespace = %s AND pod_name = %s", (ns, lost))
    stack.extender.start()
    left = [n for n in names if n != gone]
    pods = placed(stack, left, ns, timeout=120)
    held = {k: v for k, v in c.reservations(stack.dsn).items() if k.startswith(ns + "/")}
    assert set(held) == {f"{ns}/{n}" for n in left}, "no leak, nothing missing"
    for n in left:  # each pod bound once, where its ledger row says
        assert held[f"{ns}/{n}"]["node"] == pods[n].spec.node_name
        assert held[f"{ns}/{n}"]["uid"] == pods[n].metadata.uid
    assert c.overcommitted(stack.dsn) == []


def test_kube_scheduler_restarted(stack: Stack, ns: str) -> None:
    stack.cp.stop_process("kube-scheduler")
    c.create_pods(stack.api, [c.opted_in_pod(f"s{i}", "graph500") for i in range(4)], ns)
    time.sleep(1)
    assert not any(p.spec.node_name for p in stack.api.list_namespaced_pod(ns).items)
    stack.cp.start_scheduler(c.scheduler_config(stack.cp, stack.extender.url))
    placed(stack, [f"s{i}" for i in range(4)], ns)
    assert c.overcommitted(stack.dsn) == []


def test_postgres_restarted(stack: Stack, ns: str) -> None:
    """With the ledger down, binds fail and kube-scheduler retries; nothing is bound without a
    reservation, and once PostgreSQL is back every pod is placed."""
    stack.pg.stop()
    try:
        c.create_pods(stack.api, [c.opted_in_pod(f"p{i}", "graph500") for i in range(4)], ns)
        time.sleep(3)
        assert not any(p.spec.node_name for p in stack.api.list_namespaced_pod(ns).items)
    finally:
        stack.pg.start()
    pods = placed(stack, [f"p{i}" for i in range(4)], ns, timeout=120)
    held = c.reservations(stack.dsn)
    for name, p in pods.items():
        assert held[f"{ns}/{name}"]["node"] == p.spec.node_name
    assert c.overcommitted(stack.dsn) == []


def test_api_service_down_does_not_stop_placement(stack: Stack, ns: str) -> None:
    """The extender asks the service layer in-process (api.decisions), so the API service's
    pods are not on the placement path: this stack runs none at all, and pods still get
    recommendations (not fallbacks) that land in the decision log."""
    c.create_pods(stack.api, [c.opted_in_pod(f"a{i}", "graph500") for i in range(3)], ns)
    pods = placed(stack, [f"a{i}" for i in range(3)], ns)
    for p in pods.values():
        placement = Placement.from_annotations(p.metadata.annotations)
        assert placement is not None and placement.fallback is None
        with psycopg.connect(stack.dsn) as conn:
            logged = conn.execute(
                "SELECT 1 FROM recommendations WHERE id = %s", (placement.recommendation_id,)
            ).fetchone()
        assert logged is not None


def test_two_replicas_share_the_ledger_under_a_burst(stack: Stack, ns: str) -> None:
    """Two extender replicas behind one Service (requests alternate between them), 200 pods at
    once: no node's CPUs, DRAM, slow memory, pool or LLC ways are over-committed, and the
    ledger is exactly the bound pods."""
    second = c.ExtenderProcess(stack.cp, stack.pg.url, name="extender-2")
    second.start()
    service = c.RoundRobinService([stack.extender.port, second.port], stack.cp.extender_tls)
    try:
        stack.cp.start_scheduler(c.scheduler_config(stack.cp, service.url))
        names = [f"r{i}" for i in range(200)]
        # Far more than fits: DRAM, ways and CPUs all run out on some node, the pool is shared.
        c.create_pods(stack.api, [c.opted_in_pod(n, "graph500") for n in names], ns)
        wait_until(lambda: _stable_bound(stack, ns, 8.0), 240, "the burst placed as far as it fits")
        pods = {str(p.metadata.name): p for p in stack.api.list_namespaced_pod(ns).items}
        bound = {n for n, p in pods.items() if p.spec.node_name}
        held = {
            k.split("/", 1)[1]: v
            for k, v in c.reservations(stack.dsn).items()
            if k.startswith(ns + "/")
        }
        assert set(held) >= bound
        stale = set(held) - bound  # a bind in flight has a row before its Binding
        assert len(stale) <= 2, stale
        for n in bound:
            assert held[n]["node"] == pods[n].spec.node_name
        assert c.overcommitted(stack.dsn) == []
        assert min(service.calls) > 50, service.calls  # both replicas did real work
    finally:
        stack.cp.start_scheduler(c.scheduler_config(stack.cp, stack.extender.url))
        service.close()
        second.stop()


def _stable_bound(stack: Stack, ns: str, quiet_seconds: float) -> bool:
    """True once the number of bound pods has not changed for `quiet_seconds`."""
    count = len([p for p in stack.api.list_namespaced_pod(ns).items if p.spec.node_name])
    now = time.monotonic()
    last = _seen.get(ns)
    if last is None or last[0] != count:
        _seen[ns] = (count, now)
        return False
    return count > 0 and now - last[1] >= quiet_seconds


_seen: dict[str, tuple[int, float]] = {}


def test_pending_pod_waits_for_room_then_binds(stack: Stack, ns: str) -> None:
    """A pod that fits nowhere now stays pending with the extender's reasons and is placed
    when a reservation is released."""
    big = [c.opted_in_pod(f"big{i}", None, cpu="12") for i in range(4)]
    c.create_pods(stack.api, big, ns)
    placed(stack, [f"big{i}" for i in range(4)], ns)
    c.create_pods(stack.api, [c.opted_in_pod("late", None, cpu="12")], ns)
    time.sleep(2)
    assert not stack.api.read_namespaced_pod("late", ns).spec.node_name
    stack.api.delete_namespaced_pod("big0", ns, grace_period_seconds=0)
    placed(stack, ["late"], ns, timeout=120)
    assert c.overcommitted(stack.dsn) == []


def test_the_rendered_chart_is_accepted_by_the_real_api_server(stack: Stack) -> None:
    """Every manifest of the chart (defaults: TLS, NetworkPolicy), created with server-side
    dry run in the chart's namespace: the API server's own validation and admission accept it.
    The ServiceMonitor is a CRD this control plane does not have."""
    client = c.api_client(stack.cp)
    rendered = c.render_chart({})
    created = 0
    for name, text in rendered.items():
        for doc in yaml.safe_load_all(text):
            if not doc or doc["kind"] == "ServiceMonitor" or name.endswith("rbac.yaml"):
                continue
            k8s_utils.create_from_dict(client, doc, namespace=NAMESPACE, dry_run="All")
            created += 1
    assert created >= 10


@pytest.mark.parametrize(
    ("user", "verb", "resource", "subresource", "allowed"),
    [
        ("extender", "create", "pods", "binding", True),
        ("extender", "patch", "pods", "", True),
        ("extender", "watch", "nodes", "", True),
        ("extender", "delete", "pods", "", False),
        ("extender", "patch", "nodes", "", False),
        ("extender", "get", "secrets", "", False),
        ("agent", "patch", "nodes", "", True),
        ("agent", "list", "pods", "", True),
        ("agent", "patch", "pods", "", False),
        ("agent", "create", "pods", "binding", False),
        ("agent", "get", "secrets", "", False),
    ],
)
def test_each_component_may_do_what_its_code_calls_and_no_more(
    stack: Stack, user: str, verb: str, resource: str, subresource: str, allowed: bool
) -> None:
    """The chart's RBAC, asked of the real authorizer for each component's service account."""
    auth = k8s.AuthorizationV1Api(c.api_client(stack.cp))
    review = auth.create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNTS[user]}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
                "resourceAttributes": {
                    "verb": verb,
                    "resource": resource,
                    "subresource": subresource,
                    "namespace": "default",
                },
            },
        }
    )
    assert review.status.allowed is allowed, review.status
