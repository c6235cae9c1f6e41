# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""The conformance table (scheduler/conformance/placements.json: nodes, pods in order, expected
placements) through both front doors of the Go engine on the real control plane: tmc-scheduler
(the plugin) and the stock kube-scheduler calling tmc-extender. The Go half
(scheduler/plugin/pkg/tmc/conformance_test.go) runs the same table through the engine's
functions, scores included; here what an operator sees is judged: the node each pod is bound
to, the placement written onto it, and the reasons a pod waits with (the PodScheduled
condition). The table's recommendations are published as TieredRecommendation objects, as the
publisher would: the suite judges placement, not decisions.

So that the judgement is tmc's rule alone, the profiles run here score with tmc alone (the
in-tree score plugins off); the table has no tie at the top. Each run records what it saw, and
`judge` compares that with a table: the real table must match, and tables planted with a wrong
rule (another node chosen, another mask, another reason, a fallback where there is none) must
not, so the suite cannot pass whatever the engine does.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from model.node_contract import (
    GROUP,
    OBJECTIVE_ANNOTATION,
    OPT_IN_RESOURCE,
    PLACEMENT_SEAL_ANNOTATION,
    RECOMMENDATION_PLURAL,
    RECOMMENDATION_VERSION,
    WORKLOAD_ANNOTATION,
    Placement,
    PlacementSealKeys,
    Recommendation,
    StructurePlan,
    recommendation_object_name,
    tiered_pod_labels,
)
from scheduler.pods import canonical_objective
from tests.scheduler.controlplane import (
    PLACEMENT_SEAL_KEY,
    ControlPlane,
    Unavailable,
    unavailable,
)
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as plugin_path
from tests.scheduler.controlplane.goextender import GoExtenderProcess
from tests.services import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "scheduler" / "conformance" / "placements.json"
RECOMMENDATION_ANNOTATION = "tmc.dev/recommendation"
NAMESPACE = "conformance"  # an operator namespace here: its pods may pin a recommendation
DOORS = ("plugin", "extender")
SCHEDULER = {"plugin": "tmc-scheduler", "extender": "tmc-extender-door"}

# The engine's reasons, as the table's codes (first match wins: "ways" before "cpus").
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


# kube-scheduler's own filters run before tmc's and may refuse a node first, for the same
# cause: their wording, as the table's codes.
IN_TREE: list[tuple[str, re.Pattern[str]]] = [
    ("free-cpus", re.compile(r"Insufficient cpu")),
    ("not-ready", re.compile(r"node\(s\) were unschedulable|untolerated taint|not ready")),
]


def reason_code(message: str) -> str:
    for code, p in [*REASONS, *IN_TREE]:
        if p.search(message):
            return code
    # A node whose tiered capacity cannot be read is, to the engine, not a tmc node.
    if message.startswith("tmc: tmc.dev/"):
        return "no-capacity"
    return f"unknown: {message}"


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


# --- objects as the API server holds them ------------------------------------------------------


def node_object(node: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node["name"],
            "labels": dict(node["labels"]),
            "annotations": dict(node["annotations"]),
        },
        "spec": {"unschedulable": bool(node.get("unschedulable", False))},
    }


def node_status(node: dict[str, Any]) -> dict[str, Any]:
    allocatable = {"pods": "110", "memory": "1Ti", **node["allocatable"]}
    status: dict[str, Any] = {"allocatable": allocatable, "capacity": allocatable}
    if node["ready"] is not None:
        status["conditions"] = [
            {
                "type": "Ready",
                "status": "True" if node["ready"] else "False",
                "reason": "KubeletReady" if node["ready"] else "KubeletNotReady",
                "lastHeartbeatTime": None,
                "lastTransitionTime": None,
            }
        ]
    return {"status": status}


