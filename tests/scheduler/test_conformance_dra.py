# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,no-untyped-call,union-attr"
"""The conformance table (scheduler/conformance/placements.json) through tmc's DRA door on the
real control plane: kube-apiserver v1.36.3, the stock kube-scheduler v1.36.3 on its default
profile (its DynamicResources plugin allocates), kube-controller-manager's resource-claim
controller (it frees a gone pod's claim), and tmc-dra-publisher, built from this checkout and run
with the chart's command line, publishing each node's ResourceSlices from the Node objects the
table gives. No kubelet runs: allocation and binding are what is judged, not preparation.

Each `schedule` step's pod opts in as a DRA cluster's pod does: with a ResourceClaim whose spec is
the one tmc-dra-publisher writes into the recommendation's ResourceClaimTemplate (`tmc-dra-slices
--claim` of its configuration and alternatives, pkg/dra's ClaimSpec). The door sizes the claim by
the recommendation's bytes, fixed when the claim is made; every pod of this table asks for exactly
its recommendation's DRAM plus slow bytes, so the engine's sizing at the pod's request gives the
same bytes. A pod placed without a recommendation (the engine's fallback) names the template its
pair would have, which the publisher never makes for a fallback: it waits. A pod that does not opt
in has no claim. A `bound` step's pod is bound with its CPU and memory and no claim: what it holds
of ways, DRAM and slow memory is the engine's bookkeeping, which the allocator never sees.

What the door did at each step is judged twice. Rules that hold on every door, whatever the file
says: no device over-committed (ways within the node's llc-ways, bytes within each device and
rack pool, as the table gives them), a pod no node can ever take stays pending, a pod with a claim
is bound only to a node the table's filter keeps or holds full for now (never one it rejects for
good; a full one is a difference, below), and what is allocated is one of the recommendation's
configurations, on the pod's node. Then every departure from the table (another
node, a pod bound where the table's waits or the reverse, other bytes or ways, another slow
source, held resources the door cannot see) must be the one scheduler/conformance/dra-door.json
records for that step, with its cause: a new departure and a recorded one that vanished both fail.
Tables planted with a wrong expectation must fail the same judgement.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes.utils import parse_quantity

from model.node_contract import WORKLOAD_ANNOTATION, recommendation_object_name
from scheduler.pods import canonical_objective
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.test_conformance import (
    load_table,
    node_object,
    node_status,
    objective_of,
    recommendation_for,
)
from tests.scheduler.test_dra_claims import claim_spec
from tests.scheduler.test_dra_objects import (
    publishing_plane,
    slices_for,
    start_stock_scheduler,
)
from tests.scheduler.test_dra_publisher import Cluster
from tests.services import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DIFFERENCES = ROOT / "scheduler" / "conformance" / "dra-door.json"
GROUP, VERSION = "resource.k8s.io", "v1"
NAMESPACE = "dra-conformance"
CLAIM = "tiers"  # the pod's name for its claim
MIB = 2**20

# What a step of the door may do otherwise than the table: the vocabulary of dra-door.json.
KINDS = {
    "another-node": "bound to another node than the table's chosen one",
    "bound-where-the-table-waits": "bound, where the table's pod waits",
    "waits-where-the-table-binds": "pending, where the table's pod is bound",
    "other-ways": "another number of LLC ways than the table's mask holds",
    "other-memory": "other DRAM or slow bytes than the table's placement",
    "other-slow-source": "slow memory from the rack pool where the table's is the node's, or back",
    "held-unseen": "a pod placed by another door holds ways and memory the allocator never sees",
}

# The taints kube-controller-manager's node-lifecycle controller puts on a node whose Ready
# condition is False or missing (it is not run here: no kubelet heartbeats any node).
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
UNREACHABLE_TAINT = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}


def load_differences() -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads(DIFFERENCES.read_text())
    assert recorded["schema"] == "tmc.conformance.dra-door/v1"
    return recorded


# --- what the door is given ----------------------------------------------------------------------


def capacity(node: dict[str, Any]) -> dict[str, Any] | None:
    """The node's capacity as tmc-dra-slices takes it, from its annotations; None for a node that
    publishes none or one that cannot be read (the publisher skips both)."""
    ann = node["annotations"]
    try:
        out: dict[str, Any] = {
            "dram_bytes": int(ann["tmc.dev/dram-bytes"]),
            "llc_ways": int(ann["tmc.dev/llc-ways"]),
            "slow_bytes": int(ann.get("tmc.dev/slow-bytes", "0")),
        }
        if "tmc.dev/cpus" in ann:
            out["cpus"] = int(ann["tmc.dev/cpus"])
        if "tmc.dev/slow-pool" in ann:
            out["slow_pool"] = ann["tmc.dev/slow-pool"]
            out["slow_pool_bytes"] = int(ann["tmc.dev/slow-pool-bytes"])
    except (KeyError, ValueError):
        return None
    if "tmc.dev/host-kind" in node["labels"]:
        out["host_kind"] = node["labels"]["tmc.dev/host-kind"]
    return out


def pool_bytes(scenario: dict[str, Any]) -> dict[str, int]:
    """Each rack pool's size as the engine counts it without an operator's size: the smallest
    its members publish."""
    pools: dict[str, int] = {}
    for node in scenario["nodes"]:
        cap = capacity(node)
        if cap is not None and "slow_pool" in cap:
            p = cap["slow_pool"]
            pools[p] = min(pools.get(p, cap["slow_pool_bytes"]), cap["slow_pool_bytes"])
    return pools


def alternatives(rec: dict[str, Any]) -> list[dict[str, int]]:
    """The configurations the publisher's template offers, preferred first."""
    offered = [rec, *rec.get("alternatives", [])]
    return [
        {"llc_ways": a["llc_ways"], "dram_bytes": a["dram_bytes"], "slow_bytes": a["slow_bytes"]}
        for a in offered
    ]


