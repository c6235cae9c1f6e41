"""`tmc bench`: the paper's evaluation (§4.2-4.5) against the simulator's ground truth.

Per workload (§4.2): tmc profiles three reference runs (`sim.profile.reference_bundle`, default
noise, several seeds), fits, and recommends; its choice is run with its own placement plan and
priced by the ground truth. Against it: exhaustive search (77 runs, oracle placement), random
(no runs, the expected cost of a uniform pick), and Bayesian optimisation (bench.baselines).

Both of the model's penalty paths are studied per workload (the paper's one pair per workload and
the per-structure penalties the bundle's stall samples allow), on the Optane-like host, local CXL
and the rack pool, with two workloads written to put structures of different memory parallelism
side by side (`sim.catalog.MIXED_PARALLELISM`); the cluster study uses the per-structure path.

Per workload mix and architecture (§4.3-4.5): `sim.cluster` replays 5,000 arrivals with each
policy and compacts the cluster; tmc's policy calls Algorithm 1 (`model.select.algorithm1`, the
function `model.recommend` uses) with the cluster's live utilization at each arrival, and the
batch policy places windows of requests with `model.batch.solve` (CP-SAT).

The simulator never sees the model: costs and durations are ground truth everywhere.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from bench.baselines import bayesian, exhaustive
from bench.pools import pool_unordered
from bench.study_cache import cached
from model.batch import BatchRequest, Machines, solve
from model.fit import PenaltyChoice, fit
from model.grid import Grid, paper_grid
from model.predict import Predictor
from model.pricing import DEFAULT_PRICE_PROFILE, PriceProfile
from model.recommend import price_grid, recommend
from model.resources import GIB, MachineShape, split_memory
from model.select import algorithm1
from model.verification import RUN_NOISE, Observation
from sim.catalog import MIXED_PARALLELISM, TABLE5, workload
from sim.cluster import (
    PAPER_ARCHITECTURES,
    Architecture,
    ClusterState,
    Menu,
    Placer,
    architecture,
    compact_run,
    online_placer,
    poisson_arrivals,
    run_cluster,
)
from sim.engine import prepare
from sim.host import ground_truth_grid, run_many
from sim.machine import Host, cxl_local_host, cxl_pool_host, optane_host
from sim.profile import NoiseSpec, reference_bundle
from sim.workload import Workload

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

# The paper's figures (§4.2-4.5), for the report's side-by-side.
PAPER = {
    "tmc_cost_vs_es": 0.02,
    "rand_cost_vs_es": 0.33,
    "tmc_search_vs_es": 1 / 26,
    "tmc_search_vs_bo": 1 / 3,
    "compact_t2_5_vs_es": -0.17,
    "cost_t2_5_vs_es": 0.015,
    "compact_t0_vs_t2_5": "T 0 -> 2.5 %: -25 %; 0 -> 7.5 %: -32 %",
    "cost_by_t": {"0": 0.011, "2.5": 0.026, "7.5": 0.079},
}
THRESHOLDS = (0.0, 0.025, 0.075)


@dataclass(frozen=True)
class Settings:
    workloads: tuple[str, ...] = TABLE5
    trace_accesses: int | None = None  # None: the workload's own
    profile_seeds: int = 10  # the paper repeats each experiment 10 times
    bo_repeats: int = 10
    arrivals: int = 5000
    concurrency: float = 120.0  # VMs present at once, on average, under exhaustive search
    mixes: int | None = None  # None: all C(n, 4)
    order_seeds: int = 3  # node orders (and arrival draws) per compaction; p90 reported
    main_architecture: str = "24G-128L"
    architectures: tuple[str, ...] = tuple(a.name for a in PAPER_ARCHITECTURES)
    sweep_policies: tuple[str, ...] = ("es", "tmc-2.5", "tmc-7.5")
    sweep_mix_stride: int = 3  # the other architectures see every 3rd mix (time budget)
    sweep_seeds: int = 2
    batch_mixes: int = 1
    batch_seeds: int = 1
    batch_window: int = 8
    batch_time_limit: float = 0.1
    # The pool host's workloads feed the cluster study only: fewer profile seeds and BO repeats.
    pool_profile_seeds: int = 2
    pool_bo_repeats: int = 2
    processes: int = 2
    # Both penalty paths side by side, per host kind, over Table 5 and the mixed-parallelism
    # workloads (the Table 5 studies above are reused where they ran on the same host).
    paths_workloads: tuple[str, ...] = TABLE5 + MIXED_PARALLELISM
    paths_hosts: tuple[str, ...] = ("local", "cxl_local", "pool")
    paths_profile_seeds: int = 3
    quick: bool = False


QUICK = Settings(
    workloads=("graph500", "memcached", "canneal", "xsbench"),
    trace_accesses=60_000,
    profile_seeds=2,
    bo_repeats=2,
    arrivals=300,
    concurrency=30.0,
    mixes=1,
    order_seeds=2,
    architectures=("24G-128L", "24G-384P"),
    sweep_policies=("es", "tmc-2.5"),
    sweep_mix_stride=1,
    sweep_seeds=1,
    batch_mixes=1,
    batch_window=4,
    batch_time_limit=0.05,
    pool_profile_seeds=1,
    pool_bo_repeats=1,
    processes=1,
    paths_workloads=("hashjoin",),
    paths_hosts=("cxl_local",),
    paths_profile_seeds=1,
    quick=True,
)
# The targets of the per-workload study, for every host kind.
PATH_TARGETS = {"cost_mean": 0.005, "cost_worst": 0.03, "mape": 0.04, "max_error": 0.10}
FULL = Settings()


# -- per workload -------------------------------------------------------------------------------


@dataclass
class WorkloadData:
    """Everything the cluster study needs about one workload on one host kind."""

    name: str
    vcpus: int
    footprint_bytes: int
    hourly: FloatArray  # [77] ratio-major
    truth_seconds: FloatArray  # [77] oracle placement
    truth_cost: FloatArray  # [77]
    tmc_seconds: FloatArray  # [77] with tmc's own placement (profile seed 0)
    tmc_cost: FloatArray  # [77] ground truth of tmc's placement
    predicted_cost: FloatArray  # [77] tmc's prediction
    dram_bytes: IntArray  # [77]
    slow_bytes: IntArray  # [77]
    ways: IntArray  # [77]
    report: dict[str, Any] = field(default_factory=dict)


def _hosts() -> dict[str, Host]:
    # Local slow memory is Optane-like (§4.1); the rack pools hold the paper's 3DXP media behind
    # CXL (+85 ns). Pool size changes capacity, not a VM's speed (same background traffic), so
    # one pool host stands for 128P-896P.
    return {
        "local": optane_host(),
        "cxl_local": cxl_local_host(),
        "pool": cxl_pool_host(media="optane"),
    }


def _trim(w: Workload, accesses: int | None) -> Workload:
    if accesses is None:
        return w
    return w.model_copy(
        update={"trace_accesses": accesses, "warmup_accesses": max(accesses // 5, 1000)}
    )


def study_workload(
    w: Workload, host: Host, prices: PriceProfile, profile_seeds: int, bo_repeats: int
) -> WorkloadData:
    grid = paper_grid()
    ratios, ways = np.asarray(grid.slow_ratios), np.asarray(grid.llc_ways, dtype=np.int64)
    n_w = len(ways)
    machine = MachineShape(
        cpus=host.cores,
        dram_bytes=host.fast_tier.capacity_bytes,
        slow_bytes=host.slow_tier.capacity_bytes,
        llc_ways=host.llc_ways,
    )
    truth = ground_truth_grid(w, host, seed=0)
    seconds = truth.seconds.ravel()
    splits = [split_memory(w.footprint_bytes, float(r)) for r in ratios]
    dram = np.repeat(np.asarray([d for d, _ in splits], dtype=np.int64), n_w)
    slow = np.repeat(np.asarray([s for _, s in splits], dtype=np.int64), n_w)
    way_col = np.tile(ways, len(ratios))
    hourly = (
        w.vcpus * prices.vcpu_hour
        + dram / GIB * prices.dram_gib_hour
        + slow / GIB * prices.slow_gib_hour
        + way_col * prices.llc_way_hour
    )
    cost = hourly * seconds / 3600.0
    es = exhaustive(cost, seconds)
    es_cost = float(cost[es.chosen])

    prep = prepare(w, host, 0, list(ways))
    tmc_runs_s: list[float] = []
    paths: dict[str, dict[str, Any]] = {}
    tmc_seconds = tmc_cost = predicted_cost = np.zeros(0)
    # "auto" is what tmc does (per-structure penalties when the bundle allows them); "paper" the
    # paper's path on the same bundles.
    choices: tuple[PenaltyChoice, ...] = ("auto", "paper")
    costs: dict[str, list[float]] = {c: [] for c in choices}
    chosen: dict[str, list[tuple[float, int]]] = {c: [] for c in choices}
    taken: dict[str, str] = {}
    errors: dict[str, tuple[float, float, float]] = {}
    verified: list[Verified] = []
    for s in range(profile_seeds):
        bundle = reference_bundle(w, host, NoiseSpec(), seed=100 + s)
        tmc_runs_s.append(sum(run.wall_seconds for run in bundle.runs))
        for choice in choices:
            fitted = fit(bundle, penalties=choice)
            taken[choice] = fitted.penalty_path
            predictor = Predictor(fitted)
            priced = price_grid(predictor, prices, grid, machine)
            sel = algorithm1(
                priced.cost, priced.cost, priced.feasible, priced.demand, np.zeros(4), 0.0
            )
            assert sel is not None
            r, k = priced.ratio_and_ways(sel.chosen)
            if s == 0:
                # All 77 with the model's own placement: its prediction error, and the
                # durations and costs tmc's VMs have in the cluster study.
                runs = run_many(
                    prep,
                    [
                        (float(rr), int(kk), predictor.placement(rr, kk))
                        for rr in ratios
                        for kk in ways
                    ],
                )
                own_seconds = np.asarray([x.wall_seconds for x in runs])
                pred_s = priced.prediction.seconds.ravel()
                err = np.abs(pred_s / own_seconds - 1.0)
                true_mar_slow = np.asarray([x.slow_misses / x.instructions for x in runs])
                pred_mar_slow = priced.prediction.mar_slow.ravel()
                has = true_mar_slow > 0
                mar_err = float(
                    np.abs(pred_mar_slow[has] - true_mar_slow[has]).sum()
                    / max(true_mar_slow[has].sum(), 1e-300)
                )
                errors[choice] = (float(err.mean()), float(err.max()), mar_err)
                if choice == "auto":
                    tmc_seconds = own_seconds
                    tmc_cost = hourly * tmc_seconds / 3600.0
                    predicted_cost = priced.cost
                chosen_seconds = float(own_seconds[sel.chosen])
            else:
                chosen_seconds = run_many(prep, [(r, k, predictor.placement(r, k))])[0].wall_seconds
            costs[choice].append(float(hourly[sel.chosen]) * chosen_seconds / 3600.0)
            chosen[choice].append((r, k))
            if choice == "auto":
                verified.append(
                    verified_choice(predictor, prices, grid, machine, prep, hourly, seed=s)
                )
    for choice in choices:
        mape_c, max_c, mar_c = errors[choice]
        paths["per_structure" if choice == "auto" else "paper"] = {
            "penalty_path": taken[choice],
            "configs": [list(c) for c in chosen[choice]],
            "cost_vs_es": float(np.mean(costs[choice])) / es_cost - 1.0,
            "cost_vs_es_max": float(np.max(costs[choice])) / es_cost - 1.0,
            "prediction_mape": mape_c,
            "prediction_max_error": max_c,
            "slow_access_rate_error": mar_c,
        }
    mape, max_err, mar_err = errors["auto"]
    tmc_costs, chosen_list = costs["auto"], chosen["auto"]

    bo = [bayesian(cost, seconds, len(ratios), n_w, seed=s) for s in range(bo_repeats)]
    report = {
        "workload": w.name,
        "host": host.host_kind,
        "paths": paths,
        "prediction_mape": mape,
        "prediction_max_error": max_err,
        "slow_access_rate_error": mar_err,
        "es": {
            "config": _config(ratios, ways, es.chosen),
            "cost": es_cost,
            "runs": es.runs,
            "run_seconds": es.run_seconds,
        },
        "tmc": {
            "configs": [list(c) for c in chosen_list],
            "cost_vs_es": float(np.mean(tmc_costs)) / es_cost - 1.0,
            "cost_vs_es_max": float(np.max(tmc_costs)) / es_cost - 1.0,
            "runs": 3,
            "run_seconds": float(np.mean(tmc_runs_s)),
        },
        "tmc_verified": {
            "configs": [list(v.config) for v in verified],
            "cost_vs_es": float(np.mean([v.cost for v in verified])) / es_cost - 1.0,
            "cost_vs_es_max": float(np.max([v.cost for v in verified])) / es_cost - 1.0,
            "runs": 3 + float(np.mean([v.runs for v in verified])),
            "run_seconds": float(np.mean(tmc_runs_s))
            + float(np.mean([v.run_seconds for v in verified])),
        },
        "bo": {
            "cost_vs_es": float(np.mean([cost[b.chosen] for b in bo])) / es_cost - 1.0,
            "runs": float(np.mean([b.runs for b in bo])),
            "run_seconds": float(np.mean([b.run_seconds for b in bo])),
        }
        if bo
        else None,
        "rand": {"cost_vs_es": float(cost.mean()) / es_cost - 1.0, "runs": 0, "run_seconds": 0.0},
    }
    return WorkloadData(
        name=w.name,
        vcpus=w.vcpus,
        footprint_bytes=w.footprint_bytes,
        hourly=hourly,
        truth_seconds=seconds,
        truth_cost=cost,
        tmc_seconds=tmc_seconds,
        tmc_cost=tmc_cost,
        predicted_cost=predicted_cost,
        dram_bytes=dram,
        slow_bytes=slow,
        ways=way_col,
        report=report,
    )


@dataclass(frozen=True)
class Verified:
    config: tuple[float, int]
    cost: float  # true cost of the final choice, tmc's placement
    runs: int
    run_seconds: float


def verified_choice(
    predictor: Predictor,
    prices: PriceProfile,
    grid: Grid,
    machine: MachineShape,
    prep: Any,
    hourly: FloatArray,
    seed: int,
) -> Verified:
    """tmc with verification runs (`model.verification`), idle cluster, T = 0: run the workload
    where each recommendation asks (the simulated time of tmc's placement there, with one run's
    noise), until it asks for nothing more; the true cost of the final choice."""
    rng = np.random.default_rng(1000 + seed)
    observations: list[Observation] = []
    spent = 0.0

    simulated: dict[tuple[float, int], float] = {}

    def run(r: float, k: int) -> float:
        # The simulator is deterministic: a configuration measured during the loop and chosen at
        # its end is simulated once.
        if (r, k) not in simulated:
            placed = run_many(prep, [(r, k, predictor.placement(r, k))])[0]
            simulated[(r, k)] = float(placed.wall_seconds)
        return simulated[(r, k)]

    while True:
        rec = recommend(
            predictor,
            machine=machine,
            prices=prices,
            grid=grid,
            threshold=0.0,
            observations=observations,
        )
        v = rec.verification
        if v is None or v.next_slow_ratio is None or v.next_llc_ways is None:
            break
        seconds = run(v.next_slow_ratio, v.next_llc_ways) * (
            1.0 + RUN_NOISE * rng.standard_normal()
        )
        spent += seconds
        observations.append(
            Observation(slow_ratio=v.next_slow_ratio, llc_ways=v.next_llc_ways, seconds=seconds)
        )
    c = rec.chosen.configuration
    i = grid.slow_ratios.index(c.slow_ratio) * len(grid.llc_ways) + grid.llc_ways.index(c.llc_ways)
    return Verified(
        (c.slow_ratio, c.llc_ways),
        float(hourly[i]) * run(c.slow_ratio, c.llc_ways) / 3600.0,
        len(observations),
        spent,
    )


def _config(ratios: FloatArray, ways: IntArray, i: int) -> list[float]:
    return [float(ratios[i // len(ways)]), int(ways[i % len(ways)])]


# -- policies for the cluster -------------------------------------------------------------------


@dataclass(frozen=True)
class PolicySet:
    """Per workload: the menu the cluster sees, the true cost of each option, and the chooser."""

    menus: list[Menu]
    costs: list[FloatArray]
    make: Callable[[int], Placer]  # seed -> placer
    window: int = 1


def _demand(d: WorkloadData, idx: IntArray) -> IntArray:
    return np.stack(
        [np.full(len(idx), d.vcpus), d.dram_bytes[idx], d.slow_bytes[idx], d.ways[idx]], axis=1
    ).astype(np.int64)


def _fractions(demand: IntArray, arch: Architecture) -> FloatArray:
    """D_i of Algorithm 1: demand as a share of one machine (a pool: its per-node share)."""
    out: FloatArray = demand / arch.capacity().astype(np.float64)
    return out


def static_policy(data: Sequence[WorkloadData], choice: Sequence[int], tmc: bool) -> PolicySet:
    menus, costs = [], []
    for d, i in zip(data, choice, strict=True):
        idx = np.asarray([i], dtype=np.int64)
        sec, cost = (d.tmc_seconds, d.tmc_cost) if tmc else (d.truth_seconds, d.truth_cost)
        menus.append(Menu(_demand(d, idx), sec[idx]))
        costs.append(cost[idx])

    def make(seed: int) -> Placer:
        return online_placer(lambda w, u: 0)

    return PolicySet(menus, costs, make)


def random_policy(data: Sequence[WorkloadData]) -> PolicySet:
    menus = [Menu(_demand(d, np.arange(77)), d.truth_seconds) for d in data]
    costs = [d.truth_cost for d in data]

    def make(seed: int) -> Placer:
        rng = np.random.default_rng(10_000 + seed)
        return online_placer(lambda w, u: int(rng.integers(0, 77)))

    return PolicySet(menus, costs, make)


def _within(d: WorkloadData, threshold: float) -> IntArray:
    sel = algorithm1(
        d.predicted_cost,
        d.predicted_cost,
        np.ones(77, dtype=bool),
        np.zeros((77, 4)),
        np.zeros(4),
        threshold,
    )
    assert sel is not None
    return np.sort(sel.within)


@dataclass(frozen=True)
class CandidatesWithinT:
    """Per workload, the configurations Algorithm 1 keeps within T on an idle cluster (computed
    once: predicted costs do not change): the menu the cluster sees, their true costs, their
    predicted costs, their demand as shares of a machine (D_i) and all of them acceptable."""

    menus: list[Menu]
    costs: list[FloatArray]
    predicted: list[FloatArray]
    fractions: list[FloatArray]
    acceptable: list[NDArray[np.bool_]]

    def algorithm1(self, w: int, utilization: FloatArray, threshold: float) -> Any:
        """Algorithm 1 over workload w's candidates at this utilization (its `Selection`)."""
        sel = algorithm1(
            self.predicted[w],
            self.predicted[w],
            self.acceptable[w],
            self.fractions[w],
            utilization,
            threshold,
        )
        assert sel is not None
        return sel


