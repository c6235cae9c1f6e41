"""What the profiler agent would measure on the simulated host: a `tmc.profile/v1` bundle.

Three reference runs (paper Table 2) give the PMU counters an agent reads — instructions, cycles,
CYCLE_ACTIVITY.STALLS_L3_MISS (or none, as in most VMs), LLC misses, wall time — and PEBS
MEM_LOAD_RETIRED.L3_MISS samples: every SI-th load miss, attributed to the tag of the address it
touched. The miss curve is what a resctrl sweep of way masks gives. Run-to-run noise is seeded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from model.bundle import (
    HostDescription,
    MemoryTier,
    MissCurvePoint,
    ProfileBundle,
    ReferenceRun,
    RunConfiguration,
    RunName,
    RunStructureMeasurement,
    Structure,
    StructureMeasurements,
    TierTraffic,
    WorkloadId,
    check_bundle,
)
from sim.engine import Prepared, prepare
from sim.host import RunResult, run_many
from sim.kernels import FLAG_WRITE
from sim.machine import Host, Tier
from sim.placement import Layout, all_in
from sim.workload import LINE_BYTES, Workload

DEFAULT_SAMPLING_INTERVAL = 10007
# One memory-stall sample per this many stall cycles (a prime, as perf's periods usually are).
DEFAULT_STALL_SAMPLE_PERIOD = 100_003


class NoiseSpec(BaseModel):
    """Run-to-run variation of the counters (relative standard deviations) and PEBS behaviour."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    instructions: float = Field(default=0.0005, ge=0.0, le=0.2)
    cycles: float = Field(default=0.01, ge=0.0, le=0.5)
    stall_cycles: float = Field(default=0.01, ge=0.0, le=0.5, description="on top of cycles'")
    llc_misses: float = Field(default=0.005, ge=0.0, le=0.5)
    miss_curve: float = Field(default=0.01, ge=0.0, le=0.09)
    pebs_phase: Literal["random", "deterministic"] = "random"
    pebs_shadow: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="share of samples attributed to the next load instead (PEBS shadowing)",
    )
    stall_counters: bool = Field(default=True, description="False: the PMU has no L3 stalls")


QUIET = NoiseSpec(
    instructions=0.0,
    cycles=0.0,
    stall_cycles=0.0,
    llc_misses=0.0,
    miss_curve=0.0,
    pebs_phase="deterministic",
)


def _tier(t: Tier) -> MemoryTier:
    return MemoryTier(
        kind=t.kind,
        latency_ns=t.latency_ns,
        bandwidth_bytes_per_second=t.read_bandwidth_bytes_per_second,
        capacity_bytes=t.capacity_bytes,
        read_bandwidth_bytes_per_second=t.read_bandwidth_bytes_per_second,
        write_bandwidth_bytes_per_second=t.write_bandwidth_bytes_per_second,
    )


def host_description(host: Host) -> HostDescription:
    return HostDescription(
        host_kind=host.host_kind,
        cpu_model=host.cpu_model,
        cpu_frequency_hz=host.cpu_frequency_hz,
        cores=host.cores,
        llc_ways=host.llc_ways,
        llc_size_bytes=host.llc_size_bytes,
        min_llc_ways=host.min_llc_ways,
        fast_tier=_tier(host.fast_tier),
        slow_tier=_tier(host.slow_tier),
    )


def load_miss_tags(
    prep: Prepared, ways: int, shadow: float, rng: np.random.Generator
) -> NDArray[np.int64]:
    """Tag index of every load miss of the measured region, in program order.

    With shadowing, a share of them carries the tag of the next load instead: the sample lands on
    the instruction after the one that missed.
    """
    tr = prep.trace
    m = prep.measured()
    sid = tr.sid[m].astype(np.int64)
    is_load = (tr.flags[m] & FLAG_WRITE) == 0
    miss = is_load & (prep.depth[m] >= ways)
    tags: NDArray[np.int64] = sid[miss]
    if shadow > 0.0 and tags.size:
        loads = np.flatnonzero(is_load)
        after = np.searchsorted(loads, np.flatnonzero(miss), side="right")
        nxt = sid[loads[np.minimum(after, loads.size - 1)]]
        shadowed = rng.random(tags.size) < shadow
        tags = np.where(shadowed, nxt, tags)
    return tags


