"""The extender's half of the conformance suite: the table in scheduler/conformance/placements.json
(nodes, pods in order, expected placements), run through filter -> prioritize -> the highest
score -> bind on a real PostgreSQL ledger. The plugin's half
(scheduler/plugin/pkg/tmc/conformance_test.go) runs the same table through TmcPlacement, so the
two placement paths are held to one contract.

Reasons are compared as the table's codes, not as wording. The fallback's reason is compared
only for its presence: the plugin names what is wrong with the pod's recommendation annotation,
the extender what its decision source said.
"""

from __future__ import annotations

import copy
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from api.decisions import DecisionRequest, DecisionService
from ledger import store as ledger
from model import DEFAULT_THRESHOLD, parse_objective
from model.node_contract import (
    OBJECTIVE_ANNOTATION,
    WORKLOAD_ANNOTATION,
    Placement,
    StructurePlan,
)
from scheduler.decisions import Recommended, Recommender
from scheduler.extender import Extender
from scheduler.feeder import Feeder
from scheduler.kube import KubeCluster
from scheduler.pods import read_pod
from scheduler.state import ClusterState
from store.db import unit_of_work
from store.orm import HostKind, Node, PlacementRecord, RackPool, RecommendationRow, Reservation
from tests.scheduler.conftest import RecordingCluster, upload_example

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "scheduler" / "conformance" / "placements.json"
RECOMMENDATION_ANNOTATION = "tmc.dev/recommendation"  # read by the plugin only, for now
NAMESPACE = "default"

# The extender's reasons, as the table's codes (first match wins: "ways" before "cpus").
REASONS: list[tuple[str, re.Pattern[str]]] = [
    ("no-capacity", re.compile(r"publishes no tiered capacity")),
    ("ways", re.compile(r"node has fewer than \d+ LLC ways")),
    ("cpus", re.compile(r"node has fewer than .* CPUs")),
    ("dram", re.compile(r"node has less DRAM")),
    ("no-slow-tier", re.compile(r"node has no slow memory tier")),
    ("slow-too-small", re.compile(r"slow tier \(local or pool\) is smaller")),
    ("not-ready", re.compile(r"node is not ready")),
    ("free-cpus", re.compile(r"not enough free CPUs")),
    ("free-dram", re.compile(r"not enough free DRAM")),
    ("free-slow", re.compile(r"not enough free slow memory")),
    ("free-ways", re.compile(r"no free run of \d+ contiguous LLC ways")),
]


def reason_code(message: str) -> str:
    return next((code for code, p in REASONS if p.search(message)), f"unknown: {message}")


def load_table() -> dict[str, Any]:
    table: dict[str, Any] = json.loads(TABLE.read_text())
    assert table["schema"] == "tmc.conformance/v1"
    return table


def objective_of(annotations: dict[str, str]) -> str:
    return annotations.get(OBJECTIVE_ANNOTATION) or "cheapest"


def recommendation_for(
    scenario: dict[str, Any], annotations: dict[str, str]
) -> dict[str, Any] | None:
    """The table's recommendation for a pod's workload and objective."""
    key = (annotations.get(WORKLOAD_ANNOTATION), objective_of(annotations))
    found = [r for r in scenario["recommendations"] if (r["workload"], r["objective"]) == key]
    return found[0] if found else None


