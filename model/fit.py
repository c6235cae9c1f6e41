"""Fitting the TMC CPI model (paper Eq. 3 and 4) from the three reference runs.

    CPI(r, w) = CPI_cache + MAR(w) * P_dram + MAR_slow(r, w) * P_slow

P_dram = L_dram / MLP and P_slow = dL / MLP are amortised penalties in cycles per LLC miss. Two
paths fit them:

- ``stall_counters``: the PMU gave CYCLE_ACTIVITY.STALLS_L3_MISS in all three runs. Stall cycles
  per instruction divided by the miss rate give the penalties directly; CPI_cache is the mean of the
  three runs' non-stall CPI (paper §3.3, "averaging measurements of the three reference runs").
- ``eq4``: no stall counter (most virtualised PMUs). fastmax and fastmin differ only in MAR, so
  their CPI difference gives P_dram; slowmax differs from fastmax only in where misses are served,
  so Eq. 4 gives P_slow = (CPI_slowmax - CPI_dram) / MPI_slow.

The stall counter counts loads only. A program whose slow-memory time goes to stores (write
sweeps: a store miss holds a fill buffer for the slow tier's latency, and its write-back takes
the slow tier's scarce write bandwidth) grows its cycles far more than its L3-miss stalls. When
the stall counter explains too little of a reference run's extra cycles against fastmax, the
stall path would move that time into on-core CPI and predict slowmax nowhere near its
measurement. So the fit takes the first path whose counter explains the runs' differences and
whose fit passes through all three runs: the L3-miss stall counter, then
``memory_stalls`` (a counter of stalls on any memory access, stores included, where the bundle
has one), then the cycles (Eq. 4); and it says why (`FitDiagnostics.path_reason`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from model.bundle import (
    DEFAULT_RUN_NOISE,
    INSTRUCTION_SPREAD_FLAG,
    MAX_RUN_NOISE,
    MemoryTier,
    ProfileBundle,
    ProfileRun,
    ReferenceRun,
    RunName,
    StructureMeasurements,
    WorkloadId,
    stall_growth,
)
from model.bundle import run_noise as bundle_run_noise
from model.misscurve import anchor_curve

MODEL_VERSION = "tmc-model/1"

FitPath = Literal["stall_counters", "memory_stalls", "eq4"]
StallCounter = Literal["stall_cycles_l3_miss", "stall_cycles_memory"]
# "paper": one DRAM and one slow penalty for the whole workload (Eq. 3-4). "per_structure": each
# structure's own penalties, from memory-stall samples attributed to it in the reference runs.
PenaltyPath = Literal["paper", "per_structure"]
PenaltyChoice = Literal["auto", "paper"]

# Diagnostics thresholds (docs/model.md, "Diagnostics").
# Three points, three or more parameters: a sound fit explains them (clean simulated profiles stay
# within 3.3 %); past this the runs disagree with the model or with each other.
CPI_RESIDUAL_FLAG = 0.05
# Implied extra slow-tier latency against the declared one (loaded at slowmax's measured traffic).
# On-core work hides part of the DRAM latency, so P_slow / P_dram overstates the latency ratio by
# design (up to 3.5x in the simulator); below half or above four times, something else is wrong.
SLOW_LATENCY_BAND = (0.5, 4.0)
LOW_PEBS_COVERAGE = 0.5  # samples x interval explain less than half the LLC-miss counter
MLP_PLAUSIBLE = (0.8, 32.0)  # one core cannot have fewer than ~1 or more than ~32 misses in flight
UNSAMPLED_SHARE_FLAG = 0.25  # of the structures, or of the footprint
# A structure with fewer PEBS samples than this over the three runs keeps the workload's penalties.
MIN_STRUCTURE_SAMPLES = 30
# Loaded latency: idle x (1 + KAPPA x U / (1 - U)). KAPPA = 1/12 is the paper's 3DXP knee (§3.6:
# 300 -> 400 ns at ~80 % of peak bandwidth); U is capped where the formula stops being a model.
QUEUE_KAPPA = 1.0 / 12.0
QUEUE_UTILIZATION_CAP = 0.95
WINDOW_MLP_MAX = 12.0
# A structure's overlap scale (stall per miss at fastmin over fastmax) is kept within this range:
# one core's misses in flight change by at most about the fill buffers' count either way.
OVERLAP_SCALE_RANGE = (0.25, 4.0)
# How far the per-structure penalties' levels may be moved to pass through the reference runs.
CALIBRATION_RANGE = (0.5, 2.0)
# A stall counter's path is taken only when the counter's growth explains a share in this band
# of each reference run's extra cycles against fastmax (where they differ by more than the runs'
# noise, `STALL_PATH_NOISE` of fastmax's CPI). Below it, stalls the counter does not see (stores,
# write-backs) carry the difference; far above it, stalls it did not count (LLC hits) turned
# into stalls it counts. Either way the on-core CPI it implies is not one number.
STALL_EXPLAINED_BAND = (0.5, 2.0)
STALL_PATH_NOISE = 0.03


class Flag(BaseModel):
    """Borderline data the fit handled, and how. Codes are stable for dashboards and alerts."""

    model_config = ConfigDict(frozen=True)
    code: str
    message: str


class FitDiagnostics(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: FitPath
    path_reason: str = Field(default="", description="why the fit took this path")
    stalls_explained: dict[str, float] = Field(
        default_factory=dict,
        description="per run, the share of its extra cycles against fastmax that its L3-miss"
        " stall counter explains (runs that differ from fastmax beyond noise)",
    )
    flags: list[Flag] = Field(default_factory=list)
    cpi_residuals: dict[str, float] = Field(
        description="(model - measured) / measured CPI at each reference run"
    )
    uncalibrated_residuals: dict[str, float] = Field(
        default_factory=dict,
        description="the same before the per-structure penalties were calibrated through the"
        " reference runs: how far the stall samples' split and the measured cycles disagree."
        " Calibration moves the model onto the runs; the disagreement stays in its intervals",
    )
    pebs_coverage: dict[str, float] = Field(
        description="sampled misses x sampling interval / LLC-miss counter, per run"
    )
    samples_total: dict[str, int]
    mlp_estimate: float | None = Field(
        default=None, description="L_dram (host nominal) / P_dram, when both are known"
    )
    slow_extra_latency_ns_estimate: float | None = Field(
        default=None, description="P_slow x MLP, to compare with the host's nominal latencies"
    )
    penalty_path: PenaltyPath = Field(
        default="paper",
        description="paper: one penalty pair per workload; per_structure: each tag's own",
    )
    penalty_path_reason: str = Field(default="the bundle has no per-structure measurements")
    slow_utilization_at_slowmax: float | None = Field(
        default=None, description="slow tier's bandwidth utilisation in slowmax, when measured"
    )


class SlowQueue(BaseModel):
    """What bandwidth-aware prediction needs about the slow tier (docs/model.md, "Queueing")."""

    model_config = ConfigDict(frozen=True)
    kappa: float
    background_utilization: float = Field(description="others' share of the tier's bandwidth")
    own_utilization_at_slowmax: float
    slowmax_cpi: float
    slowmax_mpi: float

    def loaded(self, utilization: float) -> float:
        """Loaded latency relative to idle."""
        u = min(max(utilization, 0.0), QUEUE_UTILIZATION_CAP)
        return 1.0 + self.kappa * u / (1.0 - u)


class FittedModel(BaseModel):
    """Everything needed to predict any configuration's time, and to plan placement."""

    model_config = ConfigDict(frozen=True)

    model_version: str = MODEL_VERSION
    workload: WorkloadId
    host_kind: str
    vcpus: int
    footprint_bytes: int
    tags: list[str]
    sizes_bytes: list[int]
    ways_min: int
    ways_max: int
    curve_ways: list[int]
    curve_mar: list[float] = Field(description="MAR(w), anchored to fastmin/fastmax counters")
    curve_cpi: list[float] | None = Field(
        default=None,
        description="the way sweep's CPI at each of curve_ways, all in DRAM, where measured",
    )
    access_rate_at_min: list[float] = Field(description="per tag, accesses/instruction at ways_min")
    access_rate_at_max: list[float] = Field(description="per tag, accesses/instruction at ways_max")
    cpi_cache: float
    p_dram: float = Field(description="amortised DRAM penalty, cycles per LLC miss")
    p_slow: float = Field(description="amortised extra slow-tier penalty, cycles per slow access")
    instructions: float
    fastmax_seconds: float
    diagnostics: FitDiagnostics
    penalty_path: PenaltyPath = "paper"
    p_dram_by_structure: list[float] | None = Field(
        default=None,
        description="per tag, cycles per LLC miss served by DRAM (per_structure); per load miss"
        " where the store penalties below are given",
    )
    p_slow_by_structure: list[float] | None = Field(
        default=None,
        description="per tag, extra cycles per slow access at slowmax's load; per slow load miss"
        " where the store penalties below are given",
    )
    slow_scale_at_min_by_structure: list[float] | None = Field(
        default=None,
        description="per tag, both penalties' scale at ways_min (DRAM stall per miss at fastmin"
        " over fastmax; per load miss where the store penalties are given); 1 at ways_max,"
        " following the miss curve in between",
    )
    p_dram_store_by_structure: list[float] | None = Field(
        default=None,
        description="per tag, cycles per store miss served by DRAM (a store waits only for a"
        " fill buffer); given where the bundle says which samples and stall samples were"
        " stores', and then the three fields above are the loads'",
    )
    p_slow_store_by_structure: list[float] | None = Field(
        default=None, description="per tag, extra cycles per slow store miss at slowmax's load"
    )
    store_scale_at_min_by_structure: list[float] | None = Field(
        default=None, description="per tag, the store penalties' scale at ways_min"
    )
    load_rate_at_min_by_structure: list[float] | None = Field(
        default=None,
        description="per tag, load misses per instruction at ways_min (its access rate times"
        " the share of its samples that were loads); given with the store penalties",
    )
    load_rate_at_max_by_structure: list[float] | None = Field(
        default=None, description="per tag, load misses per instruction at ways_max"
    )
    slow_queue: SlowQueue | None = None
    dram_latency_cycles: float | None = Field(
        default=None, description="declared idle DRAM latency (per_structure path)"
    )
    slow_latency_cycles: float | None = Field(
        default=None, description="declared idle slow-tier latency (per_structure path)"
    )
    window_mlp_by_structure: list[float] | None = Field(
        default=None,
        description="per tag, slow misses in flight together (extra latency / P_slow), 1..12",
    )
    load_share_by_structure: list[float] | None = Field(
        default=None,
        description="per tag, the share of its sampled LLC misses that were loads, over the"
        " three reference runs (None: no store was sampled, all are taken as loads)",
    )
    fill_buffers_full: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="the chance that a miss in slowmax found every fill buffer of its core busy"
        " (Erlang C over the misses in flight, by Little's law from slowmax's counters and the"
        " declared slow latency): how often a store miss's slow latency holds up other misses."
        " None without sampled stores",
    )
    profile_runs: list[ProfileRun] = Field(
        default_factory=list,
        description="the bundle's runs beyond its reference runs (measured configurations)",
    )
    slow_sharing: float | None = Field(
        default=None,
        ge=0.0,
        description="how many misses a slow miss shares its wait with, fitted to the profile's"
        " runs at partial slow ratios (0 without one); None in a model stored before it was"
        " kept here: the predictor fits it again",
    )
    slow_few_ways: float | None = Field(
        default=None,
        ge=-1.0,
        description="k in the slow penalties' factor 1 + k x h(w) from the most ways to the"
        " fewest, fitted to the profile's runs all slow below slowmax's way count (0 without"
        " one); None in a model stored before it was kept here: the predictor fits it again",
    )
    slow_uncovered: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="the share of the way from the point prediction to the uncovered one at"
        " partial slow ratios, fitted to the profile's runs there once the sharing is (0"
        " without one); None in a model stored before it was kept here: the predictor fits it"
        " again",
    )
    run_noise: float = Field(
        default=DEFAULT_RUN_NOISE,
        ge=0.0,
        le=MAX_RUN_NOISE,
        description="relative run-to-run noise of the profile's runs: measured by repeats when"
        " the bundle says it (`run_noise`), else the contract's default",
    )

    def cpi(self, mar: float, mar_slow: float) -> float:
        """The paper's Eq. 3 with the workload-level penalties."""
        return self.cpi_cache + mar * self.p_dram + mar_slow * self.p_slow

    @property
    def fastmax_cpi(self) -> float:
        if self.p_dram_by_structure is None:
            return self.cpi(self.curve_mar_at(self.ways_max), 0.0)
        loads, stores = self.load_rate_at_max_by_structure, self.p_dram_store_by_structure
        if loads is None or stores is None:
            return self.cpi_cache + _dot(self.access_rate_at_max, self.p_dram_by_structure)
        store_rates = [a - x for a, x in zip(self.access_rate_at_max, loads, strict=True)]
        return self.cpi_cache + _dot(loads, self.p_dram_by_structure) + _dot(store_rates, stores)

    def curve_mar_at(self, ways: int) -> float:
        # Exact lookup at the references; both are on the curve by the bundle's checks.
        return self.curve_mar[self.curve_ways.index(ways)]


