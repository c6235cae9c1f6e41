"""OR-Tools in the product, measured: the capacity planner and the rebalancer against greedy.

**Capacity planner** (`model.capacity.plan_kind`, bin packing over whole machines with CP-SAT).
Per regime and mix, each workload class offers the candidates the confident Algorithm 1 keeps
within T on an idle cluster, with tmc's predicted run times (upper bounds) and costs (what the
product knows). The planner's machine count is compared with the greedy answer in the same call
(every class in its predicted-cheapest option, the peak's VMs packed first fit decreasing), and
both are *checked against simulation*: the arrivals are replayed in `sim.cluster`, each VM given
an option drawn from the plan's mix (greedy's: its cheapest), held for its simulated run time,
and the cluster compacted as in the evaluation. The planner also names the cheapest machine kind
of the Fig. 9 family for the mix.

**Rebalancer** (`model.rebalancer.rebalance`). Live clusters are made by replaying arrivals of a
mix's exhaustive-search configurations on 24G-128L machines, first fit with best-fit CAT runs,
VMs leaving after their simulated run time; the snapshot is the cluster at the last arrival
(fragmented by departures). CP-SAT (10 s, one worker) and the greedy drain plan moves on it; the
figure is the machines in use after each plan.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from bench.pools import pool_map
from bench.studies import (
    Regime,
    Study,
    confident_candidates,
    hourly,
    study_options,
)
from model.capacity import (
    MachineKind,
    WorkloadClass,
    greedy_plan,
    paper_machine_kinds,
    plan_capacity,
    plan_kind,
)
from model.confidence import DEFAULT_CONFIDENCE
from model.packing import best_fit_run, run_mask
from model.price_profiles import price_profile
from model.rebalancer import Node, Pod, greedy_rebalance, rebalance
from model.select import confident_algorithm1
from sim.cluster import (
    ClusterState,
    Menu,
    Placer,
    architecture,
    compact_size,
    online_placer,
    poisson_arrivals,
)
from sim.cluster import run_cluster as sim_run

THRESHOLD = 0.025


def tmc_menus(studies: Sequence[Study]) -> list[Menu]:
    """Each workload's menu: per grid option its demand (vCPUs, DRAM, slow, ways) and run time."""
    menus = []
    for s in studies:
        n = len(s.ways)
        demand = np.stack([np.full(n, s.vcpus), s.dram_bytes, s.slow_bytes, s.ways], axis=1)
        menus.append(Menu(demand.astype(np.int64), s.tmc_seconds))
    return menus


PLAN_SECONDS = 10.0  # CP-SAT time limit per plan (one worker)
REGIMES = (
    Regime("msv2-lsq", 0.2, 0.4, "memory-heavy", "run"),
    Regime("msv2-lsq", 0.03, 0.4, "memory-heavy", "run"),
    Regime("gce-n1", 0.03, 0.4, "paper", "run"),
    Regime("gce-n1", 0.2, 0.4, "paper", "run"),
)


