# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""Placement following a capacity plan's machine patterns, end to end on a running stack (the
plugin's or the extender's): the same scenario for both paths.

1. Without patterns, a graph500 pod is placed (the node `N_g` placement alone chooses) and
   deleted; a graph500 pod pinned to another node `T_g` that can hold it stays, and an xsbench
   pod is placed (`N_x`, placement's own choice with graph500 on `T_g`) and deleted.
2. A capacity plan whose machines put graph500 on `T_g`'s machine and xsbench on a node
   `T_x != N_x` is adopted with `tmc plan patterns apply` against the API server (a dry run
   first, which writes nothing; applied twice, the second time changes nothing).
3. The pinned pod goes, and one pod of each workload is created, unpinned: each lands on the
   node whose pattern holds it, where placement without patterns chose another node.
4. `tmc plan patterns clear` removes the patterns, and the same two pods placed again from the
   same state go where placement alone takes them (graph500 on `N_g` again).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from typer.testing import CliRunner

from cli.main import app
from model.node_contract import PATTERN_ANNOTATION, NodePattern, Placement
from tests.scheduler.controlplane import cluster as c
from tests.services import wait_until

Placed = Callable[[list[str], str], dict[str, k8s.V1Pod]]


def placement_of(pod: k8s.V1Pod) -> Placement:
    placement = Placement.from_annotations(pod.metadata.annotations)
    assert placement is not None and placement.node == pod.spec.node_name, pod.metadata.name
    assert placement.fallback is None, placement.fallback
    return placement


def _fits(node: dict[str, Any], pools: dict[str, int], conf: Any, taken: int = 0) -> bool:
    """Whether an empty node (less `taken` DRAM) can hold the configuration, by what it
    publishes."""
    slow_room = max(node["slow"], pools.get(node["pool"], 0) if node["pool"] else 0)
    return bool(
        node["dram"] - taken >= conf.dram_bytes
        and node["ways"] >= conf.llc_ways
        and (conf.slow_bytes == 0 or slow_room >= conf.slow_bytes)
    )


def _gone(api: k8s.CoreV1Api, ns: str, names: list[str]) -> None:
    for name in names:
        api.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    wait_until(
        lambda: not {p.metadata.name for p in api.list_namespaced_pod(ns).items} & set(names),
        60,
        f"{names} deleted",
    )


def _option(conf: Any) -> dict[str, int]:
    return {
        "vcpus": conf.vcpus,
        "dram_bytes": conf.dram_bytes,
        "slow_bytes": conf.slow_bytes,
        "llc_ways": conf.llc_ways,
    }


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def follow_the_plan(cp: Any, api: k8s.CoreV1Api, ns: str, placed: Placed, tmp: Path) -> None:
    """The scenario of this module's docstring; `placed` waits for pods to be bound. The nodes
    carry no pattern afterwards, whatever happened (the module's other tests share them)."""
    try:
        _follow_the_plan(cp, api, ns, placed, tmp)
    finally:
        for nd in api.list_node().items:
            if PATTERN_ANNOTATION in (nd.metadata.annotations or {}):
                api.patch_node(
                    nd.metadata.name, {"metadata": {"annotations": {PATTERN_ANNOTATION: None}}}
                )


def _follow_the_plan(cp: Any, api: k8s.CoreV1Api, ns: str, placed: Placed, tmp: Path) -> None:
    nodes, pools = c.published_capacity(api)
    names = sorted(nodes)
    # 1. Placement without patterns.
    c.create_pods(api, [c.opted_in_pod("alone-g", "graph500")], ns)
    alone_g = placement_of(placed(["alone-g"], ns)["alone-g"])
    conf_g, n_g = alone_g.configuration, alone_g.node
    _gone(api, ns, ["alone-g"])
    targets_g = [n for n in names if n != n_g and _fits(nodes[n], pools, conf_g)]
    assert targets_g, f"no node but {n_g} can hold graph500's {conf_g}"
    t_g = targets_g[0]
    pinned = c.opted_in_pod("pinned-g", "graph500")
    pinned["spec"]["nodeSelector"] = {"kubernetes.io/hostname": t_g}
    c.create_pods(api, [pinned, c.opted_in_pod("alone-x", "xsbench")], ns)
    got = placed(["pinned-g", "alone-x"], ns)
    assert placement_of(got["pinned-g"]).node == t_g
    alone_x = placement_of(got["alone-x"])
    conf_x, n_x = alone_x.configuration, alone_x.node
    _gone(api, ns, ["alone-x"])
    targets_x = [
        n
        for n in names
        if n != n_x and _fits(nodes[n], pools, conf_x, taken=conf_g.dram_bytes if n == t_g else 0)
    ]
    assert targets_x, f"no node but {n_x} can hold xsbench's {conf_x}"
    t_x = next((n for n in targets_x if n != t_g), targets_x[0])

    # 2. The plan: one machine per node, in the order the nodes are assigned (by name).
    content: list[dict[str, int]] = []
    for n in names:
        tally = {}
        if n == t_g:
            tally["graph500#0"] = 2
        if n == t_x:
            tally["xsbench#0"] = 2
        content.append(tally or {"batch#0": 1})
    kind = {"kind": c.HOST_KIND, "machines": len(content), "machines_content": content}
    plan = {
        "best": kind,
        "kinds": [kind],
        "options": {
            "graph500": [_option(conf_g)],
            "xsbench": [_option(conf_x)],
            "batch": [{"vcpus": 1, "dram_bytes": 1 << 30, "slow_bytes": 0, "llc_ways": 1}],
        },
        "dry_run": True,
    }
    path = tmp / "plan.json"
    path.write_text(json.dumps(plan))
    admin = str(cp.kubeconfig("admin"))
    common = ["--kubeconfig", admin, "--json"]
    dry = _cli("plan", "patterns", "apply", str(path), "--dry-run", *common)
    assert dry["dry_run"] and all(r["changed"] for r in dry["nodes"])
    assert all(
        PATTERN_ANNOTATION not in (nd.metadata.annotations or {}) for nd in api.list_node().items
    )
    applied = _cli("plan", "patterns", "apply", str(path), *common)
    assert [r["node"] for r in applied["nodes"]] == names
    assert [r["machine"] for r in applied["nodes"]] == list(range(len(names)))
    again = _cli("plan", "patterns", "apply", str(path), *common)
    assert not any(r["changed"] for r in again["nodes"]), again
    for nd in api.list_node().items:
        pattern = NodePattern.from_annotations(nd.metadata.annotations)
        assert pattern is not None and pattern.machine == names.index(nd.metadata.name)
    time.sleep(2)  # the scheduler's node watch is an event away from the API server

    # 3. Placement with patterns: each pod where its pattern holds it, not where it went alone.
    _gone(api, ns, ["pinned-g"])
    c.create_pods(api, [c.opted_in_pod("planned-g", "graph500")], ns)
    planned_g = placement_of(placed(["planned-g"], ns)["planned-g"])
    c.create_pods(api, [c.opted_in_pod("planned-x", "xsbench")], ns)
    planned_x = placement_of(placed(["planned-x"], ns)["planned-x"])
    assert (planned_g.node, planned_x.node) == (t_g, t_x), (
        f"graph500 on {planned_g.node} (its pattern's node {t_g}; {n_g} without patterns), "
        f"xsbench on {planned_x.node} (its pattern's node {t_x}; {n_x} without patterns)"
    )
    assert n_g != t_g and n_x != t_x

    # 4. Patterns removed.
    cleared = _cli("plan", "patterns", "clear", *common)
    assert {r["node"] for r in cleared["nodes"]} == set(names)
    assert all(
        PATTERN_ANNOTATION not in (nd.metadata.annotations or {}) for nd in api.list_node().items
    )
