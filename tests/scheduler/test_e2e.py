# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""The extender front door end to end, every hop its own process: etcd, kube-apiserver and the
stock kube-scheduler (the chart's extender KubeSchedulerConfiguration: mutual TLS,
nodeCacheCapable, managedResources; the chart's RBAC) calling tmc-extender (the Go engine, built
from scheduler/plugin with tmc-scheduler), the recommendation publisher on a real PostgreSQL
(publishing TieredRecommendations, mirroring the bound pods into the ledger), and
`tmc-agent serve` and `tmc-nri reconcile` (the node's applier without NRI) per fake node (fake
sysfs/resctrl/cgroup trees: the hardware this machine lacks). As on the plugin's path, nothing on the placement path calls the service or PostgreSQL.

The control plane is built from Go modules by controlplane/build.sh (cached outside the
repository). Where it cannot be built the tests skip with the reason, except in CI (CI=true),
where that is a failure: these tests are what proves the cluster half.
"""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from model.node_contract import Placement, parse_plan_file
from tests.fixtures.database import empty_tables
from tests.scheduler.conftest import upload_example
from tests.scheduler.controlplane import (
    NAMESPACE,
    SERVICE_ACCOUNTS,
    ControlPlane,
    faults,
)
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import patterns as planned
from tests.scheduler.controlplane import plugin as plugin_path
from tests.scheduler.controlplane.goextender import GoExtenderProcess
from tests.services import PostgresServer, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    cp = (
        plugin_path.start_plugin_plane()
    )  # builds tmc-extender too; the CRD and the publisher's RBAC
    c.use_ecdsa_extender_certificates(cp)  # the key type the chart makes
    yield cp
    cp.close()


class Stack(c.PlacementStack):
    """The extender's placement path of one test module."""

    process_logs = ("publisher", "tmc-extender", "kube-scheduler")

    def __init__(self, cp: ControlPlane, pg: PostgresServer) -> None:
        super().__init__(cp, pg)
        self.publisher = plugin_path.PublisherProcess(cp, pg.url)
        self.extender = GoExtenderProcess(cp)


@pytest.fixture(scope="module")
def stack(plane: ControlPlane, postgres: PostgresServer) -> Iterator[Stack]:
    empty_tables(postgres.dsn())
    s = Stack(plane, postgres)
    s.start_nodes()
    s.publisher.start()
    s.publisher.wait_ready()
    s.extender.start()
    plane.start_scheduler(c.scheduler_config(plane, s.extender.url))
    yield s
    s.stop_nodes()
    s.publisher.stop()
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


@pytest.fixture
def door(stack: Stack) -> faults.Door:
    """This stack as the fault scenarios both doors run (controlplane/faults.py) see it."""
    return faults.Door(stack, stack.publisher, "tmc-extender", lambda ns: mirrored(stack, ns, 90))


def test_pods_follow_the_adopted_plans_machine_patterns(
    stack: Stack, ns: str, tmp_path: Path
) -> None:
    """A capacity plan's machines adopted as node patterns (`tmc plan patterns apply` against
    the API server): a graph500 and an xsbench pod each land on the node whose pattern holds
    its workload, where kube-scheduler with the extender, without patterns, placed it elsewhere
    (tests/scheduler/controlplane/patterns.py)."""
    upload_example(stack.sessions, "xsbench")
    try:
        planned.follow_the_plan(
            stack.cp, stack.api, ns, lambda names, n: placed(stack, names, n), tmp_path
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stack.logs()}") from exc


def node_of(stack: Stack, name: str) -> c.FakeNode:
    return next(n for n in stack.nodes if n.name == name)


def in_ns(held: dict[str, dict[str, Any]], ns: str) -> dict[str, tuple[str, str, int]]:
    return {
        k: (v["uid"], v["node"], int(v["mask"])) for k, v in held.items() if k.startswith(ns + "/")
    }


