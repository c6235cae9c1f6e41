"""The ledger's cluster as the rebalancer sees it (ledger/rebalance.py): what moves, what is
pinned, what is left out, and that no plan can overcommit a pool or a node's own slow memory."""

from __future__ import annotations

import itertools

from ledger.rebalance import live_cluster, plan_live_moves
from ledger.types import Held, NodeCapacity
from model.planning_requests import LiveRebalanceIn
from model.rebalancer import rebalance

GIB = 1 << 30


def node(name: str, pool: str | None = None, ready: bool = True, slow: int = 0) -> NodeCapacity:
    return NodeCapacity(name, "kind", 12, 24 * GIB, slow, 48, pool, ready)


def held(
    pod: str,
    on: str,
    mask: int,
    slow: int = 0,
    from_pool: bool = False,
    namespace: str = "apps",
) -> Held:
    return Held(f"uid-{pod}", namespace, pod, on, 1, 2 * GIB, slow, from_pool, mask)


def test_runs_pools_and_readiness_become_planner_terms() -> None:
    nodes = [
        node("a", pool="rack-1", slow=64 * GIB),
        node("b", pool="rack-1"),
        node("c", slow=128 * GIB),
        node("down", ready=False),
    ]
    pods = [
        held("pooled", "a", 0b1111 << 8, slow=4 * GIB, from_pool=True),
        held("local-on-pool-node", "a", 0b11, slow=3 * GIB),
        held("local", "c", 0b111 << 45, slow=5 * GIB),
        held("system", "c", 0b1, namespace="kube-system"),
        held("stranded", "down", 0b1),
    ]
    live = live_cluster(nodes, {"rack-1": 256 * GIB, "unused": GIB}, pods, {"kube-system"})
    assert [n.name for n in live.nodes] == ["a", "b", "c"]
    assert live.pool_names == ["rack-1"] and live.pools == [256 * GIB]
    # A node on a pool is planned on the pool; its local DIMMs are left to the pods holding them.
    assert [(n.pool, n.slow_bytes) for n in live.nodes] == [(0, 0), (0, 0), (-1, 128 * GIB)]
    by = {p.name: p for p in live.pods}
    assert (by["apps/pooled"].way_start, by["apps/pooled"].llc_ways) == (8, 4)
    assert by["apps/pooled"].movable and by["apps/pooled"].slow_bytes == 4 * GIB
    local = by["apps/local-on-pool-node"]
    assert not local.movable and local.slow_bytes == 0
    assert (by["apps/local"].way_start, by["apps/local"].llc_ways) == (45, 3)
    assert not by["kube-system/system"].movable
    assert [(s.pod, s.node) for s in live.skipped] == [("apps/stranded", "down")]


def test_a_broken_mask_is_pinned_over_its_whole_span_and_an_outside_one_left_out() -> None:
    nodes = [node("a")]
    live = live_cluster(nodes, {}, [held("gap", "a", 0b1001), held("wide", "a", 1 << 50)], ())
    (gap,) = live.pods
    assert (gap.way_start, gap.llc_ways, gap.movable) == (0, 4, False)
    assert [s.reason for s in live.skipped] == ["its CAT mask lies outside the node's ways"]


def test_the_plan_over_a_live_cluster_frees_the_emptiest_node_and_respects_pins() -> None:
    nodes = [node("a"), node("b"), node("c")]
    pods = [
        held("p1", "a", 0b1111),
        held("p2", "b", 0b1111 << 40),
        held("p3", "c", 0b11 << 20, namespace="kube-system"),
    ]
    live = live_cluster(nodes, {}, pods, {"kube-system"})
    plan = rebalance(live.nodes, live.pods, live.pools, time_limit_seconds=5.0)
    assert plan.nodes_before == 3 and plan.nodes_after == 1
    assert sorted(plan.freed) == ["a", "b"]
    assert {m.pod for m in plan.moves} == {"apps/p1", "apps/p2"}
    assert all(m.target == "c" for m in plan.moves)
    # The moved runs avoid the pinned pod's ways 20-21 on c and each other.
    runs = sorted((m.way_start, m.way_start + 4) for m in plan.moves)
    spans = [*runs, (20, 22)]
    spans.sort()
    assert all(x[1] <= y[0] for x, y in itertools.pairwise(spans))


def claim(
    pod: str, on: str, ways: int, dram: int = GIB, slow: int = 0, pooled: bool = False
) -> Held:
    """A pod placed through the DRA door: its ways a count, no mask."""
    return Held(f"uid-{pod}", "apps", pod, on, 1, dram, slow, pooled, 0, counted_ways=ways)


def test_what_a_dra_pod_holds_stays_taken_on_its_node() -> None:
    """A DRA pod is not planned (no run to move) but its ways, DRAM and slow memory stay taken
    on its node (one of memory only as well): p1 (4 ways, 2 GiB, 8 GiB slow) would move to b
    beside p2 and free a, were the claim's holdings on b free. It keeps b in use, and the plan's
    answer names no claim."""
    nodes = [node("a", slow=64 * GIB), node("b", slow=64 * GIB)]
    p1 = held("p1", "a", 0b1111 << 4, slow=8 * GIB)
    p2 = held("p2", "b", 0b1111 << 20)
    taken = {
        "ways": claim("c", "b", 41),
        "DRAM": claim("c", "b", 1, dram=21 * GIB),
        "slow memory": claim("c", "b", 1, slow=60 * GIB),
        "DRAM, no ways": claim("c", "b", 0, dram=21 * GIB),
    }
    for what, c in taken.items():
        plan = plan_live_moves(LiveRebalanceIn(), nodes, {}, [p1, p2, c])
        assert plan["plan"]["status"] == "unchanged", (what, plan["plan"])
        assert plan["plan"]["moves"] == [], what
        assert len(plan["plan"]["placement"]) == 2, what
        assert [s["pod"] for s in plan["cluster"]["skipped"]] == ["apps/c"], what
        assert all(m["pod"] != "apps/c" for m in plan["plan"]["remaps"]), what
    # A claim that leaves room: p1 moves beside it and a is freed.
    room = plan_live_moves(LiveRebalanceIn(), nodes, {}, [p1, p2, claim("c", "b", 8)])
    assert room["plan"]["freed"] == ["a"]
    assert [m["pod"] for m in room["plan"]["moves"]] == ["apps/p1"]
    # The claim's stand-in run lies in b's free ways, beside p2's run.
    live = live_cluster(nodes, {}, [p1, p2, claim("c", "b", 20)], ())
    (hold,) = live.claims
    assert (hold.node, hold.llc_ways, hold.movable) == (1, 20, False)
    assert not (0b1111 << 20) & (((1 << 20) - 1) << hold.way_start)
