"""Batch placement: a window of pending requests configured and placed jointly with CP-SAT.

Algorithm 1 (§3.5) decides one request at a time: it picks the configuration whose demand
leans least on what the cluster is short of, and a scheduler then puts it somewhere. With a
window of requests waiting, both choices can be made together: which of each request's
candidates within T, and which machine, so that the window lands on as few machines as possible
(then as cheaply as possible). That is a multi-dimensional bin-packing problem with a choice of
item shapes, solved here with OR-Tools' CP-SAT under a time limit; when CP-SAT has no solution
in time (or only one that places fewer requests or opens more machines than that), every request
takes Algorithm 1's choice and the first machine, in the caller's order, that holds it. The
greedy answer is also given to CP-SAT as a hint to start from.

Pure: numbers in, assignments out. No I/O, no clock other than the solver's own limit.

Objective, lexicographic through weights: (1) place as many requests as possible, (2) open as
few machines that were empty as possible (machines already in use are paid for), (3) the least
cost, each request's cost counted relative to its cheapest candidate in units of 1/1000 of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from ortools.sat.python import cp_model

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

# Resource columns: CPU, DRAM bytes, slow bytes, LLC ways (Algorithm 1's order).
SLOW = 2
COST_UNITS = 1000  # cost resolution: 0.1 % of a request's cheapest candidate


@dataclass(frozen=True)
class BatchRequest:
    demand: IntArray  # [k, 4] per candidate: vCPUs, DRAM bytes, slow bytes, ways
    cost: FloatArray  # [k] each candidate's (predicted) cost
    greedy: int  # Algorithm 1's choice among the k, the fallback


@dataclass(frozen=True)
class Machines:
    """Free capacity now. `pool` gives each machine's rack pool (-1: local slow memory, in
    `free[:, 2]`); `pool_free` the free bytes of each pool, shared by its machines."""

    free: IntArray  # [m, 4]
    in_use: NDArray[np.bool_]  # [m] hosting something already
    pool: IntArray | None = None  # [m]
    pool_free: IntArray | None = None  # [p]


@dataclass(frozen=True)
class BatchResult:
    assignments: list[tuple[int, int] | None]  # per request: (candidate, machine) or None
    status: Literal["optimal", "feasible", "fallback"]
    opened: int  # machines that were empty and now are not
    cost: float


def _fits(demand: IntArray, free: IntArray, pool: int, pool_free: IntArray | None) -> bool:
    """Room for `demand` on a machine with `free`; slow bytes from its pool when it has one."""
    if pool >= 0 and pool_free is not None:
        return (
            bool((demand[:SLOW] <= free[:SLOW]).all())
            and bool((demand[SLOW + 1 :] <= free[SLOW + 1 :]).all())
            and int(demand[SLOW]) <= int(pool_free[pool])
        )
    return bool((demand <= free).all())


def _pools(machines: Machines) -> IntArray:
    n = len(machines.free)
    return machines.pool if machines.pool is not None else np.full(n, -1, dtype=np.int64)


def greedy(requests: Sequence[BatchRequest], machines: Machines) -> BatchResult:
    """Algorithm 1's choice for every request, each on the first machine that holds it."""
    free = machines.free.copy()
    pools = _pools(machines)
    pool_free = None if machines.pool_free is None else machines.pool_free.copy()
    used = machines.in_use.copy()
    out: list[tuple[int, int] | None] = []
    opened, cost = 0, 0.0
    for req in requests:
        d = req.demand[req.greedy]
        got = next(
            (m for m in range(len(free)) if _fits(d, free[m], int(pools[m]), pool_free)), None
        )
        if got is None:
            out.append(None)
            continue
        pool = int(pools[got])
        if pool >= 0 and pool_free is not None:
            taken = d.copy()
            taken[SLOW] = 0
            free[got] -= taken
            pool_free[pool] -= int(d[SLOW])
        else:
            free[got] -= d
        opened += int(not used[got])
        used[got] = True
        cost += float(req.cost[req.greedy])
        out.append((req.greedy, got))
    return BatchResult(out, "fallback", opened, cost)


