"""The live cluster as the rebalancer sees it: the ledger's nodes, pools and reservations turned
into `model.rebalancer` nodes and pods.

What the planner cannot express is kept conservative rather than guessed:

- Only ready nodes take part. A pod on a node that is not ready is left out (listed in
  `skipped`): no plan may move pods onto that node, and moving pods off it is the drain's job.
- A planner node draws its slow memory either from its own DIMMs or from its rack pool. A node
  with a pool is planned on the pool; a pod that holds the node's *local* slow memory there is
  pinned to its node and its local bytes are not charged to the pool (they stay its own), so no
  plan overcommits either.
- A reservation whose CAT mask is not one contiguous run (the ledger never writes one) is pinned
  and charged its whole span.
- Pods in a pinned namespace never move; their CAT runs may still be re-laid on their node.
- A pod placed through the DRA door holds its LLC ways as a count whose run its node picks: it is
  not planned (skipped: no run to move), but what it holds stays taken on its node. Its vCPUs,
  memory and ways are charged there as a pinned hold (`LiveCluster.claims`) whose run the planner
  lays where the node's free ways are, and which the plan never reports as moved or re-laid. A
  DRA pod holding memory but no ways is charged one way (a planner pod holds one at least).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger.types import Held, NodeCapacity
from model.errors import InvalidRequest
from model.packing import best_fit_run
from model.planning_requests import LiveRebalanceIn, plan_moves
from model.rebalancer import Node, Pod


@dataclass(frozen=True)
class SkippedPod:
    pod: str  # namespace/name
    node: str
    reason: str


@dataclass(frozen=True)
class LiveCluster:
    nodes: list[Node]
    pods: list[Pod]
    pools: list[int]  # capacity per pool index, bytes
    pool_names: list[str]
    skipped: list[SkippedPod] = field(default_factory=list)
    # What the DRA door's pods hold, pinned to their nodes: planned beside `pods` so that no
    # move lands on their ways or memory, and left out of the plan's answer.
    claims: list[Pod] = field(default_factory=list)


def _run_of(mask: int) -> tuple[int, int, bool]:
    """(first way, way count, contiguous) of a CAT mask; the span when not contiguous."""
    start = (mask & -mask).bit_length() - 1
    span = mask.bit_length() - start
    return start, span, mask >> start == (1 << span) - 1


def live_cluster(
    nodes: Sequence[NodeCapacity],
    pools: Mapping[str, int],
    held: Sequence[Held],
    pinned_namespaces: Collection[str] = (),
) -> LiveCluster:
    ready = [n for n in nodes if n.ready]
    index = {n.name: i for i, n in enumerate(ready)}
    pool_names = sorted({n.pool for n in ready if n.pool is not None and n.pool in pools})
    pool_index = {name: i for i, name in enumerate(pool_names)}
    planner_nodes = [
        Node(
            name=n.name,
            cpus=n.cpus,
            dram_bytes=n.dram_bytes,
            slow_bytes=0 if n.pool in pool_index else n.slow_bytes,
            llc_ways=n.llc_ways,
            pool=pool_index.get(n.pool, -1) if n.pool is not None else -1,
        )
        for n in ready
    ]
    pods: list[Pod] = []
    skipped: list[SkippedPod] = []
    counted: list[tuple[int, Held]] = []
    used_ways = [0] * len(ready)  # per node: the union of the masks of the pods planned
    for h in sorted(held, key=lambda h: (h.node, h.namespace, h.pod_name)):
        name = f"{h.namespace}/{h.pod_name}"
        ni = index.get(h.node)
        if ni is None:
            skipped.append(SkippedPod(name, h.node, "its node is not ready or not in the ledger"))
            continue
        if h.llc_mask <= 0:
            # A count of ways (a DRA claim) lies wherever the node put it: no run to move, but
            # its holdings stay taken (below).
            why = "its LLC ways are a count whose run its node picks" if h.counted_ways else None
            skipped.append(SkippedPod(name, h.node, why or "it holds no LLC ways"))
            counted.append((ni, h))
            continue
        start, span, contiguous = _run_of(h.llc_mask)
        if start + span > ready[ni].llc_ways:
            skipped.append(SkippedPod(name, h.node, "its CAT mask lies outside the node's ways"))
            continue
        used_ways[ni] |= h.llc_mask
        movable = contiguous and h.namespace not in pinned_namespaces
        pods.append(_planner_pod(h, ni, planner_nodes[ni], span, start, movable))
    # A node without ways takes no pod of tmc's (each holds a way at least): nothing to keep there.
    claims = [
        _claim_hold(h, ni, planner_nodes[ni], used_ways)
        for ni, h in counted
        if planner_nodes[ni].llc_ways > 0
    ]
    return LiveCluster(
        nodes=planner_nodes,
        pods=pods,
        pools=[pools[name] for name in pool_names],
        pool_names=pool_names,
        skipped=skipped,
        claims=claims,
    )


def _claim_hold(h: Held, ni: int, node: Node, used_ways: list[int]) -> Pod:
    """A DRA pod's holdings as a pinned planner pod. Its run is a stand-in where the node's ways
    are free (the planner may re-lay it: only the count is the claim's); when none is free for
    it, the node is over-full and the planner re-lays its runs or finds no plan."""
    # A claim of memory only is charged one way: a planner pod holds one at least, and one way
    # too many is the cautious side (its memory and its node's use are what matter).
    ways = max(1, min(h.counted_ways, node.llc_ways))
    run = best_fit_run(used_ways[ni], node.llc_ways, ways)
    start = 0 if run is None else (run & -run).bit_length() - 1
    if run is not None:
        used_ways[ni] |= run
    return _planner_pod(h, ni, node, ways, start, movable=False)


def _planner_pod(h: Held, ni: int, node: Node, ways: int, start: int, movable: bool) -> Pod:
    """A reservation as the planner's pod on node `ni`, its ways the run from `start`. A pod
    holding its node's *local* slow memory on a node of a rack pool is pinned, and its local
    bytes are not charged to the pool."""
    local_on_pool_node = h.slow_bytes > 0 and not h.slow_from_pool and node.pool >= 0
    return Pod(
        name=f"{h.namespace}/{h.pod_name}",
        node=ni,
        vcpus=h.vcpus,
        dram_bytes=h.dram_bytes,
        slow_bytes=0 if local_on_pool_node else h.slow_bytes,
        llc_ways=ways,
        way_start=start,
        movable=movable and not local_on_pool_node,
    )


def plan_live_moves(
    body: LiveRebalanceIn, nodes: list[NodeCapacity], pools: dict[str, int], held: list[Held]
) -> dict[str, Any]:
    """`POST /v1/planner/rebalance/live`'s plan, from what the ledger holds (read by the caller):
    the nodes asked for (default every ready one), their pods, the greedy drain beside it."""
    if body.nodes is not None:
        unknown = sorted(set(body.nodes) - {n.name for n in nodes})
        if unknown:
            raise InvalidRequest("nodes", f"not in the ledger: {', '.join(unknown[:10])}")
        chosen = set(body.nodes)
        nodes = [n for n in nodes if n.name in chosen]
        held = [h for h in held if h.node in chosen]
    live = live_cluster(nodes, pools, held, set(body.pinned_namespaces))
    if not live.nodes:
        raise InvalidRequest("nodes", "no ready node to plan")
    planned = live.pods + live.claims
    out = plan_moves(live.nodes, planned, live.pools, body.max_moves, body.time_limit_seconds)
    # The claims' stand-in runs are no one's: the plan names tmc's pods only.
    plan = out["plan"]
    claimed = {p.name for p in live.claims}
    plan["placement"] = plan["placement"][: len(live.pods)]
    plan["remaps"] = [m for m in plan["remaps"] if m["pod"] not in claimed]
    out["cluster"] = {
        "source": "ledger",
        "nodes": len(live.nodes),
        "pods": len(live.pods),
        "pinned": sum(not p.movable for p in live.pods),
        "pools": dict(zip(live.pool_names, live.pools, strict=True)),
        "skipped": [dataclasses.asdict(s) for s in live.skipped],
    }
    return out