def scheduled_pods(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    return [s["schedule"] for s in scenario["steps"] if "schedule" in s]


# --- the one adapter between the table and the extender ----------------------------------------


@dataclass
class Placer:
    """The extender under test, with what feeds it: a decision source fixed from the table (the
    suite judges placement, not decisions) and the feeder's node and pod events."""

    extender: Extender
    feeder: Feeder
    state: ClusterState


# The ledger's tables, emptied between scenarios. The decision log is kept: reservations refer
# to it, never the other way round.
LEDGER_TABLES = (Reservation, PlacementRecord, Node, RackPool, HostKind)


def empty_ledger(sessions: sessionmaker[Session]) -> None:
    with unit_of_work(sessions) as session:
        for table in LEDGER_TABLES:
            session.execute(delete(table))


def decision_log(sessions: sessionmaker[Session], table: dict[str, Any]) -> None:
    """Entries of the decision log under the table's recommendation ids: a reservation refers
    to its decision, so a bind of a recommendation the log lacks is refused. One real decision
    is made (an example profile, the service's default prices) and copied under each id; the
    copies' contents are not what the table recommends, and nothing here reads them."""
    upload_example(sessions, "graph500")
    service = DecisionService(sessions)
    decided = service.decide(
        DecisionRequest(
            workload="graph500",
            objective=parse_objective("cheapest"),
            threshold=DEFAULT_THRESHOLD,
            utilization=ClusterState().utilization(),
        )
    )
    ids = {r["recommendation_id"] for s in table["scenarios"] for r in s["recommendations"]}
    with unit_of_work(sessions) as session:
        real = session.get_one(RecommendationRow, decided.recommendation_id)
        columns = {c.key: getattr(real, c.key) for c in RecommendationRow.__table__.columns}
        for rec_id in ids:
            session.merge(RecommendationRow(**{**columns, "id": rec_id}))


def placer_for(
    scenario: dict[str, Any], sessions: sessionmaker[Session], cluster: RecordingCluster
) -> Placer:
    state = ClusterState()
    # The product's Recommender with every outcome pinned (never expiring): the table's
    # recommendation per (workload, objective), and a fallback reason for every other workload
    # a pod names, so no decision is computed by the service.
    recommender = Recommender(sessions, state.utilization, ttl_seconds=math.inf)
    for r in scenario["recommendations"]:
        recommender.remember(
            r["workload"],
            r["objective"],
            Recommended(
                vcpus=1,  # unused: a pod gets the CPUs it requests
                dram_bytes=r["dram_bytes"],
                slow_bytes=r["slow_bytes"],
                slow_ratio=r["slow_ratio"],
                llc_ways=r["llc_ways"],
                recommendation_id=r["recommendation_id"],
                computed_at=time.monotonic(),
                plan=tuple(StructurePlan(**p) for p in r["plan"]),
            ),
        )
    for pod in scheduled_pods(scenario):
        ann = pod.get("annotations") or {}
        if ann.get(WORKLOAD_ANNOTATION) and recommendation_for(scenario, ann) is None:
            recommender.remember(
                ann[WORKLOAD_ANNOTATION],
                objective_of(ann),
                f"no recommendation for workload {ann[WORKLOAD_ANNOTATION]!r}",
            )
    extender = Extender(state, recommender, cluster)
    # The feeder's handlers touch neither watch nor list: the recording cluster stands in.
    feeder = Feeder(cast(KubeCluster, cluster), sessions, state, recommender)
    return Placer(extender, feeder, state)


# --- objects as the API server holds them ------------------------------------------------------


def node_object(node: dict[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = {"allocatable": dict(node["allocatable"])}
    if node["ready"] is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if node["ready"] else "False"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node["name"],
            "labels": dict(node["labels"]),
            "annotations": dict(node["annotations"]),
        },
        "spec": {"unschedulable": bool(node.get("unschedulable", False))},
        "status": status,
    }


def pod_object(scenario: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """The pod both paths see; its tmc.dev/recommendation is what the plugin reads (the table's
    recommendation for its workload and objective, or the text the table gives)."""
    ann = dict(pod.get("annotations") or {})
    if "recommendation_annotation" in pod:
        ann[RECOMMENDATION_ANNOTATION] = pod["recommendation_annotation"]
    elif (rec := recommendation_for(scenario, ann)) is not None:
        ann[RECOMMENDATION_ANNOTATION] = json.dumps({"schema": "tmc.recommendation/v1", **rec})
    resources: dict[str, Any] = {"requests": dict(pod.get("requests") or {})}
    if pod.get("limits"):
        resources["limits"] = dict(pod["limits"])
    spec: dict[str, Any] = {
        "schedulerName": "tmc-scheduler",
        "containers": [{"name": "main", "resources": resources}],
    }
    if pod.get("init_requests"):
        spec["initContainers"] = [
            {"name": "init", "resources": {"requests": dict(pod["init_requests"])}}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod["name"],
            "namespace": NAMESPACE,
            "uid": f"uid-{pod['name']}",
            "annotations": ann,
        },
        "spec": spec,
    }


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Run:
    scenario: dict[str, Any]
    placer: Placer
    cluster: RecordingCluster
    sessions: sessionmaker[Session]
    mismatches: list[str] = field(default_factory=list)
    # Steps the table says the extender does not meet yet ("extender_differs"): what differed.
    known: dict[str, list[str]] = field(default_factory=dict)
    step: str = ""
    node_lists: list[str] = field(default_factory=list)

    def mismatch(self, text: str) -> None:
        self.mismatches.append(f"{self.scenario['name']}/{self.step}: {text}")

    @property
    def names(self) -> list[str]:
        return [n["name"] for n in self.scenario["nodes"]]

    def run(self) -> int:
        self.placer.extender.observe_node_list = self.node_lists.append
        for node in self.scenario["nodes"]:
            self.cluster.nodes[node["name"]] = node_object(node)
            self.placer.feeder.on_node("ADDED", node_object(node))
        for i, step in enumerate(self.scenario["steps"]):
            before = len(self.mismatches)
            self.take(i, step)
            if "extender_differs" in step:
                # Held strictly: a step that starts to agree must lose its marker.
                self.known[self.step] = self.mismatches[before:]
                del self.mismatches[before:]
                if not self.known[self.step]:
                    self.mismatch("meets the table now: remove its extender_differs")
        if any(read != "bytes" for read in self.node_lists):
            self.mismatch(f"node lists read other than as bytes: {set(self.node_lists)}")
        if self.placer.extender.recommender.computed:
            self.mismatch("a decision was computed by the service, not taken from the table")
        return len(self.scenario["steps"])

    def take(self, i: int, step: dict[str, Any]) -> None:
        if "schedule" in step:
            self.step = f"{i}:{step['schedule']['name']}"
            pod = pod_object(self.scenario, step["schedule"])
            self.cluster.add(pod)
            self.attempt(self.cluster.pods[f"{NAMESPACE}/{pod['metadata']['name']}"], step)
        elif "retry" in step:
            self.step = f"{i}:{step['retry']} (retry)"
            self.attempt(self.cluster.pods[f"{NAMESPACE}/{step['retry']}"], step)
        elif "delete" in step:
            self.step = f"{i}:delete {step['delete']}"
            self.delete(step["delete"])
        elif "bound" in step:
            self.step = f"{i}:{step['bound']['name']} (bound)"
            self.arrive_bound(step["bound"])
        elif "finish" in step:
            self.step = f"{i}:finish {step['finish']}"
            self.finish(step["finish"])
        else:
            self.step = str(i)
            self.mismatch("a step that neither schedules, retries, deletes, binds nor finishes")

    def delete(self, name: str) -> None:
        pod = self.cluster.pods.pop(f"{NAMESPACE}/{name}")
        uid = pod["metadata"]["uid"]
        if self.placer.state.held(uid) is None:
            self.mismatch("the pod held nothing before its deletion")
        self.placer.feeder.on_pod("DELETED", pod)  # the pod watch's event
        if self.placer.state.held(uid) is not None or uid in self.ledger_masks():
            self.mismatch("the deleted pod still holds its reservation")

    def arrive_bound(self, table_pod: dict[str, Any]) -> None:
        """A pod bound by someone else: the pod watch delivers it with its placement."""
        pod = pod_object(self.scenario, table_pod)
        pod["spec"]["nodeName"] = table_pod["node"]
        self.cluster.pods[f"{NAMESPACE}/{table_pod['name']}"] = pod
        self.placer.feeder.on_pod("ADDED", pod)
        held = self.placer.state.held(pod["metadata"]["uid"])
        if held is None or held.node != table_pod["node"]:
            self.mismatch(f"the bound pod is not counted: {held}")

    def finish(self, name: str) -> None:
        pod = self.cluster.pods[f"{NAMESPACE}/{name}"]
        uid = pod["metadata"]["uid"]
        if self.placer.state.held(uid) is None:
            self.mismatch("the pod held nothing before it finished")
        pod["status"] = {"phase": "Succeeded"}
        self.placer.feeder.on_pod("MODIFIED", pod)  # the pod watch's update
        if self.placer.state.held(uid) is not None or uid in self.ledger_masks():
            self.mismatch("the finished pod still holds its reservation")

    def ledger_masks(self) -> dict[str, int]:
        """The mirror's masks once the feeder wrote what its events queued (its own thread
        does that in the product; here it is not started)."""
        self.placer.feeder.mirror_pending()
        with unit_of_work(self.sessions) as session:
            _, _, held = ledger.load(session)
        return {h.pod_uid: h.llc_mask for h in held}

    def attempt(self, pod: dict[str, Any], step: dict[str, Any]) -> None:
        want = step["expect"]
        ext = self.placer.extender
        meta = pod["metadata"]
        # As kube-scheduler sends it with nodeCacheCapable: Pod, Nodes, NodeNames, compact.
        body = {"Pod": pod, "Nodes": None, "NodeNames": self.names}
        raw, _ = ext.filter_bytes(orjson.dumps(body))
        answer = orjson.loads(raw)
        parsed = ext.filter(copy.deepcopy(body))
        if parsed != answer:
            self.mismatch(f"filter from bytes {answer} and parsed {parsed} differ")
        if want.get("skipped"):
            self.check_skipped(pod, answer)
            return
        if want.get("refused"):
            self.check_refused(pod, answer)
            return
        feasible = answer["NodeNames"] or []
        full = {n: reason_code(r) for n, r in answer["FailedNodes"].items()}
        never = {n: reason_code(r) for n, r in answer["FailedAndUnresolvableNodes"].items()}
        if set(feasible) != set(want["feasible"]):
            self.mismatch(f"feasible {sorted(feasible)}, want {sorted(want['feasible'])}")
        if full != want["full"]:
            self.mismatch(f"full now {full}, want {want['full']}")
        if never != want["never"]:
            self.mismatch(f"never {never}, want {want['never']}")
        # The contract of the extender's Error: when no node fits and some are only full now,
        # kube-scheduler is told to retry the pod soon.
        if bool(answer["Error"]) != (not feasible and bool(full)):
            self.mismatch(f"Error {answer['Error']!r} with {len(feasible)} feasible nodes")
        if not feasible:
            if want["chosen"] is not None:
                self.mismatch(f"no node fits, want {want['chosen']}")
            if self.placer.state.held(meta["uid"]) is not None:
                self.mismatch("a pod no node fits holds a reservation")
            return
        ranked = {"Pod": pod, "Nodes": None, "NodeNames": feasible}
        priorities = orjson.loads(ext.prioritize_bytes(orjson.dumps(ranked)))
        if priorities != ext.prioritize(copy.deepcopy(ranked)):
            self.mismatch("prioritize from bytes and parsed differ")
        scores = {p["Host"]: p["Score"] for p in priorities}
        if scores != want["feasible"]:
            self.mismatch(f"scores {scores}, want {want['feasible']}")
        if "packing" in want:
            # The packing score alone, before the machine patterns' preference: the scores a
            # placement without patterns would use.
            decision = ext.recommender.decide(read_pod(pod, ext.opt_in_resource))
            packing = dict(zip(feasible, ext.state.scores(feasible, decision.ask()), strict=True))
            if packing != want["packing"]:
                self.mismatch(f"packing scores {packing}, want {want['packing']}")
        # The highest score wins, ties to the first name; the table has no tie at the top.
        top = max(scores.values())
        best = min(n for n, s in scores.items() if s == top)
        if sum(1 for s in scores.values() if s == top) > 1:
            self.mismatch(f"the highest score {top} is shared: a tie-break would decide")
        if best != want["chosen"]:
            self.mismatch(f"chose {best}, want {want['chosen']}")
        bound = ext.bind(
            {
                "PodName": meta["name"],
                "PodNamespace": NAMESPACE,
                "PodUID": meta["uid"],
                "Node": best,
            }
        )
        if bound != {"Error": ""}:
            self.mismatch(f"bind to {best}: {bound}")
            return
        self.placer.feeder.on_pod("MODIFIED", pod)  # the pod watch sees it bound
        placement = Placement.from_annotations(pod["metadata"].get("annotations"))
        if placement is None or pod["spec"].get("nodeName") != best:
            self.mismatch(f"not bound to {best} with a placement: {pod}")
            return
        self.check_placement(pod, placement, best, want.get("placement"))
        held = self.placer.state.held(meta["uid"])
        if held is None or held.llc_mask != placement.llc_mask_bits:
            self.mismatch(f"the cache holds {held} for the bound pod")
        if self.ledger_masks().get(meta["uid"]) != placement.llc_mask_bits:
            self.mismatch("the ledger does not hold the pod's placement")

    def check_refused(self, pod: dict[str, Any], answer: dict[str, Any]) -> None:
        """A pod that cannot be read: no node kept or judged, an Error (kube-scheduler retries
        it), and no bind."""
        meta = pod["metadata"]
        judged = (
            answer["NodeNames"] or answer["FailedNodes"] or answer["FailedAndUnresolvableNodes"]
        )
        if judged or not answer["Error"]:
            self.mismatch(f"filter of a pod that cannot be read: {answer}")
        refused = self.placer.extender.bind(
            {
                "PodName": meta["name"],
                "PodNamespace": NAMESPACE,
                "PodUID": meta["uid"],
                "Node": self.names[0],
            }
        )
        if not refused["Error"] or self.placer.state.held(meta["uid"]) is not None:
            self.mismatch(f"bind of a pod that cannot be read: {refused}")

    def check_skipped(self, pod: dict[str, Any], answer: dict[str, Any]) -> None:
        """A pod that does not opt in: no opinion from filter, 0 from prioritize, no bind."""
        ext = self.placer.extender
        meta = pod["metadata"]
        if (answer["NodeNames"], answer["FailedNodes"], answer["FailedAndUnresolvableNodes"]) != (
            self.names,
            {},
            {},
        ) or answer["Error"]:
            self.mismatch(f"filter judged a pod that does not opt in: {answer}")
        body = {"Pod": pod, "Nodes": None, "NodeNames": self.names}
        if any(p["Score"] for p in orjson.loads(ext.prioritize_bytes(orjson.dumps(body)))):
            self.mismatch("prioritize scored a pod that does not opt in")
        refused = ext.bind(
            {
                "PodName": meta["name"],
                "PodNamespace": NAMESPACE,
                "PodUID": meta["uid"],
                "Node": self.names[0],
            }
        )
        if "does not request tiered memory" not in refused["Error"]:
            self.mismatch(f"bind of a pod that does not opt in: {refused}")
        if self.placer.state.held(meta["uid"]) is not None or pod["spec"].get("nodeName"):
            self.mismatch("a pod that does not opt in was placed")

    def check_placement(
        self, pod: dict[str, Any], got: Placement, node: str, want: dict[str, Any] | None
    ) -> None:
        """The placement against the table, and against what the pod asked for: its workload
        and objective, and its recommendation's id, ratio and plan."""
        if want is None:
            self.mismatch(f"placed on {node} with no placement expected")
            return
        c = got.configuration
        if got.node != node:
            self.mismatch(f"placement names {got.node}, bound to {node}")
        conf = (c.vcpus, c.dram_bytes, c.slow_bytes)
        if conf != (want["vcpus"], want["dram_bytes"], want["slow_bytes"]):
            self.mismatch(f"configuration {conf}, want {want}")
        if got.llc_mask != want["llc_mask"] or c.llc_ways != got.llc_mask_bits.bit_count():
            self.mismatch(f"LLC mask {got.llc_mask} ({c.llc_ways} ways), want {want['llc_mask']}")
        if got.slow_from_pool != want["slow_from_pool"]:
            self.mismatch(f"slow from pool {got.slow_from_pool}, want {want['slow_from_pool']}")
        if (got.fallback is not None) != want["fallback"]:
            self.mismatch(f"fallback {got.fallback!r}, want a fallback: {want['fallback']}")
        ann = pod["metadata"].get("annotations") or {}
        if got.workload != ann.get(WORKLOAD_ANNOTATION) or got.objective != objective_of(ann):
            self.mismatch(f"workload {got.workload!r}, objective {got.objective!r}")
        rec = recommendation_for(self.scenario, ann)
        if want["fallback"] or rec is None:
            if got.recommendation_id is not None or got.plan or c.slow_ratio != 0.0:
                self.mismatch(f"a fallback carries a recommendation's parts: {got}")
            return
        if (got.recommendation_id, c.slow_ratio, c.llc_ways) != (
            rec["recommendation_id"],
            rec["slow_ratio"],
            rec["llc_ways"],
        ):
            self.mismatch(f"recommendation {got.recommendation_id}, ratio {c.slow_ratio}")
        if [p.model_dump() for p in got.plan] != rec["plan"]:
            self.mismatch(f"plan {got.plan}, want {rec['plan']}")


@dataclass
class Outcome:
    cases: int = 0
    mismatches: list[str] = field(default_factory=list)
    known: dict[str, list[str]] = field(default_factory=dict)  # see Run.known


def run_table(table: dict[str, Any], sessions: sessionmaker[Session]) -> Outcome:
    """Every scenario on an empty ledger. The decision log must hold the table's
    recommendations (`decision_log`)."""
    outcome = Outcome()
    for scenario in table["scenarios"]:
        empty_ledger(sessions)
        cluster = RecordingCluster()
        run = Run(scenario, placer_for(scenario, sessions, cluster), cluster, sessions)
        outcome.cases += run.run()
        outcome.mismatches += run.mismatches
        outcome.known.update({f"{scenario['name']}/{k}": v for k, v in run.known.items()})
    return outcome


# --- the tests ---------------------------------------------------------------------------------


@pytest.fixture
def logged(sessions: sessionmaker[Session]) -> sessionmaker[Session]:
    """The database with the table's recommendations in its decision log."""
    decision_log(sessions, load_table())
    return sessions


def test_the_extender_meets_the_table(logged: sessionmaker[Session]) -> None:
    table = load_table()
    sessions = logged
    outcome = run_table(table, sessions)
    assert outcome.mismatches == []
    assert outcome.cases == sum(len(s["steps"]) for s in table["scenarios"])
    assert outcome.cases > 20
    marked = sum("extender_differs" in step for s in table["scenarios"] for step in s["steps"])
    assert len(outcome.known) == marked
    for differences in outcome.known.values():  # shown with -rP
        print("known difference:", "; ".join(differences))


def _expectation(table: dict[str, Any], scenario: str, pod: str) -> dict[str, Any]:
    found = next(s for s in table["scenarios"] if s["name"] == scenario)
    step = next(s for s in found["steps"] if s.get("schedule", {}).get("name") == pod)
    expect: dict[str, Any] = step["expect"]
    return expect


MUTATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "chosen node": lambda e: e.update(chosen="nowhere"),
    "score": lambda e: e["feasible"].update({n: s + 1 for n, s in e["feasible"].items()}),
    "mask": lambda e: e["placement"].update(llc_mask="0x1"),
    "slow source": lambda e: e["placement"].update(
        slow_from_pool=not e["placement"]["slow_from_pool"]
    ),
    "fallback": lambda e: e["placement"].update(fallback=not e["placement"]["fallback"]),
    "configuration": lambda e: e["placement"].update(dram_bytes=e["placement"]["dram_bytes"] + 1),
    "reason": lambda e: e["never"].update({"fit-a": "cpus"}),
    "reason class": lambda e: e["full"].update({"fit-a": e["never"].pop("fit-a")}),
    "feasible nodes": lambda e: e["feasible"].pop("fit-b"),
}