def mirrored(stack: Stack, ns: str, timeout: float = 60) -> dict[str, tuple[str, str, int]]:
    """Once the ledger's mirror of the namespace equals its bound pods' placements (uid, node,
    ways), that picture; the mirror trails the watch by a batch."""
    truth: dict[str, tuple[str, str, int]] = {}

    def equal() -> bool:
        truth.clear()
        truth.update(in_ns(c.placements(stack.api), ns))
        return in_ns(c.reservations(stack.dsn), ns) == truth

    try:
        wait_until(equal, timeout, f"the ledger mirroring the bound pods of {ns}")
    except TimeoutError as exc:
        mirror = in_ns(c.reservations(stack.dsn), ns)
        raise AssertionError(f"{exc}: API {truth}, mirror {mirror}\n{stack.logs()}") from exc
    return truth


def test_the_example_pod_is_placed_and_its_plan_reaches_the_node(stack: Stack, ns: str) -> None:
    """deploy/examples/tiered-pod.yaml: recommended, filtered, prioritized, bound, annotated;
    tmc-nri reconcile on its node applies the per-structure plan, the CAT mask and the memory
    limit; deleting the pod releases the reservation, and reconcile removes the resctrl group
    and the plan file."""
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
    # The per-structure plan: graph500's tagged structures with their fast and slow bytes,
    # carried by the placement (planByReference is off by default).
    assert placement.plan_from is None, placement
    structures = c.plan_of(stack.cp, placement)
    assert len(structures) >= 2
    conf = placement.configuration
    assert sum(s.fast_bytes for s in structures) == conf.dram_bytes
    assert sum(s.slow_bytes for s in structures) == conf.slow_bytes
    uid = pod.metadata.uid
    assert mirrored(stack, ns) == {f"{ns}/{name}": (uid, placement.node, placement.llc_mask_bits)}
    with psycopg.connect(stack.dsn) as conn:  # the evidence a verification run is checked against
        logged = conn.execute(
            "SELECT node_name, recommendation_id, llc_ways FROM placement_log WHERE pod_uid = %s",
            (uid,),
        ).fetchone()
    assert logged == (placement.node, placement.recommendation_id, conf.llc_ways)

    # The decision log has the same decision.
    with psycopg.connect(stack.dsn) as conn:
        row = conn.execute(
            "SELECT slow_ratio, llc_ways FROM recommendations WHERE id = %s",
            (placement.recommendation_id,),
        ).fetchone()
    assert row is not None and row[1] == conf.llc_ways

    node = node_of(stack, placement.node)
    cgroup = node.kubelet_starts(uid, threads=[4242, 4243])
    plan_path = node.plans / f"{uid}.plan"
    group = node.resctrl / f"tmc-pod-{uid}"
    try:
        wait_until(
            lambda: plan_path.exists() and (group / "schemata").exists(),
            30,
            "tmc-nri reconcile applying it",
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{stack.logs()}") from exc
    plan = parse_plan_file(plan_path.read_text())
    assert plan.fast_bytes == {s.tag: s.fast_bytes for s in structures}
    assert plan.slow_bytes == {s.tag: s.slow_bytes for s in structures}
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
    wait_until(
        lambda: not plan_path.exists() and not group.exists(), 30, "tmc-nri reconcile cleaning up"
    )


def test_each_pod_is_given_its_own_request_split_by_the_recommendation(
    stack: Stack, ns: str
) -> None:
    """A profile traced at 4480 MiB, pods requesting 8 GiB and 2 GiB: through the extender each
    is given its own request in all, split by the recommended ratio and plan shares; the one
    below its profile's footprint is told so."""
    c.create_pods(stack.api, c.sized_pods(), ns)
    c.check_given_their_requests(stack.cp, stack.dsn, placed(stack, list(c.SIZED_PODS), ns))
    c.check_told_below_their_profile(stack.api, ns, "tmc-extender")


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
    assert set(mirrored(stack, ns)) == {f"{ns}/{n}" for n in names}
    assert c.overcommitted_on_the_api_server(stack.api) == []
    assert c.overcommitted(stack.dsn) == []
    for name, p in pods.items():
        placement = Placement.from_annotations(p.metadata.annotations)
        assert placement is not None and placement.node == p.spec.node_name
        assert (placement.fallback is None) == name.startswith("g")
        if placement.fallback is not None:
            assert placement.plan == [] and placement.configuration.slow_bytes == 0
        if placement.configuration.slow_bytes > 0:
            assert p.spec.node_name != "dram-only"


def test_the_verbs_refuse_a_caller_without_the_schedulers_certificate(stack: Stack) -> None:
    """A probe (the CA trusted, no client certificate) reads /readyz but not the verbs."""
    ctx = c.probe_tls(stack.extender.tls)
    body = json.dumps({"Pod": c.opted_in_pod("x", "graph500"), "NodeNames": [], "Nodes": None})
    request = urllib.request.Request(
        stack.extender.url + "/filter", data=body.encode(), method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5, context=ctx)
    assert refused.value.code == 401
    assert "client certificate" in json.loads(refused.value.read())["Error"]
    other = ssl.create_default_context(cafile=str(stack.extender.tls / "ca.crt"))
    with urllib.request.urlopen(
        stack.extender.url.replace("/scheduler", "/readyz"), timeout=5, context=other
    ) as ok:
        assert ok.status == 200


def test_extender_killed_mid_burst_and_restarted(stack: Stack, ns: str) -> None:
    """tmc-extender SIGKILLed while binds are in flight and a pod deleted while it is down:
    after the restart (its cache rebuilt from the API server) every pod is placed with its
    recommendation, none twice, nothing is over-committed, and the mirror (the publisher's,
    which kept running) equals the bound pods: no leak."""
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
    gone = str(bound_now[0].metadata.name)
    stack.api.delete_namespaced_pod(gone, ns, grace_period_seconds=0)
    stack.extender.start()
    left = [n for n in names if n != gone]
    pods = placed(stack, left, ns, timeout=120)
    assert all(
        (q := Placement.from_annotations(pod.metadata.annotations)) is not None
        and q.fallback is None
        for pod in pods.values()
    )
    held = mirrored(stack, ns)
    assert set(held) == {f"{ns}/{n}" for n in left}, "no leak, nothing missing"
    for n in left:  # each pod bound once, where its ledger row says
        assert held[f"{ns}/{n}"][:2] == (pods[n].metadata.uid, pods[n].spec.node_name)
    assert c.overcommitted_on_the_api_server(stack.api) == []
    assert c.overcommitted(stack.dsn) == []


def test_kube_scheduler_restarted(stack: Stack, ns: str) -> None:
    stack.cp.stop_process("kube-scheduler")
    c.create_pods(stack.api, [c.opted_in_pod(f"s{i}", "graph500") for i in range(4)], ns)
    time.sleep(1)
    assert not any(p.spec.node_name for p in stack.api.list_namespaced_pod(ns).items)
    stack.cp.start_scheduler(c.scheduler_config(stack.cp, stack.extender.url))
    placed(stack, [f"s{i}" for i in range(4)], ns)
    assert c.overcommitted(stack.dsn) == []


def test_postgres_down_during_a_burst(stack: Stack, ns: str) -> None:
    """PostgreSQL stopped in the middle of a burst: pods of a published pair are still placed
    with its recommendation (the engine reads the published object, never the database),
    nothing is over-committed, and once PostgreSQL is back the mirror equals the bound pods,
    a pod deleted while it was down included."""
    c.create_pods(stack.api, [c.opted_in_pod("warm", "graph500")], ns)
    warm = Placement.from_annotations(placed(stack, ["warm"], ns)["warm"].metadata.annotations)
    assert warm is not None and warm.fallback is None
    names = [f"p{i}" for i in range(12)]
    creator = threading.Thread(
        target=c.create_pods,
        args=(stack.api, [c.opted_in_pod(n, "graph500") for n in names], ns),
    )
    creator.start()
    stack.pg.stop()
    try:
        creator.join()
        pods = placed(stack, names, ns, timeout=120)
        stack.api.delete_namespaced_pod("warm", ns, grace_period_seconds=0)
        for p in pods.values():
            placement = Placement.from_annotations(p.metadata.annotations)
            assert placement is not None and placement.fallback is None
            assert placement.recommendation_id == warm.recommendation_id
        assert c.overcommitted_on_the_api_server(stack.api) == []
    finally:
        stack.pg.start()
    held = mirrored(stack, ns, timeout=90)
    assert set(held) == {f"{ns}/{n}" for n in names}
    assert c.overcommitted(stack.dsn) == []


def test_api_service_down_does_not_stop_placement(door: faults.Door, ns: str) -> None:
    """No API service at all: pods still get recommendations that land in the decision log
    (faults.no_api_service; test_plugin_e2e.py runs the same through tmc-scheduler)."""
    faults.no_api_service(door, ns)


def test_the_publisher_down_places_published_pairs_and_waits_for_the_others(
    door: faults.Door, ns: str
) -> None:
    """The publisher stopped: a published pair's pod is placed with its recommendation, an
    unpublished pair's pod waits and is placed once the publisher is back (faults.publisher_down;
    test_plugin_e2e.py runs the same through tmc-scheduler). The extender cannot keep the waiting
    pod out of kube-scheduler's queue: its filter answers the wait as an error, so the pod shows
    FailedScheduling events naming the pair, retried on backoff, where the plugin's shows one
    WaitingForRecommendation (docs/scheduler.md, "Waiting for a recommendation")."""
    faults.publisher_down(door, ns)


def test_two_scheduler_extender_pairs_with_leader_election_under_a_burst(
    stack: Stack, ns: str
) -> None:
    """Two kube-scheduler replicas with leader election, each calling its own extender beside
    it (as the chart deploys them), 200 pods at once, far more than fits, and the leader stopped
    mid-burst: the other pair takes over from its own cache, kept by the watch. Nothing is
    over-committed, checked on the bound pods' placements at the API server and on the mirror,
    which equals them; only a leader's extender was called."""
    second = GoExtenderProcess(stack.cp, name="tmc-extender-2")
    second.start()
    first_config = c.with_short_lease(
        c.scheduler_config(stack.cp, stack.extender.url, leaderElect=True)
    )
    second_config = c.with_short_lease(c.scheduler_config(stack.cp, second.url, leaderElect=True))
    try:
        stack.cp.start_scheduler(first_config)
        wait_until(lambda: c.leads(stack.cp, "kube-scheduler"), 30, "the first pair leading")
        c.start_scheduler_replica(stack.cp, second_config, "kube-scheduler-2")
        names = [f"r{i}" for i in range(200)]
        # Far more than fits: DRAM, ways and CPUs all run out on some node, the pool is shared.
        creator = threading.Thread(
            target=c.create_pods,
            args=(stack.api, [c.opted_in_pod(n, "graph500") for n in names], ns),
        )
        creator.start()
        wait_until(lambda: _bound_count(stack, ns) >= 10, 60, "the first leader binding")
        assert _verb_calls(second) == 0, "a scheduler that does not lead calls no extender"
        stack.cp.stop_process("kube-scheduler")  # the leader goes, mid-burst
        creator.join()
        wait_until(lambda: c.leads(stack.cp, "kube-scheduler-2"), 30, "the second pair leading")
        c.wait_burst_settled(stack.api, ns)
        truth = c.placements(stack.api)
        bound = {k for k in truth if k.startswith(ns + "/")}
        unbound = [p for p in stack.api.list_namespaced_pod(ns).items if not p.spec.node_name]
        assert unbound, "the burst is larger than the cluster"
        assert c.overcommitted_on_the_api_server(stack.api) == []
        assert set(mirrored(stack, ns)) == bound
        assert c.overcommitted(stack.dsn) == []
        assert _verb_calls(second) > 0, "the second pair placed pods after the takeover"
    finally:
        stack.cp.stop_process("kube-scheduler-2")
        stack.cp.start_scheduler(c.scheduler_config(stack.cp, stack.extender.url))
        second.stop()


# The placement lease as the chart gives each extender with leader election (namespace and
# name), with timings as short as the schedulers' leader election in these tests.
PLACEMENT_LEASE = (
    f"--placement-lease={NAMESPACE}/tmc-scheduler-placement",
    "--placement-lease-duration=4s",
    "--placement-renew-deadline=3s",
    "--placement-retry-period=1s",
)


def test_a_paused_pair_and_a_stopped_scheduler_hand_placement_over_safely(
    stack: Stack, ns: str
) -> None:
    """Two scheduler-extender pairs with leader election and the placement lease, as the chart
    deploys them. First the leading kube-scheduler alone is paused (SIGSTOP) while its extender
    runs on: the other pair takes over and places pods, because an extender no longer asked to
    place pods lets the placement lease go. Then the new leading pair, scheduler and extender,
    is paused mid-burst while pods are freed, and resumed once the first pair (restarted) has
    taken over: its extender's cache is stale, and the lease refuses its binds. Nothing is
    over-committed on the API server at the end."""
    first = GoExtenderProcess(
        stack.cp, "tmc-extender-a", user="scheduler", extra_args=PLACEMENT_LEASE
    )
    second = GoExtenderProcess(
        stack.cp, "tmc-extender-b", user="scheduler", extra_args=PLACEMENT_LEASE
    )
    first.start()
    second.start()
    configs = {
        "kube-scheduler": c.with_short_lease(
            c.scheduler_config(stack.cp, first.url, leaderElect=True)
        ),
        "kube-scheduler-2": c.with_short_lease(
            c.scheduler_config(stack.cp, second.url, leaderElect=True)
        ),
    }
    paused: list[int] = []
    try:
        stack.cp.start_scheduler(configs["kube-scheduler"])
        wait_until(lambda: c.leads(stack.cp, "kube-scheduler"), 30, "the first pair leading")
        c.start_scheduler_replica(stack.cp, configs["kube-scheduler-2"], "kube-scheduler-2")

        def create(prefix: str, count: int) -> None:
            for i in range(count):
                c.create_pods(stack.api, [c.opted_in_pod(f"{prefix}{i}", "graph500")], ns)
                time.sleep(0.1)

        creator = threading.Thread(target=create, args=("a", 60))
        creator.start()
        wait_until(lambda: _bound_count(stack, ns) >= 4, 60, "the first pair binding")
        # The leading scheduler stops; its extender does not.
        leader = stack.cp.procs["kube-scheduler"].pid
        os.kill(leader, signal.SIGSTOP)
        paused.append(leader)
        wait_until(lambda: c.leads(stack.cp, "kube-scheduler-2"), 30, "the second pair leading")
        before = _bound_count(stack, ns)
        creator.join()
        # The idle extender lets the lease go after its duration; then the second binds.
        wait_until(lambda: _bound_count(stack, ns) > before, 60, "the second pair binding")
        os.kill(leader, signal.SIGCONT)
        paused.remove(leader)
        stack.cp.stop_process("kube-scheduler")  # it lost the election: as a pod, restarted
        stack.cp.start_scheduler(configs["kube-scheduler"])

        # Now the second pair, scheduler and extender, is paused while pods come and go.
        creator = threading.Thread(target=create, args=("b", 60))
        creator.start()
        try:
            wait_until(
                lambda: _bound_count(stack, ns) > before + 3, 60, "the second pair binding more"
            )
        except TimeoutError as exc:
            raise AssertionError(
                f"{exc}: {before} bound before\n"
                + _placement_evidence(stack, {n.name for n in stack.nodes}, [first, second])
            ) from exc
        assert second.proc is not None
        pair = [stack.cp.procs["kube-scheduler-2"].pid, second.proc.pid]
        for pid in pair:
            os.kill(pid, signal.SIGSTOP)
            paused.append(pid)
        wait_until(lambda: c.leads(stack.cp, "kube-scheduler"), 30, "the first pair leading again")
        for pod in [
            p.metadata.name for p in stack.api.list_namespaced_pod(ns).items if p.spec.node_name
        ][:3]:
            stack.api.delete_namespaced_pod(pod, ns, grace_period_seconds=0)
        freed = _bound_count(stack, ns)
        wait_until(lambda: _bound_count(stack, ns) > freed, 60, "the first pair binding again")
        for pid in pair:
            os.kill(pid, signal.SIGCONT)
            paused.remove(pid)
        creator.join()
        c.wait_burst_settled(stack.api, ns)
        problems = c.overcommitted_on_the_api_server(stack.api)
        assert problems == [], f"{problems}\n" + _placement_evidence(
            stack, {p.rsplit(" on ", 1)[-1] for p in problems}, [first, second]
        )
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        stack.cp.stop_process("kube-scheduler-2")
        stack.cp.start_scheduler(c.scheduler_config(stack.cp, stack.extender.url))
        first.stop()
        second.stop()


def _placement_evidence(stack: Stack, nodes: set[str], extenders: list[GoExtenderProcess]) -> str:
    """What an over-commit needs to be understood: the placements on the nodes named, and every
    line of the schedulers' and extenders' logs that names one of those pods."""
    held = c.placements(stack.api)
    on_nodes = {k: r for k, r in held.items() if r["node"] in nodes}
    pods = {k.split("/", 1)[-1] for k in on_nodes}
    logs = {name: stack.cp.log(name) for name in ("kube-scheduler", "kube-scheduler-2")}
    logs |= {x.log.name: x.log.read_text(errors="replace") for x in extenders}
    lines = [
        f"{name}: {line[:300]}"
        for name, text in logs.items()
        for line in text.splitlines()
        if any(f"/{pod}" in line or f'"{pod}"' in line for pod in pods) or "lease" in line.lower()
    ]
    placed = "\n".join(f"{k}: {r}" for k, r in sorted(on_nodes.items()))
    return f"placements:\n{placed}\nlog lines:\n" + "\n".join(lines[-400:])


def _bound_count(stack: Stack, ns: str) -> int:
    return len([p for p in stack.api.list_namespaced_pod(ns).items if p.spec.node_name])


def _verb_calls(extender: GoExtenderProcess) -> float:
    """Filter calls the extender has answered, from its /metrics."""
    found = re.findall(
        r'^tmc_extender_requests_total\{outcome="[^"]+",verb="filter"\} (\S+)$',
        extender.metrics(),
        re.M,
    )
    return sum(float(v) for v in found)


def test_pending_pod_waits_for_room_then_binds(door: faults.Door, ns: str) -> None:
    """A pod only the engine refuses (every node's ways held) stays pending with the engine's
    reasons and is placed where a reservation is released (faults.pending_until_room;
    test_plugin_e2e.py runs the same through tmc-scheduler). The extender's filter answers an
    error naming each node's reason, retried on kube-scheduler's backoff (docs/scheduler.md,
    "Where the doors differ")."""
    faults.pending_until_room(door, ns)


def test_the_rendered_chart_is_accepted_by_the_real_api_server(stack: Stack) -> None:
    """Every manifest of the chart (defaults: TLS, NetworkPolicy), created with server-side
    dry run in the chart's namespace: the API server's own validation and admission accept it.
    The ServiceMonitor is a CRD this control plane does not have."""
    client = c.api_client(stack.cp)
    for placement in ("plugin", "extender"):  # the default, and the extender's path
        rendered = c.render_chart({"scheduler": {"placement": placement}})
        created = 0
        for name, text in rendered.items():
            for doc in yaml.safe_load_all(text):
                # RBAC and the admission policies are installed already (cluster.install_rbac),
                # and so are the plugin's and the publisher's accounts and roles
                # (plugin.install_plugin).
                installed = name.endswith(("rbac.yaml", "admission.yaml")) or (
                    name.endswith("plugin.yaml")
                    and doc
                    and doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
                )
                if not doc or doc["kind"] == "ServiceMonitor" or installed:
                    continue
                k8s_utils.create_from_dict(client, doc, namespace=NAMESPACE, dry_run="All")
                created += 1
        assert created >= 10, placement


@pytest.mark.parametrize(
    ("user", "verb", "resource", "subresource", "allowed"),
    [
        ("extender", "create", "pods", "binding", True),
        ("extender", "watch", "nodes", "", True),
        # The Binding carries the placement: the extender never patches a pod.
        ("extender", "patch", "pods", "", False),
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
