# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""The plugin's placement path end to end, every hop its own process: etcd, kube-apiserver,
`tmc-scheduler` (kube-scheduler with the TmcPlacement plugin, built from the repository's Go
module) on the chart's configuration and RBAC, the recommendation publisher on a real
PostgreSQL, and `tmc-agent serve` per fake node (fake sysfs/resctrl/cgroup trees: the hardware
this machine lacks). Nothing on the placement path calls the service or PostgreSQL: the faults
below stop them and pods are still placed.

The binaries are built by controlplane/build.sh and scheduler/plugin/build.sh (cached outside
the repository). Where they cannot be built the tests skip with the reason, except in CI
(CI=true), where that is a failure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from model.node_contract import Placement, parse_plan_file
from model.resources import quantity_text
from tests.fixtures.database import empty_tables
from tests.scheduler.conftest import upload_example
from tests.scheduler.controlplane import ControlPlane, faults
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import patterns as planned
from tests.scheduler.controlplane import plugin as p
from tests.services import PostgresServer, free_port, wait_until

# This stack's tmc-scheduler names published plans (tmc.placement/v3), its nodes' tmc-nri
# reconcile reads them there; the extender's stack (test_e2e.py) carries them, the default.
NAMED_PLANS = {"planByReference": True}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    cp = p.start_plugin_plane()
    yield cp
    cp.close()


class Stack(c.PlacementStack):
    """The plugin's placement path of one test module."""

    process_logs = ("publisher", "tmc-scheduler", "tmc-scheduler-2")

    def __init__(self, cp: ControlPlane, pg: PostgresServer) -> None:
        super().__init__(cp, pg)
        self.publisher = p.PublisherProcess(cp, pg.url, metrics_port=free_port())


@pytest.fixture(scope="module")
def stack(plane: ControlPlane, postgres: PostgresServer) -> Iterator[Stack]:
    empty_tables(postgres.dsn())
    s = Stack(plane, postgres)
    s.start_nodes()
    s.publisher.start()
    s.publisher.wait_ready()
    p.start_plugin_scheduler(plane, chart=NAMED_PLANS)
    yield s
    s.stop_nodes()
    s.publisher.stop()
    plane.stop_process("tmc-scheduler")


