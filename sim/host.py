"""Ground truth: what a workload's run takes on a simulated tiered-memory host.

    simulate(workload, host, slow_ratio, llc_ways, seed)       one configuration
    ground_truth_grid(workload, host, slow_ratios, ways, seed)  many, sharing one trace

Time comes from simulating accesses (an LRU LLC partition, an out-of-order window over the
misses, tier latencies with bandwidth queueing), never from the TMC equation. Counts measured on
the trace are scaled to the workload's `instructions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

from model.grid import PAPER_LLC_WAYS, PAPER_SLOW_RATIOS
from model.resources import split_memory
from sim import kernels as kern
from sim.engine import Job, Prepared, Timed, prepare, time_jobs
from sim.machine import Host, Tier
from sim.placement import (
    Layout,
    PlacementLike,
    StructurePlan,
    oracle_plan,
    plan_from,
)
from sim.workload import LINE_BYTES, Workload

__all__ = [
    "Host",
    "RunResult",
    "StructureResult",
    "TierResult",
    "TruthGrid",
    "ground_truth_grid",
    "run_many",
    "simulate",
]


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class StructureResult(_Out):
    tag: str
    size_bytes: int
    fast_bytes: int
    slow_bytes: int
    llc_misses: int
    llc_load_misses: int
    slow_misses: int
    stall_cycles: int  # cycles the window stood still waiting on this structure's access
    stall_cycles_l3_miss: int  # of which the access had missed the LLC


class TierResult(_Out):
    kind: str
    misses: int
    writebacks: int
    mean_latency_ns: float  # as seen by misses, queueing included
    mean_utilization: float  # of the tier's bandwidth, at the misses, others' traffic included
    bytes_per_second: float  # this VM's reads and write-backs


class RunResult(_Out):
    """One run of the whole workload in one configuration (all vCPUs together)."""

    workload: str
    slow_ratio: float
    llc_ways: int
    dram_bytes: int
    slow_bytes: int
    instructions: int
    cycles: int
    stall_cycles: int
    stall_cycles_l3_miss: int
    llc_misses: int
    llc_load_misses: int
    slow_misses: int
    wall_seconds: float
    cpi: float
    effective_mlp: float  # mean miss latency / L3-miss stall cycles per load miss
    structures: list[StructureResult]
    fast_tier: TierResult
    slow_tier: TierResult


def _plans(
    prep: Prepared,
    slow_ratio: float,
    ways: int,
    placement: Sequence[PlacementLike] | None,
) -> list[StructurePlan]:
    if placement is not None:
        return plan_from(prep.workload, placement)
    return oracle_plan(prep.workload, prep.misses_per_structure(ways), slow_ratio)


def _tier_result(
    host: Host, tier: Tier, row: NDArray[np.float64], slow: bool, scale: float, seconds: float
) -> TierResult:
    lat, n, rho, wbc = (
        (kern.C_LAT_SLOW, kern.C_N_SLOW, kern.C_RHO_SLOW, kern.C_WB_SLOW)
        if slow
        else (kern.C_LAT_FAST, kern.C_N_FAST, kern.C_RHO_FAST, kern.C_WB_FAST)
    )
    count = row[n]
    misses = count * scale
    writebacks = row[wbc] * scale
    return TierResult(
        kind=tier.kind,
        misses=round(misses),
        writebacks=round(writebacks),
        mean_latency_ns=float(row[lat] / count * 1e9 / host.cpu_frequency_hz) if count else 0.0,
        mean_utilization=float(row[rho] / count) if count else tier.background_utilization,
        bytes_per_second=float((misses + writebacks) * LINE_BYTES / seconds) if seconds else 0.0,
    )


def result_of(
    prep: Prepared,
    slow_ratio: float,
    ways: int,
    plans: Sequence[StructurePlan],
    row: NDArray[np.float64],
    per_structure: NDArray[np.float64],
) -> RunResult:
    w, host = prep.workload, prep.host
    scale = w.instructions / row[kern.C_INSTRUCTIONS]
    cycles = row[kern.C_CYCLES] * scale
    seconds = cycles / (host.cpu_frequency_hz * w.vcpus)
    load_misses = row[kern.C_LOAD_MISSES]
    stall_l3 = row[kern.C_STALL_L3]
    n_miss = row[kern.C_N_FAST] + row[kern.C_N_SLOW]
    mean_lat = (row[kern.C_LAT_FAST] + row[kern.C_LAT_SLOW]) / n_miss if n_miss else 0.0
    mlp = mean_lat * load_misses / stall_l3 if stall_l3 > 0 else 0.0
    dram, slow = split_memory(w.footprint_bytes, slow_ratio)
    return RunResult(
        workload=w.name,
        slow_ratio=slow_ratio,
        llc_ways=ways,
        dram_bytes=dram,
        slow_bytes=slow,
        instructions=w.instructions,
        cycles=round(cycles),
        stall_cycles=round(row[kern.C_STALL] * scale),
        stall_cycles_l3_miss=round(stall_l3 * scale),
        llc_misses=round((load_misses + row[kern.C_STORE_MISSES]) * scale),
        llc_load_misses=round(load_misses * scale),
        slow_misses=round(row[kern.C_SLOW_MISSES] * scale),
        wall_seconds=float(seconds),
        cpi=float(cycles / w.instructions),
        effective_mlp=float(mlp),
        structures=[
            StructureResult(
                tag=p.tag,
                size_bytes=p.size_bytes,
                fast_bytes=p.fast_bytes,
                slow_bytes=p.slow_bytes,
                llc_misses=round(ps[kern.S_MISSES] * scale),
                llc_load_misses=round(ps[kern.S_LOAD_MISSES] * scale),
                slow_misses=round(ps[kern.S_SLOW_MISSES] * scale),
                stall_cycles=round(ps[kern.S_STALL] * scale),
                stall_cycles_l3_miss=round(ps[kern.S_STALL_L3] * scale),
            )
            for p, ps in zip(plans, per_structure, strict=True)
        ],
        fast_tier=_tier_result(host, host.fast_tier, row, False, scale, seconds),
        slow_tier=_tier_result(host, host.slow_tier, row, True, scale, seconds),
    )


def _check_config(host: Host, slow_ratio: float, ways: int) -> None:
    if not 0.0 <= slow_ratio <= 1.0:
        raise ValueError(f"slow_ratio {slow_ratio} outside [0, 1]")
    if not 1 <= ways <= host.llc_ways:
        raise ValueError(f"llc_ways {ways} outside 1..{host.llc_ways}")


def run_many(
    prep: Prepared,
    configs: Sequence[tuple[float, int, Sequence[PlacementLike] | None]],
    layout: Layout = "interleave",
) -> list[RunResult]:
    """Time several (slow_ratio, ways, placement or None for the oracle) on one prepared trace."""
    for r, w, _ in configs:
        _check_config(prep.host, r, w)
    prep.ensure_ways([w for _, w, _ in configs])
    plans = [_plans(prep, r, w, p) for r, w, p in configs]
    timed: Timed = time_jobs(
        prep, [Job(ways=w, plans=pl) for (_, w, _), pl in zip(configs, plans, strict=True)], layout
    )
    return [
        result_of(prep, r, w, pl, timed.counters[i], timed.per_structure[i])
        for i, ((r, w, _), pl) in enumerate(zip(configs, plans, strict=True))
    ]


def simulate(
    workload: Workload,
    host: Host,
    slow_ratio: float,
    llc_ways: int,
    seed: int = 0,
    placement: Sequence[PlacementLike] | None = None,
    layout: Layout = "interleave",
) -> RunResult:
    """The ground-truth run of `workload` with `slow_ratio` of its memory slow and `llc_ways` ways.

    Without a `placement`, an oracle fills the slow share with the structures of fewest true
    misses per byte at this way count; with one (e.g. tmc's plan), that plan is followed. The same
    seed gives the same trace, so configurations compare without trace noise.
    """
    _check_config(host, slow_ratio, llc_ways)
    prep = prepare(workload, host, seed, [llc_ways])
    return run_many(prep, [(slow_ratio, llc_ways, placement)], layout)[0]


@dataclass(frozen=True)
class TruthGrid:
    """Ground truth over slow_ratios x llc_ways; arrays are indexed [ratio, ways]."""

    workload: str
    slow_ratios: tuple[float, ...]
    llc_ways: tuple[int, ...]
    seconds: NDArray[np.float64]
    cpi: NDArray[np.float64]
    llc_misses: NDArray[np.float64]
    slow_misses: NDArray[np.float64]
    runs: list[list[RunResult]]

    def run(self, slow_ratio: float, llc_ways: int) -> RunResult:
        return self.runs[self.slow_ratios.index(slow_ratio)][self.llc_ways.index(llc_ways)]


def ground_truth_grid(
    workload: Workload,
    host: Host,
    slow_ratios: Sequence[float] = PAPER_SLOW_RATIOS,
    llc_ways: Sequence[int] = PAPER_LLC_WAYS,
    seed: int = 0,
    layout: Layout = "interleave",
) -> TruthGrid:
    """Every configuration of the grid with oracle placement: the exhaustive search's answer."""
    prep = prepare(workload, host, seed, llc_ways)
    configs: list[tuple[float, int, Sequence[PlacementLike] | None]] = [
        (float(r), int(w), None) for r in slow_ratios for w in llc_ways
    ]
    flat = run_many(prep, configs, layout)
    nw = len(llc_ways)
    runs = [flat[i * nw : (i + 1) * nw] for i in range(len(slow_ratios))]

    def grid(get: str) -> NDArray[np.float64]:
        return np.asarray([[float(getattr(x, get)) for x in row] for row in runs])

    return TruthGrid(
        workload=workload.name,
        slow_ratios=tuple(float(r) for r in slow_ratios),
        llc_ways=tuple(int(w) for w in llc_ways),
        seconds=grid("wall_seconds"),
        cpi=grid("cpi"),
        llc_misses=grid("llc_misses"),
        slow_misses=grid("slow_misses"),
        runs=runs,
    )
