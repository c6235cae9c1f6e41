"""A cluster of tiered-memory machines: VMs arrive, are placed first-fit, run, and leave.

Paper §4.1 and §4.3: 12-core machines with a 48-way LLC and 24 or 48 GiB of DRAM; slow memory
either local to each machine (128L, 256L) or a rack pool shared by 8 machines (128P ... 896P).
Requests arrive from a workload mix; each is given a configuration by a *policy* (the caller's:
exhaustive search, tmc, random, ...), and placed on the first machine, in a random node order,
that has room for all of it. The cluster's size is then compacted as Borg does (Verma et al.,
EuroSys '15, §5.1): remove machines until the workload no longer fits.

What a VM requests: its vCPUs (the workload's), the DRAM and slow bytes of the chosen
configuration (its footprint split by the slow ratio), and its LLC ways (CAT gives ways per
machine, so a machine's ways are a capacity like its cores). What it is given: exactly that,
for as long as it runs.

How long it stays: its ground-truth run time in the chosen configuration. VMs therefore
depart, and the cluster reaches a steady state in which the VMs present at once are
arrival rate x mean run time (Little's law). We chose run time over a VM that never leaves
because it charges a policy for slowness: a configuration that runs 30 % longer holds its
cores, memory and ways 30 % longer, which is what a throughput-bound tenant costs an operator;
with VMs that never leave, 5,000 arrivals would be a static bin-packing problem in which
slowness is free.

This module knows nothing of the TMC model (an import contract forbids it): a policy is any
callable that, given a request and the cluster's live utilization, returns an option index.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from model.resources import GIB

# Resources, in the column order used everywhere here and by Algorithm 1 (CPU, DRAM, slow, LLC).
CPU, DRAM, SLOW, LLC = 0, 1, 2, 3
RACK_NODES = 8

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Architecture:
    """One machine kind of §4.5, the size of a cluster left open (that is what compaction finds).

    A pool of `pool_bytes` serves each rack of `rack_nodes` machines; a cluster whose size is
    not a multiple of the rack gets a last, partial rack with the proportional share of a pool,
    so that compaction can remove machines one at a time (Borg's granularity)."""

    name: str
    cpus: int = 12
    llc_ways: int = 48
    dram_bytes: int = 24 * GIB
    local_slow_bytes: int = 128 * GIB
    pool_bytes: int = 0
    rack_nodes: int = RACK_NODES

    @property
    def pooled(self) -> bool:
        return self.pool_bytes > 0

    @property
    def slow_share_bytes(self) -> int:
        """Slow memory per machine: its own, or its share of the rack pool."""
        return self.pool_bytes // self.rack_nodes if self.pooled else self.local_slow_bytes

    def capacity(self) -> IntArray:
        """One machine's capacity per resource; slow is the per-node share for a pool."""
        return np.asarray(
            [self.cpus, self.dram_bytes, self.slow_share_bytes, self.llc_ways], dtype=np.int64
        )


def architecture(dram_gib: int, slow: str) -> Architecture:
    """`slow` as the paper names it: "128L", "256L", "128P", "384P", "640P" or "896P"."""
    size, kind = int(slow[:-1]), slow[-1].upper()
    if kind not in "LP":
        raise ValueError(f"slow memory {slow!r}: expected <GiB>L (local) or <GiB>P (rack pool)")
    name = f"{dram_gib}G-{size}{kind}"
    if kind == "L":
        return Architecture(name=name, dram_bytes=dram_gib * GIB, local_slow_bytes=size * GIB)
    return Architecture(
        name=name, dram_bytes=dram_gib * GIB, local_slow_bytes=0, pool_bytes=size * GIB
    )


# Fig. 9's twelve architectures.
PAPER_SLOW = ("128L", "256L", "128P", "384P", "640P", "896P")
PAPER_ARCHITECTURES = tuple(architecture(d, s) for d in (24, 48) for s in PAPER_SLOW)


@dataclass(frozen=True)
class Menu:
    """What a workload may be given: one row per option (a configuration), with its demand
    (vCPUs, DRAM bytes, slow bytes, ways) and how long it runs in it."""

    demand: IntArray  # [k, 4]
    seconds: FloatArray  # [k]


@dataclass(frozen=True)
class Arrivals:
    times: FloatArray  # seconds, increasing
    workloads: IntArray  # index into the menus


def poisson_arrivals(n: int, mix: Sequence[int], rate_per_second: float, seed: int) -> Arrivals:
    """`n` arrivals, each a workload drawn uniformly from `mix` (§4.1: "randomly selected from
    the workload mix"), at exponential gaps."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate_per_second, size=n)
    which = rng.integers(0, len(mix), size=n)
    return Arrivals(times=np.cumsum(gaps), workloads=np.asarray(mix, dtype=np.int64)[which])


class ClusterState:
    """Free capacity of every machine (and rack pool), and the cluster's utilization.

    The replay asks for the utilization and a first fit at every arrival, on four resources
    and a few hundred machines: the cluster-wide sums are kept as Python floats (the same
    IEEE additions, in the same order, as on an array), and a machine's fit is its four
    comparisons read as one 32-bit word."""

    def __init__(
        self, arch: Architecture, machines: int, order_seed: int, menus: Sequence[Menu] = ()
    ) -> None:
        self.arch = arch
        self.menus = menus
        self.machines = machines
        cap = arch.capacity()
        self.free = np.tile(cap, (machines, 1))
        if arch.pooled:
            # The pool is checked separately; a machine's own slow column never binds.
            self.free[:, SLOW] = np.iinfo(np.int64).max // 4
            racks = -(-machines // arch.rack_nodes)
            members = np.bincount(np.arange(machines) // arch.rack_nodes, minlength=racks)
            self.pool_free = (arch.pool_bytes * members) // arch.rack_nodes
            self.rack = np.arange(machines) // arch.rack_nodes
            slow_total = int(self.pool_free.sum())
        else:
            self.pool_free = np.zeros(0, dtype=np.int64)
            self.rack = np.zeros(machines, dtype=np.int64)
            slow_total = int(cap[SLOW]) * machines
        self.total = np.asarray(
            [cap[CPU] * machines, cap[DRAM] * machines, slow_total, cap[LLC] * machines],
            dtype=np.float64,
        )
        self._total = [float(t) for t in self.total]
        self._used = [0.0, 0.0, 0.0, 0.0]
        self._in_use = 0  # machines holding at least one VM
        self.vms = np.zeros(machines, dtype=np.int64)
        # VMs present per machine, by workload and by (workload, option): what a placer that
        # follows a plan's machine patterns counts against each pattern's slots.
        self._by_workload: dict[int, IntArray] = {}
        self._by_option: dict[tuple[int, int], IntArray] = {}
        # First fit in a random node order (§4.1), fixed for the run: a permutation of the
        # machines, and each machine's rank in it.
        self.order = np.random.default_rng(order_seed).permutation(machines)
        self._pooled = arch.pooled
        self._not_slow = np.asarray([1, 1, 0, 1], dtype=np.int64)

    @property
    def used(self) -> FloatArray:
        """Resources held by the VMs, cluster-wide."""
        return np.asarray(self._used, dtype=np.float64)

    def utilization(self) -> FloatArray:
        return np.asarray(self.utilization_list(), dtype=np.float64)

    def utilization_list(self) -> list[float]:
        """`utilization()` as Python floats: used / total where total > 0, at most 1."""
        return [
            (min(u / t, 1.0) if t > 0 else 0.0)
            for u, t in zip(self._used, self._total, strict=True)
        ]

    def fits(self, demand: IntArray) -> NDArray[np.bool_]:
        """Per machine: can it hold `demand` [4] now?"""
        # The four comparisons of a row are four contiguous bytes: all true is 0x01010101.
        ok: NDArray[np.bool_] = (self.free >= demand).view(np.uint32).ravel() == _ALL_FOUR
        if self._pooled:
            ok &= self.pool_free[self.rack] >= demand[SLOW]
        return ok

    def first_fit(self, demand: IntArray) -> int | None:
        ok = self.fits(demand)[self.order]
        i = int(ok.argmax())
        return int(self.order[i]) if ok[i] else None

    def record(self, machine: int, workload: int, option: int, sign: int) -> None:
        """A VM of `workload` in `option` arrives on (sign 1) or leaves (-1) `machine`."""
        if workload not in self._by_workload:
            self._by_workload[workload] = np.zeros(self.machines, dtype=np.int64)
        if (workload, option) not in self._by_option:
            self._by_option[(workload, option)] = np.zeros(self.machines, dtype=np.int64)
        self._by_workload[workload][machine] += sign
        self._by_option[(workload, option)][machine] += sign

    def vms_of(self, workload: int, option: int | None = None) -> IntArray:
        """Per machine, the VMs of `workload` present (in `option` only, when given)."""
        counts = (
            self._by_workload.get(workload)
            if option is None
            else self._by_option.get((workload, option))
        )
        return np.zeros(self.machines, dtype=np.int64) if counts is None else counts

    def place(self, machine: int, demand: IntArray) -> None:
        self._take(machine, demand, 1)

    def release(self, machine: int, demand: IntArray) -> None:
        self._take(machine, demand, -1)

    def _take(self, machine: int, demand: IntArray, sign: int) -> None:
        d = demand.tolist()
        if self._pooled:
            self.free[machine] -= sign * demand * self._not_slow
            self.pool_free[self.rack[machine]] -= sign * int(d[SLOW])
        else:
            self.free[machine] -= sign * demand
        used = self._used
        for r in range(4):
            used[r] += float(sign * d[r])
        before = int(self.vms[machine])
        self.vms[machine] = before + sign
        if before == 0:
            self._in_use += 1
        elif before + sign == 0:
            self._in_use -= 1

    def machines_in_use(self) -> int:
        return self._in_use


# A machine's four resource comparisons, all true, read as one native-endian 32-bit word.
_ALL_FOUR = np.ones(4, dtype=np.bool_).view(np.uint32)[0]


# A policy: (workload index, the cluster's utilization [4]) -> option index in its menu.
Policy = Callable[[int, FloatArray], int]
# A window placer: (pending workload indices, state) -> (option, machine) per request, or None
# where it found no room. The online case is a window of one.
Placer = Callable[[Sequence[int], ClusterState], list[tuple[int, int] | None]]


def online_placer(policy: Policy) -> Placer:
    """One request at a time: the policy picks the option, first fit picks the machine."""

    def place(pending: Sequence[int], state: ClusterState) -> list[tuple[int, int] | None]:
        out: list[tuple[int, int] | None] = []
        for w in pending:
            option = policy(w, state.utilization())
            demand = state.menus[w].demand[option]
            machine = state.first_fit(demand)
            if machine is None:
                out.append(None)
                continue
            state.place(machine, demand)
            out.append((option, machine))
        return out

    return place


@dataclass
class ClusterRun:
    machines: int
    placed: int
    rejected: int
    first_rejection: int | None  # arrival index
    options: IntArray  # per arrival, -1 if not placed
    peak_machines_in_use: int
    mean_utilization: FloatArray  # time-average over arrivals, per resource
    solver_fallbacks: int = 0
    extra: dict[str, float] = field(default_factory=dict)


def run_cluster(
    arch: Architecture,
    machines: int,
    arrivals: Arrivals,
    menus: Sequence[Menu],
    placer: Placer,
    *,
    order_seed: int = 0,
    window: int = 1,
    stop_on_reject: bool = True,
) -> ClusterRun:
    """Replay the arrivals on `machines` machines. Requests are placed in windows of `window`
    consecutive arrivals, at the arrival time of the window's last request (window 1: at once);
    a VM departs its run time after it was placed. With `stop_on_reject`, the first request
    that finds no room ends the run (all compaction needs to know)."""
    state = ClusterState(arch, machines, order_seed, menus)
    departures: list[tuple[float, int, int, int]] = []  # (time, seq, machine, arrival)
    times: list[float] = arrivals.times.tolist()
    workloads: list[int] = arrivals.workloads.tolist()
    demands = [m.demand for m in menus]
    seconds = [m.seconds.tolist() for m in menus]
    options = [-1] * len(times)
    placed = rejected = peak = 0
    first_rejection: int | None = None
    util_sum = [0.0, 0.0, 0.0, 0.0]
    n = len(times)
    for start in range(0, n, window):
        stop = min(start + window, n)
        now = times[stop - 1]
        while departures and departures[0][0] <= now:
            _, _, m, a = heapq.heappop(departures)
            state.release(m, demands[workloads[a]][options[a]])
            state.record(m, workloads[a], options[a], -1)
        count = stop - start
        for r, u in enumerate(state.utilization_list()):
            util_sum[r] += u * count
        pending = workloads[start:stop]
        for offset, got in enumerate(placer(pending, state)):
            a = start + offset
            if got is None:
                rejected += 1
                if first_rejection is None:
                    first_rejection = a
                continue
            option, m = got
            options[a] = option
            state.record(m, pending[offset], option, 1)
            placed += 1
            done = now + seconds[pending[offset]][option]
            heapq.heappush(departures, (done, a, m, a))
        peak = max(peak, state.machines_in_use())
        if stop_on_reject and rejected:
            break
    total = max(1, placed + rejected)
    return ClusterRun(
        machines=machines,
        placed=placed,
        rejected=rejected,
        first_rejection=first_rejection,
        options=np.asarray(options, dtype=np.int64),
        peak_machines_in_use=peak,
        mean_utilization=np.asarray([x / total for x in util_sum], dtype=np.float64),
    )


def compact_size(fits: Callable[[int], bool], upper: int, lower: int = 1) -> int:
    """The fewest machines on which the workload fits (Borg's compacted cell size).

    Borg removes machines one at a time until the workload no longer fits; with first fit the
    answer is, up to the random node order, monotone in the number of machines, so a bisection
    between a size that fits (`upper`, grown if it does not) and one that does not finds the
    same size in log steps."""
    while not fits(upper):
        lower, upper = upper, upper * 2
    lo, hi = max(0, lower - 1), upper  # invariant: hi fits; lo does not (or is 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def compact_run(
    simulate: Callable[[int, bool], ClusterRun], upper: int, lower: int = 1
) -> tuple[int, ClusterRun]:
    """`compact_size` over `simulate(machines, stop_on_reject)`, and the whole run at that size.

    A run without a rejection never stops early, so the probe that found the compact size to
    fit is already that run: it is kept rather than replayed."""
    last: dict[int, ClusterRun] = {}

    def fits(k: int) -> bool:
        run = simulate(k, True)
        if run.rejected == 0:
            last.clear()
            last[k] = run
        return run.rejected == 0

    n = compact_size(fits, upper=upper, lower=lower)
    return n, last[n] if n in last else simulate(n, False)
