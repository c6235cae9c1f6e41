# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,no-untyped-call,union-attr"
"""tmc's DRA objects on a real kube-apiserver v1.36.3, started with no feature gate of ours: the
chart's DeviceClasses (`dra.enabled`) and the ResourceSlices that scheduler/plugin/pkg/dra makes
for a 48-way node with local slow memory, a 48-way node on a rack pool, the rack pool itself and
a 64-way node (printed by `tmc-dra-slices`, built from this checkout). Each object must be
accepted and stored exactly as sent: an API server whose DRAPartitionableDevices or
DRAConsumableCapacity gate were off would drop the shared counters, the counters devices consume,
allowMultipleAllocations and the request policies, and the stored objects would differ. The
controls: the same server refuses a slice one device over the limit tmc's slices keep to, and
one holding devices and counters together, and a server with those two gates off does not store
the slices as sent. Last, the stock kube-scheduler (its DynamicResources plugin) allocates claims
on the chart's classes from these slices: runs of ways that never overlap, and DRAM and slow
memory (a node's own, or its rack pool's) by the byte, until they run out."""

from __future__ import annotations

import copy
import json
import os
import shutil
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client as k8s

from tests.scheduler.controlplane import ControlPlane, Unavailable, unavailable
from tests.scheduler.controlplane import cluster as c
from tests.services import wait_until

pytestmark = pytest.mark.slow

PLUGIN = c.ROOT / "scheduler" / "plugin"
GROUP, VERSION = "resource.k8s.io", "v1"
GIB = 2**30
# A node like the paper's §4.1 machine (48-way LLC, 24 GiB DRAM, 128 GiB Optane-like memory), a
# second on a rack pool with no slow memory of its own, and the largest node tmc's contract has.
NODES: dict[str, Any] = {
    "nodes": [
        {
            "name": "node-a",
            "capacity": {
                "host_kind": "optane-48",
                "dram_bytes": 24 * GIB,
                "slow_bytes": 128 * GIB,
                "llc_ways": 48,
            },
        },
        {
            "name": "node-b",
            "capacity": {
                "host_kind": "cxl-48",
                "dram_bytes": 24 * GIB,
                "llc_ways": 48,
                "slow_pool": "rack-a",
                "slow_pool_bytes": 512 * GIB,
            },
        },
        {"name": "node-64", "capacity": {"dram_bytes": 512 * GIB, "llc_ways": 64}},
    ],
    # The operator's pool size (the chart's rackPools) wins over what a node publishes.
    "rack_pools": {"rack-a": 384 * GIB},
    "generation": 1,
}


def go_binary() -> str:
    """The Go toolchain scheduler/plugin/build.sh uses: the machine's, or the control plane's."""
    found = shutil.which("go")
    cache = Path(os.environ.get("TMC_K8S_CACHE", Path.home() / ".cache" / "tmc-k8s"))
    if found is None and (cache / "go-venv" / "bin" / "go").exists():
        found = str(cache / "go-venv" / "bin" / "go")
    if found is None:
        raise Unavailable("no Go toolchain to build tmc-dra-slices")
    return found


def build_slices_command(out: Path) -> Path:
    """tmc-dra-slices from this checkout, with build.sh's module and build caches."""
    cache = Path(os.environ.get("TMC_K8S_CACHE", Path.home() / ".cache" / "tmc-k8s"))
    env = {
        **os.environ,
        "GOMODCACHE": str(cache / "gomodcache"),
        "GOCACHE": str(cache / "gocache"),
        "GOPATH": str(cache / "gopath"),
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-buildvcs=false",
        "CGO_ENABLED": "0",
    }
    binary = out / "tmc-dra-slices"
    done = subprocess.run(
        [go_binary(), "build", "-o", str(binary), "./cmd/tmc-dra-slices"],
        cwd=PLUGIN,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise Unavailable(f"tmc-dra-slices did not build: {done.stderr[-2000:]}")
    return binary


def slices_for(binary: Path, given: dict[str, Any]) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(binary)], input=json.dumps(given), check=True, capture_output=True, text=True
    )
    listed: dict[str, Any] = json.loads(done.stdout)
    assert listed["kind"] == "List"
    items: list[dict[str, Any]] = listed["items"]
    return items