def _cpi(run: ReferenceRun) -> float:
    return run.cycles / run.instructions


def _mpi(run: ReferenceRun) -> float:
    return run.llc_misses / run.instructions


def fit(bundle: ProfileBundle, penalties: PenaltyChoice = "auto") -> FittedModel:
    """Fit a checked bundle. Borderline data is handled and reported in ``diagnostics.flags``.

    ``penalties="auto"`` fits per-structure penalties when the bundle carries per-structure
    measurements and the paper's workload-level pair otherwise; ``"paper"`` always takes the
    paper's path (for comparison).
    """
    flags: list[Flag] = []
    fastmax, fastmin, slowmax = bundle.run("fastmax"), bundle.run("fastmin"), bundle.run("slowmax")
    w_max, w_min = fastmax.configuration.llc_ways, fastmin.configuration.llc_ways

    # 1. MAR(w), anchored to the counters of the two all-DRAM runs.
    curve_ways = [p.llc_ways for p in bundle.miss_curve]
    curve_mar, flat = anchor_curve(
        curve_ways,
        [p.misses_per_instruction for p in bundle.miss_curve],
        w_min,
        w_max,
        _mpi(fastmin),
        _mpi(fastmax),
    )
    if flat:
        flags.append(
            Flag(
                code="flat_miss_curve",
                message=f"misses barely change between {w_min} and {w_max} ways: the workload does"
                " not benefit from LLC ways; MAR is held at fastmax's level",
            )
        )
    mar_min, mar_max = curve_mar[curve_ways.index(w_min)], curve_mar[curve_ways.index(w_max)]

    # 2. Per-structure access rates: each PEBS table gives shares, the anchored MAR the level.
    sizes = [s.size_bytes for s in bundle.structures]
    tags = [s.tag for s in bundle.structures]
    if mar_min == mar_max:
        # MAR held at fastmax's level: so is each structure's rate (LRU's stack property lets no
        # structure miss more with more ways, so none can miss less either), fastmax's table.
        rates_min = rates_max = _access_rates(
            fastmax.name, fastmax.samples, tags, sizes, mar_max, flags
        )
    else:
        rates_min = _access_rates(fastmin.name, fastmin.samples, tags, sizes, mar_min, flags)
        rates_max = _access_rates(fastmax.name, fastmax.samples, tags, sizes, mar_max, flags)
    unsampled = [
        i
        for i, tag in enumerate(tags)
        if fastmin.samples.get(tag, 0) == 0 and fastmax.samples.get(tag, 0) == 0
    ]
    if unsampled:
        flags.append(_unsampled_flag(tags, sizes, unsampled))
    # Where the runs say which samples and which stall samples were stores', each structure's
    # loads and stores are charged their own penalties (docs/model.md, "Loads and stores").
    columns = _columns(
        bundle, tags, fastmax if mar_min == mar_max else fastmin, rates_min, rates_max
    )

    # 3. Penalties and on-core CPI.
    runs = (fastmax, fastmin, slowmax)
    explained = _stalls_explained(bundle, "stall_cycles_l3_miss")

    def references(
        path: FitPath, cpi_cache: float, p_dram: float, p_slow: float
    ) -> tuple[
        tuple[list[float], list[float], list[float]] | None,
        str,
        dict[str, float],
        dict[str, float],
    ]:
        """Per-structure penalties (when measured and asked for), the model's CPI at the three
        reference runs for one path's workload-level fit, and the per-structure model's CPI there
        before its calibration through them (empty without per-structure penalties)."""
        per = None
        uncalibrated: dict[str, float] = {}
        reason = "the bundle has no per-structure measurements"
        if bundle.structure_measurements is not None:
            if penalties == "paper":
                reason = "per-structure measurements present; the paper's path was asked for"
            else:
                per, reason, raw = _per_structure_penalties(
                    bundle,
                    bundle.structure_measurements,
                    path,
                    cpi_cache,
                    p_dram,
                    p_slow,
                    columns,
                )
                if per is not None and raw is not None:
                    uncalibrated = _reference_cpis(cpi_cache, columns, raw)
        if per is not None:
            predicted = _reference_cpis(cpi_cache, columns, per)
        else:
            predicted = {
                "fastmax": cpi_cache + mar_max * p_dram,
                "fastmin": cpi_cache + mar_min * p_dram,
                "slowmax": cpi_cache + mar_max * (p_dram + p_slow),
            }
        return per, reason, predicted, uncalibrated

    def worst_residual(
        path: FitPath, cpi_cache: float, p_dram: float, p_slow: float
    ) -> tuple[str, float]:
        predicted = references(path, cpi_cache, p_dram, p_slow)[2]
        residual = {r.name: predicted[r.name] / _cpi(r) - 1.0 for r in runs}
        worst = max(residual, key=lambda k: abs(residual[k]))
        return worst, residual[worst]

    choice = _choose_path(bundle, worst_residual)
    path, path_reason = choice.path, choice.reason
    cpi_cache, p_dram, p_slow = choice.cpi_cache, choice.p_dram, choice.p_slow
    flags += choice.flags
    if all(r.stall_cycles_l3_miss is not None for r in runs) and path != "stall_counters":
        flags.append(Flag(code="stall_counters_incomplete", message=path_reason))
    elif any(r.stall_cycles_l3_miss is not None for r in runs) and path == "eq4":
        flags.append(
            Flag(
                code="partial_stall_counters",
                message="stall cycles reported for some runs only; fitted from CPIs (Eq. 4)",
            )
        )

    slow_growth = _cpi(slowmax) / _cpi(fastmax) - 1.0
    if slow_growth <= STALL_PATH_NOISE:
        flags.append(
            Flag(
                code="slow_tier_not_slower",
                message=f"slowmax ran {slow_growth:+.1%} against fastmax (within the runs' noise):"
                " the slow tier adds no measurable penalty for this workload, so slow memory"
                " costs it nothing in time",
            )
        )
    if bundle.host.slow_tier.latency_ns <= bundle.host.fast_tier.latency_ns:
        flags.append(
            Flag(
                code="slow_tier_nominally_fast",
                message="the host declares a slow tier no slower than its DRAM",
            )
        )

    per, reason, predicted, uncalibrated = references(path, cpi_cache, p_dram, p_slow)
    queue = None
    if per is not None:
        queue = _slow_queue(bundle, bundle.structure_measurements)
    penalty_path: PenaltyPath = "per_structure" if per is not None else "paper"

    instructions = [r.instructions for r in runs]
    spread = max(instructions) / min(instructions) - 1.0
    if spread > INSTRUCTION_SPREAD_FLAG:
        flags.append(
            Flag(
                code="instruction_spread",
                message=f"the reference runs differ by {spread:.1%} in instructions retired",
            )
        )

    # 4. Diagnostics: how well three points are explained, and what the penalties imply.
    residuals = {r.name: predicted[r.name] / _cpi(r) - 1.0 for r in runs}
    residuals_before = {r.name: uncalibrated[r.name] / _cpi(r) - 1.0 for r in runs if uncalibrated}
    coverage = {
        r.name: (sum(r.samples.values()) * bundle.sampling_interval / r.llc_misses)
        if r.llc_misses
        else 0.0
        for r in runs
    }
    freq_ghz = bundle.host.cpu_frequency_hz / 1e9
    mlp = None
    extra_ns = None
    if p_dram > 0:
        mlp = bundle.host.fast_tier.latency_ns * freq_ghz / p_dram
        extra_ns = p_slow * mlp / freq_ghz
    flags += _diagnose(bundle, residuals, coverage, mlp, extra_ns, queue)

    load_shares = _load_shares(bundle, tags)
    fitted = FittedModel(
        workload=bundle.workload,
        host_kind=bundle.host.host_kind,
        vcpus=bundle.vcpus,
        footprint_bytes=bundle.footprint_bytes,
        tags=tags,
        sizes_bytes=sizes,
        ways_min=w_min,
        ways_max=w_max,
        curve_ways=curve_ways,
        curve_mar=curve_mar,
        curve_cpi=_sweep_cpi(bundle),
        run_noise=bundle_run_noise(bundle),
        profile_runs=[] if bundle.profile_runs is None else list(bundle.profile_runs.runs),
        access_rate_at_min=rates_min,
        access_rate_at_max=rates_max,
        cpi_cache=cpi_cache,
        p_dram=p_dram,
        p_slow=p_slow,
        instructions=sum(instructions) / 3.0,
        fastmax_seconds=fastmax.wall_seconds,
        penalty_path=penalty_path,
        **_penalty_fields(per, columns),
        slow_queue=queue,
        window_mlp_by_structure=(
            _window_mlp(bundle, columns.per_miss_at_max(per[1]), queue) if per is not None else None
        ),
        load_share_by_structure=load_shares,
        fill_buffers_full=None if load_shares is None else _fill_buffers_full(bundle),
        dram_latency_cycles=bundle.host.fast_tier.latency_ns * freq_ghz
        if per is not None
        else None,
        slow_latency_cycles=bundle.host.slow_tier.latency_ns * freq_ghz
        if per is not None
        else None,
        diagnostics=FitDiagnostics(
            path=path,
            path_reason=path_reason,
            stalls_explained=dict(explained),
            penalty_path=penalty_path,
            penalty_path_reason=reason,
            slow_utilization_at_slowmax=(
                queue.background_utilization + queue.own_utilization_at_slowmax
                if queue is not None
                else None
            ),
            flags=flags,
            cpi_residuals=residuals,
            uncalibrated_residuals=residuals_before,
            pebs_coverage=coverage,
            samples_total={r.name: sum(r.samples.values()) for r in runs},
            mlp_estimate=mlp,
            slow_extra_latency_ns_estimate=extra_ns,
        ),
    )
    return with_run_terms(fitted)


