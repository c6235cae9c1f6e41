"""Typed bridges to the compiled kernels, and the per-workload state reused across configurations.

The LLC's contents depend on the way count only, never on where lines live, so one stack pass per
trace gives every access's LRU depth (hit or miss at any way count) and, for the way counts asked
for, the dirty lines each fill evicts. Each configuration is then a cheap timing pass over it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from sim import kernels as kern
from sim.machine import Host, Tier
from sim.placement import Layout, StructurePlan, fast_lines, slow_fractions
from sim.trace import Trace, generate
from sim.workload import LINE_BYTES, Workload

F64 = NDArray[np.float64]
# Accesses timed before the measured region so that the window, fill buffers and bandwidth
# estimate are in their steady state when measuring starts (the cache is warm from the trace).
TIMING_LEAD = 50_000
_MEMO_SIZE = 2


@dataclass
class Prepared:
    """A workload's trace on a host, with its LLC stack pass; build with `prepare`."""

    workload: Workload
    host: Host
    seed: int
    trace: Trace
    depth: NDArray[np.uint8]
    wb: dict[int, NDArray[np.int32]] = field(default_factory=dict)
    _misses: dict[int, F64] = field(default_factory=dict)

    def ensure_ways(self, ways: Sequence[int]) -> None:
        """Record the write-backs of these way counts (one more stack pass if any are new)."""
        missing = sorted({int(w) for w in ways} - set(self.wb))
        if not missing:
            return
        for w in missing:
            if not 1 <= w <= self.host.llc_ways:
                raise ValueError(f"llc_ways {w} outside 1..{self.host.llc_ways}")
        depth, rows = stack_pass(self.trace, self.host, missing)
        self.depth = depth
        for w, row in zip(missing, rows, strict=True):
            self.wb[w] = row

    def measured(self) -> slice:
        return slice(self.trace.warmup, len(self.trace))

    def misses_per_structure(self, ways: int) -> F64:
        """True LLC misses (loads and stores) of each structure in the measured region."""
        known = self._misses.get(ways)
        if known is not None:
            return known
        m = self.measured()
        miss = self.depth[m] >= ways
        counts: F64 = np.bincount(
            self.trace.sid[m][miss], minlength=len(self.workload.structures)
        ).astype(np.float64)
        self._misses[ways] = counts
        return counts

    def misses_by_ways(self, max_ways: int) -> F64:
        """Measured-region misses at every way count 1..max_ways (the stack property's curve)."""
        d = self.depth[self.measured()]
        hist = np.bincount(d, minlength=self.host.llc_ways + 1)
        # misses(w) = accesses with depth >= w
        tail = np.cumsum(hist[::-1])[::-1]
        out: F64 = tail[1 : max_ways + 1].astype(np.float64)
        return out

    def measured_instructions(self) -> int:
        return int(self.trace.gap[self.measured()].sum(dtype=np.int64))


def stack_pass(
    trace: Trace, host: Host, wb_ways: Sequence[int]
) -> tuple[NDArray[np.uint8], list[NDArray[np.int32]]]:
    n = len(trace)
    depth = np.empty(n, dtype=np.uint8)
    ways = np.asarray(list(wb_ways), dtype=np.int64)
    wb = np.empty((len(ways), n), dtype=np.int32)
    kern.lru_stack_pass(
        trace.lines, trace.flags, host.simulated_sets, host.llc_ways, ways, depth, wb
    )
    return depth, [wb[i] for i in range(len(ways))]


_memo: OrderedDict[tuple[str, str | None, str, int], Prepared] = OrderedDict()


def prepare(workload: Workload, host: Host, seed: int, ways: Sequence[int] = ()) -> Prepared:
    """The trace and stack pass for (workload, host, seed), with the write-backs of `ways`.

    The last few are kept, so that calls for the same workload reuse the trace.
    """
    # source_dir is not part of the dump but decides which trace files a workload replays.
    key = (workload.model_dump_json(), workload.source_dir, host.model_dump_json(), seed)
    hit = _memo.get(key)
    if hit is not None:
        _memo.move_to_end(key)
        hit.ensure_ways(ways)
        return hit
    trace = generate(workload, seed)
    wanted = sorted({int(w) for w in ways})
    for w in wanted:
        if not 1 <= w <= host.llc_ways:
            raise ValueError(f"llc_ways {w} outside 1..{host.llc_ways}")
    depth, rows = stack_pass(trace, host, wanted)
    prep = Prepared(
        workload=workload,
        host=host,
        seed=seed,
        trace=trace,
        depth=depth,
        wb=dict(zip(wanted, rows, strict=True)),
    )
    _memo[key] = prep
    while len(_memo) > _MEMO_SIZE:
        _memo.popitem(last=False)
    return prep


def _tier_params(host: Host, tier: Tier) -> list[float]:
    # Device busy cycles per line moved: what a request takes of the tier's bandwidth.
    hz = host.cpu_frequency_hz
    return [
        host.ns_to_cycles(tier.latency_ns),
        tier.loaded_latency_factor,
        LINE_BYTES / tier.read_bandwidth_bytes_per_second * hz,
        LINE_BYTES / tier.write_bandwidth_bytes_per_second * hz,
        tier.background_utilization,
    ]


def timing_params(workload: Workload, host: Host) -> F64:
    p = [
        workload.cpi_core,
        float(host.core.rob_instructions),
        float(host.core.mshrs),
        host.ns_to_cycles(host.core.llc_hit_ns),
        float(workload.vcpus),
        host.ns_to_cycles(host.bandwidth_window_ns),
    ]
    p += _tier_params(host, host.fast_tier) + _tier_params(host, host.slow_tier)
    params = np.asarray(p, dtype=np.float64)
    assert params.shape[0] == kern.N_PARAMS
    return params


@dataclass(frozen=True)
class Job:
    ways: int
    plans: list[StructurePlan]


@dataclass(frozen=True)
class Timed:
    """Raw measured-region counters of each job: [job, counter] and [job, structure, counter]."""

    counters: F64
    per_structure: F64


def time_jobs(prep: Prepared, jobs: Sequence[Job], layout: Layout = "interleave") -> Timed:
    prep.ensure_ways([j.ways for j in jobs])
    tr = prep.trace
    ways_list = sorted(prep.wb)
    row_of = {w: i for i, w in enumerate(ways_list)}
    wb = np.stack([prep.wb[w] for w in ways_list])
    n_jobs = len(jobs)
    n_struct = len(prep.workload.structures)
    out = np.zeros((n_jobs, kern.N_COUNTERS), dtype=np.float64)
    out_s = np.zeros((n_jobs, n_struct, kern.N_STRUCT_COUNTERS), dtype=np.float64)
    kern.time_jobs(
        tr.gap,
        tr.sid,
        tr.lines,
        tr.flags,
        prep.depth,
        wb,
        np.asarray([row_of[j.ways] for j in jobs], dtype=np.int64),
        np.asarray([j.ways for j in jobs], dtype=np.int64),
        np.stack([slow_fractions(j.plans) for j in jobs]),
        np.stack([fast_lines(j.plans) for j in jobs]),
        tr.phase,
        layout == "tail",
        tr.base,
        timing_params(prep.workload, prep.host),
        max(0, tr.warmup - TIMING_LEAD),
        tr.warmup,
        out,
        out_s,
    )
    return Timed(counters=out, per_structure=out_s)