class Plane:
    def __init__(self, cp: ControlPlane, slices: list[dict[str, Any]]) -> None:
        self.cp = cp
        self.api = k8s.CustomObjectsApi(c.api_client(cp))
        self.slices = slices

    def create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        made = self.api.create_cluster_custom_object(GROUP, VERSION, plural, body)
        return cast(dict[str, Any], made)

    def read(self, plural: str, name: str) -> dict[str, Any]:
        got = self.api.get_cluster_custom_object(GROUP, VERSION, plural, name)
        return cast(dict[str, Any], got)

    def sent(self, name: str) -> dict[str, Any]:
        """The slice tmc-dra-slices printed under this name."""
        return next(s for s in self.slices if s["metadata"]["name"] == name)


# The two beta gates tmc's slices rely on, both on by default at v1.36.
GATES = ("DRAPartitionableDevices", "DRAConsumableCapacity")


@pytest.fixture(scope="module")
def slices_command(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return build_slices_command(tmp_path_factory.mktemp("dra"))
    except Unavailable as exc:
        unavailable(exc)


@pytest.fixture(scope="module")
def slices(slices_command: Path) -> list[dict[str, Any]]:
    return slices_for(slices_command, NODES)


def started(gates: dict[str, bool] | None = None) -> ControlPlane:
    try:
        cp = ControlPlane(feature_gates=gates)
    except Unavailable as exc:
        unavailable(exc)
    try:
        cp.start()
    except BaseException:
        cp.close()
        raise
    return cp


@pytest.fixture(scope="module")
def plane(slices: list[dict[str, Any]]) -> Iterator[Plane]:
    cp = started()
    try:
        yield Plane(cp, slices)
    finally:
        cp.close()


def feature_enabled(cp: ControlPlane, gate: str) -> bool:
    """The API server's own word on a gate: its kubernetes_feature_enabled metric."""
    context = ssl.create_default_context(cafile=str(cp.dir / "ca.crt"))
    request = urllib.request.Request(
        f"{cp.server}/metrics", headers={"Authorization": f"Bearer {cp.admin_token}"}
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        text: str = response.read().decode()
    values = [
        line.rsplit(" ", 1)[1]
        for line in text.splitlines()
        if line.startswith("kubernetes_feature_enabled{") and f'name="{gate}"' in line
    ]
    assert len(values) == 1, (gate, values)
    return values[0] == "1"


def test_the_gates_tmcs_slices_need_are_on_by_default(plane: Plane) -> None:
    for gate in (*GATES, "DRAPrioritizedList"):
        assert feature_enabled(plane.cp, gate), gate
    # Read from the metric, not assumed: a gate tmc does not rely on, off by default at v1.36.
    assert not feature_enabled(plane.cp, "DRADeviceTaintRules")


def test_the_charts_device_classes_are_accepted(plane: Plane) -> None:
    assert not [
        d
        for t in c.render_chart({}).values()
        for d in yaml.safe_load_all(t)
        if d and d["kind"] == "DeviceClass"
    ]
    rendered = c.render_chart({"dra": {"enabled": True}})["tmc/templates/dra.yaml"]
    classes = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "DeviceClass"]
    assert {d["metadata"]["name"] for d in classes} == {
        "llc-ways.tmc.dev",
        "dram.tmc.dev",
        "slow-memory.tmc.dev",
    }
    for doc in classes:
        plane.create("deviceclasses", doc)
        stored = plane.read("deviceclasses", doc["metadata"]["name"])
        assert stored["spec"] == doc["spec"]


def test_the_api_server_refuses_an_invalid_selector(plane: Plane) -> None:
    """The control for the classes: the server compiles their CEL, and refuses what does not."""
    bad = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": "broken.tmc.dev"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "tmc.dev" &&'}}]},
    }
    with pytest.raises(k8s.ApiException) as refused:
        plane.create("deviceclasses", bad)
    assert refused.value.status == 422


