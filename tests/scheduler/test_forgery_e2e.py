# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call,index"
"""The forgeries that reach past admission, on the real control plane with tmc-scheduler
(the plugin, built from this checkout) on the chart's configuration, RBAC and admission
policies: an operator's pinned recommendations (the only pins admission lets through) whose
placement would not fit a pod's annotations, and a node claiming a rack pool's size. Nodes are
API objects annotated as their agents publish; nothing here needs the service or PostgreSQL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from model.node_contract import Placement
from model.resources import GIB
from tests.scheduler.controlplane import ControlPlane, Unavailable, unavailable
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as p
from tests.scheduler.test_admission import OPERATOR_NS, Plane
from tests.services import wait_until

pytestmark = pytest.mark.slow

POOL = "rack-e2e"
VALUES: dict[str, Any] = {
    "admission": {"operatorGroups": [f"system:serviceaccounts:{OPERATOR_NS}"]},
    "rackPools": {POOL: "256Gi"},
}
NS = "forgery"
# A pod asking for 201 GiB under a pin of 1 GiB DRAM and 200 GiB slow: 200 GiB from the pool.
POOLED_POD = "201Gi"


def tmc_node(name: str, pool_bytes: int) -> dict[str, Any]:
    """A pooled node as its agent publishes it: 12 CPUs, 24 GiB of DRAM, 48 ways, no local slow
    tier, a member of POOL claiming `pool_bytes`."""
    body = c.node_object(name)
    # The memory the kernel gives pods: its DRAM and what it may draw from the pool, so that the
    # in-tree fit lets a pod ask for more than the DRAM (tmc splits the request between tiers).
    for field in ("capacity", "allocatable"):
        body["status"][field]["memory"] = "280Gi"
    body["metadata"]["labels"]["tmc.dev/host-kind"] = "e2e-pooled"
    body["metadata"]["annotations"] = {
        "tmc.dev/cpus": "12",
        "tmc.dev/dram-bytes": str(24 * GIB),
        "tmc.dev/slow-bytes": "0",
        "tmc.dev/llc-ways": "48",
        "tmc.dev/slow-pool": POOL,
        "tmc.dev/slow-pool-bytes": str(pool_bytes),
    }
    return body


class Stack:
    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.admin = c.core(cp)
        self.roles = Plane(cp)  # the tenant and operator accounts, their tokens
        c.new_namespace(self.admin, NS)
        self.operator: k8s.CoreV1Api = self.roles.operator


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    try:
        cp = ControlPlane()
        p.build_scheduler()
    except Unavailable as exc:
        unavailable(exc)
    try:
        cp.start()
        c.install_rbac(cp, VALUES)
        p.install_plugin(cp)
        api = c.core(cp)
        c.register_node(api, tmc_node("pooled-a", 256 * GIB))
        rendered = c.render_chart({**p.plugin_values(cp), **VALUES})["tmc/templates/plugin.yaml"]
        config_map = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ConfigMap")
        config = cp.dir / "plugin-config-forgery.yaml"
        config.write_text(config_map["data"]["scheduler-config.yaml"])
        cp.start_scheduler(config, binary=p.engine_binary("tmc-scheduler"), name="tmc-scheduler")
        # Then a node annotates itself into the same pool claiming 4 PB, while the scheduler
        # runs: on the previous engine a pool was as large as the last node to say so.
        c.register_node(api, tmc_node("greedy", 4 * 10**15))
        time.sleep(2)  # the scheduler's node informer delivers it
        yield Stack(cp)
    finally:
        cp.close()


def pinned(dram: int, slow: int, ways: int, plan: list[dict[str, Any]] | None = None) -> str:
    return json.dumps(
        {
            "schema": "tmc.recommendation/v1",
            "dram_bytes": dram,
            "slow_bytes": slow,
            "llc_ways": ways,
            "slow_ratio": slow / (dram + slow) if dram + slow else 0.0,
            "plan": plan or [],
        },
        separators=(",", ":"),
    )


def pod_pinning(name: str, rec: str, memory: str = "1Mi") -> dict[str, Any]:
    """An opted-in pod pinning `rec`: tmc gives it its own memory request split by the
    recommendation's ratio."""
    body = c.opted_in_pod(name, None, memory=memory)
    body["metadata"]["annotations"]["tmc.dev/recommendation"] = rec
    return body


def bound(api: k8s.CoreV1Api, names: list[str]) -> dict[str, str]:
    return {n: api.read_namespaced_pod(n, NS).spec.node_name or "" for n in names}


def settled(api: k8s.CoreV1Api, names: list[str], seconds: float = 60) -> dict[str, str]:
    """Each pod's node ("" while pending), once one is bound and a few scheduling retries have
    passed (a second pod over-committing the pool would be bound by then)."""
    try:
        wait_until(lambda: any(bound(api, names).values()), seconds, f"one of {names} bound")
    except TimeoutError as exc:
        events = [
            f"{e.involved_object.name}: {e.reason}: {e.message}"
            for e in api.list_namespaced_event(NS).items
        ]
        raise TimeoutError(f"{exc}; events: {events[-6:]}") from exc
    time.sleep(6)
    return bound(api, names)