def in_mib(alternative: dict[str, int]) -> tuple[int, int, int]:
    """An alternative as the door allocates it: ways, and memory in whole MiB rounded up."""
    return (
        alternative["llc_ways"],
        -(-alternative["dram_bytes"] // MIB) * MIB,
        -(-alternative["slow_bytes"] // MIB) * MIB,
    )


def door_node(node: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The table's node as a DRA cluster holds it: its kubelet's hostname label (a rack pool's
    slice selects its members by it), and the taint the node-lifecycle controller gives a node
    that is not ready."""
    body = node_object(node)
    body["metadata"]["labels"]["kubernetes.io/hostname"] = node["name"]
    taints: list[dict[str, str]] = []
    if node["ready"] is False:
        taints.append(NOT_READY_TAINT)
    if node["ready"] is None:
        taints.append(UNREACHABLE_TAINT)
    return body, {"spec": {"taints": taints or None}}


def opts_in(step: dict[str, Any]) -> bool:
    return not (step.get("expect") or {}).get("skipped")


def door_pod(
    pod: dict[str, Any], *, claim: str | None, template: str | None, scheduler: str
) -> dict[str, Any]:
    """The table's pod for the DRA door: its CPU and memory as given, tmc's extended resource left
    out (the door's opt-in is the claim), and the claim it names, if any."""

    def plain(resources: dict[str, str] | None) -> dict[str, str]:
        return {k: v for k, v in (resources or {}).items() if "/" not in k}

    resources: dict[str, Any] = {"requests": plain(pod.get("requests"))}
    if plain(pod.get("limits")):
        resources["limits"] = plain(pod.get("limits"))
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "pause", "resources": resources}],
    }
    if pod.get("init_requests"):
        spec["initContainers"] = [
            {"name": "init", "image": "pause", "resources": {"requests": pod["init_requests"]}}
        ]
    if claim is not None or template is not None:
        source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
        spec["resourceClaims"] = [{"name": CLAIM, **source}]
        spec["containers"][0]["resources"]["claims"] = [{"name": CLAIM}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod["name"], "annotations": dict(pod.get("annotations") or {})},
        "spec": spec,
    }


# --- what a run saw ------------------------------------------------------------------------------