PATTERN_MUTATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    # Placed as if there were no patterns: the packing scores, and the node packing prefers.
    "pattern ignored": lambda e: e.update(feasible=dict(e["packing"]), chosen="pat-c"),
    "packing score": lambda e: e["packing"].update({"pat-c": e["packing"]["pat-c"] - 1}),
}


def test_a_wrong_expectation_fails(logged: sessionmaker[Session]) -> None:
    """The suite cannot pass whatever the extender does: each kind of expectation, made wrong on
    fit/big-1 (placed on fit-b; fit-a never, for its DRAM), is caught."""
    sessions = logged
    original = load_table()
    fit = {"scenarios": [s for s in original["scenarios"] if s["name"] == "fit"]}
    caught = []
    for what, mutate in MUTATIONS.items():
        table = copy.deepcopy(fit)
        mutate(_expectation(table, "fit", "big-1"))
        if run_table(table, sessions).mismatches:
            caught.append(what)
    assert caught == list(MUTATIONS)
    planned = {"scenarios": [s for s in original["scenarios"] if s["name"] == "patterns"]}
    for what, mutate in PATTERN_MUTATIONS.items():
        table = copy.deepcopy(planned)
        mutate(_expectation(table, "patterns", "web-1"))
        assert run_table(table, sessions).mismatches, what
    ignored = {"scenarios": [s for s in original["scenarios"] if s["name"] == "nodes-and-opt-in"]}
    for kind in ("skipped", "refused"):  # each expected to be judged like any pod instead
        table = copy.deepcopy(ignored)
        for step in table["scenarios"][0]["steps"]:
            if step.get("expect", {}).get(kind):
                step["expect"] = {"feasible": {}, "full": {}, "never": {}, "chosen": None}
        assert run_table(table, sessions).mismatches, kind