def pod_object(pod: dict[str, Any], scheduler: str) -> dict[str, Any]:
    """The pod as the table gives it; a pod with its own recommendation text pins it, and one
    that requests tmc's resource carries tmc's label, as every tmc pod does."""
    ann = dict(pod.get("annotations") or {})
    if "recommendation_annotation" in pod:
        ann[RECOMMENDATION_ANNOTATION] = pod["recommendation_annotation"]
    requests = dict(pod.get("requests") or {})
    # The API server refuses an extended resource requested without its limit.
    limits = {k: v for k, v in requests.items() if "/" in k} | dict(pod.get("limits") or {})
    resources: dict[str, Any] = {"requests": requests}
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "pause", "resources": resources}],
        # No kubelet: nothing is ever started, and a bound pod stays bound.
        "terminationGracePeriodSeconds": 0,
    }
    if pod.get("init_requests"):
        spec["initContainers"] = [
            {
                "name": "init",
                "image": "pause",
                "resources": {"requests": dict(pod["init_requests"])},
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod["name"],
            "labels": tiered_pod_labels()
            if OPT_IN_RESOURCE in limits  # requested (the limit follows), or limited alone
            else {},
            "annotations": ann,
        },
        "spec": spec,
    }


def published(rec: dict[str, Any]) -> dict[str, Any]:
    """The table's recommendation as the publisher would write it."""
    return Recommendation(
        workload=rec["workload"],
        objective=rec["objective"],
        recommendation_id=rec["recommendation_id"],
        dram_bytes=rec["dram_bytes"],
        slow_bytes=rec["slow_bytes"],
        llc_ways=rec["llc_ways"],
        slow_ratio=rec["slow_ratio"],
        plan=[StructurePlan(**p) for p in rec["plan"]],
    ).to_object()