@dataclass
class Took:
    """One step at the API server: the node the pod is bound to (None: pending), whether it has a
    claim, what the claim was allocated (the alternative's index, its ways and bytes, and whether
    its slow memory came from the node or its rack pool), and after the step, what every
    allocated claim of the scenario holds together, by DRA pool and device."""

    node: str | None = None
    claimed: bool = False
    alternative: int | None = None
    ways: int = 0
    dram_bytes: int = 0
    slow_bytes: int = 0
    slow_from: str | None = None  # "node", "pool" or None (no slow memory)
    held: dict[str, int] = field(default_factory=dict)  # "<pool>|<device>": ways or bytes
    problem: str = ""  # what the harness could not do, or a claim allocated off the pod's node


def consumed(result: dict[str, Any]) -> int:
    return int(sum(parse_quantity(v) for v in result.get("consumedCapacity", {}).values()))


def allocation_of(claim: dict[str, Any], node: str, took: Took) -> None:
    """The claim's allocation as a configuration: a subrequest per request, all of one
    alternative (c<i>); slow memory that an alternative without any takes as its last MiB of DRAM
    (the DRAM device through the slow request) is DRAM."""
    results = claim["status"]["allocation"]["devices"]["results"]
    chosen = {r["request"].split("/", 1)[1] for r in results}
    if len(chosen) != 1:
        took.problem = f"the claim mixes alternatives {sorted(chosen)}"
        return
    took.alternative = int(next(iter(chosen))[1:])
    for r in results:
        request = r["request"].split("/", 1)[0]
        local = r["pool"] == node
        if not local and not (request == "slow" and r["pool"].startswith("rack-pool/")):
            took.problem = f"{r['request']} allocated from pool {r['pool']}, bound to {node}"
        if request == "ways":
            took.ways += consumed(r)
        elif request == "dram" or r["device"] == "dram":
            took.dram_bytes += consumed(r)
        else:
            took.slow_bytes += consumed(r)
            took.slow_from = "node" if local else "pool"


