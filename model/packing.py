"""Placing one configuration on one node: CAT way runs and the extender's packing score.

Pure functions, so that the scheduler's hot path and its tests share one definition.

**LLC ways.** Intel CAT gives a class of service a *contiguous* capacity bitmask (bit i = way i).
A node's ways are therefore not a count but a bitmask of the ways already handed out; a request
for w ways needs a free *run* of w adjacent bits. Runs are chosen best-fit: the shortest free run
that holds w, at its low end, which keeps long runs whole for the wide requests that need them.
`fragmentation` is 1 - (longest free run / free ways): 0 when every free way is in one run.

**The packing score** (the extender's prioritize; kube-scheduler wants an integer 0..10). For a
node and a configuration placed on it, with u_r the node's utilization of resource r *after* the
placement, over the resources the node has (CPU, DRAM, LLC ways, and slow memory when it has a
slow tier: its own or its rack pool's):

    fill      = mean_r u_r                         dense packing: fuller nodes first (MostAllocated)
    imbalance = max_r u_r - min_r u_r              stranding: one resource full, another idle
    cat_waste = (best-fit run length - w) / ways   ways left in the chosen run, cut off from others
    raw       = fill - IMBALANCE_WEIGHT * imbalance - CAT_WASTE_WEIGHT * cat_waste   in [-1, 1]
    score     = round(10 * (raw + 1) / 2)

TMC's Algorithm 1 already chose the configuration against the cluster's utilization (§3.5); this
score only decides *where* it goes, preferring to fill machines evenly in every resource so that
none is left with, say, free ways and no DRAM (the stranding the paper's compaction measures).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority
IMBALANCE_WEIGHT = 0.5
CAT_WASTE_WEIGHT = 0.5


# -- CAT capacity bitmasks --------------------------------------------------------------------


def full_mask(ways: int) -> int:
    return (1 << ways) - 1


def run_mask(start: int, length: int) -> int:
    return ((1 << length) - 1) << start


def is_contiguous(mask: int) -> bool:
    """CAT rejects a mask with holes; 0 is not a valid mask either."""
    if mask <= 0:
        return False
    low = mask & -mask
    return ((mask + low) & mask) == 0


def free_runs(used: int, ways: int) -> list[tuple[int, int]]:
    """The free runs of a node's ways as (first way, length), lowest first."""
    runs: list[tuple[int, int]] = []
    start = -1
    for way in range(ways + 1):
        free = way < ways and not (used >> way) & 1
        if free and start < 0:
            start = way
        elif not free and start >= 0:
            runs.append((start, way - start))
            start = -1
    return runs


def longest_free_run(used: int, ways: int) -> int:
    return max((length for _, length in free_runs(used, ways)), default=0)


def fragmentation(used: int, ways: int) -> float:
    runs = free_runs(used, ways)
    free = sum(length for _, length in runs)
    return 0.0 if free == 0 else 1.0 - max(length for _, length in runs) / free


def best_fit_length(used: int, ways: int, need: int) -> int | None:
    """Length of the run best_fit_run would cut `need` ways from, or None if none holds them."""
    lengths = [length for _, length in free_runs(used, ways) if length >= need]
    return min(lengths) if lengths else None


def best_fit_run(used: int, ways: int, need: int) -> int | None:
    """The mask of `need` contiguous free ways, cut from the low end of the shortest free run that
    holds them (lowest such run on a tie); None when no run is long enough."""
    if need < 1:
        raise ValueError("a CAT mask needs at least one way")
    fitting = [(length, start) for start, length in free_runs(used, ways) if length >= need]
    if not fitting:
        return None
    _, start = min(fitting)
    return run_mask(start, need)


def best_fit_table(used: int, ways: int) -> list[int]:
    """For each need 0..ways, the length of the best-fit run (0 when none holds it): what the
    vectorised score needs, kept per node and rebuilt only when its mask changes."""
    lengths = sorted(length for _, length in free_runs(used, ways))
    table = [0] * (ways + 1)
    for need in range(1, ways + 1):
        table[need] = next((length for length in lengths if length >= need), 0)
    return table


# -- the packing score ------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeLoad:
    """One node's capacity and what is already reserved on it. Slow memory is the node's own or,
    for a pooled node, its rack pool's (capacity and reservations of the whole pool)."""

    cpus: float
    dram_bytes: float
    slow_bytes: float
    llc_ways: int
    used_cpus: float
    used_dram_bytes: float
    used_slow_bytes: float
    llc_used_mask: int


@dataclass(frozen=True)
class Ask:
    vcpus: float
    dram_bytes: float
    slow_bytes: float
    llc_ways: int


def _raw_to_score(raw: float) -> int:
    return round(MAX_SCORE * min(1.0, max(0.0, (raw + 1.0) / 2.0)))


def packing_score(node: NodeLoad, ask: Ask) -> int:
    """The score of placing `ask` on `node` (see the module docstring); 0 if it does not fit."""
    run = best_fit_length(node.llc_used_mask, node.llc_ways, ask.llc_ways)
    if run is None:
        return 0
    shares = [
        (node.used_cpus + ask.vcpus) / node.cpus,
        (node.used_dram_bytes + ask.dram_bytes) / node.dram_bytes,
        (node.llc_used_mask.bit_count() + ask.llc_ways) / node.llc_ways,
    ]
    if node.slow_bytes > 0:
        shares.append((node.used_slow_bytes + ask.slow_bytes) / node.slow_bytes)
    if max(shares) > 1.0:
        return 0
    fill = sum(shares) / len(shares)
    imbalance = max(shares) - min(shares)
    waste = (run - ask.llc_ways) / node.llc_ways
    return _raw_to_score(fill - IMBALANCE_WEIGHT * imbalance - CAT_WASTE_WEIGHT * waste)


FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def packing_scores(
    cpus: FloatArray,
    dram_bytes: FloatArray,
    slow_bytes: FloatArray,
    llc_ways: IntArray,
    used_cpus: FloatArray,
    used_dram_bytes: FloatArray,
    used_slow_bytes: FloatArray,
    used_ways: IntArray,
    best_fit: IntArray,
    ask: Ask,
) -> IntArray:
    """`packing_score` for many nodes at once (the same formula, tested equal); `best_fit` is each
    node's `best_fit_table(...)[ask.llc_ways]`."""
    shares = np.stack(
        [
            (used_cpus + ask.vcpus) / cpus,
            (used_dram_bytes + ask.dram_bytes) / dram_bytes,
            (used_ways + ask.llc_ways) / llc_ways,
            np.divide(
                used_slow_bytes + ask.slow_bytes,
                slow_bytes,
                out=np.full(len(cpus), np.nan),
                where=slow_bytes > 0,
            ),
        ]
    )
    fill = np.nanmean(shares, axis=0)
    top = np.nanmax(shares, axis=0)
    imbalance = top - np.nanmin(shares, axis=0)
    waste = (best_fit - ask.llc_ways) / llc_ways
    raw = fill - IMBALANCE_WEIGHT * imbalance - CAT_WASTE_WEIGHT * waste
    score = np.rint(MAX_SCORE * np.clip((raw + 1.0) / 2.0, 0.0, 1.0)).astype(np.int64)
    return np.where((best_fit == 0) | (top > 1.0), 0, score)