def fallbacks(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """For every other pair a pod names (and pins no recommendation for), the fallback object
    the publisher writes for a workload it cannot recommend."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for step in scenario["steps"]:
        pod = step.get("schedule") or {}
        ann = pod.get("annotations") or {}
        workload = ann.get(WORKLOAD_ANNOTATION)
        if not workload or "recommendation_annotation" in pod:
            continue
        if recommendation_for(scenario, ann) is not None:
            continue
        objective = canonical_objective(objective_of(ann))
        out[(workload, objective)] = Recommendation(
            workload=workload,
            objective=objective,
            fallback=f"no recommendation for workload {workload!r}",
        ).to_object()
    return list(out.values())


# --- what a run saw ----------------------------------------------------------------------------


@dataclass
class Seen:
    """One step's outcome at the API server: the node (None: not bound), the placement written,
    and for a pod that waits, the reason codes of its PodScheduled condition with their counts."""

    node: str | None = None
    placement: dict[str, Any] | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    message: str = ""
    problem: str = ""  # what the harness itself could not do (a deletion that did not finish)


FULL_NOW = "tmc: no node can hold the pod now; tried again on backoff: "


def condition_reasons(message: str) -> dict[str, int]:
    """A waiting pod's reasons as codes with their counts: kube-scheduler's
    "0/3 nodes are available: 1 tmc: node has fewer than 4 CPUs, 2 tmc: ...", or the extender's
    error when nothing fits now ("...: node-a: tmc: not enough free CPUs; node-b: ...")."""
    counts: dict[str, int] = {}
    if FULL_NOW in message:
        listed = message.split(FULL_NOW, 1)[1]
        for item in listed.split("; "):
            text = item.split(": ", 1)[-1]
            counts[reason_code(text)] = counts.get(reason_code(text), 0) + 1
        return counts
    body = message.split("available: ", 1)[-1].split(" no new claims", 1)[0]
    body = body.split(". preemption:", 1)[0].rstrip(".")
    for n, text in re.findall(r"(\d+) (.+?)(?=, \d+ |$)", body):
        code = reason_code(text)
        counts[code] = counts.get(code, 0) + int(n)
    return counts


# --- the judgement: a table against what was seen ------------------------------------------------


def judge(scenario: dict[str, Any], seen: list[Seen | None]) -> list[str]:
    """Every difference between the table's expectations and what a run saw."""
    out: list[str] = []
    for i, (step, got) in enumerate(zip(scenario["steps"], seen, strict=True)):
        where = f"{scenario['name']} step {i}"
        if got is None:
            continue
        if got.problem:
            out.append(f"{where}: {got.problem}")
            continue
        want = step.get("expect")
        if want is None:
            continue
        pod = step.get("schedule") or {}
        if want.get("skipped"):
            if got.placement is not None:
                out.append(f"{where}: a pod that does not opt in got a placement")
            continue
        if want.get("refused"):
            if got.node is not None or got.placement is not None:
                out.append(f"{where}: a pod that cannot be read was placed on {got.node}")
            continue
        if want["chosen"] is None:
            if got.node is not None:
                out.append(f"{where}: bound to {got.node}, want no node")
                continue
            codes: dict[str, int] = {}
            for code in [*want["never"].values(), *want["full"].values()]:
                codes[code] = codes.get(code, 0) + 1
            # Every reason seen is one the table gives, no more often. kube-scheduler's own
            # filters run first and may refuse a node for the same cause in their words (a
            # full node's CPUs: "Insufficient cpu", never or now alike), and nodes they refuse
            # never reach the extender: what is seen is a part of the table's reasons.
            if "free-cpus" in got.reasons and "Insufficient cpu" in got.message:
                codes["free-cpus"] = codes.get("free-cpus", 0) + codes.pop("cpus", 0)
            extra = {k: v for k, v in got.reasons.items() if v > codes.get(k, 0)}
            if not got.reasons or extra:
                out.append(f"{where}: waits with {got.reasons} ({got.message!r}), want {codes}")
            continue
        if got.node != want["chosen"]:
            out.append(f"{where}: bound to {got.node} ({got.message!r}), want {want['chosen']}")
            continue
        out.extend(f"{where}: {m}" for m in placement_mismatches(scenario, pod, got, want))
    return out


def placement_mismatches(
    scenario: dict[str, Any], pod: dict[str, Any], got: Seen, want: dict[str, Any]
) -> list[str]:
    out: list[str] = []
    p = want.get("placement")
    if got.placement is None or p is None:
        return [f"placement {got.placement}, want {p}"]
    placement = Placement.from_annotations(got.annotations)
    assert placement is not None
    conf = placement.configuration
    if placement.node != got.node:
        out.append(f"placement names {placement.node}, bound to {got.node}")
    if (conf.vcpus, conf.dram_bytes, conf.slow_bytes) != (
        p["vcpus"],
        p["dram_bytes"],
        p["slow_bytes"],
    ):
        out.append(f"configuration {conf}, want {p}")
    if placement.llc_mask != p["llc_mask"]:
        out.append(f"LLC mask {placement.llc_mask}, want {p['llc_mask']}")
    if placement.slow_from_pool != p["slow_from_pool"]:
        out.append(f"slow from pool {placement.slow_from_pool}, want {p['slow_from_pool']}")
    if (placement.fallback is not None) != p["fallback"]:
        out.append(f"fallback {placement.fallback!r}, want a fallback: {p['fallback']}")
    ann = pod.get("annotations") or {}
    rec = recommendation_for(scenario, ann)
    if not p["fallback"] and rec is not None:
        if (placement.recommendation_id, conf.slow_ratio) != (
            rec["recommendation_id"],
            rec["slow_ratio"],
        ):
            out.append(f"recommendation {placement.recommendation_id}, ratio {conf.slow_ratio}")
        plan = placement.plan
        if placement.plan_from is not None:
            # A published plan is named, not carried: the object the pair is published as.
            named = recommendation_object_name(rec["workload"], rec["objective"])
            if placement.plan_from.recommendation != named or not rec["plan"]:
                out.append(f"plan from {placement.plan_from}, want {named}'s plan")
            plan = c.sized_plan(rec, placement)
        if [s.model_dump() for s in plan] != rec["plan"]:
            out.append(f"plan {plan}, want {rec['plan']}")
    return out


# --- the run on the control plane ----------------------------------------------------------------


def tmc_scores_alone(config: Path, tmc_plugin: bool) -> Path:
    """The configuration with the in-tree score plugins off: nodes are ranked by tmc alone."""
    cfg = yaml.safe_load(config.read_text())
    profile = cfg["profiles"][0]
    plugins = profile.setdefault("plugins", {})
    plugins["score"] = {"disabled": [{"name": "*"}]}
    if tmc_plugin:
        plugins["score"]["enabled"] = [{"name": "TmcPlacement", "weight": 1}]
    out = config.with_name(f"conformance-{config.name}")
    out.write_text(yaml.safe_dump(cfg))
    return out


class Door:
    """One front door running on the control plane."""

    def __init__(self, cp: ControlPlane, door: str) -> None:
        self.cp = cp
        self.door = door
        self.scheduler = SCHEDULER[door]
        self.extender: GoExtenderProcess | None = None

    def start(self) -> None:
        if self.door == "plugin":
            config = tmc_scores_alone(plugin_path.plugin_config(self.cp, self.scheduler), True)
            self.cp.start_scheduler(
                config, binary=plugin_path.engine_binary("tmc-scheduler"), name=self.scheduler
            )
            return
        self.extender = GoExtenderProcess(self.cp)
        self.extender.start()
        base = yaml.safe_load(c.scheduler_config(self.cp, self.extender.url).read_text())
        base["profiles"][0]["schedulerName"] = self.scheduler
        path = self.cp.dir / "extender-door.yaml"
        path.write_text(yaml.safe_dump(base))
        self.cp.start_scheduler(tmc_scores_alone(path, False), name=self.scheduler)

    def stop(self) -> None:
        self.cp.stop_process(self.scheduler)
        if self.extender is not None:
            self.extender.stop()
            self.extender = None

    def logs(self) -> str:
        return c.dump_logs(self.cp, [self.scheduler, *(["tmc-extender"] if self.extender else [])])


def settle(api: k8s.CoreV1Api, name: str, expect_bound: bool, timeout: float = 30) -> Seen:
    """Once the pod is bound, or waits with a PodScheduled=False condition (for a pod that should
    bind, until it binds or the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        pod = api.read_namespaced_pod(name, NAMESPACE)
        ann = dict(pod.metadata.annotations or {})
        if pod.spec.node_name:
            placement = Placement.from_annotations(ann)
            return Seen(
                node=pod.spec.node_name,
                placement=None if placement is None else placement.model_dump(mode="json"),
                annotations=ann,
            )
        cond = next((x for x in (pod.status.conditions or []) if x.type == "PodScheduled"), None)
        waiting = cond is not None and cond.status == "False"
        if (waiting and not expect_bound) or time.monotonic() > deadline:
            message = str(cond.message if cond is not None else "")
            return Seen(reasons=condition_reasons(message), message=message)
        time.sleep(0.1)


def run_scenario(cp: ControlPlane, door: Door, scenario: dict[str, Any]) -> list[Seen | None]:
    api = c.core(cp)
    as_scheduler = c.core(cp, "scheduler")
    objects = k8s.CustomObjectsApi(c.api_client(cp))
    for node in scenario["nodes"]:
        c.register_node(api, node_object(node))
        api.patch_node_status(node["name"], node_status(node))
    bodies = [published(rec) for rec in scenario["recommendations"]] + fallbacks(scenario)
    for body in bodies:
        objects.create_cluster_custom_object(
            GROUP, RECOMMENDATION_VERSION, RECOMMENDATION_PLURAL, body
        )
    seen: list[Seen | None] = []
    try:
        # The engines see the nodes and the objects before the first pod.
        time.sleep(1.0)
        retried = {step["retry"] for step in scenario["steps"] if "retry" in step}
        for step in scenario["steps"]:
            seen.append(take(api, as_scheduler, door, step))
            name = (step.get("schedule") or {}).get("name") or step.get("retry")
            want = step.get("expect") or {}
            waiting = not want.get("chosen") and not want.get("skipped")
            if name and waiting and (name not in retried or "retry" in step):
                # The table's model tries a pod once; a real scheduler keeps trying a pod
                # that waits, and would place it when a later step makes room. A pod the
                # table does not try again is withdrawn once seen waiting.
                forget(api, name)
    finally:
        api.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
        wait_until(lambda: not api.list_namespaced_pod(NAMESPACE).items, 60, "pods gone")
        for node in scenario["nodes"]:
            api.delete_node(node["name"])
        for body in bodies:
            objects.delete_cluster_custom_object(
                GROUP, RECOMMENDATION_VERSION, RECOMMENDATION_PLURAL, body["metadata"]["name"]
            )
        time.sleep(0.5)  # the engines see the deletions before the next scenario's objects
    return seen


def forget(api: k8s.CoreV1Api, name: str) -> None:
    api.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    wait_until(
        lambda: name not in {p.metadata.name for p in api.list_namespaced_pod(NAMESPACE).items},
        30,
        f"{name} deleted",
    )
    time.sleep(0.3)  # the engine's informer sees the deletion


def take(
    api: k8s.CoreV1Api, as_scheduler: k8s.CoreV1Api, door: Door, step: dict[str, Any]
) -> Seen | None:
    if "schedule" in step:
        pod = step["schedule"]
        api.create_namespaced_pod(NAMESPACE, pod_object(pod, door.scheduler))
        want = step["expect"]
        placed = bool(want.get("chosen")) or bool(want.get("skipped"))
        return settle(api, pod["name"], expect_bound=placed)
    if "retry" in step:
        want = step["expect"]
        return settle(api, step["retry"], expect_bound=bool(want.get("chosen")))
    if "delete" in step:
        api.delete_namespaced_pod(step["delete"], NAMESPACE, grace_period_seconds=0)
        try:
            wait_until(
                lambda: (
                    not [
                        p
                        for p in api.list_namespaced_pod(NAMESPACE).items
                        if p.metadata.name == step["delete"]
                    ]
                ),
                30,
                "the pod deleted",
            )
        except TimeoutError as exc:
            return Seen(problem=str(exc))
        time.sleep(0.3)  # the engine's informer sees the deletion
        return None
    if "bound" in step:
        # Bound by another scheduler of tmc (its identity may write a placement): the Binding
        # carries the placement, sealed with the cluster's key, as the engine's own does.
        pod = step["bound"]
        placed_keys = ("tmc.dev/placement", "tmc.dev/llc-mask")
        given = dict(pod.get("annotations") or {})
        annotations = {k: v for k, v in given.items() if k in placed_keys}
        body = pod_object(
            {**pod, "annotations": {k: v for k, v in given.items() if k not in placed_keys}},
            "nobody",
        )
        api.create_namespaced_pod(NAMESPACE, body)
        made = api.read_namespaced_pod(pod["name"], NAMESPACE)
        keys = PlacementSealKeys.from_directory(door.cp.placement_seal_keys, PLACEMENT_SEAL_KEY)
        annotations[PLACEMENT_SEAL_ANNOTATION] = keys.seal(made.metadata.uid, annotations)
        as_scheduler.create_namespaced_pod_binding(
            pod["name"],
            NAMESPACE,
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {
                    "name": pod["name"],
                    "uid": made.metadata.uid,
                    "annotations": annotations,
                },
                "target": {"apiVersion": "v1", "kind": "Node", "name": pod["node"]},
            },
            _preload_content=False,
        )
        time.sleep(0.3)
        return None
    if "finish" in step:
        api.patch_namespaced_pod_status(
            step["finish"], NAMESPACE, {"status": {"phase": "Succeeded"}}
        )
        time.sleep(0.3)
        return None
    return Seen(problem="a step that neither schedules, retries, deletes, binds nor finishes")


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    try:
        cp = ControlPlane()
        plugin_path.build_scheduler()
    except Unavailable as exc:
        unavailable(exc)
    try:
        cp.start()
        c.use_ecdsa_extender_certificates(cp)
        c.install_rbac(cp, {"admission": {"operatorNamespaces": [NAMESPACE]}})
        plugin_path.install_plugin(cp)
        c.new_namespace(c.core(cp), NAMESPACE)
    except BaseException:
        cp.close()
        raise
    yield cp
    cp.close()


@pytest.fixture(scope="module")
def observed(plane: ControlPlane) -> dict[str, dict[str, list[Seen | None]]]:
    """Every scenario of the table through each front door: what the API server showed."""
    table = load_table()
    out: dict[str, dict[str, list[Seen | None]]] = {}
    for door_name in DOORS:
        door = Door(plane, door_name)
        door.start()
        try:
            out[door_name] = {s["name"]: run_scenario(plane, door, s) for s in table["scenarios"]}
        except BaseException as exc:
            raise AssertionError(f"{door_name}: {exc}\n{door.logs()}") from exc
        finally:
            door.stop()
    return out


@pytest.mark.parametrize("door", DOORS)
def test_each_front_door_meets_the_table(
    observed: dict[str, dict[str, list[Seen | None]]], door: str
) -> None:
    table = load_table()
    found: list[str] = []
    for scenario in table["scenarios"]:
        found += judge(scenario, observed[door][scenario["name"]])
    assert not found, "\n".join(found)


def planted(table: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Copies of the table, each expecting a different rule in one place."""
    out: dict[str, dict[str, Any]] = {}
    for scenario in table["scenarios"]:
        for i, step in enumerate(scenario["steps"]):
            want = step.get("expect") or {}
            if want.get("chosen") and len(want["feasible"]) > 1 and "another node" not in out:
                wrong = copy.deepcopy(scenario)
                other = next(n for n in want["feasible"] if n != want["chosen"])
                wrong["steps"][i]["expect"]["chosen"] = other
                out["another node"] = wrong
            if want.get("chosen") and "another mask" not in out:
                wrong = copy.deepcopy(scenario)
                mask = int(want["placement"]["llc_mask"], 16)
                wrong["steps"][i]["expect"]["placement"]["llc_mask"] = hex(mask << 1)
                out["another mask"] = wrong
            if want.get("chosen") and not want["placement"]["fallback"] and "fallback" not in out:
                wrong = copy.deepcopy(scenario)
                wrong["steps"][i]["expect"]["placement"]["fallback"] = True
                out["fallback"] = wrong
            tmc_only = {"ways", "dram", "no-slow-tier", "slow-too-small", "free-ways", "free-slow"}
            for kind in ("never", "full"):
                found = [n for n, code in (want.get(kind) or {}).items() if code in tmc_only]
                if want.get("chosen") is None and found and "another reason" not in out:
                    wrong = copy.deepcopy(scenario)
                    code = want[kind][found[0]]
                    wrong["steps"][i]["expect"][kind][found[0]] = (
                        "no-capacity" if code != "no-capacity" else "cpus"
                    )
                    out["another reason"] = wrong
    return out


@pytest.mark.parametrize("door", DOORS)
def test_a_table_planted_with_a_wrong_rule_fails(
    observed: dict[str, dict[str, list[Seen | None]]], door: str
) -> None:
    wrongs = planted(load_table())
    assert set(wrongs) == {"another node", "another mask", "fallback", "another reason"}
    for what, scenario in wrongs.items():
        assert judge(scenario, observed[door][scenario["name"]]), f"a wrong {what} passed"


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
    assert reason_code("Insufficient cpu") == "free-cpus"
    assert condition_reasons(
        '0/3 nodes are available: 1 tmc: tmc.dev/llc-ways: "many" is not an integer, 2 tmc: '
        "node has fewer than 4 CPUs. no new claims to deallocate, preemption: 0/3 nodes are "
        "available: 3 Preemption is not helpful for scheduling."
    ) == {"no-capacity": 1, "cpus": 2}
    assert condition_reasons(
        FULL_NOW + "a: tmc: node has no slow memory tier; b: tmc: not enough free CPUs"
    ) == {"no-slow-tier": 1, "free-cpus": 1}
    assert reason_code("tmc: node has fewer than 16 LLC ways") == "ways"
    assert reason_code("tmc: node has fewer than 4 CPUs") == "cpus"