def _candidates(
    s: Study, regime: Regime, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[np.ndarray, Any]:
    prices = price_profile(
        regime.source, llc_area_share=regime.llc_share, slow_to_dram=regime.slow_to_dram
    )
    h = hourly(s, prices)
    pred = h * s.predicted_seconds / 3600.0
    z = NormalDist().inv_cdf(confidence)
    sel = confident_candidates(s, pred, s.sigma, s.predicted_seconds, z, THRESHOLD)
    return np.sort(sel.within), h


def _classes(
    studies: Sequence[Study], mix: Sequence[int], regime: Regime, rate_per_hour: float
) -> tuple[list[WorkloadClass], list[np.ndarray]]:
    classes, idxs = [], []
    for i in mix:
        s = studies[i]
        within, h = _candidates(s, regime)
        # The predicted run time: the candidates are already those whose bound is within T, and
        # the peak quantile covers the count's fluctuation; upper bounds (up to +70 % at high
        # slow ratios) would plan for VMs that are not there.
        seconds = s.predicted_seconds
        options = study_options(s, within, seconds, h * seconds / 3600.0)
        classes.append(WorkloadClass(s.name, rate_per_hour / len(mix), options))
        idxs.append(within)
    return classes, idxs


def _simulated_size(
    studies: Sequence[Study],
    mix: Sequence[int],
    idxs: Sequence[np.ndarray],
    shares: Sequence[np.ndarray],
    rate: float,
    arrivals: int,
    seeds: int,
) -> float:
    """Compact cluster when each VM of class c takes option o with probability shares[c][o]."""
    position = {w: j for j, w in enumerate(mix)}

    def placer_for(seed: int, arr: Any) -> Placer:
        # The same draws on every probe of a seed's compaction.
        rng = np.random.default_rng(500 + seed)
        draws = iter(
            [
                int(rng.choice(idxs[position[int(w)]], p=shares[position[int(w)]]))
                for w in arr.workloads
            ]
        )
        return online_placer(lambda w, u: next(draws))

    return _placed_size(studies, mix, placer_for, rate, arrivals, seeds)


@dataclass(frozen=True)
class PatternTable:
    """A plan's machine patterns laid over a cluster's machines (machines past the plan's count
    repeat its patterns): per machine, the slots of each (workload, option) and of each
    workload."""

    by_option: dict[tuple[int, int], np.ndarray]
    by_workload: dict[int, np.ndarray]

    @classmethod
    def lay(cls, patterns: Sequence[Sequence[tuple[int, int]]], machines: int) -> PatternTable:
        by_option: dict[tuple[int, int], np.ndarray] = {}
        by_workload: dict[int, np.ndarray] = {}
        for k in range(machines):
            for w, o in patterns[k % len(patterns)]:
                by_option.setdefault((w, o), np.zeros(machines, dtype=np.int64))[k] += 1
                by_workload.setdefault(w, np.zeros(machines, dtype=np.int64))[k] += 1
        return cls(by_option, by_workload)

    def slots(self, workload: int, option: int | None = None) -> np.ndarray | None:
        if option is None:
            return self.by_workload.get(workload)
        return self.by_option.get((workload, option))


class _Placing:
    """The VMs present per machine as a placer sees them within one call: the replay's counts
    (`ClusterState.vms_of`) and what this call placed, which the replay records only once the
    call returns."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.placed: dict[tuple[int, int | None], np.ndarray] = {}

    def vms_of(self, workload: int, option: int | None = None) -> np.ndarray:
        extra = self.placed.get((workload, option))
        present = self.state.vms_of(workload, option)
        return present if extra is None else present + extra

    def place(self, machine: int, workload: int, option: int) -> None:
        self.state.place(machine, self.state.menus[workload].demand[option])
        for key in ((workload, None), (workload, option)):
            self.placed.setdefault(key, np.zeros(self.state.machines, dtype=np.int64))[machine] += 1


def _first_in_order(state: ClusterState, ok: np.ndarray) -> int | None:
    in_order = ok[state.order]
    i = int(np.argmax(in_order))
    return int(state.order[i]) if in_order[i] else None


def pattern_placer(
    patterns: Sequence[Sequence[tuple[int, int]]], fallback: Sequence[Sequence[int]]
) -> Placer:
    """First fit that follows a plan's machines, slot by slot, *and takes the slot's option*: an
    arrival of workload w goes, in the cluster's node order, to the first machine whose planned
    pattern has a free slot for w in option o (the pattern holds more VMs of w in o than the
    machine runs; options in `fallback[w]` order: how often the plan uses them) and room for
    it; else to the first machine whose pattern holds w in some option, with room; else plain
    first fit in w's most planned option that fits anywhere. What a scheduler that also chose
    each VM's configuration from the plan would place."""
    tables: dict[int, PatternTable] = {}

    def place(pending: Sequence[int], state: ClusterState) -> list[tuple[int, int] | None]:
        table = tables.get(state.machines) or tables.setdefault(
            state.machines, PatternTable.lay(patterns, state.machines)
        )
        got: list[tuple[int, int] | None] = []
        placing = _Placing(state)
        for w in pending:
            menu = state.menus[w]
            choice = None
            for free_slot in (True, False):
                for o in fallback[w]:
                    planned = table.slots(w, o)
                    if planned is None:
                        continue
                    held = placing.vms_of(w, o) if free_slot else 0
                    m = _first_in_order(state, state.fits(menu.demand[o]) & (planned > held))
                    if m is not None:
                        choice = (o, m)
                        break
                if choice is not None:
                    break
            if choice is None:
                for o in fallback[w]:
                    m = state.first_fit(menu.demand[o])
                    if m is not None:
                        choice = (o, m)
                        break
            if choice is not None:
                placing.place(choice[1], w, choice[0])
            got.append(choice)
        return got

    return place


def scheduled_placer(
    patterns: Sequence[Sequence[tuple[int, int]]] | None,
    choose: Callable[[int, np.ndarray], int],
) -> Placer:
    """The scheduler's rule for adopted machine patterns (`model.patterns`), on the simulator's
    first fit: each arrival's configuration is the policy's (`choose`, on the live
    utilization, as the service recommends it); among the machines it fits on, those whose
    pattern has a slot free for exactly its workload and configuration come first, then those
    whose pattern has room for its workload in another one (`model.patterns.EXACT`,
    `WORKLOAD`), then any; first fit in the node order within that tier, where the scheduler
    ranks the tier by its packing score. Without patterns: plain first fit."""
    tables: dict[int, PatternTable] = {}

    def place(pending: Sequence[int], state: ClusterState) -> list[tuple[int, int] | None]:
        got: list[tuple[int, int] | None] = []
        table = None
        if patterns:
            table = tables.get(state.machines) or tables.setdefault(
                state.machines, PatternTable.lay(patterns, state.machines)
            )
        placing = _Placing(state)
        for w in pending:
            o = choose(w, state.utilization())
            fits = state.fits(state.menus[w].demand[o])
            m = None
            if table is not None:
                planned_w = table.slots(w)
                if planned_w is not None:
                    room = planned_w > placing.vms_of(w)
                    planned_wo = table.slots(w, o)
                    if planned_wo is not None:
                        exact = planned_wo > placing.vms_of(w, o)
                        m = _first_in_order(state, fits & room & exact)
                    if m is None:
                        m = _first_in_order(state, fits & room)
            if m is None:
                m = _first_in_order(state, fits)
            if m is None:
                got.append(None)
                continue
            placing.place(m, w, o)
            got.append((o, m))
        return got

    return place


def _pattern_size(
    studies: Sequence[Study],
    mix: Sequence[int],
    patterns: Sequence[Sequence[tuple[int, int]]],
    rate: float,
    arrivals: int,
    seeds: int,
) -> float:
    """Compact cluster when VMs are placed following the plan's machines (`pattern_placer`);
    patterns hold (workload index, option index in the workload's 77-point menu)."""
    counts: dict[int, dict[int, int]] = {}
    for p in patterns:
        for w, o in p:
            counts.setdefault(w, {})
            counts[w][o] = counts[w].get(o, 0) + 1
    fallback: list[list[int]] = []
    for w in range(len(studies)):
        c = counts.get(w, {})
        fallback.append(sorted(c, key=c.__getitem__, reverse=True))
    placer = pattern_placer(patterns, fallback)
    return _placed_size(studies, mix, lambda seed, arr: placer, rate, arrivals, seeds)


def _scheduled_size(
    studies: Sequence[Study],
    mix: Sequence[int],
    regime: Regime,
    idxs: Sequence[np.ndarray],
    patterns: Sequence[Sequence[tuple[int, int]]] | None,
    rate: float,
    arrivals: int,
    seeds: int,
) -> float:
    """Compact cluster when each VM takes the configuration Algorithm 1's second round gives it
    among its class's options on the live utilization (as the service recommends), and the
    scheduler places it following the plan's machine patterns (`scheduled_placer`), or by first
    fit alone without patterns."""
    menus = tmc_menus(studies)
    prices = price_profile(
        regime.source, llc_area_share=regime.llc_share, slow_to_dram=regime.slow_to_dram
    )
    cap = architecture(24, "128L").capacity().astype(np.float64)
    position = {w: j for j, w in enumerate(mix)}
    choosers = []
    for w, within in zip(mix, idxs, strict=True):
        s = studies[w]
        cost = (hourly(s, prices) * s.predicted_seconds)[within]
        frac = menus[w].demand[within] / cap
        seconds = s.predicted_seconds[within]
        every = np.ones(len(within), dtype=bool)
        choosers.append((within, cost, frac, seconds, every))

    def choose(w: int, u: np.ndarray) -> int:
        within, cost, frac, seconds, every = choosers[position[w]]
        sel = confident_algorithm1(cost, cost, seconds, every, frac, u, THRESHOLD)
        assert sel is not None
        return int(within[sel.chosen])

    placer = scheduled_placer(patterns, choose)
    return _placed_size(studies, mix, lambda seed, arr: placer, rate, arrivals, seeds)


def _placed_size(
    studies: Sequence[Study],
    mix: Sequence[int],
    placer_for: Callable[[int, Any], Placer],
    rate: float,
    arrivals: int,
    seeds: int,
) -> float:
    """The 90th percentile over seeds of the compact cluster on 24G-128L, each probe of a seed's
    arrivals placed by `placer_for(seed, arrivals)`."""
    arch = architecture(24, "128L")
    menus = tmc_menus(studies)
    sizes = []
    for seed in range(seeds):
        arr = poisson_arrivals(arrivals, mix, rate, seed)

        def fits(n: int, arr: Any = arr, seed: int = seed) -> bool:
            run = sim_run(arch, n, arr, menus, placer_for(seed, arr), order_seed=seed)
            return run.rejected == 0

        sizes.append(compact_size(fits, upper=200))
    return float(np.percentile(sizes, 90))


def capacity_jobs(
    studies: dict[str, list[Study]], mix_stride: int, regimes: Sequence[Regime] = REGIMES
) -> list[tuple[Regime, tuple[int, ...]]]:
    """The (regime, mix) pairs the capacity study plans for."""
    jobs = []
    for regime in regimes:
        sts = studies.get(regime.shape)
        if not sts:
            continue
        for mix in list(itertools.combinations(range(len(sts)), min(4, len(sts))))[::mix_stride]:
            jobs.append((regime, mix))
    return jobs


def capacity_study(
    studies: dict[str, list[Study]],
    arrivals: int,
    seeds: int,
    concurrency: float,
    mix_stride: int,
    regimes: Sequence[Regime] = REGIMES,
) -> list[dict[str, Any]]:
    return [
        capacity_row(studies[regime.shape], regime, mix, arrivals, seeds, concurrency)
        for regime, mix in capacity_jobs(studies, mix_stride, regimes)
    ]


def capacity_row(
    sts: Sequence[Study],
    regime: Regime,
    mix: tuple[int, ...],
    arrivals: int,
    seeds: int,
    concurrency: float,
) -> dict[str, Any]:
    """One mix in one regime: the planner against greedy, both checked against simulation."""
    kind = MachineKind("24G-128L")
    prices = price_profile(
        regime.source, llc_area_share=regime.llc_share, slow_to_dram=regime.slow_to_dram
    )
    es_idx = [int(np.argmin(hourly(sts[i], prices) * sts[i].truth_seconds)) for i in mix]
    es_seconds = float(np.mean([sts[i].truth_seconds[k] for i, k in zip(mix, es_idx, strict=True)]))
    rate = concurrency / es_seconds  # per second, as in the cluster study
    classes, idxs = _classes(sts, mix, regime, rate * 3600.0)
    t0 = time.monotonic()
    plan = plan_kind(classes, kind, prices, time_limit_seconds=PLAN_SECONDS)
    plan_s = time.monotonic() - t0
    shares = []
    for c in classes:
        x = np.asarray(plan.mix[c.name])
        shares.append(x / x.sum())
    greedy_shares = []
    for c in classes:
        g = np.zeros(len(c.options))
        g[int(np.argmin([o.cost for o in c.options]))] = 1.0
        greedy_shares.append(g)
    planned_sim = _simulated_size(sts, mix, idxs, shares, rate, arrivals, seeds)
    greedy_sim = _simulated_size(sts, mix, idxs, greedy_shares, rate, arrivals, seeds)
    # The same arrivals placed following each plan's machines.
    by_name = {c.name: (ci, c) for ci, c in enumerate(classes)}
    planned_patterns = []
    for m in plan.machines_content:
        pattern = []
        for key, count in m.items():
            name, oi = key.rsplit("#", 1)
            ci, _ = by_name[name]
            pattern += [(mix[ci], int(idxs[ci][int(oi)]))] * count
        planned_patterns.append(pattern)
    greedy_content = greedy_plan(classes, kind, 1.0, 0.95) or []
    greedy_patterns = [[(mix[ci], int(idxs[ci][oi])) for ci, oi in m] for m in greedy_content]
    planned_follow = _pattern_size(sts, mix, planned_patterns, rate, arrivals, seeds)
    greedy_follow = _pattern_size(sts, mix, greedy_patterns, rate, arrivals, seeds)
    scheduled = _scheduled_size(sts, mix, regime, idxs, planned_patterns, rate, arrivals, seeds)
    unplanned = _scheduled_size(sts, mix, regime, idxs, None, rate, arrivals, seeds)
    best_kind = plan_capacity(classes, paper_machine_kinds(), prices, time_limit_seconds=1.0).best
    # The plan's true cost per VM against exhaustive search's, on the plan's mix.
    true_cost = []
    for i, within, sh in zip(mix, idxs, shares, strict=True):
        s = sts[i]
        h = hourly(s, prices)
        es = float((h * s.truth_seconds).min())
        true_cost.append(float(np.dot(sh, h[within] * s.tmc_seconds[within])) / es)
    return {
        "regime": regime.key,
        "mix": [sts[i].name for i in mix],
        "planned_machines": plan.machines,
        "greedy_machines": plan.greedy_machines,
        "planned_simulated": planned_sim,
        "greedy_simulated": greedy_sim,
        "planned_followed": planned_follow,
        "greedy_followed": greedy_follow,
        "scheduled_followed": scheduled,
        "scheduled_first_fit": unplanned,
        "binding": plan.binding,
        "status": plan.status,
        "note": plan.note,
        "lower_bound": plan.lower_bound,
        "plan_seconds": plan_s,
        "planned_cost_vs_es": float(np.mean(true_cost)) - 1.0,
        "best_kind": best_kind.kind,
        "best_kind_machines": best_kind.machines,
    }


def live_cluster(
    studies: Sequence[Study],
    mix: Sequence[int],
    regime: Regime,
    machines: int,
    arrivals: int,
    seed: int,
) -> tuple[list[Node], list[Pod]]:
    """Replay a mix's ES configurations with CAT runs; the cluster left at the last arrival."""
    prices = price_profile(
        regime.source, llc_area_share=regime.llc_share, slow_to_dram=regime.slow_to_dram
    )
    es = {i: int(np.argmin(hourly(studies[i], prices) * studies[i].truth_seconds)) for i in mix}
    es_seconds = float(np.mean([studies[i].truth_seconds[es[i]] for i in mix]))
    arr = poisson_arrivals(arrivals, mix, 0.7 * machines * 3 / es_seconds, seed)
    nodes = [Node(f"n{i}", 12, 24 << 30, 128 << 30, 48) for i in range(machines)]
    free = [[12, 24 << 30, 128 << 30] for _ in nodes]
    masks = [0] * machines
    live: dict[int, tuple[int, int, int, float]] = {}  # arrival -> (workload, node, start, end)
    order = np.random.default_rng(seed).permutation(machines)
    for a, (t, w) in enumerate(zip(arr.times, arr.workloads, strict=True)):
        for k in [k for k, v in live.items() if v[3] <= t]:
            wk, ni, start, _ = live.pop(k)
            s, i = studies[wk], es[wk]
            free[ni][0] += s.vcpus
            free[ni][1] += int(s.dram_bytes[i])
            free[ni][2] += int(s.slow_bytes[i])
            masks[ni] &= ~run_mask(start, int(s.ways[i]))
        s, i = studies[int(w)], es[int(w)]
        need = (s.vcpus, int(s.dram_bytes[i]), int(s.slow_bytes[i]))
        for ni in order:
            mask = best_fit_run(masks[ni], 48, int(s.ways[i]))
            if mask is None or any(n > f for n, f in zip(need, free[ni], strict=True)):
                continue
            for r in range(3):
                free[ni][r] -= need[r]
            masks[ni] |= mask
            start = (mask & -mask).bit_length() - 1
            live[a] = (int(w), int(ni), start, float(t + s.truth_seconds[i]))
            break
    pods = []
    for k, (wk, ni, start, _) in live.items():
        s, i = studies[wk], es[wk]
        pods.append(
            Pod(
                f"{s.name}-{k}",
                ni,
                s.vcpus,
                int(s.dram_bytes[i]),
                int(s.slow_bytes[i]),
                int(s.ways[i]),
                start,
            )
        )
    return nodes, pods


def rebalance_jobs(
    studies: dict[str, list[Study]], snapshots: int
) -> list[tuple[Regime, tuple[int, ...], int]]:
    """The (regime, mix, snapshot seed) live clusters the rebalancer plans moves on."""
    jobs = []
    for regime in (REGIMES[2], REGIMES[0]):
        sts = studies.get(regime.shape)
        if not sts:
            continue
        mix = tuple(range(min(4, len(sts))))
        jobs += [(regime, mix, seed) for seed in range(snapshots)]
    return jobs


def rebalance_study(
    studies: dict[str, list[Study]], snapshots: int, machines: int, time_limit: float
) -> list[dict[str, Any]]:
    return [
        rebalance_row(studies[regime.shape], regime, mix, seed, machines, time_limit)
        for regime, mix, seed in rebalance_jobs(studies, snapshots)
    ]


def rebalance_row(
    sts: Sequence[Study],
    regime: Regime,
    mix: tuple[int, ...],
    seed: int,
    machines: int,
    time_limit: float,
) -> dict[str, Any]:
    """One live cluster: CP-SAT's moves against the greedy drain's."""
    nodes, pods = live_cluster(sts, mix, regime, machines, 600, seed)
    t0 = time.monotonic()
    plan = rebalance(nodes, pods, time_limit_seconds=time_limit)
    solve_s = time.monotonic() - t0
    greedy = greedy_rebalance(nodes, pods)
    return {
        "regime": regime.key,
        "snapshot": seed,
        "pods": len(pods),
        "in_use": plan.nodes_before,
        "cp_sat_after": plan.nodes_after,
        "cp_sat_moves": len(plan.moves),
        "cp_sat_remaps": len(plan.remaps),
        "cp_sat_status": plan.status,
        "cp_sat_seconds": solve_s,
        "greedy_after": greedy.nodes_after,
        "greedy_moves": len(greedy.moves),
    }


def planning_markdown(capacity: list[dict[str, Any]], moves: list[dict[str, Any]]) -> str:
    lines = [
        "## OR-Tools planners against greedy",
        "",
        "Capacity planner (`model.capacity.plan_kind`: whole machines, CP-SAT bin packing of"
        " each class's 95th-percentile count of VMs at once, 24G-128L): machines planned (CP-SAT's"
        " lower bound, status) and, in brackets, the compact cluster when the plan's option mix"
        " is replayed in the simulator; greedy gives every class its predicted-cheapest option,"
        " first fit decreasing, in the same call; when CP-SAT does not beat it the plan is"
        " greedy's (status `greedy`). `following the plans, options from the plan`: the compact"
        " cluster when each arrival takes a free slot of its workload on the first machine whose"
        " planned pattern has one, in that slot's option, else a machine whose pattern holds it,"
        " else first fit. `as the scheduler places`: each arrival in the configuration"
        " Algorithm 1's second round gives it on the live utilization (as the service"
        " recommends), placed by the scheduler's rule for adopted machine patterns"
        " (`model.patterns`: a slot free for exactly its configuration, else room for its"
        " workload, else any node; first fit within) with the planner's patterns, and by first"
        " fit alone. Method: `bench/planning.py`.",
        "",
        "| regime | mix | binds | planner (bound, status) | greedy | planned vs greedy |"
        " simulated vs greedy | following the plans, options from the plan: planner, greedy |"
        " as the scheduler places: planner's patterns, no patterns | plan's true cost vs ES |"
        " cheapest kind (machines) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in capacity:
        gain = r["planned_simulated"] / r["greedy_simulated"] - 1.0
        planned_gain = r["planned_machines"] / r["greedy_machines"] - 1.0
        lines.append(
            f"| {r['regime']} | {'+'.join(r['mix'])} | {r['binding']} |"
            f" {r['planned_machines']} ({r.get('lower_bound', 0)}, {r.get('status', '-')})"
            f" ({r['planned_simulated']:g}) |"
            f" {r['greedy_machines']} ({r['greedy_simulated']:g}) | {100 * planned_gain:+.1f} % |"
            f" {100 * gain:+.1f} % |"
            f" {r.get('planned_followed', float('nan')):g}, {r.get('greedy_followed', float('nan')):g} |"
            f" {r.get('scheduled_followed', float('nan')):g},"
            f" {r.get('scheduled_first_fit', float('nan')):g} |"
            f" {100 * r['planned_cost_vs_es']:+.1f} % | {r['best_kind']} ({r['best_kind_machines']}) |"
        )
    lines += [
        "",
        "Rebalancer (`model.rebalancer.rebalance`, CP-SAT with CAT runs as non-overlapping intervals)"
        " against the greedy drain, on live clusters left by departures:",
        "",
        "| regime | snapshot | pods | machines in use | CP-SAT after (moves, remaps, s) |"
        " greedy after (moves) |",
        "|---|---|---|---|---|---|",
    ]
    for r in moves:
        lines.append(
            f"| {r['regime']} | {r['snapshot']} | {r['pods']} | {r['in_use']} |"
            f" {r['cp_sat_after']} ({r['cp_sat_moves']}, {r['cp_sat_remaps']},"
            f" {r['cp_sat_seconds']:.1f}) | {r['greedy_after']} ({r['greedy_moves']}) |"
        )
    lines.append("")
    return "\n".join(lines)


@dataclass(frozen=True)
class PlanningSettings:
    arrivals: int
    seeds: int
    concurrency: float
    mix_stride: int
    regimes: tuple[Regime, ...]
    snapshots: int
    machines: int
    rebalance_seconds: float


FULL_PLANNING = PlanningSettings(1200, 1, 120.0, 5, REGIMES, 2, 30, 10.0)
QUICK_PLANNING = PlanningSettings(300, 1, 30.0, 100, REGIMES[:1], 1, 8, 2.0)

_CONTEXT: dict[str, Any] = {}


def _planning_job(job: tuple[str, tuple[Any, ...]]) -> dict[str, Any]:
    what, args = job
    studies: dict[str, list[Study]] = _CONTEXT["studies"]
    p: PlanningSettings = _CONTEXT["settings"]
    if what == "rebalance":
        regime, mix, seed = args
        return rebalance_row(
            studies[regime.shape], regime, mix, seed, p.machines, p.rebalance_seconds
        )
    regime, mix = args
    return capacity_row(studies[regime.shape], regime, mix, p.arrivals, p.seeds, p.concurrency)


def run_planning(
    studies: dict[str, list[Study]],
    out_dir: Path,
    quick: bool,
    stem: str,
    processes: int = 1,
) -> dict[str, Any]:
    """Both studies; their rows are independent, so they run in `processes` processes, the
    rebalancer's (each a fixed CP-SAT time limit) first so that the pool does not idle at the
    end."""
    started = time.monotonic()
    p = QUICK_PLANNING if quick else FULL_PLANNING
    moves_jobs = rebalance_jobs(studies, p.snapshots)
    cap_jobs = capacity_jobs(studies, p.mix_stride, p.regimes)
    jobs: list[tuple[str, tuple[Any, ...]]] = [("rebalance", j) for j in moves_jobs]
    jobs += [("capacity", j) for j in cap_jobs]
    _CONTEXT["studies"] = studies
    _CONTEXT["settings"] = p
    rows = pool_map(_planning_job, jobs, processes)
    moves, capacity = rows[: len(moves_jobs)], rows[len(moves_jobs) :]
    md = planning_markdown(capacity, moves)
    (out_dir / f"{stem}-planning.md").write_text(md)
    return {"capacity": capacity, "rebalance": moves, "seconds": time.monotonic() - started}
