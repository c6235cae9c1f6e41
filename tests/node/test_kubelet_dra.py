# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call,index"
"""The DRA door's node side with a real kubelet: a pod whose ResourceClaim (driver tmc.dev) is
allocated on node-a, prepared by tmc-dra-node through the kubelet's DRA plugin API, named to the
container by the claim's CDI device (containerd applies it), and applied at creation by tmc-nri
over NRI. The claim is allocated as the stock scheduler would leave it: its status.allocation
and reservedFor written as admin, then the pod bound to the node. The kubelet, containerd and
runc are test_kubelet.py's (`cluster`): no CNI, host network, no resctrl on this machine."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.node import test_kubelet
from tests.node.conftest import Node, PluginFactory
from tests.node.runtime import harness
from tests.node.test_kubelet import NODE, Kubelet, wait_pod
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.test_dra_objects import claim

pytestmark = pytest.mark.slow  # a real containerd and kubelet, built once per machine

# test_kubelet.py's control plane and kubelet, one per module.
cluster = test_kubelet.cluster

MIB = 2**20
WAYS = 12  # the node's ways as tmc-dra-node is told them (this machine has no L3 CAT)
GROUP, VERSION = "resource.k8s.io", "v1"


class DraNode:
    """One tmc-dra-node process, registered in the kubelet's plugins_registry."""

    def __init__(self, binary: Path, cp: ControlPlane, kubelet: Kubelet, cdi: Path, log: Path):
        self.log = log
        self.proc = subprocess.Popen(
            [
                str(binary),
                "--node",
                NODE,
                "--kubelet-dir",
                str(kubelet.base / "root"),
                "--cdi-dir",
                str(cdi),
                "--resctrl",
                "",
                "--ways",
                str(WAYS),
                "--kubeconfig",
                str(cp.kubeconfig("admin")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=log.open("ab"),
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while "registered with the kubelet" not in log.read_text():
            assert self.proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)

    def stop(self) -> None:
        harness.terminate(self.proc, 10)


@pytest.fixture
def start_dra_node(
    cluster: tuple[ControlPlane, Kubelet], node: Node, tmp_path: Path
) -> Iterator[Callable[[], DraNode]]:
    cp, kubelet = cluster
    started: list[DraNode] = []

    def start() -> DraNode:
        plugin = DraNode(
            node.plugin_binary.parent / "tmc-dra-node",
            cp,
            kubelet,
            node.runtime.cdi,
            tmp_path / f"tmc-dra-node-{len(started)}.log",
        )
        started.append(plugin)
        return plugin

    yield start
    for plugin in started:
        plugin.stop()


def until(done: Callable[[], object], kubelet: Kubelet, seconds: float = 60) -> None:
    """Wait until done() is true, failing with the kubelet's log after `seconds`."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, kubelet.log.read_text()[-3000:]
        time.sleep(0.5)


def checkpoint_path(kubelet: Kubelet) -> Path:
    return kubelet.base / "root" / "plugins" / "tmc.dev" / "checkpoint.json"


def held(kubelet: Kubelet) -> dict[str, Any]:
    """The claims tmc-dra-node holds on the node (its checkpoint)."""
    path = checkpoint_path(kubelet)
    if not path.exists():
        return {}
    claims: dict[str, Any] = json.loads(path.read_text())["claims"]
    return claims


def objects(cp: ControlPlane) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(c.api_client(cp))


def claimed_pod(name: str) -> dict[str, Any]:
    """A pod of the probe image whose container takes the claim `name` (not yet bound)."""
    body = test_kubelet.bound_pod(name, {})
    del body["spec"]["nodeName"]
    # The DRA door's pods carry no tmc label: their claims, not a placement, say what they hold.
    del body["metadata"]["labels"]
    body["spec"]["resourceClaims"] = [{"name": "tiers", "resourceClaimName": name}]
    body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "tiers"}]}
    return body


def allocate(cp: ControlPlane, name: str, ways: int, dram: int) -> k8s.V1Pod:
    """The claim and its pod, as the stock scheduler leaves them: the claim's devices of node-a
    allocated (`ways` ways, `dram` bytes), reserved for the pod, and the pod bound to node-a."""
    api = c.core(cp)
    body = claim(name, ways=ways, dram=str(dram))
    body["metadata"]["namespace"] = "default"
    objects(cp).create_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaims", body)
    pod = api.create_namespaced_pod("default", claimed_pod(name))
    status = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "ways",
                            "driver": "tmc.dev",
                            "pool": NODE,
                            "device": "ways",
                            "consumedCapacity": {"ways": str(ways)},
                        },
                        {
                            "request": "dram",
                            "driver": "tmc.dev",
                            "pool": NODE,
                            "device": "dram",
                            "consumedCapacity": {"bytes": str(dram)},
                        },
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [NODE]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": name, "uid": pod.metadata.uid}],
        }
    }
    objects(cp).patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", "resourceclaims", name, status
    )
    api.create_namespaced_pod_binding(
        name,
        "default",
        {"metadata": {"name": name}, "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}},
        _preload_content=False,
    )
    return api.read_namespaced_pod(name, "default")


def remove(cp: ControlPlane, kubelet: Kubelet, name: str) -> None:
    """The pod and its claim deleted, and the claim unprepared (gone from the checkpoint)."""
    api = c.core(cp)
    uid = objects(cp).get_namespaced_custom_object(
        GROUP, VERSION, "default", "resourceclaims", name
    )["metadata"]["uid"]
    api.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    until(lambda: uid not in held(kubelet), kubelet)
    objects(cp).delete_namespaced_custom_object(GROUP, VERSION, "default", "resourceclaims", name)


def prepare_failures(api: k8s.CoreV1Api, pod: k8s.V1Pod) -> list[str]:
    events = api.list_namespaced_event(
        "default",
        field_selector=f"involvedObject.uid={pod.metadata.uid},reason=FailedPrepareDynamicResources",
    ).items
    return [e.message or "" for e in events]


def sandboxes(node: Node, pod: k8s.V1Pod) -> list[str]:
    return node.runtime.crictl(
        "pods", "-q", "--label", f"io.kubernetes.pod.uid={pod.metadata.uid}"
    ).stdout.split()


def test_a_claimed_pod_runs_with_its_allocation_and_is_unprepared_when_it_goes(
    cluster: tuple[ControlPlane, Kubelet],
    node: Node,
    start_plugin: PluginFactory,
    start_dra_node: Callable[[], DraNode],
) -> None:
    cp, kubelet = cluster
    start_plugin(dra_checkpoint=str(checkpoint_path(kubelet)))
    start_dra_node()
    api = c.core(cp)
    pod = allocate(cp, "bfs-dra", ways=4, dram=192 * MIB)
    pod = wait_pod(api, "bfs-dra", lambda p: p.status.phase in ("Succeeded", "Failed"))
    assert pod.status.phase == "Succeeded", pod.status
    claim_uid = objects(cp).get_namespaced_custom_object(
        GROUP, VERSION, "default", "resourceclaims", "bfs-dra"
    )["metadata"]["uid"]
    # containerd applied the claim's CDI device: the container's spec names the claim.
    (container,) = node.runtime.crictl(
        "ps", "-a", "-q", "--label", f"io.kubernetes.pod.uid={pod.metadata.uid}"
    ).stdout.split()
    spec = node.runtime.spec(container)
    assert f"TMC_DRA_ALLOCATION={claim_uid}" in spec["process"]["env"]
    # tmc-nri applied it with the placement rule: the plan, the shim, and no memory limit from
    # the claim's bytes (the recommendation's size, not the pod's request); its ways are the run
    # tmc-dra-node gave the claim's 4 (the lowest of the node's 12), which this machine has no
    # resctrl to give (and says so).
    seen = kubelet.container_log(pod, "probe").splitlines()
    assert f"memory-limit-v1 {192 * MIB}" not in seen
    assert "env-TMC_PLAN /run/tmc/plan" in seen
    assert "shim-mapped 1" in seen
    record = json.loads((node.plans / "applied" / str(pod.metadata.uid) / "probe.json").read_text())
    assert record["llc_mask"] == "0xf" and record["dram_bytes"] == 192 * MIB
    assert record["memory_limit"] == 0
    assert record["started"] is True
    assert any("no L3 CAT through resctrl" in s for s in record["skipped"])
    # The pod is done: the kubelet unprepares the claim, whose run and CDI spec go.
    cdi_spec = node.runtime.cdi / f"tmc.dev-claim_{claim_uid}.json"
    until(lambda: claim_uid not in held(kubelet) and not cdi_spec.exists(), kubelet)
    remove(cp, kubelet, "bfs-dra")


def test_with_the_node_plugin_down_the_pod_waits_and_starts_once_it_runs(
    cluster: tuple[ControlPlane, Kubelet],
    node: Node,
    start_plugin: PluginFactory,
    start_dra_node: Callable[[], DraNode],
) -> None:
    cp, kubelet = cluster
    start_plugin(dra_checkpoint=str(checkpoint_path(kubelet)))
    api = c.core(cp)
    pod = allocate(cp, "waits-dra", ways=2, dram=64 * MIB)
    until(lambda: prepare_failures(api, pod), kubelet)
    failures = prepare_failures(api, pod)
    assert "tmc.dev" in failures[0], failures
    # Not started: no sandbox, no container.
    assert api.read_namespaced_pod("waits-dra", "default").status.phase == "Pending"
    assert sandboxes(node, pod) == []
    start_dra_node()
    pod = wait_pod(
        api, "waits-dra", lambda p: p.status.phase in ("Succeeded", "Failed"), seconds=120
    )
    assert pod.status.phase == "Succeeded", pod.status
    assert "env-TMC_PLAN /run/tmc/plan" in kubelet.container_log(pod, "probe").splitlines()
    remove(cp, kubelet, "waits-dra")


def test_a_claim_whose_ways_do_not_fit_is_refused_and_the_pod_never_starts(
    cluster: tuple[ControlPlane, Kubelet],
    node: Node,
    start_plugin: PluginFactory,
    start_dra_node: Callable[[], DraNode],
) -> None:
    cp, kubelet = cluster
    start_plugin(dra_checkpoint=str(checkpoint_path(kubelet)))
    start_dra_node()
    api = c.core(cp)
    pod = allocate(cp, "toobig-dra", ways=WAYS + 1, dram=64 * MIB)
    until(lambda: any("do not fit" in f for f in prepare_failures(api, pod)), kubelet)
    # Refused by the node plugin, retried by the kubelet, and never started.
    time.sleep(5)
    assert api.read_namespaced_pod("toobig-dra", "default").status.phase == "Pending"
    assert sandboxes(node, pod) == []
    assert held(kubelet) == {}
    remove(cp, kubelet, "toobig-dra")