@pytest.fixture
def ns(stack: Stack, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace per test; its pods are deleted after it, and the mirror follows."""
    name = c.new_namespace(stack.api, request.node.name.replace("_", "-")[:50].strip("-"))
    yield name
    stack.api.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    wait_until(lambda: not stack.api.list_namespaced_pod(name).items, 60, f"pods of {name} gone")


def placed(stack: Stack, names: list[str], ns: str, timeout: float = 90) -> dict[str, Any]:
    try:
        return c.bound_pods(stack.api, names, ns, timeout)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{stack.logs()}") from exc


def placement_of(pod: k8s.V1Pod) -> Placement:
    placement = Placement.from_annotations(pod.metadata.annotations)
    assert placement is not None, pod.metadata.name
    assert placement.node == pod.spec.node_name
    return placement


def mirror(stack: Stack, ns: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in c.reservations(stack.dsn).items() if k.startswith(ns + "/")}


def test_the_example_pod_is_placed_by_the_plugin_and_its_plan_reaches_the_node(
    stack: Stack, ns: str
) -> None:
    """deploy/examples/tiered-pod.yaml through tmc-scheduler: the publisher publishes graph500's
    slo:5% recommendation when it sees the pod, the plugin places the pod with it (not the
    fallback), tmc-nri reconcile on the node applies the plan and the mask, and the ledger mirrors
    the placement."""
    body = c.example_pod()
    c.create_pods(stack.api, [body], ns)
    name = body["metadata"]["name"]
    pod = placed(stack, [name], ns)[name]
    placement = placement_of(pod)
    assert placement.fallback is None, f"{placement.fallback}\n{stack.logs()}"
    assert placement.objective == "slo:5%" and placement.workload == "graph500"
    published = p.recommendations(stack.cp)[("graph500", "slo:5%")]
    conf = placement.configuration
    assert (conf.dram_bytes, conf.slow_bytes, conf.llc_ways) == (
        published["dram_bytes"],
        published["slow_bytes"],
        published["llc_ways"],
    )
    assert placement.recommendation_id == published["recommendation_id"]
    # The plan stays on the published object; the pod names it, at its generation.
    assert placement.schema_ == "tmc.placement/v3" and not placement.plan, placement
    structures = c.plan_of(stack.cp, placement)
    assert len(structures) >= 2
    # The object's status says it was published for its generation and is no fallback, and
    # `kubectl get` shows the sizes as Kubernetes quantities.
    obj = p.recommendation_objects(stack.cp)[("graph500", "slo:5%")]
    status: dict[str, Any] = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    conditions = {cond["type"]: cond for cond in status["conditions"]}
    assert conditions["Published"]["status"] == "True"
    assert conditions["Fallback"]["status"] == "False"
    assert conditions["Fallback"]["reason"] == "Recommended"
    shown = p.recommendation_table(stack.cp)[obj["metadata"]["name"]]
    assert shown["DRAM"] == quantity_text(published["dram_bytes"])
    assert shown["Slow"] == quantity_text(published["slow_bytes"])
    assert conditions["Fallback"]["message"].startswith(f"{shown['DRAM']} DRAM, {shown['Slow']}")
    assert shown["Fallback"] == "False" and shown["Ways"] == published["llc_ways"]
    with psycopg.connect(stack.dsn) as conn:
        row = conn.execute(
            "SELECT llc_ways FROM recommendations WHERE id = %s", (placement.recommendation_id,)
        ).fetchone()
    assert row is not None and row[0] == conf.llc_ways

    node = next(n for n in stack.nodes if n.name == placement.node)
    uid = pod.metadata.uid
    node.kubelet_starts(uid, threads=[5151])
    plan_path = node.plans / f"{uid}.plan"
    group = node.resctrl / f"tmc-pod-{uid}"
    wait_until(
        lambda: plan_path.exists() and (group / "schemata").exists(), 30, "tmc-nri reconcile"
    )
    plan = parse_plan_file(plan_path.read_text())
    assert plan.fast_bytes == {s.tag: s.fast_bytes for s in structures}
    assert plan.slow_bytes == {s.tag: s.slow_bytes for s in structures}
    assert (group / "schemata").read_text().strip() == "L3:" + ";".join(
        f"{d}={placement.llc_mask_bits:x}" for d in (0, 1)
    )
    # The mirror: the feeder records the bound pod's reservation from its annotation.
    wait_until(lambda: f"{ns}/{name}" in mirror(stack, ns), 60, "the mirror")
    held = mirror(stack, ns)[f"{ns}/{name}"]
    assert held["node"] == placement.node and int(held["mask"]) == placement.llc_mask_bits


def test_each_pod_is_given_its_own_request_split_by_the_recommendation(
    stack: Stack, ns: str
) -> None:
    """A profile traced at 4480 MiB, pods requesting 8 GiB and 2 GiB: through tmc-scheduler each
    is given its own request in all, split by the recommended ratio and plan shares; the one
    below its profile's footprint is told so."""
    bodies = c.sized_pods()
    c.create_pods(stack.api, bodies, ns)
    c.check_given_their_requests(stack.cp, stack.dsn, placed(stack, list(c.SIZED_PODS), ns))
    c.check_told_below_their_profile(stack.api, ns, "tmc-scheduler")


def test_pods_follow_the_adopted_plans_machine_patterns(
    stack: Stack, ns: str, tmp_path: Path
) -> None:
    """A capacity plan's machines adopted as node patterns (`tmc plan patterns apply` against
    the API server): a graph500 and an xsbench pod each land on the node whose pattern holds
    its workload, where tmc-scheduler without patterns placed it elsewhere
    (tests/scheduler/controlplane/patterns.py)."""
    upload_example(stack.sessions, "xsbench")
    # The publisher sees a new fit within its poll and decides the workload's published pairs
    # again, against the utilization of that moment: the scenario starts once it has seen this
    # one, so xsbench's pair is decided once, when its first pod appears, and keeps that
    # configuration through the scenario (the refresh is an hour here).
    wait_until(
        lambda: (
            "new fits or runs for ['xsbench']" in stack.publisher.log.read_text(errors="replace")
        ),
        30,
        "the publisher's look at xsbench's new fit",
    )
    try:
        planned.follow_the_plan(
            stack.cp, stack.api, ns, lambda names, n: placed(stack, names, n), tmp_path
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stack.logs()}") from exc


def test_a_workload_without_a_profile_is_published_as_a_fallback(stack: Stack, ns: str) -> None:
    """No profile for the workload: the publisher publishes the fallback with the service's
    reason, and the pod is placed with it without waiting out the plugin's wait."""
    c.create_pods(stack.api, [c.opted_in_pod("stranger", "no-such-workload")], ns)
    pod = placed(stack, ["stranger"], ns)["stranger"]
    fallback = placement_of(pod).fallback
    assert fallback is not None and fallback.startswith("tmc has no configuration"), fallback
    published = p.recommendations(stack.cp)[("no-such-workload", "cheapest")]
    assert published["fallback"] in fallback
    obj = p.recommendation_objects(stack.cp)[("no-such-workload", "cheapest")]
    conditions = {cond["type"]: cond for cond in obj["status"]["conditions"]}
    assert conditions["Fallback"]["status"] == "True"
    assert conditions["Fallback"]["message"] == published["fallback"]
    assert conditions["Fallback"]["reason"] not in ("", "Recommended")
    row = p.recommendation_table(stack.cp)[obj["metadata"]["name"]]
    assert (row["Fallback"], row["DRAM"]) == ("True", "-"), row
    waited = [
        e.message
        for e in stack.api.list_namespaced_event(ns).items
        if e.involved_object.name == "stranger" and "waiting" in (e.message or "")
    ]
    # At most the first tries, before the object was written; never the whole wait.
    created = pod.metadata.creation_timestamp
    scheduled = next(
        cond.last_transition_time for cond in pod.status.conditions if cond.type == "PodScheduled"
    )
    assert (scheduled - created).total_seconds() < 9, waited
    # The publisher counts the bound pod by the reason in its placement, once its row is in the
    # ledger's mirror (its lag observed, nothing left waiting).

    def series() -> dict[tuple[str, str], float]:
        return {
            (s.name, s.labels.get("reason", "")): s.value
            for family in text_string_to_metric_families(stack.publisher.metrics())
            for s in family.samples
        }

    def counted() -> bool:
        got = series()
        return (
            got[("tmc_pods_placed_fallback", "no_configuration")] >= 1
            and got[("tmc_mirror_lag_seconds_count", "")] >= 1
            and got[("tmc_mirror_pending_changes", "")] == 0
        )

    wait_until(counted, 30, "the fallback pod counted and mirrored")
    got = series()
    assert got[("tmc_pods_placed_fallback", "unpublished")] == 0
    assert got[("tmc_mirror_oldest_pending_seconds", "")] == 0
    assert got[("tmc_mirror_in_step", "")] == 1
    lag = got[("tmc_mirror_lag_seconds_sum", "")] / got[("tmc_mirror_lag_seconds_count", "")]
    assert lag < 5, lag  # a row a few tenths of a second after its event, on this machine
    print(f"mirror lag: {lag:.3f} s mean over {got[('tmc_mirror_lag_seconds_count', '')]:.0f}")


def bound_in(stack: Stack, ns: str) -> dict[str, k8s.V1Pod]:
    return {
        str(pod.metadata.name): pod
        for pod in stack.api.list_namespaced_pod(ns).items
        if pod.spec.node_name
    }


def assert_mirrors(stack: Stack, ns: str, timeout: float = 60) -> None:
    """The ledger (the mirror) holds exactly the namespace's bound pods, where they are bound."""

    def equal() -> bool:
        pods = bound_in(stack, ns)
        held = mirror(stack, ns)
        return set(held) == {f"{ns}/{n}" for n in pods} and all(
            held[f"{ns}/{n}"]["node"] == pod.spec.node_name
            and held[f"{ns}/{n}"]["uid"] == pod.metadata.uid
            for n, pod in pods.items()
        )

    try:
        wait_until(equal, timeout, "the mirror equal to the bound pods")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{stack.logs()}") from exc


@pytest.fixture
def door(stack: Stack) -> faults.Door:
    """This stack as the fault scenarios both doors run (controlplane/faults.py) see it."""
    return faults.Door(
        stack, stack.publisher, "tmc-scheduler", lambda ns: assert_mirrors(stack, ns, 90)
    )


def test_scheduler_killed_mid_burst_and_restarted(stack: Stack, ns: str) -> None:
    """SIGKILL while pods are being placed, and a bound pod deleted while it is down: the
    restarted scheduler rebuilds its reservations from the API server, places the rest, binds
    no pod twice and over-commits nothing; the mirror ends equal to the bound pods."""
    names = [f"k{i}" for i in range(12)]
    creator = threading.Thread(
        target=c.create_pods,
        args=(stack.api, [c.opted_in_pod(n, "graph500") for n in names], ns),
    )
    creator.start()
    wait_until(lambda: len(bound_in(stack, ns)) >= 3, 60, "some pods bound")
    stack.cp.kill_process("tmc-scheduler")
    creator.join()
    # More pods while it is down: the restarted scheduler places them against the reservations
    # it rebuilt, never against an empty cache.
    late = [f"late{i}" for i in range(8)]
    c.create_pods(stack.api, [c.opted_in_pod(n, "graph500") for n in late], ns)
    names += late
    before = bound_in(stack, ns)
    gone = sorted(before)[0]
    stack.api.delete_namespaced_pod(gone, ns, grace_period_seconds=0)
    p.start_plugin_scheduler(stack.cp, chart=NAMED_PLANS)
    left = [n for n in names if n != gone]
    pods = placed(stack, left, ns, timeout=120)
    for n, pod in before.items():  # a pod bound before the kill kept its node and placement
        if n != gone:
            assert pods[n].spec.node_name == pod.spec.node_name
            assert pods[n].metadata.annotations == pod.metadata.annotations
    for pod in pods.values():
        assert placement_of(pod).fallback is None
    assert c.overcommitted_on_the_api_server(stack.api) == []
    assert_mirrors(stack, ns)


def test_postgres_down_for_the_whole_burst(stack: Stack, door: faults.Door, ns: str) -> None:
    """PostgreSQL stopped before the burst and started after it: every pod of a workload with
    a published recommendation is placed with it (no fallback), and the mirror catches up."""
    faults.ensure_published(door, ns, "cheapest")
    names = [f"d{i}" for i in range(12)]
    bodies = [c.opted_in_pod(n, "graph500") for n in names]
    stack.pg.stop()
    try:
        c.create_pods(stack.api, bodies, ns)
        pods = placed(stack, names, ns, timeout=120)
        for pod in pods.values():
            placement = placement_of(pod)
            assert placement.fallback is None and placement.objective == "cheapest"
        assert c.overcommitted_on_the_api_server(stack.api) == []
    finally:
        stack.pg.start()
    assert_mirrors(stack, ns, timeout=120)


def test_the_publisher_down_places_published_pairs_and_waits_for_the_others(
    door: faults.Door, ns: str
) -> None:
    """The publisher (and so the service's decisions) gone: a published pair's pod is placed
    with its recommendation; a pod of a pair never published waits for it (out of the queue, one
    Normal event WaitingForRecommendation naming the pair; never the fallback, never tried and
    failed) and is placed with its recommendation once the publisher is back
    (faults.publisher_down; test_e2e.py runs the same through tmc-extender)."""
    faults.publisher_down(door, ns)


def test_api_service_down_does_not_stop_placement(door: faults.Door, ns: str) -> None:
    """No API service at all: pods still get recommendations that land in the decision log
    (faults.no_api_service; test_e2e.py runs the same through tmc-extender)."""
    faults.no_api_service(door, ns)


def test_pending_pod_waits_for_room_then_binds(door: faults.Door, ns: str) -> None:
    """A pod only the engine refuses (every node's ways held) stays pending with the engine's
    reasons, summed up by the scheduler as Unschedulable on every node, and is placed where a
    reservation is released, moved by the plugin's queueing hint on the pod deleted
    (faults.pending_until_room; test_e2e.py runs the same through tmc-extender)."""
    faults.pending_until_room(door, ns)


def test_two_replicas_with_leader_election_under_a_200_pod_burst(stack: Stack, ns: str) -> None:
    """Two tmc-scheduler replicas electing a leader; the leader is killed mid-burst and the
    other takes over with a cache rebuilt from the API server. Nothing is over-committed,
    checked against the sum of the bound pods' placements, and no pod is bound twice."""
    stack.cp.stop_process("tmc-scheduler")
    replicas = ["tmc-scheduler", "tmc-scheduler-2"]
    try:
        # A short placement lease: a new leader binds once it went unrenewed this long from
        # when it first tries (the chart's default is 15 s).
        lease = {"leaseDurationSeconds": 4, "renewDeadlineSeconds": 3, "retryPeriodSeconds": 1}
        for name in replicas:
            p.start_plugin_scheduler(
                stack.cp, name, NAMED_PLANS, leaderElect=True, placementLease=lease
            )
        try:
            wait_until(
                lambda: any("Successfully acquired lease" in stack.cp.log(n) for n in replicas),
                60,
                "a leader",
            )
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{stack.logs()}") from exc
        leader = next(n for n in replicas if "Successfully acquired lease" in stack.cp.log(n))
        names = [f"r{i}" for i in range(200)]
        # Far more than fits: DRAM, ways and CPUs run out on some nodes, the pool is shared.
        creator = threading.Thread(
            target=c.create_pods,
            args=(stack.api, [c.opted_in_pod(n, "graph500") for n in names], ns),
        )
        creator.start()
        wait_until(lambda: len(bound_in(stack, ns)) >= 10, 90, "the leader placing pods")
        stack.cp.kill_process(leader)
        creator.join()
        other = next(n for n in replicas if n != leader)
        wait_until(
            lambda: "Successfully acquired lease" in stack.cp.log(other), 90, "the new leader"
        )
        c.wait_burst_settled(stack.api, ns)
        pods = bound_in(stack, ns)
        assert len(pods) > 20, len(pods)
        for pod in pods.values():
            placement_of(pod)
        assert c.overcommitted_on_the_api_server(stack.api) == []
        assert_mirrors(stack, ns)
    finally:
        for name in replicas:
            stack.cp.stop_process(name)
        p.start_plugin_scheduler(stack.cp, chart=NAMED_PLANS)


def test_a_node_agent_that_restarts_rereads_masks_and_reassigns_none(stack: Stack, ns: str) -> None:
    """The node's agent and tmc-nri reconcile restarted under a running pod: reconcile re-reads
    the pod's placement and leaves its resctrl group's mask as it was; a pod placed afterwards on
    that node gets disjoint ways."""
    first = c.opted_in_pod("first", "graph500")
    c.create_pods(stack.api, [first], ns)
    pod = placed(stack, ["first"], ns)["first"]
    placement = placement_of(pod)
    node = next(n for n in stack.nodes if n.name == placement.node)
    node.kubelet_starts(pod.metadata.uid, threads=[6161])
    schemata = node.resctrl / f"tmc-pod-{pod.metadata.uid}" / "schemata"
    wait_until(schemata.exists, 30, "tmc-nri reconcile applying the mask")
    applied = schemata.read_text()
    node.stop_agent()
    node.start_agent()
    time.sleep(3)  # several of tmc-nri reconcile's passes (every 0.2 s)
    assert schemata.read_text() == applied
    after = stack.api.read_namespaced_pod("first", ns)
    assert after.metadata.annotations == pod.metadata.annotations
    # Another pod pinned to the same node: its ways do not overlap the first pod's.
    second = c.opted_in_pod("second", "graph500")
    second["spec"]["nodeSelector"] = {"kubernetes.io/hostname": placement.node}
    c.create_pods(stack.api, [second], ns)
    other = placement_of(placed(stack, ["second"], ns)["second"])
    assert other.node == placement.node
    assert other.llc_mask_bits & placement.llc_mask_bits == 0


def test_a_new_fit_is_published_at_once(stack: Stack, ns: str) -> None:
    """canneal has no profile: its pod is placed with the published fallback. Its profile is
    then uploaded and fitted: the publisher (whose refresh is an hour here) publishes the fit
    within seconds, and the next pod of canneal is placed with the recommendation."""
    c.create_pods(stack.api, [c.opted_in_pod("before", "canneal")], ns)
    before = placement_of(placed(stack, ["before"], ns)["before"])
    assert before.fallback is not None, before
    upload_example(stack.sessions, "canneal")

    def recommended() -> bool:
        obj = p.recommendation_objects(stack.cp).get(("canneal", "cheapest"))
        return obj is not None and "fallback" not in obj["spec"]

    try:
        wait_until(recommended, 20, "canneal's fit published")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{stack.logs()}") from exc
    c.create_pods(stack.api, [c.opted_in_pod("after", "canneal")], ns)
    after = placement_of(placed(stack, ["after"], ns)["after"])
    assert after.fallback is None and after.recommendation_id is not None, after
    obj = p.recommendation_objects(stack.cp)[("canneal", "cheapest")]
    conditions = {cond["type"]: cond for cond in obj["status"]["conditions"]}
    assert conditions["Fallback"]["status"] == "False"
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"] >= 2


def test_a_pods_own_required_plugins_are_replaced_by_its_binding(stack: Stack, ns: str) -> None:
    """The runtime reads a container's required-plugins key before the pod's: a pod created with
    an empty list for its container (and for the pod) would start without tmc-nri. tmc-scheduler's
    Binding writes both over what the pod was created with."""
    body = c.opted_in_pod("own-guard", "no-such-workload")
    container = body["spec"]["containers"][0]["name"]
    key = "required-plugins.noderesource.dev/container." + container
    body["metadata"]["annotations"].update(
        {key: "[]", "required-plugins.noderesource.dev/pod": "[]"}
    )
    c.create_pods(stack.api, [body], ns)
    got = placed(stack, ["own-guard"], ns)["own-guard"].metadata.annotations
    assert got[key] == got["required-plugins.noderesource.dev/pod"] == '["tmc"]', got