def candidates_within(
    data: Sequence[WorkloadData], threshold: float, arch: Architecture
) -> CandidatesWithinT:
    idxs = [_within(d, threshold) for d in data]
    menus = [Menu(_demand(d, i), d.tmc_seconds[i]) for d, i in zip(data, idxs, strict=True)]
    return CandidatesWithinT(
        menus=menus,
        costs=[d.tmc_cost[i] for d, i in zip(data, idxs, strict=True)],
        predicted=[d.predicted_cost[i] for d, i in zip(data, idxs, strict=True)],
        fractions=[_fractions(m.demand, arch) for m in menus],
        acceptable=[np.ones(len(i), dtype=bool) for i in idxs],
    )


def tmc_policy(data: Sequence[WorkloadData], threshold: float, arch: Architecture) -> PolicySet:
    """Algorithm 1 at each arrival with the cluster's live utilization, over the candidates
    within T."""
    within = candidates_within(data, threshold, arch)

    def choose(w: int, u: FloatArray) -> int:
        return int(within.algorithm1(w, u, threshold).chosen)

    def make(seed: int) -> Placer:
        return online_placer(choose)

    return PolicySet(within.menus, within.costs, make)


def batch_policy(
    data: Sequence[WorkloadData], threshold: float, arch: Architecture, settings: Settings
) -> PolicySet:
    """Windows of requests, configured and placed jointly by CP-SAT (model.batch)."""
    base = tmc_policy(data, threshold, arch)
    pred = [d.predicted_cost[_within(d, threshold)] for d in data]
    fracs = [_fractions(m.demand, arch) for m in base.menus]
    stats = {"windows": 0, "fallbacks": 0}

    def placer(pending: Sequence[int], state: ClusterState) -> list[tuple[int, int] | None]:
        u = state.utilization()
        reqs = []
        for w in pending:
            sel = algorithm1(pred[w], pred[w], np.ones(len(pred[w]), bool), fracs[w], u, threshold)
            assert sel is not None
            reqs.append(BatchRequest(state.menus[w].demand, pred[w], sel.chosen))
        # Machines in the state's node order, so that the fallback is first fit in that order.
        order = state.order
        machines = Machines(
            free=state.free[order],
            in_use=state.vms[order] > 0,
            pool=state.rack[order] if arch.pooled else None,
            pool_free=state.pool_free if arch.pooled else None,
        )
        res = solve(reqs, machines, time_limit_seconds=settings.batch_time_limit)
        stats["windows"] += 1
        stats["fallbacks"] += res.status == "fallback"
        out: list[tuple[int, int] | None] = []
        for w, a in zip(pending, res.assignments, strict=True):
            if a is None:
                out.append(None)
                continue
            m = int(order[a[1]])
            state.place(m, state.menus[w].demand[a[0]])
            out.append((a[0], m))
        return out

    def make(seed: int) -> Placer:
        return placer

    return PolicySet(base.menus, base.costs, make, window=settings.batch_window)