def with_run_terms(fitted: FittedModel) -> FittedModel:
    """The model with the terms its runs beyond the reference runs fit (`slow_sharing`,
    `slow_few_ways`; docs/model.md, "Equations as implemented"), fitted here once and stored with
    it, so that a predictor built from the stored model does not fit them again."""
    # The predictor fits them (they are fitted to its predictions); it imports this module.
    from model.predict import Predictor  # noqa: PLC0415

    predictor = Predictor(fitted)
    return fitted.model_copy(
        update={
            "slow_sharing": predictor.slow_sharing,
            "slow_few_ways": predictor.slow_few_ways,
            "slow_uncovered": predictor.slow_uncovered,
        }
    )


def _stalls_explained(bundle: ProfileBundle, counter: StallCounter) -> dict[RunName, float]:
    """Per run that differs from fastmax beyond noise: the share of its extra cycles per
    instruction that its extra stall cycles per instruction (by `counter`) account for."""
    out: dict[RunName, float] = {}
    base = _cpi(bundle.run("fastmax"))
    names: tuple[RunName, RunName] = ("fastmin", "slowmax")
    for name in names:
        growth = stall_growth(bundle, name, counter)
        if growth is None:
            continue
        stall, cycles = growth
        if abs(cycles) > STALL_PATH_NOISE * base:
            out[name] = stall / cycles
    return out


