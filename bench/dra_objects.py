# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,no-untyped-call"
"""tmc's DRA objects for bench.scheduler_e2e's DRA path: the ResourceSlices of the benchmark's
nodes (made by `tmc-dra-slices` from scheduler/plugin/pkg/dra, built from this checkout), the
chart's DeviceClasses, a claim per pod (`tmc-dra-slices --claim`), and the check that the stock
kube-scheduler's allocations over-commit nothing: no device gives more ways or bytes than it
has (a node's LLC ways are one device of consumable capacity `ways`, its memory devices of
`bytes`)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.utils import parse_quantity

from model.node_contract import NodeCapacity, Placement
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.test_dra_claims import claim_spec
from tests.scheduler.test_dra_objects import GROUP, VERSION, device_classes, slices_for

# tmc-dra-slices reads at most 1 MiB: nodes go to it in chunks, each a whole number of the
# benchmark's rack pools (64 node indices each), so that every pool's slice is made once.
NODES_PER_CALL = 640


def slices_input(nodes: Sequence[tuple[str, NodeCapacity]]) -> dict[str, Any]:
    """What tmc-dra-slices reads for these nodes: their capacity as the agent publishes it."""
    return {
        "nodes": [
            {"name": name, "capacity": cap.model_dump(mode="json", exclude_none=True)}
            for name, cap in nodes
        ],
        "generation": 1,
    }


def cluster_slices(
    command: Path, nodes: Sequence[tuple[str, NodeCapacity]]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(0, len(nodes), NODES_PER_CALL):
        out += slices_for(command, slices_input(nodes[i : i + NODES_PER_CALL]))
    return out


def create_all(cp: ControlPlane, plural: str, bodies: list[dict[str, Any]]) -> float:
    """Cluster-scoped objects created from 8 threads (as add_nodes registers nodes); seconds."""
    api = k8s.CustomObjectsApi(c.api_client(cp))

    def one(body: dict[str, Any]) -> None:
        response: Any = api.create_cluster_custom_object(
            GROUP, VERSION, plural, body, _preload_content=False
        )
        try:
            if not 200 <= response.status <= 299:
                raise RuntimeError(f"creating {plural} answered {response.status}")
            response.drain_conn()
        finally:
            response.release_conn()

    start = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, bodies))
    return time.monotonic() - start


def resident_mib(pid: int | None) -> float:
    """A process's resident memory (VmRSS of /proc/<pid>/status) in MiB; nan when unknown."""
    if pid is None:
        return float("nan")
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def claim_body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def with_claim(body: dict[str, Any], claim: str) -> dict[str, Any]:
    """The pod body naming its claim (resourceClaimName), each container using it."""
    out = {**body, "spec": {**body["spec"]}}
    out["spec"]["resourceClaims"] = [{"name": "tiers", "resourceClaimName": claim}]
    out["spec"]["containers"] = [
        {**ct, "resources": {**ct.get("resources", {}), "claims": [{"name": "tiers"}]}}
        for ct in body["spec"]["containers"]
    ]
    return out


def list_claims(cp: ControlPlane) -> list[dict[str, Any]]:
    api = k8s.CustomObjectsApi(c.api_client(cp))
    listed: Any = api.list_cluster_custom_object(GROUP, VERSION, "resourceclaims")
    items: list[dict[str, Any]] = listed["items"]
    return items


# The consumable capacities of tmc's devices (pkg/dra CapacityWays, CapacityBytes).
CAPACITIES = ("ways", "bytes")


def device_capacity(slices: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], int]:
    """(pool, device, capacity) -> what a device of consumable capacity holds, from the slices:
    a node's ways, a memory device's bytes."""
    out: dict[tuple[str, str, str], int] = {}
    for s in slices:
        pool = s["spec"]["pool"]["name"]
        for d in s["spec"].get("devices", []):
            for name in CAPACITIES:
                held = (d.get("capacity") or {}).get(name)
                if held is not None:
                    out[(pool, d["name"], name)] = int(parse_quantity(held["value"]))
    return out