class Door:
    """The DRA door's control plane: the publisher, the resource-claim controller and the stock
    scheduler, with the chart's DeviceClasses."""

    def __init__(self, cp: ControlPlane, slices_command: Path) -> None:
        self.cp = cp
        self.slices_command = slices_command
        # No operator's pool sizes: a pool is as large as the smallest its members publish.
        self.publisher = Cluster(cp, slices_command, {"rackPools": {}})
        self.core = self.publisher.core
        self.objects = self.publisher.objects

    def claims(self) -> dict[str, dict[str, Any]]:
        listed = self.objects.list_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "resourceclaims"
        )
        return {x["metadata"]["name"]: x for x in cast(dict[str, Any], listed)["items"]}

    def held(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for x in self.claims().values():
            allocation = (x.get("status") or {}).get("allocation")
            for r in allocation["devices"]["results"] if allocation else ():
                key = f"{r['pool']}|{r['device']}"
                out[key] = out.get(key, 0) + consumed(r)
        return out

    def published(self, scenario: dict[str, Any]) -> bool:
        """The publisher's slices are what tmc-dra-slices makes of the scenario's nodes (devices
        and pools; a pool's node selector is the publisher's own)."""
        nodes = [
            {"name": n["name"], "capacity": cap}
            for n in scenario["nodes"]
            if (cap := capacity(n)) is not None
        ]
        want = {
            s["spec"]["pool"]["name"]: s["spec"]["devices"]
            for s in slices_for(self.slices_command, {"nodes": nodes, "generation": 1})
        }
        have = {
            s["spec"]["pool"]["name"]: s["spec"]["devices"] for s in self.publisher.ours().values()
        }
        return want == have

    def start_pod(self, step: dict[str, Any], scenario: dict[str, Any]) -> bool:
        """The schedule step's claim and pod; whether the pod has a claim."""
        pod = step["schedule"]
        ann = pod.get("annotations") or {}
        if not opts_in(step):
            self.core.create_namespaced_pod(
                NAMESPACE, door_pod(pod, claim=None, template=None, scheduler="default-scheduler")
            )
            return False
        rec = None if "recommendation_annotation" in pod else recommendation_for(scenario, ann)
        if rec is None:
            # The engine's fallback: no recommendation, so no template to name.
            workload = ann.get(WORKLOAD_ANNOTATION) or "none"
            template = recommendation_object_name(workload, canonical_objective(objective_of(ann)))
            body = door_pod(pod, claim=None, template=template, scheduler="default-scheduler")
            self.core.create_namespaced_pod(NAMESPACE, body)
            return False
        spec = claim_spec(self.slices_command, alternatives(rec))
        self.objects.create_namespaced_custom_object(
            GROUP,
            VERSION,
            NAMESPACE,
            "resourceclaims",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ResourceClaim",
                "metadata": {"name": pod["name"]},
                "spec": spec,
            },
        )
        body = door_pod(pod, claim=pod["name"], template=None, scheduler="default-scheduler")
        self.core.create_namespaced_pod(NAMESPACE, body)
        return True

    def settle(self, name: str, claimed: bool, expect_bound: bool) -> Took:
        """Once the pod is bound or waits: once kube-scheduler has said so (PodScheduled=False;
        longer when the table binds it, since a freed claim may still be on its way), and a pod
        naming a template that does not exist once it has stayed unbound a while (it waits for a
        claim that is never made, and gets no condition)."""
        start = time.monotonic()
        patience = 30.0
        pod = self.core.read_namespaced_pod(name, NAMESPACE)
        if any(r.resource_claim_template_name for r in pod.spec.resource_claims or ()):
            patience = 3.0
        while True:
            pod = self.core.read_namespaced_pod(name, NAMESPACE)
            if pod.spec.node_name:
                return self.took(name, claimed, pod.spec.node_name)
            cond = next(
                (x for x in (pod.status.conditions or []) if x.type == "PodScheduled"), None
            )
            waited = time.monotonic() - start
            refused = cond is not None and cond.status == "False"
            if waited > patience or (refused and (not expect_bound or waited > 10)):
                return self.took(name, claimed, None)
            time.sleep(0.1)

    def took(self, name: str, claimed: bool, node: str | None) -> Took:
        got = Took(node=node, claimed=claimed)
        if node is not None and claimed:
            claim = self.claims().get(name)
            if claim is None or not (claim.get("status") or {}).get("allocation"):
                got.problem = "bound, and its claim is not allocated"
            else:
                allocation_of(claim, node, got)
        got.held = self.held()
        return got

    def remove(self, name: str) -> str:
        """The pod deleted, and its claim with it, as the resource-claim controller deletes a
        claim made for a pod; empty, or what did not finish."""
        if name in self.pods():  # a pod the door left waiting was withdrawn already
            self.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        try:
            wait_until(lambda: name not in self.pods(), 30, f"{name} deleted")
            if name in self.claims():
                self.objects.delete_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, "resourceclaims", name
                )
                # Deallocated by the controller, then gone (its finalizer lifted).
                wait_until(lambda: name not in self.claims(), 30, f"{name}'s claim deleted")
        except TimeoutError as exc:
            return str(exc)
        return ""

    def pods(self) -> set[str]:
        return {str(p.metadata.name) for p in self.core.list_namespaced_pod(NAMESPACE).items}

    def take(self, step: dict[str, Any], scenario: dict[str, Any], claimed: set[str]) -> Took:
        if "schedule" in step:
            name = step["schedule"]["name"]
            if self.start_pod(step, scenario):
                claimed.add(name)
            placed = bool(step["expect"].get("chosen")) or not opts_in(step)
            return self.settle(name, name in claimed, placed)
        if "retry" in step:
            name = step["retry"]
            return self.settle(name, name in claimed, bool(step["expect"].get("chosen")))
        if "delete" in step:
            return Took(problem=self.remove(step["delete"]), held=self.held())
        if "bound" in step:
            pod = step["bound"]
            self.core.create_namespaced_pod(
                NAMESPACE, door_pod(pod, claim=None, template=None, scheduler="nobody")
            )
            made = self.core.read_namespaced_pod(pod["name"], NAMESPACE)
            self.core.create_namespaced_pod_binding(
                pod["name"],
                NAMESPACE,
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": pod["name"], "uid": made.metadata.uid},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": pod["node"]},
                },
                _preload_content=False,
            )
            time.sleep(0.3)  # kube-scheduler's informer sees the pod on its node
            return Took(node=pod["node"], held=self.held())
        if "finish" in step:
            name = step["finish"]
            self.core.patch_namespaced_pod_status(
                name, NAMESPACE, {"status": {"phase": "Succeeded"}}
            )
            problem = ""
            if name in claimed:
                try:
                    wait_until(
                        lambda: not (self.claims()[name].get("status") or {}).get("allocation"),
                        30,
                        f"{name}'s claim deallocated",
                    )
                except TimeoutError as exc:
                    problem = str(exc)
            time.sleep(0.3)
            return Took(problem=problem, held=self.held())
        return Took(problem="a step that neither schedules, retries, deletes, binds nor finishes")

    def run(self, scenario: dict[str, Any]) -> list[Took]:
        for node in scenario["nodes"]:
            body, taints = door_node(node)
            c.register_node(self.core, body)
            self.core.patch_node_status(node["name"], node_status(node))
            self.core.patch_node(node["name"], taints)
        seen: list[Took] = []
        try:
            wait_until(lambda: self.published(scenario), 60, f"{scenario['name']}'s slices")
            time.sleep(1.0)  # kube-scheduler sees the nodes and their slices
            retried = {step["retry"] for step in scenario["steps"] if "retry" in step}
            claimed: set[str] = set()
            for step in scenario["steps"]:
                got = self.take(step, scenario, claimed)
                seen.append(got)
                name = (step.get("schedule") or {}).get("name") or step.get("retry")
                if name and got.node is None and (name not in retried or "retry" in step):
                    # As on the other doors: the table tries a pod once, and a pod that waits
                    # and is not tried again is withdrawn, or a later release would place it.
                    got.problem = got.problem or self.remove(name)
        finally:
            for name in self.pods():
                self.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
            for name in self.claims():
                self.objects.delete_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, "resourceclaims", name
                )
            wait_until(lambda: not self.pods() and not self.claims(), 60, "pods and claims gone")
            for node in scenario["nodes"]:
                self.core.delete_node(node["name"])
            wait_until(lambda: not self.publisher.ours(), 60, "the scenario's slices deleted")
            time.sleep(0.5)  # kube-scheduler sees the deletions before the next scenario
        return seen


