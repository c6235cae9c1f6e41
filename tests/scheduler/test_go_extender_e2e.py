# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""The extender front door end to end: the stock kube-scheduler (the chart's extender
configuration: mutual TLS, nodeCacheCapable, managedResources) calling tmc-extender (the Go
engine, built from scheduler/plugin with tmc-scheduler), the recommendation publisher on a real
PostgreSQL, and `tmc-agent serve` per fake node. As on the plugin's path, nothing on the
placement path calls the service or PostgreSQL."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from model.node_contract import Placement, parse_plan_file
from tests.fixtures.database import empty_tables
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as p
from tests.scheduler.controlplane.goextender import GoExtenderProcess
from tests.services import PostgresServer, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    cp = p.start_plugin_plane()  # builds tmc-extender too; the CRD and the publisher's RBAC
    c.use_ecdsa_extender_certificates(cp)
    yield cp
    cp.close()


class Stack(c.PlacementStack):
    process_logs = ("publisher", "tmc-extender", "kube-scheduler")

    def __init__(self, cp: ControlPlane, pg: PostgresServer) -> None:
        super().__init__(cp, pg)
        self.publisher = p.PublisherProcess(cp, pg.url)
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


def test_the_example_pod_is_placed_through_the_go_extender(stack: Stack, ns: str) -> None:
    """deploy/examples/tiered-pod.yaml through the stock kube-scheduler and tmc-extender: placed
    with the published slo:5% recommendation, its plan file and mask applied by the agent."""
    body = c.example_pod()
    c.create_pods(stack.api, [body], ns)
    name = body["metadata"]["name"]
    pod = placed(stack, [name], ns)[name]
    placement = placement_of(pod)
    assert placement.fallback is None, f"{placement.fallback}\n{stack.logs()}"
    published = p.recommendations(stack.cp)[("graph500", "slo:5%")]
    conf = placement.configuration
    assert (conf.dram_bytes, conf.slow_bytes, conf.llc_ways) == (
        published["dram_bytes"],
        published["slow_bytes"],
        published["llc_ways"],
    )
    assert placement.recommendation_id == published["recommendation_id"]
    node = next(n for n in stack.nodes if n.name == placement.node)
    uid = pod.metadata.uid
    node.kubelet_starts(uid, threads=[5151])
    plan_path = node.plans / f"{uid}.plan"
    wait_until(plan_path.exists, 30, "the agent's plan file")
    assert parse_plan_file(plan_path.read_text()).fast_bytes == {
        s.tag: s.fast_bytes for s in placement.plan
    }


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


def test_go_extender_killed_mid_burst_and_restarted(stack: Stack, ns: str) -> None:
    """SIGKILL while binds are in flight and a pod deleted while it is down: after the restart
    (its cache rebuilt from the API server) every pod is placed, none twice, nothing
    over-committed."""
    names = [f"b{i}" for i in range(24)]
    creator = threading.Thread(
        target=c.create_pods,
        args=(stack.api, [c.opted_in_pod(n, "graph500") for n in names], ns),
    )
    creator.start()
    wait_until(
        lambda: len([q for q in stack.api.list_namespaced_pod(ns).items if q.spec.node_name]) >= 4,
        60,
        "some binds",
    )
    stack.extender.kill()
    creator.join()
    bound_now = [q for q in stack.api.list_namespaced_pod(ns).items if q.spec.node_name]
    gone = str(bound_now[0].metadata.name)
    stack.api.delete_namespaced_pod(gone, ns, grace_period_seconds=0)
    stack.extender.start()
    left = [n for n in names if n != gone]
    pods = placed(stack, left, ns, timeout=120)
    assert all(placement_of(q).fallback is None for q in pods.values())
    assert c.overcommitted_on_the_api_server(stack.api) == []


def test_postgres_down_for_the_whole_burst(stack: Stack, ns: str) -> None:
    """PostgreSQL stopped: pods of a published pair are placed with its recommendation."""
    c.create_pods(stack.api, [c.opted_in_pod("warm", "graph500")], ns)
    warm = placement_of(placed(stack, ["warm"], ns)["warm"])
    assert warm.fallback is None
    stack.pg.stop()
    try:
        names = [f"p{i}" for i in range(12)]
        c.create_pods(stack.api, [c.opted_in_pod(n, "graph500") for n in names], ns)
        pods = placed(stack, names, ns, timeout=120)
        for q in pods.values():
            assert placement_of(q).recommendation_id == warm.recommendation_id
        assert c.overcommitted_on_the_api_server(stack.api) == []
    finally:
        stack.pg.start()