def test_the_table_is_well_formed() -> None:
    """What both suites rely on: every node named exists, every non-skipped pod's nodes are
    partitioned into feasible, full now and never with the right reason codes, the chosen node
    has the unique highest score, and a pod carrying its own recommendation text has none in
    the decision source (so both paths place it as a fallback)."""
    table = load_table()
    never_codes, full_codes = set(table["reasons"]["never"]), set(table["reasons"]["full"])
    used: set[str] = set()
    followed = 0  # steps where a machine pattern, not packing alone, chose the node
    for scenario in table["scenarios"]:
        names = {n["name"] for n in scenario["nodes"]}
        pods: set[str] = set()
        for step in scenario["steps"]:
            for refers in ("delete", "retry", "finish"):
                if refers in step:
                    assert step[refers] in pods, step
            if "bound" in step:
                assert step["bound"]["node"] in names and step["bound"]["name"] not in pods
                pods.add(step["bound"]["name"])
            if "schedule" in step:
                pod = step["schedule"]
                assert pod["name"] not in pods
                pods.add(pod["name"])
                if "recommendation_annotation" in pod:
                    assert recommendation_for(scenario, pod.get("annotations") or {}) is None
                    assert step["expect"]["placement"]["fallback"] is True
            want = step.get("expect")
            if want is None or want.get("skipped") or want.get("refused"):
                continue
            parts = [set(want["feasible"]), set(want["full"]), set(want["never"])]
            assert set().union(*parts) == names and sum(map(len, parts)) == len(names), step
            assert set(want["never"].values()) <= never_codes, step
            assert set(want["full"].values()) <= full_codes, step
            used |= set(want["never"].values()) | set(want["full"].values())
            scores = want["feasible"]
            if not scores:
                assert want["chosen"] is None and "placement" not in want
                continue
            top = max(scores.values())
            assert [n for n, s in scores.items() if s == top] == [want["chosen"]], step
            if "packing" in want:
                assert set(want["packing"]) == set(scores), step
                best = max(want["packing"].values())
                packing_alone = [n for n, s in want["packing"].items() if s == best]
                followed += packing_alone != [want["chosen"]]
            assert set(want["placement"]) == {
                "vcpus",
                "dram_bytes",
                "slow_bytes",
                "llc_mask",
                "slow_from_pool",
                "fallback",
            }
    assert used == never_codes | full_codes  # every reason is exercised
    assert followed >= 3


def test_an_unknown_reason_is_reported_as_such() -> None:
    assert reason_code("tmc: something new") == "unknown: tmc: something new"
    assert reason_code("tmc: node has fewer than 16 LLC ways") == "ways"
    assert reason_code("tmc: node has fewer than 4 CPUs") == "cpus"