# --- the judgement -------------------------------------------------------------------------------


def differences(scenario: dict[str, Any], seen: list[Took]) -> list[list[str]]:
    """Each step's departures from the table (kinds of KINDS), in the order of KINDS."""
    out: list[list[str]] = []
    for step, got in zip(scenario["steps"], seen, strict=True):
        kinds: set[str] = set()
        want = step.get("expect")
        if "bound" in step:
            kinds.add("held-unseen")
        elif want is not None and not want.get("skipped") and not want.get("refused"):
            chosen = want["chosen"]
            if chosen is None and got.node is not None:
                kinds.add("bound-where-the-table-waits")
            elif chosen is not None and got.node is None:
                kinds.add("waits-where-the-table-binds")
            elif chosen is not None and got.node is not None:
                if got.node != chosen:
                    kinds.add("another-node")
                p = want["placement"]
                if got.ways != int(p["llc_mask"], 16).bit_count():
                    kinds.add("other-ways")
                if (got.dram_bytes, got.slow_bytes) != (p["dram_bytes"], p["slow_bytes"]):
                    kinds.add("other-memory")
                if got.slow_bytes and (got.slow_from == "pool") != p["slow_from_pool"]:
                    kinds.add("other-slow-source")
        out.append([k for k in KINDS if k in kinds])
    return out


def limits(scenario: dict[str, Any]) -> dict[str, int]:
    """What each DRA pool's devices may hold, as the table's nodes say: "<pool>|<device>"."""
    out: dict[str, int] = {}
    for node in scenario["nodes"]:
        cap = capacity(node)
        if cap is None:
            continue
        out[f"{node['name']}|ways"] = cap["llc_ways"]
        out[f"{node['name']}|dram"] = cap["dram_bytes"]
        out[f"{node['name']}|slow"] = cap["slow_bytes"]
    for pool, size in pool_bytes(scenario).items():
        out[f"rack-pool/{pool}|slow"] = size
    return out