def by_pool(slices: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    pools: dict[str, list[dict[str, Any]]] = {}
    for s in slices:
        pools.setdefault(s["spec"]["pool"]["name"], []).append(s)
    return pools


def test_the_nodes_and_the_rack_pool_are_stored_as_sent(plane: Plane) -> None:
    pools = by_pool(plane.slices)
    # 48 ways: counters, memory and 1,176 runs in 19 slices; 64 ways: 2,080 runs in 33.
    assert {p: len(s) for p, s in pools.items()} == {
        "node-a": 21,
        "node-b": 21,
        "node-64": 35,
        "rack-pool/rack-a": 1,
    }
    for pool, slices in pools.items():
        devices = [d for s in slices for d in s["spec"].get("devices", [])]
        ways = [d for d in devices if d["attributes"]["kind"]["string"] == "llc-ways"]
        expected = {"node-a": 1176, "node-b": 1176, "node-64": 2080, "rack-pool/rack-a": 0}
        assert len(ways) == expected[pool], pool
        for s in slices:
            assert s["spec"]["pool"]["resourceSliceCount"] == len(slices)
    for sent in plane.slices:
        plane.create("resourceslices", sent)
        stored = plane.read("resourceslices", sent["metadata"]["name"])
        assert stored["spec"] == sent["spec"], sent["metadata"]["name"]
    # What the gates would have dropped is there, on the server.
    node_a = {s["metadata"]["name"]: s for s in pools["node-a"]}
    counters = plane.read("resourceslices", "tmc-node-node-a-0")["spec"]["sharedCounters"]
    assert [len(s["counters"]) for s in counters] == [32, 16]
    memory = plane.read("resourceslices", "tmc-node-node-a-1")["spec"]["devices"]
    assert {d["name"]: d["capacity"]["bytes"]["value"] for d in memory} == {
        "dram": "24Gi",
        "slow": "128Gi",
    }
    assert all(
        d["allowMultipleAllocations"] and d["capacity"]["bytes"]["requestPolicy"] for d in memory
    )
    runs = plane.read("resourceslices", "tmc-node-node-a-2")["spec"]["devices"]
    assert len(runs) == 64 and all(d["consumesCounters"] for d in runs)
    assert set(node_a) == {f"tmc-node-node-a-{i}" for i in range(21)}
    pool = plane.read("resourceslices", "tmc-pool-rack-pool.rack-a-0")["spec"]
    assert pool["nodeSelector"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "tmc.dev/slow-pool", "operator": "In", "values": ["rack-a"]}]}
    ]
    assert pool["devices"][0]["capacity"]["bytes"]["value"] == "384Gi"


def test_the_api_server_refuses_what_tmcs_slices_keep_clear_of(plane: Plane) -> None:
    """The controls for the round trip: the same server enforces the limits the slices keep."""
    runs, more = plane.sent("tmc-node-node-a-2"), plane.sent("tmc-node-node-a-3")
    over = copy.deepcopy(runs)
    over["metadata"] = {"name": "tmc-over-limit"}
    over["spec"]["pool"]["name"] = "over-limit"
    over["spec"]["devices"].append(more["spec"]["devices"][0])  # 65 devices consuming counters
    both = copy.deepcopy(runs)
    both["metadata"] = {"name": "tmc-devices-and-counters"}
    both["spec"]["pool"]["name"] = "both"
    both["spec"]["sharedCounters"] = plane.sent("tmc-node-node-a-0")["spec"]["sharedCounters"]
    for body in (over, both):
        with pytest.raises(k8s.ApiException) as refused:
            plane.create("resourceslices", body)
        assert refused.value.status == 422, body["metadata"]["name"]


