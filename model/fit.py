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
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from model.bundle import INSTRUCTION_SPREAD_FLAG, ProfileBundle, ReferenceRun, WorkloadId
from model.misscurve import anchor_curve

MODEL_VERSION = "tmc-model/1"

FitPath = Literal["stall_counters", "eq4"]
# A slow tier whose fitted penalty is below this share of the DRAM penalty is "no slower than DRAM".
NEGLIGIBLE_SLOW_PENALTY = 0.01


class Flag(BaseModel):
    """Borderline data the fit handled, and how. Codes are stable for dashboards and alerts."""

    model_config = ConfigDict(frozen=True)
    code: str
    message: str


class FitDiagnostics(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: FitPath
    flags: list[Flag] = Field(default_factory=list)
    cpi_residuals: dict[str, float] = Field(
        description="(model - measured) / measured CPI at each reference run"
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
    access_rate_at_min: list[float] = Field(description="per tag, accesses/instruction at ways_min")
    access_rate_at_max: list[float] = Field(description="per tag, accesses/instruction at ways_max")
    cpi_cache: float
    p_dram: float = Field(description="amortised DRAM penalty, cycles per LLC miss")
    p_slow: float = Field(description="amortised extra slow-tier penalty, cycles per slow access")
    instructions: float
    fastmax_seconds: float
    diagnostics: FitDiagnostics

    def cpi(self, mar: float, mar_slow: float) -> float:
        return self.cpi_cache + mar * self.p_dram + mar_slow * self.p_slow

    @property
    def fastmax_cpi(self) -> float:
        return self.cpi(self.curve_mar_at(self.ways_max), 0.0)

    def curve_mar_at(self, ways: int) -> float:
        # Exact lookup at the references; both are on the curve by the bundle's checks.
        return self.curve_mar[self.curve_ways.index(ways)]


def _cpi(run: ReferenceRun) -> float:
    return run.cycles / run.instructions


def _mpi(run: ReferenceRun) -> float:
    return run.llc_misses / run.instructions


def fit(bundle: ProfileBundle) -> FittedModel:
    """Fit a checked bundle. Borderline data is handled and reported in ``diagnostics.flags``."""
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
    rates_min = _access_rates(fastmin, tags, sizes, mar_min, flags)
    rates_max = _access_rates(fastmax, tags, sizes, mar_max, flags)
    for tag in tags:
        if fastmin.samples.get(tag, 0) == 0 and fastmax.samples.get(tag, 0) == 0:
            flags.append(
                Flag(
                    code="structure_without_samples",
                    message=f"{tag}: no PEBS samples in fastmin or fastmax; treated as the coldest"
                    " data (a longer run or a smaller sampling interval would tell)",
                )
            )

    # 3. Penalties and on-core CPI.
    runs = (fastmax, fastmin, slowmax)
    path: FitPath
    if all(r.stall_cycles_l3_miss is not None for r in runs):
        path = "stall_counters"
        cpi_cache, p_dram, p_slow = _fit_from_stalls(fastmax, fastmin, slowmax, flags)
    else:
        path = "eq4"
        if any(r.stall_cycles_l3_miss is not None for r in runs):
            flags.append(
                Flag(
                    code="partial_stall_counters",
                    message="stall cycles reported for some runs only; fitted from CPIs (Eq. 4)",
                )
            )
        cpi_cache, p_dram, p_slow = _fit_from_cpi(fastmax, fastmin, slowmax, flags)

    if p_slow <= NEGLIGIBLE_SLOW_PENALTY * max(p_dram, 1e-9):
        flags.append(
            Flag(
                code="slow_tier_not_slower",
                message="slowmax ran no slower than fastmax: the slow tier adds no measurable"
                " penalty for this workload, so slow memory costs it nothing in time",
            )
        )
    if bundle.host.slow_tier.latency_ns <= bundle.host.fast_tier.latency_ns:
        flags.append(
            Flag(
                code="slow_tier_nominally_fast",
                message="the host declares a slow tier no slower than its DRAM",
            )
        )

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
    def model_cpi(mar: float, mar_slow: float) -> float:
        return cpi_cache + mar * p_dram + mar_slow * p_slow

    predicted = {
        "fastmax": model_cpi(mar_max, 0.0),
        "fastmin": model_cpi(mar_min, 0.0),
        "slowmax": model_cpi(mar_max, mar_max),
    }
    residuals = {r.name: predicted[r.name] / _cpi(r) - 1.0 for r in runs}
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

    return FittedModel(
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
        access_rate_at_min=rates_min,
        access_rate_at_max=rates_max,
        cpi_cache=cpi_cache,
        p_dram=p_dram,
        p_slow=p_slow,
        instructions=sum(instructions) / 3.0,
        fastmax_seconds=fastmax.wall_seconds,
        diagnostics=FitDiagnostics(
            path=path,
            flags=flags,
            cpi_residuals=residuals,
            pebs_coverage=coverage,
            samples_total={r.name: sum(r.samples.values()) for r in runs},
            mlp_estimate=mlp,
            slow_extra_latency_ns_estimate=extra_ns,
        ),
    )


def _access_rates(
    run: ReferenceRun, tags: list[str], sizes: list[int], mar: float, flags: list[Flag]
) -> list[float]:
    total = sum(run.samples.values())
    if total == 0:
        flags.append(
            Flag(
                code="no_samples_in_run",
                message=f"{run.name} has no PEBS samples; its accesses are attributed by size",
            )
        )
        footprint = sum(sizes)
        return [mar * size / footprint for size in sizes]
    return [mar * run.samples.get(tag, 0) / total for tag in tags]


def _fit_from_stalls(
    fastmax: ReferenceRun, fastmin: ReferenceRun, slowmax: ReferenceRun, flags: list[Flag]
) -> tuple[float, float, float]:
    def stall_pi(run: ReferenceRun) -> float:
        assert run.stall_cycles_l3_miss is not None
        return run.stall_cycles_l3_miss / run.instructions

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
    cpi_cache = sum((r.cycles - (r.stall_cycles_l3_miss or 0)) / r.instructions for r in runs) / 3
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