def pebs_samples(
    tags: NDArray[np.int64],
    events: int,
    interval: int,
    n_tags: int,
    phase: Literal["random", "deterministic"],
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """Samples per tag from every `interval`-th of `events` load misses of the whole run.

    The run's miss stream is the measured region's stream repeated, so the j-th sample is event
    `first + j * interval` of it.
    """
    first = int(rng.integers(0, interval)) if phase == "random" else interval - 1
    if events <= first or tags.size == 0:
        return np.zeros(n_tags, dtype=np.int64)
    n = (events - 1 - first) // interval + 1
    pos = (first + np.arange(n, dtype=np.int64) * interval) % tags.size
    counts: NDArray[np.int64] = np.bincount(tags[pos], minlength=n_tags).astype(np.int64)
    return counts


def _reference_run(
    name: RunName,
    result: RunResult,
    prep: Prepared,
    noise: NoiseSpec,
    interval: int,
    rng: np.random.Generator,
) -> ReferenceRun:
    w = prep.workload

    def wobble(sigma: float) -> float:
        return float(1.0 + sigma * rng.standard_normal()) if sigma > 0 else 1.0

    instructions = max(1, round(result.instructions * wobble(noise.instructions)))
    more = instructions / result.instructions
    run_factor = wobble(noise.cycles)
    cycles = max(1, round(result.cycles * more * run_factor))
    stall = round(result.stall_cycles_l3_miss * more * run_factor * wobble(noise.stall_cycles))
    miss_factor = more * wobble(noise.llc_misses)
    llc_misses = round(result.llc_misses * miss_factor)
    tags = load_miss_tags(prep, result.llc_ways, noise.pebs_shadow, rng)
    samples = pebs_samples(
        tags,
        round(result.llc_load_misses * miss_factor),
        interval,
        len(w.structures),
        noise.pebs_phase,
        rng,
    )
    return ReferenceRun(
        name=name,
        configuration=RunConfiguration(slow_ratio=result.slow_ratio, llc_ways=result.llc_ways),
        instructions=instructions,
        cycles=cycles,
        stall_cycles_l3_miss=min(stall, cycles) if noise.stall_counters else None,
        llc_misses=min(llc_misses, instructions),
        wall_seconds=cycles / (prep.host.cpu_frequency_hz * w.vcpus),
        samples={s.tag: int(c) for s, c in zip(w.structures, samples, strict=True)},
    )


def tier_traffic(result: RunResult, tier: Tier, slow: bool) -> TierTraffic:
    """What the tier's controller counts in a run: this VM's fills and write-backs, and the other
    users' traffic (`background_utilization`, counted as reads)."""
    t = result.slow_tier if slow else result.fast_tier
    others = (
        tier.background_utilization * tier.read_bandwidth_bytes_per_second * result.wall_seconds
    )
    return TierTraffic(
        read_bytes=round(t.misses * LINE_BYTES + others), write_bytes=t.writebacks * LINE_BYTES
    )


def structure_measurement(
    name: RunName,
    result: RunResult,
    host: Host,
    period: int,
    noisy: bool,
    scale: float,
    rng: np.random.Generator,
) -> RunStructureMeasurement:
    """Memory-stall samples per tag: one every `period` cycles in which retirement waited on an
    LLC-missing load, attributed to that load's structure (Poisson counts when `noisy`)."""
    expected = np.asarray([s.stall_cycles_l3_miss * scale / period for s in result.structures])
    counts = rng.poisson(expected) if noisy else np.rint(expected)
    return RunStructureMeasurement(
        run=name,
        stall_samples={s.tag: int(c) for s, c in zip(result.structures, counts, strict=True)},
        fast_tier=tier_traffic(result, host.fast_tier, False),
        slow_tier=tier_traffic(result, host.slow_tier, True),
    )


def reference_runs(
    prep: Prepared, ways_min: int, ways_max: int, layout: Layout = "interleave"
) -> dict[RunName, RunResult]:
    """Noise-free fastmax, fastmin and slowmax (paper Table 2)."""
    w = prep.workload
    fast, slow = all_in(w, "fast"), all_in(w, "slow")
    fastmax, fastmin, slowmax = run_many(
        prep, [(0.0, ways_max, fast), (0.0, ways_min, fast), (1.0, ways_max, slow)], layout
    )
    return {"fastmax": fastmax, "fastmin": fastmin, "slowmax": slowmax}


def reference_bundle(
    workload: Workload,
    host: Host,
    noise: NoiseSpec | None = None,
    seed: int = 0,
    *,
    sampling_interval: int = DEFAULT_SAMPLING_INTERVAL,
    ways_min: int = 1,
    ways_max: int = 28,
    curve_ways: Sequence[int] | None = None,
    layout: Layout = "interleave",
    structure_measurements: bool = True,
    stall_sample_period: int = DEFAULT_STALL_SAMPLE_PERIOD,
) -> ProfileBundle:
    """The bundle an agent would upload after profiling `workload` on `host`.

    `noise=None` uses the default `NoiseSpec()`; pass `QUIET` for exact counters. The trace comes
    from `seed`, and so does the noise, so one seed gives one bundle.
    With `structure_measurements` (default), the bundle also carries memory-stall samples per tag
    and the tiers' traffic in each run (`tmc.structure-measurements/v1`).
    """
    noise = NoiseSpec() if noise is None else noise
    if not 1 <= ways_min < ways_max <= host.llc_ways:
        raise ValueError("need 1 <= ways_min < ways_max <= host.llc_ways")
    ways = sorted(set(curve_ways or range(ways_min, ways_max + 1)) | {ways_min, ways_max})
    prep = prepare(workload, host, seed, [ways_min, ways_max])
    runs = reference_runs(prep, ways_min, ways_max, layout)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x6E6F697365]))
    measured = [
        _reference_run(name, runs[name], prep, noise, sampling_interval, rng)
        for name in ("fastmax", "fastmin", "slowmax")
    ]
    per_instruction = prep.misses_by_ways(max(ways)) / prep.measured_instructions()
    curve = [
        MissCurvePoint(
            llc_ways=w,
            misses_per_instruction=float(
                per_instruction[w - 1] * (1.0 + noise.miss_curve * rng.standard_normal())
                if noise.miss_curve > 0
                else per_instruction[w - 1]
            ),
        )
        for w in ways
    ]
    extra = None
    if structure_measurements:
        # A separate stream, so that bundles with and without these fields agree on the rest.
        srng = np.random.default_rng(np.random.SeedSequence([seed, 0x7374616C6C]))
        noisy = noise != QUIET
        extra = StructureMeasurements(
            source="simulator",
            stall_sample_period_cycles=stall_sample_period,
            runs=[
                structure_measurement(
                    run.name,
                    runs[run.name],
                    host,
                    stall_sample_period,
                    noisy,
                    run.cycles / max(runs[run.name].cycles, 1),
                    srng,
                )
                for run in measured
            ],
        )
    bundle = ProfileBundle(
        workload=WorkloadId(
            name=workload.name, input_label=workload.input_label, version=workload.version
        ),
        host=host_description(host),
        vcpus=workload.vcpus,
        sampling_interval=sampling_interval,
        footprint_bytes=workload.footprint_bytes,
        structures=[Structure(tag=s.tag, size_bytes=s.size_bytes) for s in workload.structures],
        runs=measured,
        miss_curve=curve,
        structure_measurements=extra,
    )
    check_bundle(bundle)
    return bundle
