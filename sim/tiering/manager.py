"""The page manager of the dynamic-tiering mode, and the run's time.

Mechanisms (docs/tiering.md says where each comes from):
- Hotness from PEBS-like sampling: every `sampling_period`-th LLC miss is sampled, so a page's
  sampled count is Poisson with mean misses / period (HeMem, MEMTIS). Reads and writes are
  counted apart and compared with their own hot thresholds (HeMem's read/write_hot_threshold).
- Cooling: when any page's count reaches `cooling_threshold`, every count is halved (HeMem). The
  ratio of hot threshold to cooling threshold therefore sets how large the hot set can be.
- Recency: a page with no sample since the last migration pass is inactive (an LRU inactive list);
  only inactive, non-hot pages are demoted.
- Periodic migration: every `period_ticks` ticks the manager demotes (to a free-memory watermark,
  as TPP's reclaim does) and then promotes hot slow pages, hottest first, at most
  `migrate_batch_bytes` per pass. A hot page that finds no free fast page is a promotion failure.
- Adaptive demotion (FlexMem, optional): the pass demotes as many pages as there are cold pages in
  the fast tier plus the last pass's promotion failures, instead of refilling a fixed watermark.
- First-touch allocation: pages land in the fast tier in the order the program first touches them
  until it is full (the fast-tier limit), then in the slow tier.

Time: the accesses of each tick are served from the tier the page is in at that tick. Latency is
the tier's idle latency, loaded by its utilisation (application traffic, migration copies and
other tenants' background traffic) with the same queueing shape as the main simulator; a tick is
never shorter than its bytes over the tier's bandwidth. Migration costs copies (both tiers'
bandwidth) and, per moved huge page, a TLB shootdown that stalls every thread; each sample costs
the sampled thread a PEBS assist; each pass costs a fixed wake-up and list walk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from model.resources import MIB
from sim.machine import Host, Tier
from sim.tiering.streams import Stream

LINE_BYTES = 64
HUGE_PAGE_BYTES = 2 * MIB
# Costs of the page manager's actions, charged to the application (docs/tiering.md).
SAMPLE_NS = 200.0  # a PEBS assist and the buffer drain, per sample, on the sampled thread
SHOOTDOWN_NS = 4000.0  # unmap + TLB-shootdown IPI per migrated huge page, on every thread
PASS_NS = 200_000.0  # the migration thread's wake-up, list walk and lock hold, per pass
MAX_UTILISATION = 0.95


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Knobs(_Spec):
    """A HeMem-like page manager's knobs (defaults are HeMem's, batch and watermark TPP-like)."""

    sampling_period: int = Field(default=5000, ge=1, le=1_000_000, description="misses/sample")
    read_hot_threshold: int = Field(default=8, ge=1, le=1000)
    write_hot_threshold: int = Field(default=4, ge=1, le=1000)
    cooling_threshold: int = Field(default=18, ge=1, le=10_000)
    migrate_batch_bytes: int = Field(default=1 << 30, ge=1, le=1 << 44)
    demotion_watermark: float = Field(default=0.02, ge=0.0, le=0.5)
    # Pages moved per second, both ways, at most (MB/s); the default is no limit in practice.
    migration_rate_limit_mbps: float = Field(default=65536.0, ge=1.0, le=1e9)


@dataclass(frozen=True)
class TieringRun:
    """One run under the page manager: its time and the manager's counters."""

    wall_seconds: float
    fast_bytes: int
    slow_miss_share: float
    promotions: int  # pages (regions) moved up
    demotions: int
    promotion_failures: int
    samples: int
    passes: int
    migrated_bytes: int
    tick_seconds: NDArray[np.float64]


