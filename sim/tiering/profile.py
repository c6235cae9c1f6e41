"""What the node agent would record for dynamic tiering, emitted from a simulated run.

Only what an agent can observe goes in: the two reference runs' times, the LLC-miss count, PEBS-
like samples (at the agent's own sampling period, with their Poisson noise) cut into windows, and
the page manager's counters in a run at the current fast-tier size. Never the stream's true
per-page rates.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from model.tiering.profile import (
    HotnessCurves,
    ManagerCounters,
    PageManagerState,
    ReuseBin,
    StructureReuse,
    TieringProfile,
)
from sim.machine import Host
from sim.tiering.manager import Knobs, run
from sim.tiering.streams import Stream

PROFILE_SAMPLING_PERIOD = 1000  # misses per sample: a profiling run samples densely
WINDOW_TICKS = 16
CURVE_POINTS = 100
REUSE_BINS = 24


def sampled_counts(
    stream: Stream, period: int, seed: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """PEBS-like samples per tick and page: Poisson with mean misses / period."""
    rng = np.random.default_rng([stream.seed, seed, 2])
    return rng.poisson(stream.reads / period).astype(float), rng.poisson(
        stream.writes / period
    ).astype(float)


def hotness_curves(samples: NDArray[np.float64], window_ticks: int) -> HotnessCurves:
    ticks, n = samples.shape
    shares = np.arange(1, CURVE_POINTS + 1) / CURVE_POINTS
    ks = np.maximum(1, np.ceil(shares * n).astype(int))
    windows = [samples[i : i + window_ticks].sum(axis=0) for i in range(0, ticks, window_ticks)]
    windows = [w for w in windows if w.sum() > 0]
    curve = np.zeros(CURVE_POINTS)
    turnover = np.zeros(CURVE_POINTS)
    weight = 0.0
    prev_rank: NDArray[np.int64] | None = None
    pairs = 0
    for win in windows:
        order = np.argsort(-win, kind="stable")
        cum = np.cumsum(win[order]) / win.sum()
        curve += cum[ks - 1] * win.sum()
        weight += win.sum()
        if prev_rank is not None:
            before = prev_rank[order]  # last window's rank of this window's k-th hottest page
            for j, k in enumerate(ks):
                turnover[j] += 1.0 - np.count_nonzero(before[:k] < k) / k
            pairs += 1
        prev_rank = np.empty(n, dtype=np.int64)
        prev_rank[order] = np.arange(n)
    total = samples.sum(axis=0)
    run_cum = np.cumsum(np.sort(total)[::-1]) / max(total.sum(), 1e-12)
    window_curve = np.maximum.accumulate(np.clip(curve / max(weight, 1e-12), 0.0, 1.0))
    run_curve = np.maximum.accumulate(np.clip(run_cum[ks - 1], 0.0, 1.0))
    return HotnessCurves(
        page_shares=[float(s) for s in shares],
        window_miss_share=[float(x) for x in window_curve],
        run_miss_share=[float(x) for x in run_curve],
        turnover=[float(x) for x in np.clip(turnover / max(pairs, 1), 0.0, 1.0)],
    )


def reuse_histogram(
    samples: NDArray[np.float64], pages: NDArray[np.int64], misses_per_tick: float
) -> list[ReuseBin]:
    """Misses between consecutive sampled touches of a page, in log2 bins."""
    gaps: list[NDArray[np.int64]] = []
    for p in pages:
        seen = np.flatnonzero(samples[:, p] > 0)
        if seen.size > 1:
            gaps.append(np.diff(seen))
    if not gaps:
        return []
    reuse = np.concatenate(gaps).astype(float) * misses_per_tick
    edges = misses_per_tick * 2.0 ** np.arange(0, REUSE_BINS + 1)
    counts, _ = np.histogram(reuse, bins=np.concatenate([[0.5 * misses_per_tick], edges[1:]]))
    centres = np.concatenate([[misses_per_tick], np.sqrt(edges[1:-1] * edges[2:])])
    return [
        ReuseBin(reuse_misses=float(c), count=int(k))
        for c, k in zip(centres, counts, strict=True)
        if k > 0
    ]


def tiering_profile(
    stream: Stream,
    host: Host,
    knobs: Knobs | None = None,
    period_ticks: int = 8,
    current_fast_bytes: int | None = None,
    profile_seed: int = 0,
) -> TieringProfile:
    """The profile an agent would upload after profiling `stream`'s workload on `host`."""
    knobs = knobs or Knobs()
    w = stream.workload
    fast = run(stream, host, w.footprint_bytes, managed=False)
    slow = run(stream, host, 0, managed=False)
    current = w.footprint_bytes if current_fast_bytes is None else current_fast_bytes
    observed = run(stream, host, current, knobs, period_ticks)
    sr, sw = sampled_counts(stream, PROFILE_SAMPLING_PERIOD, profile_seed)
    samples = sr + sw
    tick_seconds = fast.wall_seconds / w.ticks
    page = w.page_bytes
    structures: list[StructureReuse] = []
    owners = stream.structure_of_page
    names = [s.tag for s in w.structures]
    total = max(samples.sum(), 1e-12)
    for i, tag in [*enumerate(names), (-1, "untagged")]:
        pages = np.flatnonzero(owners == i)
        if pages.size == 0:
            continue
        mine = samples[:, pages].sum()
        writes = sw[:, pages].sum()
        structures.append(
            StructureReuse(
                tag=tag,
                size_bytes=int(pages.size * page),
                miss_share=float(mine / total),
                write_share=float(writes / mine) if mine else 0.0,
                reuse=reuse_histogram(samples, pages, w.misses_per_tick),
            )
        )
    return TieringProfile(
        footprint_bytes=w.pages * page,
        page_bytes=page,
        llc_misses=w.misses,
        threads=w.threads,
        wall_seconds_fast=fast.wall_seconds,
        wall_seconds_slow=slow.wall_seconds,
        slow_write_bandwidth_bytes_per_second=host.slow_tier.write_bandwidth_bytes_per_second,
        fast_write_bandwidth_bytes_per_second=host.fast_tier.write_bandwidth_bytes_per_second,
        sampling_period=PROFILE_SAMPLING_PERIOD,
        window_seconds=WINDOW_TICKS * tick_seconds,
        hotness=hotness_curves(samples, WINDOW_TICKS),
        structures=structures,
        page_manager=PageManagerState(
            kind="tmc-sim",
            version="hemem-like/1",
            knobs={k: float(v) for k, v in knobs.model_dump().items()},
            migration_period_seconds=period_ticks * tick_seconds,
        ),
        counters=ManagerCounters(
            fast_bytes=observed.fast_bytes,
            wall_seconds=observed.wall_seconds,
            promotions=observed.promotions,
            demotions=observed.demotions,
            promotion_failures=observed.promotion_failures,
            migrated_bytes=observed.migrated_bytes,
        ),
    )