def scheduled(scenario: dict[str, Any], name: str) -> dict[str, Any]:
    """The pod a `schedule` step of the scenario made under this name."""
    return next(
        s["schedule"] for s in scenario["steps"] if (s.get("schedule") or {}).get("name") == name
    )


def rules_broken(scenario: dict[str, Any], seen: list[Took]) -> list[str]:
    """What must hold on every door, whatever the file of differences says. A node the table holds
    full for now may take the pod on this door (its state or its rules differ: a recorded
    difference); a node its filter rejects for good never may."""
    out: list[str] = []
    room = limits(scenario)
    names = {n["name"] for n in scenario["nodes"]}
    for i, (step, got) in enumerate(zip(scenario["steps"], seen, strict=True)):
        where = f"{scenario['name']} step {i}"
        if got.problem:
            out.append(f"{where}: {got.problem}")
        for key, amount in got.held.items():
            if amount > room.get(key, 0):
                out.append(f"{where}: {key} holds {amount}, more than {room.get(key, 0)}")
        want = step.get("expect") or {}
        if "schedule" not in step and "retry" not in step:
            continue
        never_fits = want.get("refused") or (
            not want.get("skipped") and not want["feasible"] and not want["full"]
        )
        if never_fits and got.node is not None:
            out.append(f"{where}: no node can ever take the pod, and it is bound to {got.node}")
        if not got.claimed or got.node is None or want.get("refused"):
            continue
        if got.node not in names or got.node in want["never"]:
            out.append(f"{where}: bound to {got.node}, which the table's filter rejects for good")
        elif got.node not in want["feasible"] and got.node not in want["full"]:
            out.append(f"{where}: bound to {got.node}, which the table does not judge")
        pod = scheduled(scenario, cast(str, pod_of(step)))
        rec = recommendation_for(scenario, pod.get("annotations") or {})
        configs = [in_mib(a) for a in alternatives(rec)] if rec else []
        if (got.ways, got.dram_bytes, got.slow_bytes) not in configs:
            out.append(
                f"{where}: allocated {got.ways} ways, {got.dram_bytes} B of DRAM and "
                f"{got.slow_bytes} B slow, none of the recommendation's {configs}"
            )
    return out


def pod_of(step: dict[str, Any]) -> str | None:
    """The pod a step is about."""
    for kind in ("schedule", "bound"):
        if kind in step:
            return cast(str, step[kind]["name"])
    for kind in ("retry", "delete", "finish"):
        if kind in step:
            return cast(str, step[kind])
    return None


def door_record(got: Took) -> dict[str, Any]:
    """What the door did at a step, as dra-door.json records it."""
    out: dict[str, Any] = {"node": got.node}
    if got.node is not None and got.claimed:
        out |= {"ways": got.ways, "dram_bytes": got.dram_bytes, "slow_bytes": got.slow_bytes}
        if got.slow_from:
            out["slow_from"] = got.slow_from
    return out


def departures(scenario: dict[str, Any], seen: list[Took], recorded: dict[str, Any]) -> list[str]:
    """Every step where the door and the table depart otherwise than the file records."""
    out: list[str] = []
    found = differences(scenario, seen)
    entries = [d for d in recorded["differences"] if d["scenario"] == scenario["name"]]
    by_step = {d["step"]: d for d in entries}
    if len(by_step) != len(entries):
        out.append(f"{scenario['name']}: a step recorded twice")
    for i, (step, got) in enumerate(zip(scenario["steps"], seen, strict=True)):
        where = f"{scenario['name']} step {i}"
        entry = by_step.pop(i, None)
        if entry is None:
            if found[i]:
                out.append(f"{where}: departs from the table ({found[i]}, {door_record(got)})")
            continue
        pod = pod_of(step)
        if entry["pod"] != pod:
            out.append(f"{where}: recorded for pod {entry['pod']}, the step's is {pod}")
        door = entry["door"]
        if "node_among" in door:
            # kube-scheduler breaks a tie between equal nodes at random: any of them, and
            # whichever kinds that choice brings among the recorded ones.
            if got.node not in door["node_among"] or not set(found[i]) <= set(entry["kinds"]):
                out.append(f"{where}: {found[i]} {door_record(got)}, recorded {entry}")
            continue
        if found[i] != entry["kinds"] or door_record(got) != door:
            out.append(f"{where}: {found[i]} {door_record(got)}, recorded {entry}")
    for i, entry in by_step.items():
        out.append(f"{scenario['name']} step {i}: recorded {entry}, and no such step")
    return out