def test_a_rack_pools_size_is_the_operators_not_the_greediest_nodes(stack: Stack) -> None:
    """A node annotated itself into the pool with 4 PB: 200 GiB twice from a 256 GiB pool
    must not both be placed, before or after the honest node is gone."""
    rec = pinned(GIB, 200 * GIB, 2)
    for name in ("pool-1", "pool-2"):
        stack.operator.create_namespaced_pod(NS, pod_pinning(name, rec, POOLED_POD))
    held = settled(stack.admin, ["pool-1", "pool-2"])
    assert sorted(bool(v) for v in held.values()) == [False, True], held
    # The one placed draws its 200 GiB from the pool (what makes the second one too many).
    first = next(n for n, node in held.items() if node)
    placement = Placement.from_annotations(
        stack.admin.read_namespaced_pod(first, NS).metadata.annotations
    )
    assert placement is not None and placement.slow_from_pool, placement
    assert placement.configuration.slow_bytes >= 199 * GIB, placement.configuration
    # The honest node leaves, and its pods with it (as the pod garbage collector deletes the
    # pods of a deleted node); so does the pending pod. The greedy node's claim is now the only
    # one: the pool is still the operator's 256 GiB.
    stack.admin.delete_node("pooled-a")
    for name, node in held.items():
        if node != "greedy":
            stack.admin.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    kept = sum(node == "greedy" for node in held.values())
    wait_until(lambda: len(stack.admin.list_namespaced_pod(NS).items) == kept, 30, "deleted")
    time.sleep(1)  # the scheduler's informer sees the deletions
    for name in ("pool-3", "pool-4"):
        stack.operator.create_namespaced_pod(NS, pod_pinning(name, rec, POOLED_POD))
    live = [p.metadata.name for p in stack.admin.list_namespaced_pod(NS).items]
    held = settled(stack.admin, live)
    assert sum(bool(v) for v in held.values()) == 1, held
    drawn = 0
    for pod in stack.admin.list_namespaced_pod(NS).items:
        placement = Placement.from_annotations(pod.metadata.annotations)
        if placement is not None and placement.slow_from_pool:
            drawn += placement.configuration.slow_bytes
    assert drawn <= 256 * GIB


def test_a_pinned_plan_too_large_for_a_pods_annotations_is_the_fallback(stack: Stack) -> None:
    """4,096 tags pinned by an operator: placed with the fallback (all in DRAM) that says why,
    never with a placement past the API server's limit, and the pod stays updatable."""
    # 4,096 tags of 10 characters: a pin of ~190 KB (the pod is still under 256 KiB).
    plan = [{"tag": f"t{i:09d}", "fast_bytes": 1, "slow_bytes": 0} for i in range(4096)]
    stack.operator.create_namespaced_pod(NS, pod_pinning("wide", pinned(8192, 0, 2, plan)))
    held = settled(stack.admin, ["wide"])
    assert held["wide"], held
    pod = stack.admin.read_namespaced_pod("wide", NS)
    placement = Placement.from_annotations(pod.metadata.annotations)
    assert placement is not None and placement.fallback is not None
    assert "bound of" in placement.fallback and placement.plan == []
    ann: dict[str, str] = pod.metadata.annotations or {}
    size = sum(len(k) + len(v) for k, v in ann.items())
    assert size < 256 * 1024
    # A later update of the pod is accepted (past 256 KiB every update failed with 422).
    stack.admin.patch_namespaced_pod("wide", NS, {"metadata": {"labels": {"seen": "yes"}}})


def test_a_node_cannot_publish_more_memory_than_its_kubelet_reports(stack: Stack) -> None:
    """A node's agent publishes 4 PiB of DRAM on a node whose kubelet reports 280Gi: the node is
    unreadable to the engine, and a pod pinning 1 PiB of DRAM (asking for no memory of its own,
    so the in-tree fit does not stop it) is placed nowhere."""
    inflated = tmc_node("inflated", 256 * GIB)
    annotations = inflated["metadata"]["annotations"]
    annotations["tmc.dev/dram-bytes"] = str(4 << 50)
    for key in ("tmc.dev/slow-pool", "tmc.dev/slow-pool-bytes"):
        annotations.pop(key)
    c.register_node(stack.admin, inflated)
    try:
        time.sleep(2)  # the scheduler's node informer delivers it
        stack.operator.create_namespaced_pod(
            NS, pod_pinning("petabyte", pinned(1 << 50, 0, 2), memory="0")
        )
        time.sleep(8)
        assert not bound(stack.admin, ["petabyte"])["petabyte"]
        said = [
            e.message or ""
            for e in stack.admin.list_namespaced_event(NS).items
            if e.involved_object.name == "petabyte"
        ]
        assert said and not any("inflated" in m and "bound" in m.lower() for m in said), said
    finally:
        stack.admin.delete_namespaced_pod("petabyte", NS, grace_period_seconds=0)
        stack.admin.delete_node("inflated")