def _access_rates(
    runs: str,
    samples: Mapping[str, int],
    tags: list[str],
    sizes: list[int],
    mar: float,
    flags: list[Flag],
) -> list[float]:
    total = sum(samples.values())
    if total == 0:
        flags.append(
            Flag(
                code="no_samples_in_run",
                message=f"no PEBS samples in {runs}: accesses are attributed by size",
            )
        )
        footprint = sum(sizes)
        return [mar * size / footprint for size in sizes]
    return [mar * samples.get(tag, 0) / total for tag in tags]


@dataclass(frozen=True)
class _PathChoice:
    path: FitPath
    reason: str
    cpi_cache: float
    p_dram: float
    p_slow: float
    flags: list[Flag]
    residual: float  # the worst |model / measured - 1| over the three runs


def _choose_path(
    bundle: ProfileBundle,
    worst_residual: Callable[[FitPath, float, float, float], tuple[str, float]],
) -> _PathChoice:
    """The first path, in order of preference (the L3-miss stall counter, the memory-stall
    counter, the cycles by Eq. 4), whose counter explains each reference run's extra cycles
    against fastmax (`STALL_EXPLAINED_BAND`) and whose fit passes through all three runs within
    `CPI_RESIDUAL_FLAG`; if none does, the one that misses its runs least."""
    fastmax, fastmin, slowmax = bundle.run("fastmax"), bundle.run("fastmin"), bundle.run("slowmax")
    runs = (fastmax, fastmin, slowmax)
    lo, hi = STALL_EXPLAINED_BAND
    passed_over: list[str] = []
    tried: list[_PathChoice] = []
    options: tuple[tuple[FitPath, StallCounter | None, str], ...] = (
        ("stall_counters", "stall_cycles_l3_miss", "the L3-miss stall counter"),
        ("memory_stalls", "stall_cycles_memory", "the memory-stall counter"),
        ("eq4", None, "the runs' cycles (Eq. 4)"),
    )
    for path, counter, label in options:
        if counter is not None:
            if any(getattr(r, counter) is None for r in runs):
                continue
            explained = _stalls_explained(bundle, counter)
            off = {k: v for k, v in explained.items() if not lo <= v <= hi}
            if off:
                passed_over.append(_explained_text(bundle, label, off))
                continue
        own: list[Flag] = []
        if counter is not None:
            cpi_cache, p_dram, p_slow = _fit_from_stalls(fastmax, fastmin, slowmax, counter, own)
        else:
            cpi_cache, p_dram, p_slow = _fit_from_cpi(fastmax, fastmin, slowmax, own)
        run, miss = worst_residual(path, cpi_cache, p_dram, p_slow)
        worst = abs(miss)
        reason = f"fitted from {label}"
        if passed_over:
            reason = "; ".join(passed_over) + f". {reason[0].upper()}{reason[1:]}"
        tried.append(_PathChoice(path, reason, cpi_cache, p_dram, p_slow, own, worst))
        if worst <= CPI_RESIDUAL_FLAG:
            return tried[-1]
        passed_over.append(f"a fit from {label} misses {run}'s measured CPI by {miss:+.1%}")
    best = min(tried, key=lambda c: c.residual)
    return _PathChoice(
        best.path,
        "; ".join(passed_over) + f"; kept the path that misses least ({best.path})",
        best.cpi_cache,
        best.p_dram,
        best.p_slow,
        best.flags,
        best.residual,
    )