# -- cluster study ------------------------------------------------------------------------------


def mixes_of(names: Sequence[str], limit: int | None) -> list[tuple[int, ...]]:
    size = min(4, len(names))
    out = list(itertools.combinations(range(len(names)), size))
    return out if limit is None else out[:limit]


def compact(
    policy: PolicySet,
    arch: Architecture,
    mix: tuple[int, ...],
    rate: float,
    settings: Settings,
    seeds: int,
) -> dict[str, Any]:
    sizes, costs = [], []
    for seed in range(seeds):
        arr = poisson_arrivals(settings.arrivals, mix, rate, seed)

        def simulate(n: int, stop_on_reject: bool, arr: Any = arr, seed: int = seed) -> Any:
            return run_cluster(
                arch,
                n,
                arr,
                policy.menus,
                policy.make(seed),
                order_seed=seed,
                window=policy.window,
                stop_on_reject=stop_on_reject,
            )

        # Upper bound: every VM present at once needs at most its own machine's CPU share.
        upper = max(4, int(settings.concurrency * 1.5 / 2))
        n, run = compact_run(simulate, upper=upper)
        placed = run.options >= 0
        per_vm = [
            float(policy.costs[int(w)][int(o)])
            for w, o in zip(arr.workloads[placed], run.options[placed], strict=True)
        ]
        sizes.append(n)
        costs.append(float(np.mean(per_vm)))
    return {
        "compact_p90": float(np.percentile(sizes, 90)),
        "compact_sizes": sizes,
        "mean_cost": float(np.mean(costs)),
    }