def solve(
    requests: Sequence[BatchRequest],
    machines: Machines,
    *,
    time_limit_seconds: float = 1.0,
    max_empty: int | None = None,
    workers: int = 1,
    seed: int = 0,
) -> BatchResult:
    """Choose every request's candidate and machine jointly; Algorithm 1's greedy answer when
    CP-SAT finds none in time. Empty machines are interchangeable (within a pool), so only the
    first `max_empty` (default: one per request) are offered to the solver."""
    if not requests:
        return BatchResult([], "optimal", 0, 0.0)
    n_m = len(machines.free)
    pools = _pools(machines)
    limit = len(requests) if max_empty is None else max_empty
    empty_seen: dict[int, int] = {}
    offered: list[int] = []
    for m in range(n_m):
        if machines.in_use[m]:
            offered.append(m)
            continue
        p = int(pools[m])
        if empty_seen.get(p, 0) < limit:
            empty_seen[p] = empty_seen.get(p, 0) + 1
            offered.append(m)

    model = cp_model.CpModel()
    x: dict[tuple[int, int, int], cp_model.IntVar] = {}
    by_machine: dict[int, list[tuple[int, int, cp_model.IntVar]]] = {m: [] for m in offered}
    unplaced = []
    cost_terms = []
    cost_weight_max = 0
    for r, req in enumerate(requests):
        cheapest = float(req.cost.min())
        units = np.rint((req.cost / cheapest - 1.0) * COST_UNITS).astype(np.int64)
        cost_weight_max += int(units.max())
        choices = []
        for c in range(len(req.demand)):
            d = req.demand[c]
            for m in offered:
                if not _fits(d, machines.free[m], int(pools[m]), machines.pool_free):
                    continue
                v = model.new_bool_var(f"x{r}_{c}_{m}")
                x[r, c, m] = v
                by_machine[m].append((r, c, v))
                choices.append(v)
                if units[c]:
                    cost_terms.append(int(units[c]) * v)
        u = model.new_bool_var(f"unplaced{r}")
        unplaced.append(u)
        model.add_exactly_one([*choices, u])

    opened = []
    for m in offered:
        items = by_machine[m]
        if not items:
            continue
        pool = int(pools[m])
        for j in range(4):
            if j == SLOW and pool >= 0:
                continue  # counted against the pool below
            model.add(
                sum(int(requests[r].demand[c][j]) * v for r, c, v in items)
                <= int(machines.free[m][j])
            )
        if not machines.in_use[m]:
            y = model.new_bool_var(f"open{m}")
            for _, _, v in items:
                model.add_implication(v, y)
            opened.append(y)
    if machines.pool_free is not None:
        for p in range(len(machines.pool_free)):
            members = [m for m in offered if int(pools[m]) == p]
            terms = [
                int(requests[r].demand[c][SLOW]) * v for m in members for r, c, v in by_machine[m]
            ]
            if terms:
                model.add(sum(terms) <= int(machines.pool_free[p]))

    # Start from Algorithm 1's answer: CP-SAT then only has to improve on it, and a short time
    # limit still yields at least the greedy packing.
    base = greedy(requests, machines)
    position = {m: i for i, m in enumerate(offered)}
    for r, a in enumerate(base.assignments):
        if a is not None and a[1] in position and (r, a[0], a[1]) in x:
            model.add_hint(x[r, a[0], a[1]], True)
            model.add_hint(unplaced[r], False)

    w_open = cost_weight_max + 1
    w_unplaced = w_open * (len(opened) + 1)
    model.minimize(w_unplaced * sum(unplaced) + w_open * sum(opened) + sum(cost_terms))

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_seconds
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return base

    out: list[tuple[int, int] | None] = [None] * len(requests)
    for (r, c, m), v in x.items():
        if solver.value(v):
            out[r] = (c, m)
    n_open = sum(int(solver.value(y)) for y in opened)
    cost = sum(float(requests[r].cost[a[0]]) for r, a in enumerate(out) if a is not None)
    placed = sum(a is not None for a in out)
    base_placed = sum(a is not None for a in base.assignments)
    # A solution found in time but worse than the greedy one (fewer placed, or more machines
    # opened) is no answer: keep Algorithm 1's.
    if (placed, -n_open) < (base_placed, -base.opened):
        return base
    return BatchResult(out, "optimal" if status == cp_model.OPTIMAL else "feasible", n_open, cost)
