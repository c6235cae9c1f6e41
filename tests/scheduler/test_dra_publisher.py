# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,no-untyped-call,union-attr"
"""tmc-dra-publisher on a real kube-apiserver v1.36.3, run as the chart's dra-publisher service
account with the chart's RBAC (dra.enabled) and the command line the chart gives it: the
ResourceSlices of the driver tmc.dev follow the nodes' published capacity. A tiered node's
slices appear as `tmc-dra-slices` (pkg/dra's ClusterSlices) makes them, owned by their Node; a
rack pool's slice, sized by the operator's rackPools, selects its members by their hostname
label; a change of capacity rewrites the node's slices at a higher generation and leaves the
others alone; a node whose capacity cannot be read, that stops publishing or that is deleted
loses its slices, and a pool with no member left loses its own; another driver's slice is never
touched; a restarted publisher writes nothing that is already right."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from tests.scheduler.controlplane import NAMESPACE, ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane.plugin import engine_binary
from tests.scheduler.test_dra_objects import publishing_plane, slices_for
from tests.services import wait_until

pytestmark = pytest.mark.slow

GROUP, VERSION = "resource.k8s.io", "v1"
GIB = 2**30
POOLS = {"rack-a": "64Gi"}
# What each node publishes, as its agent writes it (labels and tmc.dev annotations), and the
# same capacity as pkg/dra reads it.
NODE_A = {"tmc.dev/dram-bytes": str(24 * GIB), "tmc.dev/slow-bytes": str(96 * GIB)}
NODE_B = {
    "tmc.dev/dram-bytes": str(24 * GIB),
    "tmc.dev/slow-pool": "rack-a",
    "tmc.dev/slow-pool-bytes": str(512 * GIB),
}


def capacity(annotations: dict[str, str], kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "host_kind": kind,
        "dram_bytes": int(annotations["tmc.dev/dram-bytes"]),
        "llc_ways": int(annotations["tmc.dev/llc-ways"]),
    }
    if "tmc.dev/slow-bytes" in annotations:
        out["slow_bytes"] = int(annotations["tmc.dev/slow-bytes"])
    if "tmc.dev/slow-pool" in annotations:
        out["slow_pool"] = annotations["tmc.dev/slow-pool"]
        out["slow_pool_bytes"] = int(annotations["tmc.dev/slow-pool-bytes"])
    return out


class Cluster:
    def __init__(
        self, cp: ControlPlane, slices_command: Path, values: dict[str, Any] | None = None
    ) -> None:
        """`values`: the chart's besides dra.enabled and rackPools (tenant namespace labels)."""
        self.cp = cp
        self.slices_command = slices_command
        self.core = c.core(cp)
        self.objects = k8s.CustomObjectsApi(c.api_client(cp))
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = cp.dir / "tmc-dra-publisher.log"
        rendered = c.render_chart({"dra": {"enabled": True}, "rackPools": POOLS, **(values or {})})
        docs = [d for d in yaml.safe_load_all(rendered["tmc/templates/dra.yaml"]) if d]
        self.deployment = next(d for d in docs if d["kind"] == "Deployment")
        client = c.api_client(cp)
        self.core.create_namespace({"metadata": {"name": NAMESPACE}})
        for doc in docs:
            if doc["kind"] != "Deployment":
                k8s_utils.create_from_dict(client, doc, namespace=NAMESPACE)

    def start(self) -> None:
        """The chart's command, the binary built from this checkout, as its service account."""
        pod = self.deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "e2e-tmc-dra-publisher"
        command = pod["containers"][0]["command"]
        assert command[0] == "/usr/local/bin/tmc-dra-publisher"
        self.proc = subprocess.Popen(
            [
                engine_binary("tmc-dra-publisher"),
                *command[1:],
                f"--kubeconfig={self.cp.kubeconfig('dra-publisher')}",
                "--debounce=200ms",
            ],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(20)
            self.proc = None

    def passes(self) -> int:
        return self.log.read_text(errors="replace").count("slices reconciled")

    def slices(self) -> dict[str, dict[str, Any]]:
        listed = cast(
            dict[str, Any],
            self.objects.list_cluster_custom_object(GROUP, VERSION, "resourceslices"),
        )
        return {s["metadata"]["name"]: s for s in listed["items"]}

    def ours(self) -> dict[str, dict[str, Any]]:
        return {n: s for n, s in self.slices().items() if s["spec"]["driver"] == "tmc.dev"}

    def expected(self, nodes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """pkg/dra's ClusterSlices for these capacities (by tmc-dra-slices), each rack pool's
        slice selecting its members by their hostname label."""
        given = {
            "nodes": [{"name": n, "capacity": cap} for n, cap in nodes.items()],
            "rack_pools": {"rack-a": 64 * GIB},
        }
        out = {s["metadata"]["name"]: s for s in slices_for(self.slices_command, given)}
        for s in out.values():
            pool = s["spec"]["pool"]["name"]
            if pool.startswith("rack-pool/"):
                members = sorted(n for n, cap in nodes.items() if cap.get("slow_pool") == pool[10:])
                s["spec"]["nodeSelector"] = {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": members,
                                }
                            ]
                        }
                    ]
                }
        return out

    def matches(self, nodes: dict[str, dict[str, Any]]) -> bool:
        want, have = self.expected(nodes), self.ours()
        if set(want) != set(have):
            return False
        for name, sent in want.items():
            stored = copy.deepcopy(have[name]["spec"])
            stored["pool"].pop("generation")
            expected = copy.deepcopy(sent["spec"])
            expected["pool"].pop("generation")
            if stored != expected:
                return False
        return True

    def wait_matches(self, nodes: dict[str, dict[str, Any]], what: str) -> None:
        wait_until(lambda: self.matches(nodes), 60, what)

    def node(self, name: str, annotations: dict[str, str], kind: str) -> None:
        body = c.node_object(name, memory="512Gi")
        body["metadata"]["labels"]["tmc.dev/host-kind"] = kind
        body["metadata"]["annotations"] = annotations
        c.register_node(self.core, body)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with publishing_plane(tmp_path_factory, "dra") as (cp, slices_command):
        made = Cluster(cp, slices_command)
        yield made
        made.stop()