@njit(cache=True)
def _poisson(mean: float, u: float) -> float:
    """The Poisson quantile at `u`: exact by inversion for small means, normal beyond."""
    if mean <= 0.0:
        return 0.0
    if mean > 30.0:
        # Tukey's lambda approximation of the normal quantile (error < 1 %).
        uc = min(max(u, 1e-9), 1.0 - 1e-9)
        z = 4.91 * (uc**0.14 - (1.0 - uc) ** 0.14)
        return float(max(0.0, np.floor(mean + np.sqrt(mean) * z + 0.5)))
    p = np.exp(-mean)
    cdf = p
    k = 0.0
    while u > cdf and k < 200.0:
        k += 1.0
        p *= mean / k
        cdf += p
    return k


@njit(cache=True)
def _sample_matrix(
    misses: NDArray[np.float64], luck: NDArray[np.float64], period: float
) -> NDArray[np.float64]:
    out = np.zeros_like(misses)
    ticks, n = misses.shape
    for t in range(ticks):
        for p in range(n):
            if misses[t, p] > 0.0:
                out[t, p] = _poisson(misses[t, p] / period, luck[t, p])
    return out


def sampled_counts(
    stream: Stream, period: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """PEBS-like sampled reads and writes per tick and page at `period` misses per sample."""
    if period not in stream.sampled:
        stream.sampled[period] = (
            _sample_matrix(stream.reads, stream.luck_reads, period),
            _sample_matrix(stream.writes, stream.luck_writes, period),
        )
    return stream.sampled[period]


@njit(cache=True)
def _manage(
    reads: NDArray[np.float64],
    writes: NDArray[np.float64],
    sampled_r: NDArray[np.float64],
    sampled_w: NDArray[np.float64],
    first_touch: NDArray[np.int64],
    fast_pages: int,
    managed: bool,
    read_hot: float,
    write_hot: float,
    cooling: float,
    batch_pages: int,
    watermark_pages: int,
    period_ticks: int,
    adaptive: bool,
) -> NDArray[np.float64]:
    """Columns per tick: fast reads, fast writes, slow reads, slow writes, samples, promoted,
    demoted, promotion failures, pass (0/1)."""
    ticks, n = reads.shape
    in_fast = np.zeros(n, np.bool_)
    used = min(fast_pages, n)
    for i in range(used):
        in_fast[first_touch[i]] = True
    heat_r = np.zeros(n)
    heat_w = np.zeros(n)
    recent = np.zeros(n, np.bool_)
    out = np.zeros((ticks, 9))
    fails_before = 0
    for t in range(ticks):
        fr = 0.0
        fw = 0.0
        sr = 0.0
        sw = 0.0
        samples = 0.0
        peak = 0.0
        for p in range(n):
            r = reads[t, p]
            w = writes[t, p]
            if in_fast[p]:
                fr += r
                fw += w
            else:
                sr += r
                sw += w
            if not managed:
                continue
            k = sampled_r[t, p]
            if k > 0:
                heat_r[p] += k
                recent[p] = True
                samples += k
            k = sampled_w[t, p]
            if k > 0:
                heat_w[p] += k
                recent[p] = True
                samples += k
            peak = max(peak, heat_r[p] + heat_w[p])
        # HeMem cools by halving every count once one page's count reaches the threshold.
        while peak >= cooling:
            for p in range(n):
                heat_r[p] = np.floor(heat_r[p] / 2.0)
                heat_w[p] = np.floor(heat_w[p] / 2.0)
            peak = np.floor(peak / 2.0)
        out[t, 0] = fr
        out[t, 1] = fw
        out[t, 2] = sr
        out[t, 3] = sw
        out[t, 4] = samples
        if not managed or (t + 1) % period_ticks != 0:
            continue
        out[t, 8] = 1.0
        heat = heat_r + heat_w
        hot = (heat_r >= read_hot) | (heat_w >= write_hot)
        # Demotion: coldest first among non-hot fast pages; inactive ones before recent ones.
        key = np.full(n, np.inf)
        for p in range(n):
            if in_fast[p] and not hot[p]:
                key[p] = heat[p] + (1e9 if recent[p] else 0.0)
        free = fast_pages - used
        deficit = max(0, watermark_pages - free)
        if adaptive:
            # Demote for the promotions that failed last pass, not only to refill the watermark.
            want = min(fails_before + deficit, batch_pages)
        elif deficit > 0:
            want = min(2 * watermark_pages - free, batch_pages)
        else:
            want = 0
        order = np.argsort(key)
        demoted = 0
        for i in range(n):
            if demoted >= want:
                break
            p = order[i]
            if not np.isfinite(key[p]) or (recent[p] and not adaptive):
                break
            in_fast[p] = False
            demoted += 1
        used -= demoted
        # Promotion: hottest slow pages first, at most one batch per pass.
        key = np.full(n, np.inf)
        for p in range(n):
            if hot[p] and not in_fast[p]:
                key[p] = -heat[p]
        order = np.argsort(key)
        promoted = 0
        failed = 0
        for i in range(min(n, batch_pages)):
            p = order[i]
            if not np.isfinite(key[p]):
                break
            if used < fast_pages:
                in_fast[p] = True
                used += 1
                promoted += 1
            else:
                failed += 1
        fails_before = failed
        out[t, 5] = promoted
        out[t, 6] = demoted
        out[t, 7] = failed
        recent[:] = False
    return out


def _loaded(tier: Tier, rho: NDArray[np.float64]) -> NDArray[np.float64]:
    r = np.minimum(rho, MAX_UTILISATION)
    return tier.latency_ns * (1.0 + tier.loaded_latency_factor * r / (1.0 - r))


def _tier_seconds(tier: Tier, read_bytes: NDArray[np.float64], write_bytes: NDArray[np.float64]):  # type: ignore[no-untyped-def]
    return read_bytes / tier.read_bandwidth_bytes_per_second + write_bytes / (
        tier.write_bandwidth_bytes_per_second
    )


def tick_times(
    stream: Stream, host: Host, cols: NDArray[np.float64], page_bytes: int
) -> NDArray[np.float64]:
    """Seconds per tick for the placement and migrations the manager produced."""
    w = stream.workload
    fr, fw, sr, sw, samples, promoted, demoted = (cols[:, i] for i in range(7))
    passes = cols[:, 8]
    moved_huge = (promoted + demoted) * (page_bytes / HUGE_PAGE_BYTES)
    # A write miss reads the line (RFO) and later writes it back.
    fast_read = (fr + fw) * LINE_BYTES + demoted * page_bytes
    fast_write = fw * LINE_BYTES + promoted * page_bytes
    slow_read = (sr + sw) * LINE_BYTES + promoted * page_bytes
    slow_write = sw * LINE_BYTES + demoted * page_bytes
    busy_fast = _tier_seconds(host.fast_tier, fast_read, fast_write)
    busy_slow = _tier_seconds(host.slow_tier, slow_read, slow_write)
    overhead = (
        samples * SAMPLE_NS / w.threads + moved_huge * SHOOTDOWN_NS + passes * PASS_NS
    ) * 1e-9
    compute = (fr + fw + sr + sw) * w.compute_ns_per_miss / w.threads * 1e-9
    in_flight = w.mlp * w.threads
    floor = np.maximum(
        busy_fast / (1.0 - host.fast_tier.background_utilization),
        busy_slow / (1.0 - host.slow_tier.background_utilization),
    )
    t = np.maximum(compute + overhead, floor) + 1e-12
    for _ in range(12):  # fixed point of time <-> utilisation, damped
        rho_f = host.fast_tier.background_utilization + busy_fast / t
        rho_s = host.slow_tier.background_utilization + busy_slow / t
        memory = (
            (
                (fr + fw) * _loaded(host.fast_tier, rho_f)
                + (sr + sw) * _loaded(host.slow_tier, rho_s)
            )
            / in_flight
            * 1e-9
        )
        t = 0.5 * t + 0.5 * np.maximum(compute + overhead + memory, floor)
    seconds: NDArray[np.float64] = t
    return seconds


def nominal_tick_seconds(stream: Stream, host: Host) -> float:
    """A tick's length with everything fast and no manager: the clock that converts the
    managers' per-second knobs (rate limits, thresholds in ms) into ticks."""
    key = f"tick:{host.model_dump_json()}"
    if key not in stream.memo:
        w = stream.workload
        cols = _manage(
            stream.reads,
            stream.writes,
            np.zeros((1, 1)),
            np.zeros((1, 1)),
            stream.first_touch,
            int(w.pages),
            False,
            1.0,
            1.0,
            1.0,
            1,
            0,
            1,
            False,
        )
        stream.memo[key] = float(tick_times(stream, host, cols, w.page_bytes).sum()) / w.ticks
    return stream.memo[key]


def roomy_fast_bytes(footprint_bytes: int, page_bytes: int, knobs: Knobs | None = None) -> int:
    """A fast-tier limit that holds every page with the free watermark still met: the manager
    runs but never has to demote (the reference a loss is measured against)."""
    wm = (knobs or Knobs()).demotion_watermark
    pages = -(-footprint_bytes // page_bytes)
    return (int(np.ceil(pages / (1.0 - wm))) + 1) * page_bytes


def run(
    stream: Stream,
    host: Host,
    fast_bytes: int,
    knobs: Knobs | None = None,
    period_ticks: int = 8,
    adaptive_demotion: bool = False,
    managed: bool = True,
) -> TieringRun:
    """Run the stream under the page manager with a fast tier limited to `fast_bytes`.

    `managed=False` runs with no page manager at all (no sampling, no migration): with
    `fast_bytes` = the footprint it is the all-fast reference a loss is measured against.
    """
    knobs = knobs or Knobs()
    w = stream.workload
    if not 0 <= fast_bytes <= 4 * w.footprint_bytes:
        raise ValueError(f"fast_bytes {fast_bytes} outside [0, 4 x footprint {w.footprint_bytes}]")
    if not 1 <= period_ticks <= w.ticks:
        raise ValueError(f"period_ticks {period_ticks} outside [1, {w.ticks}]")
    page = w.page_bytes
    fast_pages = fast_bytes // page
    batch_pages = max(1, knobs.migrate_batch_bytes // page)
    if managed and knobs.migration_rate_limit_mbps < 65536.0:
        # The rate limit caps each pass's moves at what the limit allows over one period.
        allowed = (
            knobs.migration_rate_limit_mbps
            * 1e6
            * period_ticks
            * nominal_tick_seconds(stream, host)
        )
        batch_pages = max(1, min(batch_pages, int(allowed // page)))
    # A region stands for `huge` huge pages that behave alike: the manager's counter for each of
    # them sees the region's samples divided among them, as it would on real 2 MiB pages.
    if managed:
        sr, sw = sampled_counts(
            stream, float(knobs.sampling_period) * max(1.0, page / HUGE_PAGE_BYTES)
        )
    else:
        sr = sw = np.zeros((1, 1))
    cols = _manage(
        stream.reads,
        stream.writes,
        sr,
        sw,
        stream.first_touch,
        int(fast_pages),
        bool(managed),
        float(knobs.read_hot_threshold),
        float(knobs.write_hot_threshold),
        float(knobs.cooling_threshold),
        int(batch_pages),
        round(knobs.demotion_watermark * fast_pages),
        int(period_ticks),
        bool(adaptive_demotion),
    )
    ticks = tick_times(stream, host, cols, page)
    total = cols[:, :4].sum()
    moved = int(cols[:, 5].sum() + cols[:, 6].sum())
    return TieringRun(
        wall_seconds=float(ticks.sum()),
        fast_bytes=int(fast_pages * page),
        slow_miss_share=float(cols[:, 2:4].sum() / total) if total else 0.0,
        promotions=int(cols[:, 5].sum()),
        demotions=int(cols[:, 6].sum()),
        promotion_failures=int(cols[:, 7].sum()),
        samples=int(cols[:, 4].sum()),
        passes=int(cols[:, 8].sum()),
        migrated_bytes=moved * page,
        tick_seconds=ticks,
    )