def _explained_text(bundle: ProfileBundle, label: str, off: Mapping[RunName, float]) -> str:
    base = _cpi(bundle.run("fastmax"))
    parts = []
    for name, share in off.items():
        growth = stall_growth(bundle, name, "stall_cycles_l3_miss") or stall_growth(
            bundle, name, "stall_cycles_memory"
        )
        cycles = growth[1] / base if growth is not None else 0.0
        parts.append(
            f"{name} ran {cycles:+.1%} against fastmax, of which {label} explains {share:.0%}"
        )
    what = (
        " (the rest is time a load-stall counter does not see: stores and write-backs waiting on"
        " the slow tier, bandwidth queueing)"
        if any(v < 1.0 for v in off.values())
        else " (stalls it did not count became stalls it counts)"
    )
    return "; ".join(parts) + what


def _stall(run: ReferenceRun, counter: StallCounter) -> int:
    value: int | None = getattr(run, counter)
    assert value is not None
    return value


def _fit_from_stalls(
    fastmax: ReferenceRun,
    fastmin: ReferenceRun,
    slowmax: ReferenceRun,
    counter: StallCounter,
    flags: list[Flag],
) -> tuple[float, float, float]:
    def stall_pi(run: ReferenceRun) -> float:
        return _stall(run, counter) / run.instructions

    # Least squares through the origin over the two all-DRAM runs: stall/instr = MPI * P_dram.
    dram_runs = (fastmax, fastmin)
    denom = sum(_mpi(r) ** 2 for r in dram_runs)
    p_dram = sum(stall_pi(r) * _mpi(r) for r in dram_runs) / denom if denom > 0 else 0.0
    if denom == 0:
        flags.append(Flag(code="no_llc_misses", message="no LLC misses in fastmax or fastmin"))
    mpi_slow = _mpi(slowmax)
    if mpi_slow > 0:
        p_slow = stall_pi(slowmax) / mpi_slow - p_dram
    else:
        p_slow = 0.0
        flags.append(Flag(code="no_slow_accesses", message="slowmax made no LLC misses"))
    runs = (fastmax, fastmin, slowmax)
    cpi_cache = sum((r.cycles - _stall(r, counter)) / r.instructions for r in runs) / 3
    return cpi_cache, p_dram, _clamp_slow(p_slow, flags)


def _fit_from_cpi(
    fastmax: ReferenceRun, fastmin: ReferenceRun, slowmax: ReferenceRun, flags: list[Flag]
) -> tuple[float, float, float]:
    d_mpi = _mpi(fastmin) - _mpi(fastmax)
    d_cpi = _cpi(fastmin) - _cpi(fastmax)
    if d_mpi > 0.02 * max(_mpi(fastmin), 1e-12):
        p_dram = d_cpi / d_mpi
    else:
        p_dram = 0.0
        flags.append(
            Flag(
                code="dram_penalty_unidentifiable",
                message="fastmin and fastmax miss alike, so their CPIs cannot separate the DRAM"
                " penalty from on-core time; P_dram taken as 0 (MAR barely varies anyway)",
            )
        )
    if p_dram < 0:
        flags.append(
            Flag(
                code="negative_dram_penalty",
                message=f"fastmin ran faster than fastmax despite more misses (P_dram {p_dram:.3g});"
                " clamped to 0, the runs look noisy",
            )
        )
        p_dram = 0.0
    cpi_cache = _cpi(fastmax) - _mpi(fastmax) * p_dram
    if cpi_cache < 0:
        flags.append(
            Flag(
                code="negative_on_core_cpi",
                message="the DRAM penalty explains more than all of fastmax's CPI; bounded so that"
                " on-core CPI is 0",
            )
        )
        p_dram = _cpi(fastmax) / _mpi(fastmax)
        cpi_cache = 0.0
    mpi_slow = _mpi(slowmax)
    if mpi_slow > 0:
        # Eq. 4, with CPI_dram taken at slowmax's own miss rate so that noise between the
        # fastmax and slowmax miss counters does not leak into the slow penalty.
        p_slow = (_cpi(slowmax) - (cpi_cache + mpi_slow * p_dram)) / mpi_slow
    else:
        p_slow = 0.0
        flags.append(Flag(code="no_slow_accesses", message="slowmax made no LLC misses"))
    return cpi_cache, p_dram, _clamp_slow(p_slow, flags)


def _clamp_slow(p_slow: float, flags: list[Flag]) -> float:
    if p_slow < 0:
        flags.append(
            Flag(
                code="negative_slow_penalty",
                message=f"slowmax ran faster than the DRAM model predicts (P_slow {p_slow:.3g});"
                " clamped to 0",
            )
        )
        return 0.0
    return p_slow


def _unsampled_flag(tags: list[str], sizes: list[int], idx: list[int]) -> Flag:
    """One line for all structures without samples, however many there are."""
    footprint = sum(sizes)
    share = sum(sizes[i] for i in idx) / footprint
    shown = ", ".join(tags[i] for i in idx[:3]) + (
        f" and {len(idx) - 3} more" if len(idx) > 3 else ""
    )
    return Flag(
        code="structure_without_samples",
        message=f"{len(idx)} of {len(tags)} structures ({share:.0%} of the footprint) had no PEBS"
        f" samples in fastmin or fastmax ({shown}); they are treated as the coldest data and go"
        " slow first. If that matters, profile again with a smaller sampling interval or a"
        " longer run",
    )


def _load_shares(bundle: ProfileBundle, tags: list[str]) -> list[float] | None:
    """Per tag, the share of its LLC-miss samples over the three reference runs that were loads;
    None where no run says which samples were stores (a load-latency sampler's are all loads).
    A tag never sampled counts as loads, the cautious reading."""
    runs = [bundle.run(n) for n in ("fastmax", "fastmin", "slowmax")]
    if all(r.store_samples is None for r in runs):
        return None
    shares: list[float] = []
    for t in tags:
        samples = sum(r.samples.get(t, 0) for r in runs)
        stores = sum((r.store_samples or {}).get(t, 0) for r in runs)
        shares.append(1.0 - min(stores, samples) / samples if samples else 1.0)
    return shares


def _fill_buffers_full(bundle: ProfileBundle) -> float:
    """The chance that a miss in slowmax found all of its core's fill buffers busy: Erlang C with
    `WINDOW_MLP_MAX` servers, offered the misses in flight by Little's law (misses x the declared
    slow latency / cycles, per vCPU). A store miss retires at once but holds a fill buffer for the
    slow tier's latency; that costs time only when another miss then waits for a buffer."""
    run = bundle.run("slowmax")
    latency_cycles = bundle.host.slow_tier.latency_ns * bundle.host.cpu_frequency_hz / 1e9
    in_flight = run.llc_misses * latency_cycles / run.cycles
    return erlang_c(int(WINDOW_MLP_MAX), in_flight)