def test_with_the_gates_off_the_slices_are_not_stored_as_sent(slices: list[dict[str, Any]]) -> None:
    """The control for the round trip: an API server with the two beta gates off drops what they
    guard (or refuses the slice), so a slice stored exactly as sent shows they are on."""
    cp = started(dict.fromkeys(GATES, False))
    try:
        assert not any(feature_enabled(cp, gate) for gate in GATES)
        gated = Plane(cp, slices)
        for name in ("tmc-node-node-a-0", "tmc-node-node-a-1", "tmc-node-node-a-2"):
            sent = gated.sent(name)
            try:
                gated.create("resourceslices", sent)
            except k8s.ApiException as refused:
                assert refused.status == 422, name
                continue
            assert gated.read("resourceslices", name)["spec"] != sent["spec"], name
    finally:
        cp.close()


# Allocation by the stock kube-scheduler (its DynamicResources plugin) from these objects: node-a
# with its own 128 GiB of slow memory, node-b with none but on rack-a (256 GiB by the operator).
ALLOCATED: dict[str, Any] = {
    "nodes": [
        NODES["nodes"][0],
        {
            "name": "node-b",
            "capacity": {**NODES["nodes"][1]["capacity"], "slow_pool_bytes": 256 * GIB},
        },
    ],
    "generation": 1,
}
TENANT = "dra-tenant"


def claim(name: str, *, ways: int, dram: str | None = None, slow: str | None = None) -> Any:
    requests: list[dict[str, Any]] = [
        {
            "name": "ways",
            "exactly": {
                "deviceClassName": "llc-ways.tmc.dev",
                "selectors": [
                    {"cel": {"expression": f'device.attributes["tmc.dev"].ways == {ways}'}}
                ],
            },
        }
    ]
    for request, cls, size in (
        ("dram", "dram.tmc.dev", dram),
        ("slow", "slow-memory.tmc.dev", slow),
    ):
        if size is not None:
            requests.append(
                {
                    "name": request,
                    "exactly": {"deviceClassName": cls, "capacity": {"requests": {"bytes": size}}},
                }
            )
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": TENANT},
        "spec": {"devices": {"requests": requests}},
    }


def pod_with_claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": TENANT},
        "spec": {
            "automountServiceAccountToken": False,
            "resourceClaims": [{"name": "tiers", "resourceClaimName": name}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/graph500:3.0.0",
                    "resources": {"claims": [{"name": "tiers"}]},
                }
            ],
        },
    }


def device_classes() -> list[dict[str, Any]]:
    """The chart's DeviceClasses (dra.enabled), as rendered."""
    rendered = c.render_chart({"dra": {"enabled": True}})["tmc/templates/dra.yaml"]
    return [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "DeviceClass"]


def install_dra(plane: Plane) -> None:
    """The chart's DeviceClasses and the plane's slices, created."""
    for doc in device_classes():
        plane.create("deviceclasses", doc)
    for body in plane.slices:
        plane.create("resourceslices", body)


def start_stock_scheduler(cp: ControlPlane) -> None:
    """The stock kube-scheduler on its default profile (DynamicResources on), as admin."""
    config = cp.dir / "dra-scheduler.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(cp.kubeconfig("admin"))},
                "leaderElection": {"leaderElect": False},
            }
        )
    )
    cp.start_scheduler(config)


@pytest.fixture(scope="module")
def scheduling(slices_command: Path) -> Iterator[Plane]:
    cp = started()
    try:
        c.install_rbac(cp)
        admin = c.core(cp)
        for name, labels in (("node-a", {}), ("node-b", {"tmc.dev/slow-pool": "rack-a"})):
            body = c.node_object(name)
            body["metadata"]["labels"].update(labels)
            c.register_node(admin, body)
        admin.create_namespace({"metadata": {"name": TENANT}})
        c.ensure_default_account(admin, TENANT)
        plane = Plane(cp, slices_for(slices_command, ALLOCATED))
        install_dra(plane)
        start_stock_scheduler(cp)
        yield plane
    finally:
        cp.close()