OTHER = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "ResourceSlice",
    "metadata": {"name": "gpu-node-a"},
    "spec": {
        "driver": "gpu.example.com",
        "nodeName": "node-a",
        "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "gpu-0"}],
    },
}


def test_the_publisher_keeps_tmc_slices_equal_to_the_nodes(cluster: Cluster) -> None:
    a = {**NODE_A, "tmc.dev/llc-ways": "12"}
    b = {**NODE_B, "tmc.dev/llc-ways": "12"}
    cluster.node("node-a", a, "optane-12")
    cluster.node("node-b", b, "cxl-12")
    cluster.node("node-c", {}, "plain")  # publishes nothing
    d = {**NODE_B, "tmc.dev/llc-ways": "4", "tmc.dev/slow-pool-bytes": str(32 * GIB)}
    cluster.node("node-d", d, "cxl-4")
    other = cast(
        dict[str, Any],
        cluster.objects.create_cluster_custom_object(GROUP, VERSION, "resourceslices", OTHER),
    )
    cluster.start()

    # Appear: node-a's and node-b's slices as ClusterSlices makes them, the pool's at 64 GiB.
    nodes = {
        "node-a": capacity(a, "optane-12"),
        "node-b": capacity(b, "cxl-12"),
        "node-d": capacity(d, "cxl-4"),
    }
    cluster.wait_matches(nodes, "the first nodes' slices")
    have = cluster.ours()
    # A slice a node (its ways as a count, its memory); the pool: one, for both its members
    # (the operator's 64 GiB, not the 32 GiB node-d publishes).
    assert sorted(have) == [
        "tmc-node-node-a-0",
        "tmc-node-node-b-0",
        "tmc-node-node-d-0",
        "tmc-pool-rack-pool.rack-a-0",
    ]
    selector = have["tmc-pool-rack-pool.rack-a-0"]["spec"]["nodeSelector"]
    assert selector["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["node-b", "node-d"]
    uids = {n.metadata.name: n.metadata.uid for n in cluster.core.list_node().items}
    for name, s in have.items():
        owners = s["metadata"].get("ownerReferences", [])
        if name.startswith("tmc-pool-"):
            assert owners == []
            device = s["spec"]["devices"][0]
            assert device["capacity"]["bytes"]["value"] == "64Gi"
        else:
            node = s["spec"]["nodeName"]
            assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [
                ("Node", node, uids[node])
            ]

    # Change: node-a grows to 16 ways (its slice rewritten); node-b is left alone.
    a["tmc.dev/llc-ways"] = "16"
    cluster.core.patch_node("node-a", {"metadata": {"annotations": {"tmc.dev/llc-ways": "16"}}})
    nodes["node-a"] = capacity(a, "optane-12")
    cluster.wait_matches(nodes, "node-a's slices at 16 ways")
    now = cluster.ours()
    assert [n for n in now if n.startswith("tmc-node-node-a-")] == ["tmc-node-node-a-0"]
    ways = now["tmc-node-node-a-0"]["spec"]["devices"][0]["capacity"]["ways"]
    assert ways["value"] == "16" and ways["requestPolicy"]["validRange"]["max"] == "16"
    assert {now[n]["spec"]["pool"]["generation"] for n in now if "node-a" in n} == {
        max(have[n]["spec"]["pool"]["generation"] for n in have if "node-a" in n) + 1
    }
    for name, s in have.items():
        if "node-a" not in name:
            assert now[name]["metadata"]["resourceVersion"] == s["metadata"]["resourceVersion"]

    # Restart: the publisher finds everything right and writes nothing.
    cluster.stop()
    before = cluster.passes()
    cluster.start()
    wait_until(lambda: cluster.passes() > before, 60, "the restarted publisher's first pass")
    after = cluster.ours()
    assert {n: s["metadata"]["resourceVersion"] for n, s in after.items()} == {
        n: s["metadata"]["resourceVersion"] for n, s in now.items()
    }

    # Unreadable capacity: node-a publishes nothing and loses its slices; the log says why.
    cluster.core.patch_node("node-a", {"metadata": {"annotations": {"tmc.dev/llc-ways": "many"}}})
    del nodes["node-a"]
    cluster.wait_matches(nodes, "node-a's slices gone")
    said = [
        line
        for line in cluster.log.read_text().splitlines()
        if "cannot be read" in line and 'node="node-a"' in line
    ]
    assert said and "tmc.dev/llc-ways" in said[0], cluster.log.read_text()[-2000:]

    # Readable again, then no longer tiered: its slices come back, then go.
    nodes["node-a"] = capacity(a, "optane-12")
    cluster.core.patch_node("node-a", {"metadata": {"annotations": {"tmc.dev/llc-ways": "16"}}})
    cluster.wait_matches(nodes, "node-a's slices back")
    cluster.core.patch_node(
        "node-a",
        {"metadata": {"annotations": {"tmc.dev/llc-ways": None, "tmc.dev/dram-bytes": None}}},
    )
    del nodes["node-a"]
    cluster.wait_matches(nodes, "node-a's slices gone once it is not tiered")

    # Deleted: node-b's slices go, the pool's slice selects node-d alone, then goes with it.
    cluster.core.delete_node("node-b")
    del nodes["node-b"]
    cluster.wait_matches(nodes, "node-b's slices gone")
    cluster.core.delete_node("node-d")
    cluster.wait_matches({}, "node-d's and the pool's slices gone")
    assert cluster.ours() == {}

    # The other driver's slice was never touched.
    stored = cluster.slices()["gpu-node-a"]
    assert stored["metadata"]["resourceVersion"] == other["metadata"]["resourceVersion"]
    assert stored["spec"] == other["spec"]
    assert cluster.proc is not None and cluster.proc.poll() is None