def build_policies(
    name: str, data: Sequence[WorkloadData], arch: Architecture, settings: Settings
) -> PolicySet:
    if name == "es":
        return static_policy(data, [int(np.argmin(d.truth_cost)) for d in data], tmc=False)
    if name == "naive":
        return static_policy(data, [int(np.argmin(d.predicted_cost)) for d in data], tmc=True)
    if name == "rand":
        return random_policy(data)
    if name.startswith("tmc-"):
        return tmc_policy(data, float(name[4:]) / 100, arch)
    if name.startswith("batch-"):
        return batch_policy(data, float(name[6:]) / 100, arch, settings)
    raise ValueError(name)


# -- the whole benchmark ------------------------------------------------------------------------

_JOB_CONTEXT: dict[str, tuple[dict[str, list[WorkloadData]], list[str], Settings]] = {}
_CACHE: dict[str, Path | None] = {}


def _cluster_job(job: tuple[Architecture, tuple[int, ...], str, int]) -> dict[str, Any]:
    data, names, settings = _JOB_CONTEXT["job"]
    arch, mix, pol, seeds = job
    d = data["pool" if arch.pooled else "local"]
    # Arrival rate: the target concurrency under exhaustive search's run times, same for every
    # policy of the mix (a slower policy then holds more VMs at once, as it would).
    es_seconds = float(np.mean([d[i].truth_seconds[np.argmin(d[i].truth_cost)] for i in mix]))
    rate = settings.concurrency / es_seconds
    t0 = time.monotonic()
    res = compact(build_policies(pol, d, arch, settings), arch, mix, rate, settings, seeds)
    return {
        "architecture": arch.name,
        "mix": [names[i] for i in mix],
        "policy": pol,
        **res,
        "seconds": time.monotonic() - t0,
    }