def erlang_c(servers: int, offered: float) -> float:
    """The chance that an arrival waits in an M/M/c queue (Erlang's C formula), 1 at or past
    saturation."""
    if offered <= 0.0:
        return 0.0
    if offered >= servers:
        return 1.0
    term = 1.0  # offered^k / k!, from k = 0
    below = 0.0
    for k in range(servers):
        below += term
        term *= offered / (k + 1)
    waiting = term * servers / (servers - offered)
    return waiting / (below + waiting)


@dataclass(frozen=True)
class _Columns:
    """The misses the per-structure penalties are fitted over, one column each: each tag's
    misses, or, where every reference run says which of its samples and stall samples were
    stores', each tag's loads (the first len(tags) columns) and its stores (the rest) apart.

    A store miss holds retirement only while it waits for a fill buffer; a load miss until its
    line arrives. A structure whose misses are first writes with many ways and loads with few
    (a table that fits the cache once written) would otherwise carry the stores' small penalty
    per miss to its loads."""

    tags: list[str]
    split: bool
    samples: dict[RunName, list[int]]
    stall_samples: dict[RunName, list[int]]
    rates_min: list[float]
    rates_max: list[float]

    def per_miss_at_max(self, per_column: list[float]) -> list[float]:
        """Per tag, a per-column penalty as one per miss at fastmax's ways."""
        n = len(self.tags)
        if not self.split:
            return list(per_column)
        out: list[float] = []
        for i in range(n):
            misses = self.rates_max[i] + self.rates_max[n + i]
            loads = self.rates_max[i] / misses if misses > 0 else 1.0
            out.append(loads * per_column[i] + (1.0 - loads) * per_column[n + i])
        return out


def _columns(
    bundle: ProfileBundle,
    tags: list[str],
    table_min: ReferenceRun,
    rates_min: list[float],
    rates_max: list[float],
) -> _Columns:
    """The columns of `bundle` (`_Columns`); `table_min` is the run whose samples gave
    `rates_min` (fastmax's where the miss curve is flat)."""
    names: tuple[RunName, RunName, RunName] = ("fastmax", "fastmin", "slowmax")
    m = bundle.structure_measurements
    runs = [bundle.run(n) for n in names]
    split = (
        m is not None
        and all(r.store_samples is not None for r in runs)
        and all(m.run(n).store_stall_samples is not None for n in names)
    )
    samples = {n: [bundle.run(n).samples.get(t, 0) for t in tags] for n in names}
    stall = {n: [0 if m is None else m.run(n).stall_samples.get(t, 0) for t in tags] for n in names}
    if not split or m is None:  # (split implies measurements; the check narrows the type)
        return _Columns(tags, False, samples, stall, list(rates_min), list(rates_max))

    def apart(all_of: list[int], stores: dict[str, int]) -> list[int]:
        store_part = [min(stores.get(t, 0), a) for t, a in zip(tags, all_of, strict=True)]
        return [a - s for a, s in zip(all_of, store_part, strict=True)] + store_part

    def rates_apart(rates: list[float], run: ReferenceRun) -> list[float]:
        loads: list[float] = []
        for t, rate in zip(tags, rates, strict=True):
            n = run.samples.get(t, 0)
            stores = min((run.store_samples or {}).get(t, 0), n)
            loads.append(rate * (n - stores) / n if n else rate)
        return loads + [r - x for r, x in zip(rates, loads, strict=True)]

    return _Columns(
        tags,
        True,
        {n: apart(samples[n], bundle.run(n).store_samples or {}) for n in names},
        {n: apart(stall[n], m.run(n).store_stall_samples or {}) for n in names},
        rates_apart(rates_min, table_min),
        rates_apart(rates_max, bundle.run("fastmax")),
    )


def _penalty_fields(
    per: tuple[list[float], list[float], list[float]] | None, columns: _Columns
) -> dict[str, list[float] | None]:
    """The fitted model's per-structure penalty fields from the per-column penalties."""
    if per is None:
        return {}
    n = len(columns.tags)
    pd, ps, k = per
    fields: dict[str, list[float] | None] = {
        "p_dram_by_structure": pd[:n],
        "p_slow_by_structure": ps[:n],
        "slow_scale_at_min_by_structure": k[:n],
    }
    if columns.split:
        fields |= {
            "p_dram_store_by_structure": pd[n:],
            "p_slow_store_by_structure": ps[n:],
            "store_scale_at_min_by_structure": k[n:],
            "load_rate_at_min_by_structure": columns.rates_min[:n],
            "load_rate_at_max_by_structure": columns.rates_max[:n],
        }
    return fields