def allocations(
    claims: Iterable[dict[str, Any]], problems: list[str]
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Each allocated claim's namespace/name and device results; a claim with no allocation is
    added to problems instead."""
    for claim in claims:
        meta = claim["metadata"]
        name = f"{meta.get('namespace', '')}/{meta['name']}"
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            problems.append(f"{name}: not allocated")
            continue
        yield name, allocation["devices"]["results"]


def overcommit(
    claims: Iterable[dict[str, Any]], capacity: dict[tuple[str, str, str], int]
) -> list[str]:
    """What the allocations of these claims over-commit: a device giving more ways or bytes
    than capacity says it has (the ways of one node's claims together above the node's ways),
    ways or bytes taken from a device capacity does not know, an allocation of a tmc device
    that records no consumed capacity (it would have taken the whole device), and a claim with
    no allocation. Empty when none."""
    problems: list[str] = []
    used: dict[tuple[str, str, str], int] = {}
    known = {(pool, device) for pool, device, _ in capacity}
    for name, results in allocations(claims, problems):
        for r in results:
            pool, device = r["pool"], r["device"]
            consumed = r.get("consumedCapacity") or {}
            if (pool, device) in known and not consumed:
                problems.append(f"{pool}/{device}: {name} took it with no consumed capacity")
            for what, taken in consumed.items():
                key = (pool, device, what)
                used[key] = used.get(key, 0) + int(parse_quantity(taken))
    for key, taken in sorted(used.items()):
        held = capacity.get(key)
        if held is None:
            problems.append(f"{key[0]}/{key[1]}: {taken} {key[2]} taken from an unknown device")
        elif taken > held:
            problems.append(f"{key[0]}/{key[1]}: {taken} {key[2]} taken of {held}")
    return problems


@dataclass(frozen=True)
class Published:
    """What publish made: the slices (and their devices), the seconds their creation took, and
    the resident memory (MiB) of the named processes before and after."""

    slices: int
    devices: int
    seconds: float
    before_mib: dict[str, float]
    after_mib: dict[str, float]
    capacity: dict[tuple[str, str, str], int]
    shape: str = "a node's ways as a count, its memory by the byte"

    def line(self, nodes: int) -> str:
        memory = ", ".join(
            f"{name} {self.before_mib[name]:.0f} -> {self.after_mib[name]:.0f} MiB"
            for name in self.before_mib
        )
        return (
            f"  DRA objects: {self.slices} ResourceSlices ({self.devices} devices: {self.shape})"
            f" for {nodes} nodes, created in {self.seconds:.0f} s"
            f" ({self.slices / self.seconds:.0f}/s); resident memory {memory}"
        )


def publish(
    cp: ControlPlane,
    command: Path,
    nodes: Sequence[tuple[str, NodeCapacity]],
    pids: dict[str, int | None],
) -> Published:
    """The chart's DeviceClasses and the nodes' (and rack pools') ResourceSlices, created; the
    resident memory of pids read before and after."""
    return _published(cp, device_classes(), cluster_slices(command, nodes), pids)


def _published(
    cp: ControlPlane,
    classes: list[dict[str, Any]],
    slices: list[dict[str, Any]],
    pids: dict[str, int | None],
    shape: str | None = None,
) -> Published:
    before = {name: resident_mib(p) for name, p in pids.items()}
    create_all(cp, "deviceclasses", classes)
    seconds = create_all(cp, "resourceslices", slices)
    time.sleep(5)  # what the creation left to settle (watch caches, compaction) counts too
    after = {name: resident_mib(p) for name, p in pids.items()}
    devices = sum(len(s["spec"].get("devices", [])) for s in slices)
    published = Published(len(slices), devices, seconds, before, after, device_capacity(slices))
    return published if shape is None else replace(published, shape=shape)


# The plainest DRA there is, as Kubernetes' own scheduler benchmarks publish it: a driver whose
# nodes each offer a few whole devices with no attributes, counters or capacity, one DeviceClass
# selecting the driver, and claims for one device each. What the stock kube-scheduler spends on
# it is what any claim costs, whatever its devices: the floor under every DRA door.
PLAIN_DRIVER = "plain.bench.tmc.dev"
PLAIN_CLASS = "plain.bench.tmc.dev"
PLAIN_DEVICES_PER_NODE = 8


def plain_objects(node_names: Sequence[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The plain driver's DeviceClass and one ResourceSlice a node of PLAIN_DEVICES_PER_NODE
    devices."""
    device_class = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": PLAIN_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{PLAIN_DRIVER}"'}}]},
    }
    slices = [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-plain"},
            "spec": {
                "driver": PLAIN_DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"device-{k}"} for k in range(PLAIN_DEVICES_PER_NODE)],
            },
        }
        for node in node_names
    ]
    return [device_class], slices


def publish_plain(
    cp: ControlPlane, node_names: Sequence[str], pids: dict[str, int | None]
) -> Published:
    """The plain driver's objects (plain_objects), created as publish creates tmc's."""
    classes, slices = plain_objects(node_names)
    return _published(cp, classes, slices, pids, "the plain driver's whole devices")


def plain_claim() -> Claim:
    """One device of the plain driver's class."""
    request = {
        "name": "device",
        "exactly": {"deviceClassName": PLAIN_CLASS, "allocationMode": "ExactCount", "count": 1},
    }
    return Claim({"devices": {"requests": [request]}}, "one whole device of the plain driver")


def allocated_twice(claims: Iterable[dict[str, Any]]) -> list[str]:
    """Whole devices (no consumable capacity) given to more than one claim, and claims with no
    allocation: what the plain driver's allocations over-commit. Empty when none."""
    problems: list[str] = []
    holder: dict[tuple[str, str], str] = {}
    for name, results in allocations(claims, problems):
        for r in results:
            key = (r["pool"], r["device"])
            if key in holder:
                problems.append(f"{key[0]}/{key[1]}: given to {holder[key]} and {name}")
            holder[key] = name
    return problems


@dataclass(frozen=True)
class Claim:
    """The claim spec each DRA pod's claim carries, and the configuration it asks for."""

    spec: dict[str, Any]
    text: str


def claim_for(command: Path, placed: Placement | None) -> Claim:
    """`tmc-dra-slices --claim` of the configuration a placement gave its pod: its ways, its DRAM
    and its slow bytes (at the pod's request, as the plugin sized it)."""
    if placed is None or placed.fallback is not None:
        raise RuntimeError(f"the plugin's pod has no configuration to claim: {placed}")
    cfg = placed.configuration
    alternative = {
        "llc_ways": cfg.llc_ways,
        "dram_bytes": cfg.dram_bytes,
        "slow_bytes": cfg.slow_bytes,
    }
    text = (
        f"{cfg.llc_ways} ways, {cfg.dram_bytes / 2**20:.0f} MiB DRAM, "
        f"{cfg.slow_bytes / 2**20:.0f} MiB slow memory"
    )
    return Claim(claim_spec(command, [alternative]), text)