def judge(scenario: dict[str, Any], seen: list[Took], recorded: dict[str, Any]) -> list[str]:
    return rules_broken(scenario, seen) + departures(scenario, seen, recorded)


def observed_file(table: dict[str, Any], observed: dict[str, list[Took]]) -> list[dict[str, Any]]:
    """The differences a run saw, in dra-door.json's shape without causes: what to compare the
    file with when it no longer matches."""
    out: list[dict[str, Any]] = []
    for scenario in table["scenarios"]:
        seen = observed[scenario["name"]]
        for i, kinds in enumerate(differences(scenario, seen)):
            if kinds:
                pod = pod_of(scenario["steps"][i])
                entry = {"scenario": scenario["name"], "step": i, "pod": pod, "kinds": kinds}
                out.append(entry | {"door": door_record(seen[i])})
    return out


# --- the run -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Door]:
    with publishing_plane(tmp_path_factory, "dra-conformance") as (cp, slices_command):
        made = Door(cp, slices_command)
        c.new_namespace(made.core, NAMESPACE)
        c.ensure_default_account(made.core, NAMESPACE)
        made.publisher.start()
        cp.start_controller_manager(("resourceclaim-controller",))
        start_stock_scheduler(cp)
        yield made
        made.publisher.stop()


@pytest.fixture(scope="module")
def observed(door: Door) -> dict[str, list[Took]]:
    """Every scenario of the table through the DRA door: what the API server showed."""
    out: dict[str, list[Took]] = {}
    for scenario in load_table()["scenarios"]:
        out[scenario["name"]] = door.run(scenario)
    record = door.cp.dir / "dra-door-observed.json"
    record.write_text(
        json.dumps(
            {
                "differences": observed_file(load_table(), out),
                "steps": {k: [asdict(t) for t in v] for k, v in out.items()},
            },
            indent=1,
        )
    )
    return out


def test_the_dra_door_meets_the_table_and_its_recorded_differences(
    observed: dict[str, list[Took]],
) -> None:
    table, recorded = load_table(), load_differences()
    found: list[str] = []
    for scenario in table["scenarios"]:
        found += judge(scenario, observed[scenario["name"]], recorded)
    seen = json.dumps(observed_file(table, observed), indent=1)
    assert not found, "\n".join(found) + f"\nthe differences this run saw:\n{seen}"