def _per_structure_penalties(
    bundle: ProfileBundle,
    m: StructureMeasurements,
    path: FitPath,
    cpi_cache: float,
    p_dram: float,
    p_slow: float,
    columns: _Columns,
) -> tuple[
    tuple[list[float], list[float], list[float]] | None,
    str,
    tuple[list[float], list[float], list[float]] | None,
]:
    """Each column's DRAM and slow penalties (`_Columns`: a structure's misses, or its loads
    and its stores apart) from its share of the memory-stall samples, and the same before their
    calibration through the reference runs.

    In each run, the run's memory stall per instruction T (the stall counter, or CPI - CPI_cache
    without one) is split over the columns by their stall samples; a column's penalty is its
    stall per instruction over its miss rate. DRAM penalties pool fastmax and fastmin; the slow
    penalty is slowmax's minus the DRAM one (a column with too few samples in slowmax takes its
    DRAM penalty times the slow-over-DRAM ratio of the measured columns of its kind, or of the
    declared latencies where none is measured). Columns with too few samples in all keep the
    workload's penalties.

    The third list is each column's overlap scale at fastmin's way count: its DRAM stall per
    miss at fastmin over that at fastmax. More misses in flight together (a structure that
    misses more with fewer ways) share their waiting, and the slow tier's extra latency is
    waited the same way, so both penalties, measured at fastmax's ways, scale by it towards
    fastmin's. A column measured at both ends gets fastmax's own DRAM penalty (fastmin's is it
    times the scale); one measured at one end only pools them, with scale 1.
    """
    names: tuple[RunName, ...] = ("fastmax", "fastmin", "slowmax")
    stall_pi: dict[str, list[float]] = {}
    for name in names:
        ref = bundle.run(name)
        attributed = sum(m.run(name).stall_samples.values())
        if attributed == 0:
            return None, f"{name} has no memory-stall samples attributed to any structure", None
        if path == "stall_counters":
            total = _stall(ref, "stall_cycles_l3_miss") / ref.instructions
        elif path == "memory_stalls":
            total = _stall(ref, "stall_cycles_memory") / ref.instructions
        else:
            total = max(0.0, _cpi(ref) - cpi_cache)
        stall_pi[name] = [total * x / attributed for x in columns.stall_samples[name]]
    slowmax = bundle.run("slowmax")
    slow_total = sum(slowmax.samples.values())
    rates_min, rates_max = columns.rates_min, columns.rates_max
    rates_slow = (
        [_mpi(slowmax) * x / slow_total for x in columns.samples["slowmax"]]
        if slow_total
        else list(rates_max)
    )
    host = bundle.host
    declared = max(host.slow_tier.latency_ns - host.fast_tier.latency_ns, 0.0) / max(
        host.fast_tier.latency_ns, 1e-9
    )

    def slow_measured(i: int) -> bool:
        return columns.samples["slowmax"][i] >= MIN_STRUCTURE_SAMPLES and rates_slow[i] > 0

    pd: list[float] = []
    ps: list[float] = []
    scale: list[float] = []
    own: list[bool] = []
    kept = 0
    for i in range(len(rates_max)):
        samples = sum(columns.samples[n][i] for n in names)
        fast_rate = rates_max[i] + rates_min[i]
        if samples < MIN_STRUCTURE_SAMPLES or fast_rate <= 0:
            pd.append(p_dram)
            ps.append(p_slow)
            scale.append(1.0)
            own.append(False)
            # A split tag that never stores (or never loads) has an empty column: not "kept".
            if samples > 0 or not columns.split:
                kept += 1
            continue
        own.append(True)
        k = _overlap_scale(
            stall_pi,
            rates_min[i],
            rates_max[i],
            i,
            (columns.samples["fastmax"][i], columns.samples["fastmin"][i]),
        )
        if k is None:
            d = (stall_pi["fastmax"][i] + stall_pi["fastmin"][i]) / fast_rate
            k = 1.0
        else:
            # Measured at both ends: fastmax's own penalty, fastmin's through the scale.
            d = stall_pi["fastmax"][i] / rates_max[i]
        if slow_measured(i):
            ps.append(max(0.0, stall_pi["slowmax"][i] / rates_slow[i] - d))
        else:
            ps.append(math.nan)  # below, from the measured columns of its kind
        pd.append(d)
        scale.append(k)
    # A column with too few misses in slowmax to measure (a structure's loads where it only
    # stores with every way) is slowed as the measured columns of its kind are: their slow
    # stall over their DRAM stall at slowmax's rates (queueing included), else the declared
    # latencies' ratio.
    n = len(columns.tags)
    kinds = [range(n), range(n, 2 * n)] if columns.split else [range(n)]
    for kind in kinds:
        measured = [j for j in kind if own[j] and slow_measured(j)]
        dram = sum(rates_slow[j] * pd[j] for j in measured)
        extra = sum(rates_slow[j] * ps[j] for j in measured)
        ratio = extra / dram if dram > 0 else declared
        for j in kind:
            if math.isnan(ps[j]):
                ps[j] = pd[j] * ratio
    fitted = sum(own)
    if fitted == 0:
        return None, "no structure has enough samples for its own penalties", None
    what = "loads and stores of structures" if columns.split else "structures"
    reason = (
        f"per-structure penalties for {fitted} of {fitted + kept} {what} from"
        f" {m.source} stall samples ({m.schema_version})"
    )
    if kept:
        reason += f"; {kept} with fewer than {MIN_STRUCTURE_SAMPLES} samples keep the workload's"
    per = _through_references(bundle, cpi_cache, (pd, ps, scale), own, rates_min, rates_max)
    return per, reason, (pd, ps, scale)


def _through_references(
    bundle: ProfileBundle,
    cpi_cache: float,
    per: tuple[list[float], list[float], list[float]],
    own: list[bool],
    rates_min: list[float],
    rates_max: list[float],
) -> tuple[list[float], list[float], list[float]]:
    """The per-structure penalties' levels set so that the model passes through the three
    measured CPIs: the stall samples give the split between structures, the cycles the level.
    In turn, fastmax's CPI scales the DRAM penalties, fastmin's the overlap scales, slowmax's
    the slow penalties; a factor outside `CALIBRATION_RANGE` means the samples and the cycles
    disagree, and it is left (the residual is then flagged). Structures that kept the workload's
    penalties (too few samples) keep them: only those with their own are moved."""
    pd, ps, k = (list(x) for x in per)
    lo, hi = CALIBRATION_RANGE

    def scaled(values: list[float], weights: list[float], target: float) -> list[float]:
        # Only the structures with their own penalties move: the target less the others' part.
        fixed = sum(w * v for w, v, o in zip(weights, values, own, strict=True) if not o)
        movable = sum(w * v for w, v, o in zip(weights, values, own, strict=True) if o)
        want = target - fixed
        if movable <= 0 or want <= 0 or not lo <= want / movable <= hi:
            return values
        return [v * want / movable if o else v for v, o in zip(values, own, strict=True)]

    fastmax, fastmin, slowmax = (bundle.run(n) for n in ("fastmax", "fastmin", "slowmax"))
    pd = scaled(pd, rates_max, _cpi(fastmax) - cpi_cache)
    weights = [a * p for a, p in zip(rates_min, pd, strict=True)]
    k = scaled(k, weights, _cpi(fastmin) - cpi_cache)
    ps = scaled(ps, rates_max, _cpi(slowmax) - cpi_cache - _dot(rates_max, pd))
    return pd, ps, k


def _reference_cpis(
    cpi_cache: float, columns: _Columns, per: tuple[list[float], list[float], list[float]]
) -> dict[str, float]:
    """The per-structure model's CPI at the three reference runs."""
    pd, ps, k = per
    rates_min, rates_max = columns.rates_min, columns.rates_max
    return {
        "fastmax": cpi_cache + _dot(rates_max, pd),
        "fastmin": cpi_cache + sum(a * p * c for a, p, c in zip(rates_min, pd, k, strict=True)),
        "slowmax": cpi_cache + sum(a * (p + q) for a, p, q in zip(rates_max, pd, ps, strict=True)),
    }


def _sweep_cpi(bundle: ProfileBundle) -> list[float] | None:
    """The way sweep's CPI per curve point, where every point has it (the bundle's checks allow
    all or none)."""
    cpis = [p.cycles_per_instruction for p in bundle.miss_curve]
    if any(c is None for c in cpis):
        return None
    return [float(c) for c in cpis if c is not None]


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _overlap_scale(
    stall_pi: Mapping[str, list[float]],
    rate_min: float,
    rate_max: float,
    i: int,
    samples: tuple[int, int],
) -> float | None:
    """A column's DRAM stall per miss at fastmin over that at fastmax, within
    `OVERLAP_SCALE_RANGE` (None where either end, `samples` at fastmax and fastmin, has too few
    samples to tell)."""
    enough = all(n >= MIN_STRUCTURE_SAMPLES for n in samples)
    if not enough or rate_min <= 0 or rate_max <= 0 or stall_pi["fastmax"][i] <= 0:
        return None
    at_min = stall_pi["fastmin"][i] / rate_min
    at_max = stall_pi["fastmax"][i] / rate_max
    lo, hi = OVERLAP_SCALE_RANGE
    return min(max(at_min / at_max, lo), hi)