def run_benchmark(
    settings: Settings,
    out_dir: Path,
    progress: Progress | None = None,
    cache: Path | None = None,
) -> dict[str, Any]:
    """The whole evaluation; with `cache`, per-workload studies are read from (and written to)
    that folder (`bench.study_cache`), and the JSON says so."""
    started = time.monotonic()
    _CACHE["folder"] = cache
    prices = DEFAULT_PRICE_PROFILE
    names = list(settings.workloads)
    archs = [architecture(int(a.split("G-")[0]), a.split("G-")[1]) for a in settings.architectures]
    kinds_needed = {"pool" if a.pooled else "local" for a in archs} | {"local"}

    def task(label: str, total: int) -> Callable[[], None]:
        if progress is None:
            return lambda: None
        t = progress.add_task(label, total=total)
        return lambda: progress.advance(t)

    # Every per-workload study (the cluster's, and the penalty paths' extra workloads and hosts)
    # is independent: one process per core, longest first.
    study_jobs: list[tuple[str, str, int, int]] = []
    for kind in sorted(kinds_needed):
        for n in names:
            seeds, bo = (
                (settings.profile_seeds, settings.bo_repeats)
                if kind == "local"
                else (settings.pool_profile_seeds, settings.pool_bo_repeats)
            )
            study_jobs.append((kind, n, seeds, bo))
    study_jobs += [
        (kind, n, settings.paths_profile_seeds, 0)
        for kind in settings.paths_hosts
        for n in settings.paths_workloads
        if not (kind in kinds_needed and n in names)
    ]
    step = task("workloads (ground truth, profiles, BO)", len(study_jobs))
    _JOB_CONTEXT["study"] = ({}, [], settings)
    studied: dict[tuple[str, str], WorkloadData] = {}
    for key, d in pool_unordered(_study_job, study_jobs, settings.processes):
        studied[key] = d
        step()
    data: dict[str, list[WorkloadData]] = {
        kind: [studied[kind, n] for n in names] for kind in sorted(kinds_needed)
    }
    paths = paths_study(settings, data, studied)
    t_workloads = time.monotonic() - started

    mixes = mixes_of(names, settings.mixes)
    main = architecture(
        int(settings.main_architecture.split("G-")[0]), settings.main_architecture.split("G-")[1]
    )
    main_policies = ["es", "naive", "rand", "tmc-0", "tmc-2.5", "tmc-7.5"]
    batch_mixes = mixes[: settings.batch_mixes]
    jobs: list[tuple[Architecture, tuple[int, ...], str, int]] = []
    # The CP-SAT jobs are the longest: first, so that they overlap with the rest.
    for mix in batch_mixes:
        jobs.append((main, mix, "batch-2.5", settings.batch_seeds))
    for mix in mixes:
        jobs += [(main, mix, p, settings.order_seeds) for p in main_policies]
    for a in archs:
        if a.name == main.name:
            continue
        for mix in mixes[:: settings.sweep_mix_stride]:
            jobs += [(a, mix, p, settings.sweep_seeds) for p in settings.sweep_policies]

    step = task("cluster compactions", len(jobs))
    _JOB_CONTEXT["job"] = (data, names, settings)
    cluster: list[dict[str, Any]] = []
    # The cluster loop is pure Python: one process per core. Forked workers inherit the
    # workload data through _JOB_CONTEXT.
    for row in pool_unordered(_cluster_job, jobs, settings.processes):
        cluster.append(row)
        step()
    t_cluster = time.monotonic() - started - t_workloads
    order = {(j[0].name, tuple(names[i] for i in j[1]), j[2]): k for k, j in enumerate(jobs)}
    cluster.sort(key=lambda r: order[(r["architecture"], tuple(r["mix"]), r["policy"])])

    results = {
        "schema": "tmc.bench/v1",
        "quick": settings.quick,
        "settings": {k: v for k, v in settings.__dict__.items()},
        "price_profile": prices.key,
        "study_cache": None if cache is None else str(cache),
        "workloads": {kind: [d.report for d in ds] for kind, ds in data.items()},
        "paths": paths,
        "cluster": cluster,
        "duration_seconds": {
            "workloads": t_workloads,
            "cluster": t_cluster,
            "total": time.monotonic() - started,
        },
    }
    results["summary"] = summarise(results, main.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "evaluation-quick" if settings.quick else "evaluation"
    (out_dir / f"{stem}.json").write_text(json.dumps(results, indent=1, default=_json))
    from bench.report import write_report  # noqa: PLC0415 (matplotlib loads only here)

    write_report(results, out_dir, stem)
    (out_dir / f"{stem}-paths.md").write_text(paths_markdown(results))
    return results


def paths_study(
    settings: Settings,
    data: dict[str, list[WorkloadData]],
    studied: dict[tuple[str, str], WorkloadData],
) -> dict[str, list[dict[str, Any]]]:
    """Per host kind, both penalty paths of every workload in `paths_workloads`; the studies
    already run for the cluster are reused (same host, more seeds)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for kind in settings.paths_hosts:
        known = {d.name: d.report for d in data.get(kind, [])}
        out[kind] = [
            known[n] if n in known else studied[kind, n].report for n in settings.paths_workloads
        ]
    return out


def _study_job(job: tuple[str, str, int, int]) -> tuple[tuple[str, str], WorkloadData]:
    kind, name, seeds, bo = job
    settings = _JOB_CONTEXT["study"][2]
    w = _trim(workload(name), settings.trace_accesses)
    host = _hosts()[kind]
    parts = (
        "evaluation",
        w.model_dump_json(),
        host.model_dump_json(),
        repr(DEFAULT_PRICE_PROFILE),
        f"{seeds} {bo}",
    )
    return (kind, name), cached(
        _CACHE.get("folder"),
        parts,
        lambda: study_workload(w, host, DEFAULT_PRICE_PROFILE, seeds, bo),
    )


def paths_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per path: mean and worst cost against exhaustive search, mean MAPE and worst error."""
    out: dict[str, dict[str, Any]] = {}
    for path in ("paper", "per_structure"):
        p = [r["paths"][path] for r in rows]
        fig: dict[str, Any] = {
            "cost_mean": float(np.mean([x["cost_vs_es"] for x in p])),
            "cost_worst": float(np.max([x["cost_vs_es"] for x in p])),
            "cost_worst_seed": float(np.max([x["cost_vs_es_max"] for x in p])),
            "mape": float(np.mean([x["prediction_mape"] for x in p])),
            "max_error": float(np.max([x["prediction_max_error"] for x in p])),
        }
        fig["meets"] = {k: fig[k] <= v for k, v in PATH_TARGETS.items()}
        out[path] = fig
    return out


def paths_markdown(results: dict[str, Any]) -> str:
    """The per-workload study of both penalty paths, as a markdown page."""
    lines = [
        "# Penalty paths: the paper's pair per workload against per-structure penalties",
        "",
        "Cost of the chosen configuration against exhaustive search (mean over profile seeds),"
        " and run-time prediction error over the 77 configurations with the model's own"
        " placement (seed 0). Targets: cost within "
        f"{PATH_TARGETS['cost_mean']:.1%} on average and {PATH_TARGETS['cost_worst']:.0%} in the"
        f" worst workload; MAPE ≤ {PATH_TARGETS['mape']:.0%}, max ≤"
        f" {PATH_TARGETS['max_error']:.0%}.",
        "",
    ]
    for kind, rows in results["paths"].items():
        host = rows[0]["host"] if rows else kind
        lines += [
            f"## {kind} (`{host}`)",
            "",
            "| workload | paper: cost vs ES | per-structure: cost vs ES | paper: MAPE / max"
            " | per-structure: MAPE / max |",
            "|---|---|---|---|---|",
        ]
        for r in rows:
            a, b = r["paths"]["paper"], r["paths"]["per_structure"]
            lines.append(
                f"| {r['workload']} | {a['cost_vs_es']:+.2%} | {b['cost_vs_es']:+.2%}"
                f" | {a['prediction_mape']:.1%} / {a['prediction_max_error']:.1%}"
                f" | {b['prediction_mape']:.1%} / {b['prediction_max_error']:.1%} |"
            )
        summ = results["summary"]["paths"][kind]
        for path in ("paper", "per_structure"):
            f = summ[path]
            missed = [k for k, ok in f["meets"].items() if not ok]
            lines.append(
                f"| **{path}** | mean {f['cost_mean']:+.2%}, worst {f['cost_worst']:+.2%} | |"
                f" MAPE {f['mape']:.1%}, max {f['max_error']:.1%} |"
                f" {'meets all targets' if not missed else 'misses: ' + ', '.join(missed)} |"
            )
        lines.append("")
    return "\n".join(lines)


def _json(o: object) -> object:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _norm(rows: list[dict[str, Any]], arch: str, policy: str, key: str) -> list[float]:
    """Per mix, policy's figure divided by exhaustive search's for the same mix, over the same
    seeds (a policy run on fewer seeds is compared with ES's first ones)."""
    es = {tuple(r["mix"]): r for r in rows if r["architecture"] == arch and r["policy"] == "es"}
    out = []
    for r in rows:
        if r["architecture"] != arch or r["policy"] != policy or tuple(r["mix"]) not in es:
            continue
        ref = es[tuple(r["mix"])]
        if key == "compact_p90":
            base = float(np.percentile(ref["compact_sizes"][: len(r["compact_sizes"])], 90))
        else:
            base = ref[key]
        out.append(r[key] / base)
    return out


def summarise(results: dict[str, Any], main_arch: str) -> dict[str, Any]:
    local = results["workloads"]["local"]
    tmc_cost = float(np.mean([w["tmc"]["cost_vs_es"] for w in local]))
    bo_cost = float(np.mean([w["bo"]["cost_vs_es"] for w in local]))
    tmc_runs = float(np.mean([w["tmc"]["runs"] for w in local]))
    verified = [w["tmc_verified"] for w in local if "tmc_verified" in w]
    bo_runs = float(np.mean([w["bo"]["runs"] for w in local]))
    es_runs = float(np.mean([w["es"]["runs"] for w in local]))
    rows = results["cluster"]
    cluster: dict[str, Any] = {}
    for arch in sorted({r["architecture"] for r in rows}):
        cluster[arch] = {}
        for pol in sorted({r["policy"] for r in rows if r["architecture"] == arch}):
            size = _norm(rows, arch, pol, "compact_p90")
            cost = _norm(rows, arch, pol, "mean_cost")
            if size:
                cluster[arch][pol] = {
                    "compact_vs_es": float(np.mean(size)) - 1.0,
                    "cost_vs_es": float(np.mean(cost)) - 1.0,
                    "mixes": len(size),
                }
    main = cluster.get(main_arch, {})
    t25 = main.get("tmc-2.5", {})
    return {
        "paths": {kind: paths_summary(rows) for kind, rows in results.get("paths", {}).items()},
        "tmc_cost_vs_es": tmc_cost,
        "bo_cost_vs_es": bo_cost,
        "rand_cost_vs_es": float(np.mean([w["rand"]["cost_vs_es"] for w in local])),
        "tmc_runs": tmc_runs,
        "bo_runs": bo_runs,
        "es_runs": es_runs,
        "search_es_over_tmc": es_runs / tmc_runs,
        "search_bo_over_tmc": bo_runs / tmc_runs,
        "tmc_verified_cost_vs_es": float(np.mean([v["cost_vs_es"] for v in verified]))
        if verified
        else None,
        "tmc_verified_cost_vs_es_max": float(np.max([v["cost_vs_es_max"] for v in verified]))
        if verified
        else None,
        "tmc_verified_runs": float(np.mean([v["runs"] for v in verified])) if verified else None,
        "cluster": cluster,
        "targets": {
            "cost_within_2pct": tmc_cost <= 0.02,
            "3x_fewer_runs_than_bo_at_equal_or_better_cost": bo_runs / tmc_runs >= 3
            and tmc_cost <= bo_cost + 1e-12,
            "compact_17pct_smaller_for_2_5pct_cost": bool(t25)
            and t25["compact_vs_es"] <= -0.17
            and t25["cost_vs_es"] <= 0.025,
        },
    }


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
