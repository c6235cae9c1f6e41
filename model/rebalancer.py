"""Rebalancing with OR-Tools. For a live cluster, which pods to move where so that machines are
freed, as a dry-run plan: CP-SAT over (pod, node) assignments, each with its LLC ways as an
interval on the node's way axis (CAT gives a class of service a *contiguous* run of ways, so the
intervals of one node must not overlap), node capacities, rack-pool capacities, and pods that must
stay. Objective:
fewest machines in use, then fewest moves. The greedy answer it is measured against drains the
emptiest machines one at a time, first fit with best-fit way runs, and keeps a drain only if
every pod found a place.

Pure: numbers in, plans out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ortools.sat.python import cp_model

from model.packing import best_fit_run, run_mask


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    dram_bytes: int
    slow_bytes: int  # local slow memory; 0 when the node draws on a pool
    llc_ways: int
    pool: int = -1  # index into the pools' capacities, -1: none


@dataclass(frozen=True)
class Pod:
    name: str
    node: int
    vcpus: int
    dram_bytes: int
    slow_bytes: int
    llc_ways: int
    way_start: int  # first way of its contiguous CAT run on its node
    movable: bool = True  # may change node; every pod's CAT run may be re-laid on its node


@dataclass(frozen=True)
class Move:
    pod: str
    source: str
    target: str
    way_start: int  # the pod's CAT run on the target: ways way_start ... way_start + ways - 1


@dataclass(frozen=True)
class RebalancePlan:
    moves: list[Move]
    nodes_before: int
    nodes_after: int
    freed: list[str]
    status: Literal["optimal", "feasible", "unchanged", "greedy"]
    placement: list[tuple[int, int]] = field(default_factory=list)  # per pod: (node, way_start)
    remaps: list[Move] = field(default_factory=list)  # pods that stay, on a new CAT run


def _check_cluster(nodes: Sequence[Node], pods: Sequence[Pod], pools: Sequence[int]) -> None:
    for p in pods:
        if not 0 <= p.node < len(nodes):
            raise ValueError(f"pod {p.name}: node index {p.node} out of range")
        n = nodes[p.node]
        if p.llc_ways < 1 or p.way_start < 0 or p.way_start + p.llc_ways > n.llc_ways:
            raise ValueError(f"pod {p.name}: its ways lie outside node {n.name}'s")
    for n in nodes:
        if n.pool >= len(pools):
            raise ValueError(f"node {n.name}: pool {n.pool} does not exist")


def _fits_statically(p: Pod, n: Node, pools: Sequence[int]) -> bool:
    slow_ok = p.slow_bytes <= (pools[n.pool] if n.pool >= 0 else n.slow_bytes)
    return (
        p.vcpus <= n.cpus and p.dram_bytes <= n.dram_bytes and p.llc_ways <= n.llc_ways and slow_ok
    )


def rebalance(
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    pools: Sequence[int] = (),
    *,
    max_moves: int | None = None,
    time_limit_seconds: float = 5.0,
    workers: int = 1,
) -> RebalancePlan:
    """A dry-run plan that frees as many nodes as it can with the fewest moves (CP-SAT, started
    from the greedy drain's plan; status "greedy" when CP-SAT found nothing better in time)."""
    _check_cluster(nodes, pods, pools)
    used_before = sorted({p.node for p in pods})
    model = cp_model.CpModel()
    assign: dict[tuple[int, int], cp_model.IntVar] = {}
    start: dict[tuple[int, int], cp_model.IntVar] = {}
    per_node: dict[int, list[tuple[int, cp_model.IntVar]]] = {i: [] for i in range(len(nodes))}
    intervals: dict[int, list[cp_model.IntervalVar]] = {i: [] for i in range(len(nodes))}
    for pi, p in enumerate(pods):
        options = []
        targets = [p.node] if not p.movable else range(len(nodes))
        for ni in targets:
            n = nodes[ni]
            if not _fits_statically(p, n, pools):
                continue
            a = model.new_bool_var(f"a{pi}_{ni}")
            s = model.new_int_var(0, n.llc_ways - p.llc_ways, f"s{pi}_{ni}")
            iv = model.new_optional_fixed_size_interval_var(s, p.llc_ways, a, f"w{pi}_{ni}")
            assign[pi, ni], start[pi, ni] = a, s
            per_node[ni].append((pi, a))
            intervals[ni].append(iv)
            options.append(a)
        model.add_exactly_one(options)
    used = []
    for ni, n in enumerate(nodes):
        items = per_node[ni]
        if not items:
            continue
        model.add_no_overlap(intervals[ni])
        model.add(sum(pods[pi].vcpus * a for pi, a in items) <= n.cpus)
        model.add(sum(pods[pi].dram_bytes * a for pi, a in items) <= n.dram_bytes)
        if n.pool < 0:
            model.add(sum(pods[pi].slow_bytes * a for pi, a in items) <= n.slow_bytes)
        y = model.new_bool_var(f"used{ni}")
        for _, a in items:
            model.add_implication(a, y)
        used.append(y)
    for k, capacity in enumerate(pools):
        terms = [
            pods[pi].slow_bytes * a
            for ni, n in enumerate(nodes)
            if n.pool == k
            for pi, a in per_node[ni]
        ]
        if terms:
            model.add(sum(terms) <= capacity)
    moved = [1 - assign[pi, p.node] for pi, p in enumerate(pods) if (pi, p.node) in assign]
    # A pod that stays keeps its CAT run unless moving the run frees room (remaps are cheap,
    # but not free: the cache lines of the old ways are lost).
    remapped = []
    for pi, p in enumerate(pods):
        if (pi, p.node) not in assign:
            continue
        r = model.new_bool_var(f"remap{pi}")
        model.add(start[pi, p.node] == p.way_start).only_enforce_if([assign[pi, p.node], r.Not()])
        remapped.append(r)
    if max_moves is not None:
        model.add(sum(moved) <= max_moves)
    # Start from the greedy drain's answer (valid, and usually good): CP-SAT then only has to
    # improve on it, and whatever the time limit, the plan is never worse than greedy's.
    greedy = greedy_rebalance(nodes, pods, pools)
    for pi, (gi, gs) in enumerate(greedy.placement):
        for ni in range(len(nodes)):
            if (pi, ni) in assign:
                model.add_hint(assign[pi, ni], ni == gi)
        if (pi, gi) in start:
            model.add_hint(start[pi, gi], gs)
    model.minimize(
        (2 * len(pods) + 1) * (len(pods) + 1) * sum(used)
        + (2 * len(pods) + 1) * sum(moved)
        + sum(remapped)
    )
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_seconds
    solver.parameters.num_workers = workers
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return (
            greedy
            if greedy.nodes_after < len(used_before)
            else _unchanged(nodes, pods, used_before)
        )
    placement = []
    moves, remaps = [], []
    for pi, p in enumerate(pods):
        ni = next(n for n in range(len(nodes)) if (pi, n) in assign and solver.value(assign[pi, n]))
        first = int(solver.value(start[pi, ni]))
        placement.append((ni, first))
        if ni != p.node:
            moves.append(Move(p.name, nodes[p.node].name, nodes[ni].name, first))
        elif first != p.way_start:
            remaps.append(Move(p.name, nodes[ni].name, nodes[ni].name, first))
    after = sorted({ni for ni, _ in placement})
    if len(after) >= len(used_before):
        return _unchanged(nodes, pods, used_before)
    if greedy.nodes_after < len(after) or (
        greedy.nodes_after == len(after) and len(greedy.moves) < len(moves)
    ):
        return greedy  # the time limit stopped CP-SAT before it caught up with its hint
    return RebalancePlan(
        moves=moves,
        nodes_before=len(used_before),
        nodes_after=len(after),
        freed=[nodes[i].name for i in used_before if i not in set(after)],
        status="optimal" if status == cp_model.OPTIMAL else "feasible",
        placement=placement,
        remaps=remaps,
    )


def _unchanged(nodes: Sequence[Node], pods: Sequence[Pod], used: list[int]) -> RebalancePlan:
    return RebalancePlan(
        moves=[],
        nodes_before=len(used),
        nodes_after=len(used),
        freed=[],
        status="unchanged",
        placement=[(p.node, p.way_start) for p in pods],
    )


def greedy_rebalance(
    nodes: Sequence[Node], pods: Sequence[Pod], pools: Sequence[int] = ()
) -> RebalancePlan:
    """Drain the emptiest nodes one at a time; a drain holds only if all its pods found room
    (first fit over the other used nodes, best-fit CAT runs)."""
    _check_cluster(nodes, pods, pools)
    where = [(p.node, p.way_start) for p in pods]
    free = [[n.cpus, n.dram_bytes, n.slow_bytes] for n in nodes]
    masks = [0] * len(nodes)
    pool_free = list(pools)
    for p in pods:
        free[p.node][0] -= p.vcpus
        free[p.node][1] -= p.dram_bytes
        if nodes[p.node].pool >= 0:
            pool_free[nodes[p.node].pool] -= p.slow_bytes
        else:
            free[p.node][2] -= p.slow_bytes
        masks[p.node] |= run_mask(p.way_start, p.llc_ways)
    used_before = sorted({p.node for p in pods})
    live = set(used_before)

    def load(ni: int) -> float:
        n = nodes[ni]
        return (n.cpus - free[ni][0]) / n.cpus + (n.dram_bytes - free[ni][1]) / n.dram_bytes

    for ni in sorted(used_before, key=load):
        mine = [pi for pi, (at, _) in enumerate(where) if at == ni]
        if any(not pods[pi].movable for pi in mine):
            continue
        state = ([f.copy() for f in free], masks.copy(), pool_free.copy(), where.copy())
        ok = True
        for pi in sorted(mine, key=lambda i: -pods[i].vcpus):
            p = pods[pi]
            target = None
            for ti in sorted(live - {ni}):
                t = nodes[ti]
                slow_room = (
                    pool_free[t.pool] + (p.slow_bytes if t.pool == nodes[ni].pool else 0)
                    if t.pool >= 0
                    else free[ti][2]
                )
                if p.vcpus > free[ti][0] or p.dram_bytes > free[ti][1] or p.slow_bytes > slow_room:
                    continue
                mask = best_fit_run(masks[ti], t.llc_ways, p.llc_ways)
                if mask is None:
                    continue
                target = (ti, mask)
                break
            if target is None:
                ok = False
                break
            ti, mask = target
            free[ti][0] -= p.vcpus
            free[ti][1] -= p.dram_bytes
            src = nodes[ni]
            if src.pool >= 0:
                pool_free[src.pool] += p.slow_bytes
            else:
                free[ni][2] += p.slow_bytes
            if nodes[ti].pool >= 0:
                pool_free[nodes[ti].pool] -= p.slow_bytes
            else:
                free[ti][2] -= p.slow_bytes
            masks[ti] |= mask
            where[pi] = (ti, (mask & -mask).bit_length() - 1)
        if ok:
            live.discard(ni)
            masks[ni] = 0
        else:
            free, masks, pool_free, where = state
    moves = [
        Move(p.name, nodes[p.node].name, nodes[where[pi][0]].name, where[pi][1])
        for pi, p in enumerate(pods)
        if where[pi][0] != p.node
    ]
    after = sorted({ni for ni, _ in where})
    return RebalancePlan(
        moves=moves,
        nodes_before=len(used_before),
        nodes_after=len(after),
        freed=[nodes[i].name for i in used_before if i not in set(after)],
        status="unchanged" if not moves else "greedy",
        placement=where,
    )