def _window_mlp(bundle: ProfileBundle, p_slow: list[float], queue: SlowQueue | None) -> list[float]:
    """How many of a structure's slow misses overlap: the extra latency they waited (declared,
    loaded as measured) over the extra stall each cost. On-core work cannot hide this part (it
    already hides what it can of the DRAM latency), so unlike L_dram / P_dram it is not inflated
    by overlap with computation. Bounded by the line fill buffers (12 on Skylake-SP)."""
    h = bundle.host
    load = (
        queue.loaded(queue.background_utilization + queue.own_utilization_at_slowmax)
        if queue
        else 1.0
    )
    extra = (
        max(h.slow_tier.latency_ns * load - h.fast_tier.latency_ns, 0.0) * h.cpu_frequency_hz / 1e9
    )
    return [min(max(extra / p, 1.0), WINDOW_MLP_MAX) if p > 0 else 1.0 for p in p_slow]


def _utilization(tier: MemoryTier, read_bytes: float, write_bytes: float, seconds: float) -> float:
    read_bw = tier.read_bandwidth_bytes_per_second or tier.bandwidth_bytes_per_second
    write_bw = tier.write_bandwidth_bytes_per_second or read_bw
    assert read_bw is not None and write_bw is not None
    return (read_bytes / read_bw + write_bytes / write_bw) / seconds


def _slow_queue(bundle: ProfileBundle, m: StructureMeasurements | None) -> SlowQueue | None:
    """The slow tier's load in slowmax, split into this workload's and everyone else's."""
    tier = bundle.host.slow_tier
    if m is None or (
        tier.bandwidth_bytes_per_second is None and tier.read_bandwidth_bytes_per_second is None
    ):
        return None
    traffic = m.run("slowmax").slow_tier
    slowmax = bundle.run("slowmax")
    if traffic is None or slowmax.llc_misses == 0:
        return None
    seconds = slowmax.wall_seconds
    own_read = min(float(traffic.read_bytes), slowmax.llc_misses * 64.0)
    # Reads beyond this workload's own fills are other users'; write-backs are taken as its own.
    others = _utilization(tier, traffic.read_bytes - own_read, 0.0, seconds)
    own = _utilization(tier, own_read, traffic.write_bytes, seconds)
    return SlowQueue(
        kappa=QUEUE_KAPPA,
        background_utilization=min(others, QUEUE_UTILIZATION_CAP),
        own_utilization_at_slowmax=own,
        slowmax_cpi=_cpi(slowmax),
        slowmax_mpi=_mpi(slowmax),
    )


def profile_backend(bundle: ProfileBundle) -> Literal["hardware", "simulator", "trace"]:
    """Which agent backend took the profile, as far as the bundle says: the trace and the
    simulator name themselves as the source of their stall samples."""
    m = bundle.structure_measurements
    if m is not None and m.source in ("trace", "simulator"):
        return m.source
    # Without stall samples, the host description still says whose timing model it is.
    if "tmc sim host model" in bundle.host.cpu_model:
        return "trace"
    if "(tmc sim)" in bundle.host.cpu_model:
        return "simulator"
    return "hardware"


def _diagnose(
    bundle: ProfileBundle,
    residuals: Mapping[RunName, float],
    coverage: Mapping[RunName, float],
    mlp: float | None,
    extra_ns: float | None,
    queue: SlowQueue | None,
) -> list[Flag]:
    out: list[Flag] = []
    backend = profile_backend(bundle)
    # On the simulator and the trace backend the host description and the reference runs' timing
    # are tmc's own host model: there is no machine to keep quiet and no latency to re-declare,
    # so the advice differs, and flags about them would only cry wolf.
    own_host = backend != "hardware"
    worst = max(residuals, key=lambda k: abs(residuals[k]))
    if abs(residuals[worst]) > CPI_RESIDUAL_FLAG:
        advice = (
            " The reference runs were timed by tmc's host model, so this is the model's own"
            " limit, not noise: its intervals widen with the residual; make the verification"
            " runs the recommendation names before relying on a tight SLO"
            if own_host
            else " Check that the three runs ran the same input on a quiet machine, then"
            " profile again"
        )
        out.append(
            Flag(
                code="cpi_residual",
                message=f"the model misses {worst}'s measured CPI by {residuals[worst]:+.1%}"
                f" (threshold {CPI_RESIDUAL_FLAG:.0%}): predictions between the reference runs"
                f" are less certain.{advice}",
            )
        )
    # A trace attributes every LLC access to its tag: there is no PEBS sample to lose.
    low = {k: v for k, v in coverage.items() if 0 < v < LOW_PEBS_COVERAGE}
    if low and backend != "trace":
        shown = ", ".join(f"{k} {v:.0%}" for k, v in low.items())
        out.append(
            Flag(
                code="low_pebs_coverage",
                message=f"PEBS samples explain little of the LLC-miss counter ({shown}): stores"
                " or shadowed loads go unsampled, so the placement may rank write-heavy"
                " structures colder than they are. Keep structures that are mostly written in"
                " DRAM, or profile with a store-sampling event where the PMU has one",
            )
        )
    if mlp is not None and not own_host and not MLP_PLAUSIBLE[0] <= mlp <= MLP_PLAUSIBLE[1]:
        out.append(
            Flag(
                code="implausible_mlp",
                message=f"the fitted DRAM penalty implies {mlp:.1f} misses in flight with the"
                f" declared {bundle.host.fast_tier.latency_ns:g} ns DRAM latency (plausible:"
                f" {MLP_PLAUSIBLE[0]:g}-{MLP_PLAUSIBLE[1]:g}). Check the host's declared DRAM"
                " latency and that fastmin really ran with fewer ways",
            )
        )
    if mlp is not None and extra_ns is not None:
        declared = bundle.host.slow_tier.latency_ns - bundle.host.fast_tier.latency_ns
        loaded = (
            queue.loaded(queue.background_utilization + queue.own_utilization_at_slowmax)
            if queue
            else 1.0
        )
        expected = bundle.host.slow_tier.latency_ns * loaded - bundle.host.fast_tier.latency_ns
        below, above = SLOW_LATENCY_BAND
        if declared > 0 and not own_host and not below * expected <= extra_ns <= above * expected:
            out.append(
                Flag(
                    code="slow_latency_mismatch",
                    message=f"slowmax implies {extra_ns:.0f} ns more per miss than DRAM, but the"
                    f" host declares {declared:.0f} ns (with the measured load: {expected:.0f} ns)."
                    " Check that slowmax was bound to the slow tier and the host's declared"
                    " latencies; if they are right, the workload's parallelism changes on the slow"
                    " tier and predictions at mixed placements are less certain",
                )
            )
    return out