def allocated(plane: Plane, name: str) -> list[dict[str, Any]]:
    got = plane.api.get_namespaced_custom_object(GROUP, VERSION, TENANT, "resourceclaims", name)
    results: list[dict[str, Any]] = cast(dict[str, Any], got)["status"]["allocation"]["devices"][
        "results"
    ]
    return results


def settle(plane: Plane, names: list[str], bound: int) -> dict[str, str]:
    """Waits until `bound` of the pods are bound and kube-scheduler found no room for the rest;
    returns each bound pod's node."""
    api = c.core(plane.cp)

    def nodes() -> dict[str, str]:
        pods = {p.metadata.name: p for p in api.list_namespaced_pod(TENANT).items}
        return {n: str(pods[n].spec.node_name) for n in names if pods[n].spec.node_name}

    def refused(name: str) -> bool:
        conditions = api.read_namespaced_pod(name, TENANT).status.conditions or []
        return any(x.type == "PodScheduled" and x.status == "False" for x in conditions)

    wait_until(
        lambda: len(nodes()) == bound and all(refused(n) for n in names if n not in nodes()),
        90,
        f"{bound} of {len(names)} pods bound",
    )
    return nodes()


def test_kube_scheduler_allocates_runs_that_never_overlap_and_memory_by_the_byte(
    scheduling: Plane,
) -> None:
    """Five pods ask for 12 ways, 5 GiB of DRAM and 100 GiB of slow memory: node-a's own slow
    memory holds one, rack-a (node-b's) two; the rest wait. Then six ask for 12 ways only: the
    48 ways of each node hold four disjoint runs, so five more are placed and one waits."""
    api = c.core(scheduling.cp)
    first = [f"full-{i}" for i in range(5)]
    for name in first:
        scheduling.api.create_namespaced_custom_object(
            GROUP, VERSION, TENANT, "resourceclaims", claim(name, ways=12, dram="5Gi", slow="100Gi")
        )
        api.create_namespaced_pod(TENANT, pod_with_claim(name))
    on = settle(scheduling, first, 3)
    assert sorted(on.values()) == ["node-a", "node-b", "node-b"], on
    for name, node in on.items():
        results = {r["request"]: r for r in allocated(scheduling, name)}
        assert results["dram"]["pool"] == node and results["dram"]["device"] == "dram"
        assert results["dram"]["consumedCapacity"] == {"bytes": "5Gi"}
        assert results["slow"]["consumedCapacity"] == {"bytes": "100Gi"}
        want_pool = "node-a" if node == "node-a" else "rack-pool/rack-a"
        assert (results["slow"]["pool"], results["slow"]["device"]) == (want_pool, "slow")
        assert results["ways"]["pool"] == node

    second = [f"ways-{i}" for i in range(6)]
    for name in second:
        scheduling.api.create_namespaced_custom_object(
            GROUP, VERSION, TENANT, "resourceclaims", claim(name, ways=12)
        )
        api.create_namespaced_pod(TENANT, pod_with_claim(name))
    on.update(settle(scheduling, second, 5))
    masks: dict[str, list[int]] = {"node-a": [], "node-b": []}
    for name, node in on.items():
        device = next(r["device"] for r in allocated(scheduling, name) if r["request"] == "ways")
        _, start, count = device.split("-")
        assert int(count) == 12
        mask = ((1 << 12) - 1) << int(start)
        assert all(mask & other == 0 for other in masks[node]), (node, device)
        masks[node].append(mask)
    assert {n: len(m) for n, m in masks.items()} == {"node-a": 4, "node-b": 4}