def planted(
    table: dict[str, Any], recorded: dict[str, Any], observed: dict[str, list[Took]]
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Copies of a scenario and of the file, each wrong in one place, that the run must fail."""
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for scenario in table["scenarios"]:
        seen = observed[scenario["name"]]
        found = differences(scenario, seen)
        for i, (step, got) in enumerate(zip(scenario["steps"], seen, strict=True)):
            want = step.get("expect") or {}
            matched = not found[i] and want.get("chosen") is not None
            if matched and got.claimed and "a node outside feasible" not in out:
                # The table's filter rejects for good the node the door bound the pod to.
                wrong = copy.deepcopy(scenario)
                w = wrong["steps"][i]["expect"]
                w["never"][got.node] = "ways"
                del w["feasible"][got.node]
                out["a node outside feasible"] = (wrong, recorded)
            if matched and "another node" not in out and len(scenario["nodes"]) > 1:
                wrong = copy.deepcopy(scenario)
                other = next(n["name"] for n in scenario["nodes"] if n["name"] != got.node)
                wrong["steps"][i]["expect"]["chosen"] = other
                out["another node"] = (wrong, recorded)
            if matched and "a bound pod expected pending" not in out:
                wrong = copy.deepcopy(scenario)
                w = wrong["steps"][i]["expect"]
                w["chosen"] = None
                w["full"][got.node] = "free-ways"
                del w["feasible"][got.node], w["placement"]
                out["a bound pod expected pending"] = (wrong, recorded)
            if matched and "no node can ever take it" not in out:
                wrong = copy.deepcopy(scenario)
                w = wrong["steps"][i]["expect"]
                w["never"] = {n["name"]: "no-capacity" for n in scenario["nodes"]}
                w["feasible"], w["full"], w["chosen"] = {}, {}, None
                del w["placement"]
                out["no node can ever take it"] = (wrong, recorded)
            pending = bool(want) and want.get("chosen") is None and not want.get("skipped")
            if (
                pending
                and got.node is None
                and not found[i]
                and "a pending pod expected bound" not in out
            ):
                wrong = copy.deepcopy(scenario)
                w = wrong["steps"][i]["expect"]
                node = scenario["nodes"][0]["name"]
                w["chosen"] = node
                w["placement"] = {
                    "vcpus": 1,
                    "dram_bytes": MIB,
                    "slow_bytes": 0,
                    "llc_mask": "0x1",
                    "slow_from_pool": False,
                    "fallback": False,
                }
                out["a pending pod expected bound"] = (wrong, recorded)
            ways = {k: v for k, v in got.held.items() if k.endswith("|ways") and v > 0}
            if ways and "an over-commit" not in out:
                # The table's node has one way fewer than the door took on it.
                key, taken = next(iter(ways.items()))
                wrong = copy.deepcopy(scenario)
                node = next(n for n in wrong["nodes"] if n["name"] == key.split("|")[0])
                node["annotations"]["tmc.dev/llc-ways"] = str(taken - 1)
                out["an over-commit"] = (wrong, recorded)
    for entry in recorded["differences"]:
        if "a difference dropped from the file" not in out and "node_among" not in entry["door"]:
            scenario = next(s for s in table["scenarios"] if s["name"] == entry["scenario"])
            thinner = copy.deepcopy(recorded)
            thinner["differences"].remove(entry)
            out["a difference dropped from the file"] = (scenario, thinner)
            changed = copy.deepcopy(recorded)
            moved = next(d for d in changed["differences"] if d == entry)
            moved["door"]["node"] = "elsewhere"
            out["another node recorded"] = (scenario, changed)
    return out


def test_a_table_or_file_planted_with_a_wrong_expectation_fails(
    observed: dict[str, list[Took]],
) -> None:
    wrongs = planted(load_table(), load_differences(), observed)
    assert set(wrongs) == {
        "a node outside feasible",
        "another node",
        "a bound pod expected pending",
        "a pending pod expected bound",
        "an over-commit",
        "no node can ever take it",
        "a difference dropped from the file",
        "another node recorded",
    }
    for what, (scenario, recorded) in wrongs.items():
        assert judge(scenario, observed[scenario["name"]], recorded), f"{what} passed"
    # These break a rule of every door, which no entry of the file can excuse.
    for what in ("a node outside feasible", "an over-commit", "no node can ever take it"):
        scenario, _ = wrongs[what]
        assert rules_broken(scenario, observed[scenario["name"]]), f"{what} broke no rule"


def test_the_file_of_differences_is_well_formed() -> None:
    """Every entry names a step of the table and its pod, kinds from the vocabulary, what the door
    did and a cause; the file documents every kind it uses."""
    table, recorded = load_table(), load_differences()
    steps = {s["name"]: s["steps"] for s in table["scenarios"]}
    assert set(recorded["kinds"]) == set(KINDS)
    for entry in recorded["differences"]:
        assert set(entry) == {"scenario", "step", "pod", "kinds", "door", "cause"}, entry
        step = steps[entry["scenario"]][entry["step"]]
        assert entry["pod"] in json.dumps(step), entry
        assert entry["kinds"] and set(entry["kinds"]) <= set(KINDS), entry
        assert entry["cause"].strip(), entry
