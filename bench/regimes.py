"""The regime map: where packing (Algorithm 1 at T > 0) shrinks the cluster, and at what true cost.

Whether trading a little cost for a lighter configuration frees machines depends on which resource
binds, and that depends on prices and VM shapes, not on the model. The map replays the cluster
study (`sim.cluster`, compaction by bisection, first fit in a random node order) over:

- the price source: `gce-n1` (the default profile) and `msv2-lsq` (the paper's least-squares fit
  over Azure's Msv2 list prices, `model.price_profiles`);
- the LLC-way price, through the LLC's die-area share (0.2, and 0.03: ways ~7x cheaper);
- the slow:DRAM price ratio per GiB (0.4 as the paper, and 0.2);
- the VM shape: the paper's workloads as they are, and memory-heavy ones (one vCPU running the
  same per-vCPU program on inputs twice as large, re-simulated: 3-9 GiB per vCPU);
- the lifetime model: a VM holds its resources for its true run time in its configuration (a
  batch job: slowness is paid in occupancy), or for a fixed time, its workload's run time under
  exhaustive search (a service: slowness costs its owner, not the cluster's capacity).

Per regime and policy: the compact cluster and the mean true cost per VM against exhaustive
search on the same arrivals and node orders, the share of decisions whose true cost is within T of
exhaustive search's, and the binding resource (highest mean utilization at the compact size).
Policies: `es` (the true cost optimum, oracle placement), `tmc-2.5` (the paper's Algorithm 1 on
predicted costs), `tmc-2.5c` (`model.select.confident_algorithm1`: each candidate judged by the
uncertainty of its difference from the cheapest predicted, `model.confidence.ErrorTerms`, at the
band level learnt for each workload on the *other* workloads: `calibrate_confidence`),
`tmc-2.5v` (the same after verification runs, chosen as the service chooses them: `verified`;
the default policy) and `tmc-2.5s` (the default policy deciding in a blend of list prices and
the mix's shadow prices, `model.shadow_prices`; true costs stay at list prices). tmc's VMs run
with tmc's own placement plan; every cost and duration is the simulator's. Per regime the map
also gives the model floor: the share of decisions for workloads whose cheapest predicted
configuration is already more than T over the true optimum (`model_floor`).

Per workload the model is fitted once (profile seed 100), which is what one tenant would see; the
map varies prices and shapes, not the profiling noise (the evaluation's per-workload study does).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bench.pools import pool_map
from bench.studies import (
    FloatArray,
    IntArray,
    Regime,
    Study,
    confident_candidates,
    hourly,
    study_options,
)
from bench.study_cache import cached
from model.capacity import MachineKind, WorkloadClass
from model.confidence import DEFAULT_CONFIDENCE, paired_bounds, prediction_interval
from model.fit import fit
from model.grid import paper_grid
from model.predict import Predictor
from model.price_profiles import price_profile
from model.pricing import PriceProfile
from model.resources import GIB, split_memory
from model.select import algorithm1, confident_algorithm1
from model.shadow_prices import DEFAULT_BLEND, ShadowPrices, shadow_prices
from model.verification import (
    RUN_NOISE,
    band_points,
    grid_correction,
    next_point,
)
from sim.catalog import TABLE5, workload
from sim.cluster import (
    Architecture,
    Menu,
    architecture,
    compact_run,
    online_placer,
    poisson_arrivals,
    run_cluster,
)
from sim.engine import prepare
from sim.host import ground_truth_grid, run_many
from sim.machine import optane_host
from sim.profile import NoiseSpec, reference_bundle
from sim.workload import Workload

RESOURCES = ("cpu", "dram", "slow", "llc")
THRESHOLD = 0.025
# The promise's level: a band candidate not kept at it takes a confirmation run.
Z_PROMISE = NormalDist().inv_cdf(DEFAULT_CONFIDENCE)
POLICIES = ("es", "tmc-2.5", "tmc-2.5c", "tmc-2.5v", "tmc-2.5s")


@dataclass(frozen=True)
class MapSettings:
    workloads: tuple[str, ...] = TABLE5
    # Shorter traces than the evaluation's 2 M accesses (the time budget: 12 re-simulated
    # workloads); the same length for every policy, so the comparison is like for like.
    trace_accesses: int | None = 600_000
    sources: tuple[str, ...] = ("gce-n1", "msv2-lsq")
    llc_shares: tuple[float, ...] = (0.2, 0.03)
    slow_ratios: tuple[float, ...] = (0.4, 0.2)
    shapes: tuple[str, ...] = ("paper", "memory-heavy")
    lifetimes: tuple[str, ...] = ("run", "fixed")
    architecture: str = "24G-128L"
    arrivals: int = 1200
    concurrency: float = 120.0
    mix_stride: int = 3  # every third of the C(6, 4) = 15 mixes
    seeds: int = 1
    # Regimes whose verdict for the default policy turns on a machine or two (larger than ES at
    # all, or a gain within 3 points of the 5 % "packing pays" line) are re-measured over this
    # many arrival seeds and node orders (ES and the default policy only); 0: no check.
    check_seeds: int = 5
    processes: int = 2
    # the held-out levels (`calibrate_confidence`) are used; this one only by callers of
    # build_policy that pass no per-workload levels
    confidence: float = DEFAULT_CONFIDENCE
    planning: bool = True  # also measure the OR-Tools planners (bench/planning.py)
    selected: tuple[str, ...] = ()  # regime keys; empty: every combination
    quick: bool = False

    def regimes(self) -> list[Regime]:
        """Every combination with the run-time lifetime; the fixed lifetime (which changes only
        how long tmc's VMs hold their resources) at the first slow:DRAM ratio only."""
        out = []
        for src, llc, slow, shape in itertools.product(
            self.sources, self.llc_shares, self.slow_ratios, self.shapes
        ):
            for life in self.lifetimes:
                if life == "run" or slow == self.slow_ratios[0]:
                    out.append(Regime(src, llc, slow, shape, life))
        if self.selected:
            out = [r for r in out if r.key in self.selected]
        return out


FULL_MAP = MapSettings()
QUICK_MAP = MapSettings(
    workloads=("graph500", "memcached", "canneal", "xsbench"),
    trace_accesses=60_000,
    llc_shares=(0.2, 0.03),
    slow_ratios=(0.4,),
    sources=("msv2-lsq",),
    lifetimes=("run",),
    arrivals=300,
    concurrency=30.0,
    mix_stride=1,
    seeds=1,
    check_seeds=0,
    processes=1,
    quick=True,
)


# The ten regimes that tell where packing pays, on the evaluation's trace length, one seed: what
# fits the time budget on a shared two-core machine (docs/evaluation.md).
REDUCED_MAP = MapSettings(
    trace_accesses=None,
    seeds=1,
    slow_ratios=(0.4, 0.2),
    selected=(
        "gce-n1/llc0.2/slow0.4/paper/run",
        "gce-n1/llc0.03/slow0.4/paper/run",
        "msv2-lsq/llc0.2/slow0.4/memory-heavy/run",
        "msv2-lsq/llc0.03/slow0.4/memory-heavy/run",
        "msv2-lsq/llc0.2/slow0.4/paper/run",
        "gce-n1/llc0.2/slow0.4/memory-heavy/run",
        "msv2-lsq/llc0.2/slow0.4/memory-heavy/fixed",
        "gce-n1/llc0.03/slow0.4/paper/fixed",
        "gce-n1/llc0.2/slow0.2/memory-heavy/run",
        "msv2-lsq/llc0.03/slow0.4/paper/run",
    ),
)


# -- VM shapes and per-workload ground truth ----------------------------------------------------


def reshape(w: Workload, shape: str) -> Workload:
    """`paper`: as given. `memory-heavy`: one vCPU running the same per-vCPU share of the program
    on data structures twice as large (e.g. a bigger input of the same code)."""
    if shape == "paper":
        return w
    if shape != "memory-heavy":
        raise ValueError(f"unknown VM shape {shape!r}")
    return w.model_copy(
        update={
            "vcpus": 1,
            "instructions": max(1, w.instructions // w.vcpus),
            "structures": [
                s.model_copy(update={"size_mib": 2.0 * s.size_mib}) for s in w.structures
            ],
        }
    )


def study(name: str, shape: str, trace_accesses: int | None) -> Study:
    host = optane_host()
    w = reshape(workload(name), shape)
    if trace_accesses is not None:
        w = w.model_copy(
            update={
                "trace_accesses": trace_accesses,
                "warmup_accesses": max(trace_accesses // 5, 1000),
            }
        )
    grid = paper_grid()
    ratios, ways = np.asarray(grid.slow_ratios), np.asarray(grid.llc_ways, dtype=np.int64)
    truth = ground_truth_grid(w, host, seed=0)
    bundle = reference_bundle(w, host, NoiseSpec(), seed=100)
    model = fit(bundle)
    predictor = Predictor(model)
    pred = predictor.predict(ratios, ways)
    interval = prediction_interval(pred, model.diagnostics)
    prep = prepare(w, host, 0, list(ways))
    runs = run_many(
        prep, [(float(r), int(k), predictor.placement(r, k)) for r in ratios for k in ways]
    )
    splits = [split_memory(w.footprint_bytes, float(r)) for r in ratios]
    n_w = len(ways)
    return Study(
        name=w.name,
        vcpus=w.vcpus,
        footprint_bytes=w.footprint_bytes,
        truth_seconds=truth.seconds.ravel(),
        tmc_seconds=np.asarray([x.wall_seconds for x in runs]),
        predicted_seconds=pred.seconds.ravel(),
        sigma=interval.sigma.ravel(),
        terms=interval.terms,
        dram_bytes=np.repeat(np.asarray([d for d, _ in splits], dtype=np.int64), n_w),
        slow_bytes=np.repeat(np.asarray([s for _, s in splits], dtype=np.int64), n_w),
        ways=np.tile(ways, len(ratios)),
    )


# -- policies -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    menus: list[Menu]
    true_cost: list[FloatArray]  # per workload, per menu option
    choose: Callable[[int, FloatArray], int]


def _demand(s: Study) -> IntArray:
    n = len(s.ways)
    return np.stack([np.full(n, s.vcpus), s.dram_bytes, s.slow_bytes, s.ways], axis=1).astype(
        np.int64
    )


def build_policy(
    name: str,
    studies: Sequence[Study],
    regime: Regime,
    arch: Architecture,
    confidence: float | dict[str, float],
    decide_in: PriceProfile | None = None,
) -> Policy:
    """A policy's menus and choosers for one regime. tmc decides in `decide_in` (default: the
    regime's list prices); true costs are always the list prices'."""
    prices = regime_prices(regime)
    cap = arch.capacity().astype(np.float64)
    menus, costs, choosers = [], [], []
    for s in studies:
        level = confidence if isinstance(confidence, float) else confidence[s.name]
        z = NormalDist().inv_cdf(level)
        h = hourly(s, prices)
        truth = h * s.truth_seconds / 3600.0
        es = int(np.argmin(truth))
        fixed = np.full(len(h), s.truth_seconds[es])
        if name == "es":
            seconds = s.truth_seconds if regime.lifetime == "run" else fixed
            menus.append(Menu(_demand(s)[[es]], seconds[[es]]))
            costs.append(truth[[es]])
            choosers.append(lambda u: 0)
            continue
        seconds = s.tmc_seconds if regime.lifetime == "run" else fixed
        hd = h if decide_in is None else hourly(s, decide_in)
        pred = hd * s.predicted_seconds / 3600.0
        frac = _demand(s) / cap
        n = len(h)
        ok = np.ones(n, dtype=bool)
        predicted_seconds = s.predicted_seconds
        if name == "tmc-2.5":
            first = algorithm1(pred, pred, ok, frac, np.zeros(4), THRESHOLD)
        elif name in ("tmc-2.5c", "tmc-2.5v"):
            sigma = s.sigma
            if name == "tmc-2.5v":
                predicted_seconds, sigma, _ = verified(s, hd, z, regime)
                pred = hd * predicted_seconds / 3600.0
            first = confident_candidates(s, pred, sigma, predicted_seconds, z, THRESHOLD, frac)
        else:
            raise ValueError(name)
        assert first is not None
        # The first round does not depend on the cluster: the menu is the candidates it keeps
        # (the cheapest predicted among them), and each arrival runs the second round over them.
        keep = np.sort(first.within)
        menus.append(Menu(_demand(s)[keep], seconds[keep]))
        costs.append((h * s.tmc_seconds / 3600.0)[keep])
        sub_ok = np.ones(len(keep), dtype=bool)
        if name == "tmc-2.5":
            choosers.append(_classic(pred[keep], sub_ok, frac[keep]))
        else:
            # Every kept candidate passed the first round: the second ranks them (its bound is
            # the prediction itself, so none is dropped again).
            choosers.append(
                _confident(pred[keep], pred[keep], predicted_seconds[keep], sub_ok, frac[keep])
            )
    return Policy(menus, costs, lambda w, u: choosers[w](u))


def mix_shadow_prices(
    studies: Sequence[Study],
    mix: Sequence[int],
    regime: Regime,
    arch: Architecture,
    levels: dict[str, float],
) -> ShadowPrices:
    """Shadow prices of the mix's packing (`model.shadow_prices`): each workload of the mix
    arrives at the same rate and may run in any configuration the default policy keeps at list
    prices, for its corrected predicted time (what the service knows, not the truth)."""
    prices = regime_prices(regime)
    classes = []
    for i in mix:
        s = studies[i]
        z = NormalDist().inv_cdf(levels[s.name])
        h = hourly(s, prices)
        seconds, sigma, _ = verified(s, h, z, regime)
        cost = h * seconds / 3600.0
        kept = confident_candidates(s, cost, sigma, seconds, z, THRESHOLD).within
        classes.append(WorkloadClass(s.name, 1.0, study_options(s, kept, seconds, cost)))
    # The simulator's machine and the planner's kind have the same fields.
    return shadow_prices(classes, MachineKind(**dataclasses.asdict(arch)), prices)


def verified(
    s: Study, hourly_price: FloatArray, z: float, regime: Regime
) -> tuple[FloatArray, FloatArray, int]:
    """The default policy's verification runs (`model.verification`), in the simulator, chosen
    as the service chooses them (`next_point`): the cost optimum's configuration; once it is
    measured, a band candidate the promise's level would not keep (`confirmation_point`), then
    a lighter configuration that the prediction puts within T but the band's bound does not
    (`packing_point`); else the one whose run is expected to save the most. Both axes
    of the grid are corrected after each run, and each measured configuration carries its
    measured time, as the service corrects (`grid_correction`), at most the budget. A run's
    time is the simulated time of tmc's placement there with one run's noise (`RUN_NOISE`,
    seeded per workload and regime, the same for either lifetime: the runs do not depend on how
    long the cluster holds a VM). Unlike the service, the loop does not start from the reference
    runs' measured times and may run there (docs/evaluation.md, "Weaker than it looks"). Returns
    the corrected predicted times, their relative standard deviations, and the number of runs."""
    grid = paper_grid()
    ratios = np.asarray(grid.slow_ratios)
    ways = np.asarray(grid.llc_ways, dtype=np.int64)
    shape = (len(ratios), len(ways))
    rng = np.random.default_rng(zlib.crc32(f"{_run_twin(regime)}/{s.name}".encode()))
    n = len(s.predicted_seconds)
    demand = _demand(s).astype(np.float64)
    points: list[tuple[int, int, float]] = []
    largest = 0.0
    seconds, sigma = s.predicted_seconds, s.sigma
    measured = np.zeros(n, dtype=bool)
    every = np.ones(n, dtype=bool)
    while True:
        cost = hourly_price * seconds
        sel = confident_candidates(s, cost, sigma, seconds, z, THRESHOLD)
        best = sel.best
        packing = confirm = None
        if measured[best]:  # before, the run goes to the best itself
            packing, confirm = band_points(
                cost,
                paired_bounds(s.terms, cost, sigma, z)(best),
                paired_bounds(s.terms, cost, sigma, Z_PROMISE)(best),
                THRESHOLD,
                demand,
                best,
                sel.within,
                measured,
                every,
            )
        wanted = next_point(
            cost,
            sigma,
            every.astype(np.float64),
            best,
            measured,
            len(points),
            packing=packing,
            confirm=confirm,
        )
        if wanted is None:
            return seconds, sigma, len(points)
        run = float(s.tmc_seconds[wanted] * (1.0 + RUN_NOISE * rng.standard_normal()))
        error = float(np.log(run) - np.log(s.predicted_seconds[wanted]))
        largest = max(largest, abs(float(np.expm1(error))))
        points.append((wanted // shape[1], wanted % shape[1], error))
        measured[wanted] = True
        fix = grid_correction(
            ratios,
            ways,
            s.sigma.reshape(shape),
            points,
            observations=len(points),
            largest_error=largest,
        )
        seconds = s.predicted_seconds * fix.factor.ravel()
        sigma = fix.sigma.ravel()


def verification_runs(
    studies: dict[str, list[Study]], regimes: Sequence[Regime], levels: dict[str, float]
) -> dict[str, float]:
    """Per regime, the mean number of verification runs a workload takes (policy tmc-2.5v)."""
    out = {}
    for r in regimes:
        prices = regime_prices(r)
        runs = [
            verified(s, hourly(s, prices), NormalDist().inv_cdf(levels[s.name]), r)[2]
            for s in studies.get(r.shape, [])
        ]
        out[r.key] = float(np.mean(runs)) if runs else 0.0
    return out


def _classic(pred: FloatArray, ok: NDArray[np.bool_], frac: FloatArray) -> Callable[..., int]:
    def choose(u: FloatArray) -> int:
        sel = algorithm1(pred, pred, ok, frac, u, THRESHOLD)
        assert sel is not None
        return sel.chosen

    return choose


def _confident(
    pred: FloatArray,
    upper: FloatArray,
    seconds: FloatArray,
    ok: NDArray[np.bool_],
    frac: FloatArray,
) -> Callable[..., int]:
    def choose(u: FloatArray) -> int:
        sel = confident_algorithm1(pred, upper, seconds, ok, frac, u, THRESHOLD)
        assert sel is not None
        return sel.chosen

    return choose


# -- compaction ---------------------------------------------------------------------------------

_CONTEXT: dict[str, Any] = {}


def _compact_job(job: tuple[Regime, tuple[int, ...], str, int]) -> dict[str, Any]:
    regime, mix, pol, seeds = job
    settings: MapSettings = _CONTEXT["settings"]
    studies: list[Study] = _CONTEXT["studies"][regime.shape]
    levels: dict[str, float] = _CONTEXT["confidence"]
    arch = _arch(settings.architecture)
    shadow = None
    if pol == "tmc-2.5s":
        # The default policy, deciding in a blend of list and the mix's shadow prices.
        shadow = mix_shadow_prices(studies, mix, regime, arch, levels)
        decide_in = shadow.currency("blend", DEFAULT_BLEND)
        policy = build_policy("tmc-2.5v", studies, regime, arch, levels, decide_in)
    else:
        policy = build_policy(pol, studies, regime, arch, levels)
    es = build_policy("es", studies, regime, arch, levels)
    floor = model_floor(studies, regime)
    es_seconds = float(np.mean([es.menus[i].seconds[0] for i in mix]))
    rate = settings.concurrency / es_seconds
    es_cost = [float(es.true_cost[i][0]) for i in range(len(studies))]
    sizes, costs, within, util, floors = [], [], [], [], []
    for seed in range(seeds):
        arr = poisson_arrivals(settings.arrivals, mix, rate, seed)

        def simulate(n: int, stop: bool, arr: Any = arr, seed: int = seed) -> Any:
            return run_cluster(
                arch,
                n,
                arr,
                policy.menus,
                online_placer(policy.choose),
                order_seed=seed,
                stop_on_reject=stop,
            )

        n, run = compact_run(simulate, upper=max(4, int(settings.concurrency)))
        placed = run.options >= 0
        ws = arrivals_w = arr.workloads[placed]
        opts = run.options[placed]
        vm_cost = np.asarray(
            [policy.true_cost[int(w)][int(o)] for w, o in zip(ws, opts, strict=True)]
        )
        ref = np.asarray([es_cost[int(w)] for w in arrivals_w])
        sizes.append(n)
        costs.append(float(vm_cost.mean()))
        within.append(float(np.mean(vm_cost <= ref * (1.0 + THRESHOLD) + 1e-12)))
        floors.append(float(np.mean([floor[int(w)] for w in arrivals_w])))
        util.append(run.mean_utilization.tolist())
    mean_util = np.mean(np.asarray(util), axis=0)
    return {
        "regime": regime.key,
        "mix": list(mix),
        "policy": pol,
        "compact_sizes": sizes,
        "compact_p90": float(np.percentile(sizes, 90)),
        "mean_cost": float(np.mean(costs)),
        "within_t_share": float(np.mean(within)),
        # decisions of workloads whose cheapest *predicted* configuration is itself more than T
        # over the true optimum: no selection anchored on the prediction brings those within T
        "model_floor_share": float(np.mean(floors)),
        "utilization": mean_util.tolist(),
        "binding": RESOURCES[int(np.argmax(mean_util))],
        "shadow_binding": None if shadow is None else list(shadow.binding),
    }


def _run_twin(r: Regime) -> str:
    return Regime(r.source, r.llc_share, r.slow_to_dram, r.shape, "run").key


def _arch(name: str) -> Architecture:
    dram, slow = name.split("G-")
    return architecture(int(dram), slow)


def _study_job(job: tuple[str, str]) -> tuple[str, Study]:
    name, shape = job
    settings: MapSettings = _CONTEXT["settings"]
    parts = ("regimes", workload(name).model_dump_json(), shape, str(settings.trace_accesses))
    return shape, cached(
        _CONTEXT.get("cache"), parts, lambda: study(name, shape, settings.trace_accesses)
    )


def run_map(
    settings: MapSettings,
    out_dir: Path,
    progress: Callable[[str], None] | None = None,
    cache: Path | None = None,
) -> dict[str, Any]:
    """The regime map; with `cache`, per-workload studies are read from (and written to) that
    folder (`bench.study_cache`), and the JSON says so."""
    started = time.monotonic()
    _CONTEXT["settings"] = settings
    _CONTEXT["cache"] = cache
    say = progress or (lambda _: None)
    say("regime map: per-workload ground truth and fits")
    jobs = [(n, sh) for sh in settings.shapes for n in settings.workloads]
    done = pool_map(_study_job, jobs, settings.processes)
    studies: dict[str, list[Study]] = {sh: [] for sh in settings.shapes}
    for shape, st in done:
        studies[shape].append(st)
    _CONTEXT["studies"] = studies
    t_studies = time.monotonic() - started
    regimes = settings.regimes()
    levels = calibrate_confidence(studies, regimes)
    _CONTEXT["confidence"] = levels
    t_calibration = time.monotonic() - started - t_studies
    say(f"regime map: confidence per held-out workload {levels}")

    n = len(settings.workloads)
    mixes = list(itertools.combinations(range(n), min(4, n)))[:: settings.mix_stride]
    keys = {r.key for r in regimes}
    # Exhaustive search's VMs hold their resources for their run time under either lifetime
    # model (the fixed lifetime is that very time), so its compaction is run once.
    cjobs = [
        (r, m, p, settings.seeds)
        for r in regimes
        for m in mixes
        for p in POLICIES
        if not (p == "es" and r.lifetime != "run" and _run_twin(r) in keys)
    ]
    say(f"regime map: {len(cjobs)} compactions")
    t0 = time.monotonic()
    rows = pool_map(_compact_job, cjobs, settings.processes)
    t_compactions = time.monotonic() - t0
    results: dict[str, Any] = {
        "schema": "tmc.bench-regimes/v1",
        "quick": settings.quick,
        "settings": {k: v for k, v in settings.__dict__.items()},
        "threshold": THRESHOLD,
        "study_cache": None if cache is None else str(cache),
        "workloads": {
            sh: [
                {
                    "name": s.name,
                    "vcpus": s.vcpus,
                    "footprint_gib": s.footprint_bytes / GIB,
                }
                for s in sts
            ]
            for sh, sts in studies.items()
        },
        "rows": rows,
        "confidence": levels,
        "calibration": calibration_table(studies, regimes, levels),
        "paired_coverage": paired_coverage(studies, regimes, CONFIDENCE_LADDER),
        "verification_runs": verification_runs(studies, regimes, levels),
        "duration_seconds": {
            "studies": t_studies,
            "calibration": t_calibration,
            "compactions": t_compactions,
            "total": time.monotonic() - started,
        },
    }
    results["map"] = summarise(rows, regimes)
    t0 = time.monotonic()
    checked = [r for r in regimes if _needs_seed_check(results["map"], r)]
    if settings.check_seeds and checked:
        say(f"regime map: {len(checked)} regimes re-measured over {settings.check_seeds} seeds")
        check_rows = pool_map(
            _compact_job,
            [
                (r, m, p, settings.check_seeds)
                for r in checked
                for m in mixes
                for p in ("es", "tmc-2.5v")
            ],
            settings.processes,
        )
        results["seed_check"] = seed_check(check_rows, checked, settings.check_seeds)
        for entry in results["map"]:
            if entry["regime"] in results["seed_check"]:
                entry["policies"]["tmc-2.5v"]["seed_check"] = results["seed_check"][entry["regime"]]
    results["duration_seconds"]["seed_check"] = time.monotonic() - t0
    # A folder of its own beside the evaluation's files.
    out_dir = out_dir / "regimes"
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "regimes-quick" if settings.quick else "regimes"
    if settings.planning:
        say("regime map: capacity planner and rebalancer against greedy")
        from bench.planning import run_planning  # noqa: PLC0415

        results["planning"] = run_planning(
            studies, out_dir, settings.quick, stem, settings.processes
        )
    results["duration_seconds"]["total"] = time.monotonic() - started
    (out_dir / f"{stem}.json").write_text(json.dumps(results, indent=1, default=_json))
    from bench.regimes_report import write_regime_report  # noqa: PLC0415 (matplotlib)

    write_regime_report(results, out_dir, stem)
    return results


def _needs_seed_check(entries: list[dict[str, Any]], regime: Regime) -> bool:
    """Does the default policy's verdict in this regime turn on a machine or two: larger than ES
    at all, or a gain within 3 points of the 5 % line?"""
    for e in entries:
        if e["regime"] == regime.key and "tmc-2.5v" in e["policies"]:
            x = e["policies"]["tmc-2.5v"]["compact_vs_es"]
            return bool(x > 0.0 or -0.08 < x <= -0.02)
    return False


def seed_check(
    rows: list[dict[str, Any]], regimes: Sequence[Regime], seeds: int
) -> dict[str, dict[str, Any]]:
    """Per re-measured regime: the default policy's compact cluster against ES's, each the mean
    over the seeds of one mix, then the mean over mixes (as the map's figure, on more seeds)."""
    out = {}
    for r in regimes:
        es = {
            tuple(x["mix"]): x["compact_sizes"]
            for x in rows
            if x["regime"] == r.key and x["policy"] == "es"
        }
        mine = [x for x in rows if x["regime"] == r.key and x["policy"] == "tmc-2.5v"]
        ratios = [
            float(np.mean(x["compact_sizes"]) / np.mean(es[tuple(x["mix"])]) - 1.0) for x in mine
        ]
        out[r.key] = {
            "seeds": seeds,
            "compact_vs_es": float(np.mean(ratios)),
            "compact_vs_es_range": [float(np.min(ratios)), float(np.max(ratios))],
            "es_sizes": [es[tuple(x["mix"])] for x in mine],
            "sizes": [x["compact_sizes"] for x in mine],
        }
    return out


def _json(o: object) -> object:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def summarise(rows: list[dict[str, Any]], regimes: Sequence[Regime]) -> list[dict[str, Any]]:
    """Per regime and policy, mean over mixes of size and cost relative to ES on the same mix."""
    out = []
    for r in regimes:
        es_key = _run_twin(r)
        es = {
            tuple(x["mix"]): x
            for x in rows
            if x["regime"] in (r.key, es_key) and x["policy"] == "es"
        }
        entry: dict[str, Any] = {"regime": r.key, **r.__dict__, "policies": {}}
        for pol in POLICIES:
            mine = (
                list(es.values())
                if pol == "es"
                else [x for x in rows if x["regime"] == r.key and x["policy"] == pol]
            )
            if not mine:
                continue
            size = [x["compact_p90"] / es[tuple(x["mix"])]["compact_p90"] - 1.0 for x in mine]
            cost = [x["mean_cost"] / es[tuple(x["mix"])]["mean_cost"] - 1.0 for x in mine]
            binding = [x["binding"] for x in mine]
            entry["policies"][pol] = {
                "compact_vs_es": float(np.mean(size)),
                "compact_vs_es_range": [float(np.min(size)), float(np.max(size))],
                "cost_vs_es": float(np.mean(cost)),
                "cost_vs_es_max": float(np.max(cost)),
                "within_t_share": float(np.mean([x["within_t_share"] for x in mine])),
                "within_t_share_min": float(np.min([x["within_t_share"] for x in mine])),
                "model_floor_share": float(
                    np.mean([x.get("model_floor_share", 0.0) for x in mine])
                ),
                "binding": max(set(binding), key=binding.count),
                "mixes": len(mine),
            }
        out.append(entry)
    return out


# -- the confidence level, learnt on held-out workloads ---------------------------------------

CONFIDENCE_LADDER = (0.7, 0.8, 0.9, 0.95, 0.99, 0.999)
# The share of the other workloads' cells (workload x regime) that may keep a candidate more than
# T over the true optimum: the map's target is that at least 95 % of decisions are within T.
CELL_TOLERANCE = 0.05


def model_floor(studies: Sequence[Study], regime: Regime) -> list[bool]:
    """Per workload: is the cheapest predicted configuration (Algorithm 1 at T = 0), run with
    tmc's placement, more than T over the true optimum? Then no selection anchored on the
    prediction is within T for it, whatever its margin."""
    prices = regime_prices(regime)
    out = []
    for s in studies:
        h = hourly(s, prices)
        pred = h * s.predicted_seconds
        best = int(np.argmin(pred))
        es = float((h * s.truth_seconds).min())
        out.append(bool(h[best] * s.tmc_seconds[best] > es * (1.0 + THRESHOLD) + 1e-12))
    return out


def regime_prices(regime: Regime) -> PriceProfile:
    return price_profile(
        regime.source, llc_area_share=regime.llc_share, slow_to_dram=regime.slow_to_dram
    )


def overspends(s: Study, regime: Regime, confidence: float) -> tuple[bool, bool, int]:
    """For one workload in one regime, with the default policy (the confident Algorithm 1 after
    verification runs, paired bounds at `confidence`): does any candidate it keeps (on any
    utilization) cost more than T over the true optimum; does the cheapest predicted (after the
    runs); and how many candidates are kept."""
    h = hourly(s, regime_prices(regime))
    z = NormalDist().inv_cdf(confidence)
    seconds, sigma, _ = verified(s, h, z, regime)
    pred = h * seconds
    sel = confident_candidates(s, pred, sigma, seconds, z, THRESHOLD)
    truth = h * s.tmc_seconds
    limit = float((h * s.truth_seconds).min()) * (1.0 + THRESHOLD) + 1e-12
    return bool(truth[sel.within].max() > limit), bool(truth[sel.best] > limit), len(sel.within)


def calibrate_confidence(
    studies: dict[str, list[Study]],
    regimes: Sequence[Regime],
    ladder: Sequence[float] = CONFIDENCE_LADDER,
    tolerance: float = CELL_TOLERANCE,
) -> dict[str, float]:
    """Per workload, the lowest level of the cost band at which, on the *other* workloads (both
    shapes, every regime of the map), at most `tolerance` of the cells keep a candidate more
    than T over the true optimum where the cheapest predicted is not (leave one workload out:
    the level a workload is judged with never saw its ground truth)."""
    names = sorted({s.name for sts in studies.values() for s in sts})
    cases = [(s, r) for r in regimes for s in studies.get(r.shape, [])]
    out = {}
    for test in names:
        train = [(s, r) for s, r in cases if s.name != test]
        level = ladder[-1]
        for c in ladder:
            bad = sum(w and not b for w, b, _ in (overspends(s, r, c) for s, r in train))
            if bad <= tolerance * len(train):
                level = c
                break
        out[test] = level
    return out


def paired_coverage(
    studies: dict[str, list[Study]], regimes: Sequence[Regime], levels: Sequence[float]
) -> list[dict[str, float]]:
    """How well the bounds are calibrated, on every workload and regime: per level, the share of
    candidates predicted within 2T of the cheapest predicted whose true cost (tmc's placement)
    exceeds their bound against it, with the paired bound and with each point's own. The
    nominal share is 1 - level."""
    rows = []
    for level in levels:
        z = NormalDist().inv_cdf(level)
        paired_over = own_over = total = 0
        for r in regimes:
            prices = regime_prices(r)
            for s in studies.get(r.shape, []):
                h = hourly(s, prices)
                pred = h * s.predicted_seconds
                best = int(np.argmin(pred))
                truth = h * s.tmc_seconds
                near = np.flatnonzero(pred <= pred[best] * (1.0 + 2 * THRESHOLD))
                near = near[near != best]
                if s.terms is None or not near.size:
                    continue
                actual = truth[near] / truth[best]
                paired = 1.0 + z * s.terms.difference_sigma(best)[near]
                own = 1.0 + z * s.sigma[near]
                ratio = pred[near] / pred[best]
                paired_over += int(np.sum(actual > ratio * paired))
                own_over += int(np.sum(actual > ratio * own))
                total += near.size
        rows.append(
            {
                "level": level,
                "pairs": total,
                "paired_exceeded": paired_over / max(total, 1),
                "own_exceeded": own_over / max(total, 1),
            }
        )
    return rows


def calibration_table(
    studies: dict[str, list[Study]], regimes: Sequence[Regime], levels: dict[str, float]
) -> list[dict[str, Any]]:
    """Per regime: workloads (cells) whose kept candidates overspend T, those whose cheapest
    predicted already does, and the mean number kept; at the held-out levels and at 0.99."""
    out = []
    for r in regimes:
        sts = studies.get(r.shape, [])
        held = [overspends(s, r, levels[s.name]) for s in sts]
        fixed = [overspends(s, r, 0.99) for s in sts]
        out.append(
            {
                "regime": r.key,
                "workloads": len(sts),
                "kept_over_t": sum(w for w, _, _ in held),
                "cheapest_over_t": sum(b for _, b, _ in held),
                "kept_over_t_at_099": sum(w for w, _, _ in fixed),
                "kept": float(np.mean([k for _, _, k in held])) if held else 0.0,
                "kept_at_099": float(np.mean([k for _, _, k in fixed])) if fixed else 0.0,
                "over_t": [s.name for s, (w, _, _) in zip(sts, held, strict=True) if w],
            }
        )
    return out
