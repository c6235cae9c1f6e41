"""A second judge: a page manager that promotes on NUMA hint faults (the kernel's memory tiering,
TPP's design), with its own costs. It shares the streams and the host's queueing with the first
judge (`sim/tiering/manager.py`) and nothing of its page manager.

Mechanisms:
- Scanning: every `scan_period_ticks` ticks the scanner unmaps every slow page (NUMA balancing
  marks page-table entries inaccessible), walking the page tables at a cost per huge page.
- Hint faults: the first access to a marked page faults (once per touched huge page of the
  region), stalling the faulting thread; the fault unmarks the page.
- Hot page selection: a faulting slow page is a promotion candidate if the fault came within
  `hot_threshold_ms` of the scan that marked it (the kernel's hot threshold: a page touched soon
  after a scan is likely touched often).
- Promotion rate limit: candidates are promoted while the bytes promoted in the current second
  stay under `promote_rate_limit_mbps`; a candidate over the limit, or with no free fast page, is
  not promoted (a failure when the tier was full).
- Demotion by reclaim: when free fast memory falls under the low watermark, kswapd demotes the
  least recently used fast pages until free memory reaches the high watermark (twice the low).
- First touch: pages land fast in first-touch order until the fast tier is full.

Costs: a hint fault 1.5 µs on the faulting thread; a page-table walk of 20 ns per huge page per
scan; a migrated huge page's copy at the tiers' bandwidth and a 2 µs shootdown on every thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from model.tiering.profile import ManagerCounters, PageManagerState, TieringProfile
from sim.machine import Host
from sim.tiering.manager import HUGE_PAGE_BYTES, LINE_BYTES, _loaded, _tier_seconds
from sim.tiering.manager import nominal_tick_seconds as _nominal
from sim.tiering.profile import tiering_profile
from sim.tiering.streams import Stream

HINT_FAULT_NS = 1500.0
SCAN_NS_PER_HUGE_PAGE = 20.0
SHOOTDOWN_NS = 2000.0
MAX_UTILISATION = 0.95


class TppKnobs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    hot_threshold_ms: float = Field(default=1000.0, ge=1.0, le=600_000.0)
    promote_rate_limit_mbps: float = Field(default=65536.0, ge=1.0, le=1e9)
    low_watermark: float = Field(default=0.02, ge=0.0, le=0.5)


@dataclass(frozen=True)
class TppRun:
    wall_seconds: float
    fast_bytes: int
    promotions: int
    demotions: int
    promotion_failures: int
    hint_faults: int
    scans: int
    migrated_bytes: int


@njit(cache=True)
def _tpp(
    reads: NDArray[np.float64],
    writes: NDArray[np.float64],
    first_touch: NDArray[np.int64],
    fast_pages: int,
    scan_period: int,
    hot_ticks: float,
    promote_per_tick: float,
    low: int,
    huge_per_page: float,
) -> NDArray[np.float64]:
    """Columns per tick: fast reads, fast writes, slow reads, slow writes, hint faults,
    promoted, demoted, failed, scanned (0/1)."""
    ticks, n = reads.shape
    in_fast = np.zeros(n, np.bool_)
    used = min(fast_pages, n)
    for i in range(used):
        in_fast[first_touch[i]] = True
    marked = np.zeros(n, np.bool_)
    marked_at = np.zeros(n)
    last_use = np.full(n, -1.0)
    credit = 0.0
    out = np.zeros((ticks, 9))
    for t in range(ticks):
        if t % scan_period == 0:
            for p in range(n):
                if not in_fast[p]:
                    marked[p] = True
                    marked_at[p] = t
            out[t, 8] = 1.0
        credit = min(credit + promote_per_tick, max(promote_per_tick * 2.0, 1.0))
        fr = 0.0
        fw = 0.0
        sr = 0.0
        sw = 0.0
        faults = 0.0
        promoted = 0.0
        failed = 0.0
        for p in range(n):
            r = reads[t, p]
            w = writes[t, p]
            if r + w <= 0.0:
                continue
            last_use[p] = t
            if in_fast[p]:
                fr += r
                fw += w
                continue
            sr += r
            sw += w
            if not marked[p]:
                continue
            marked[p] = False
            faults += min(huge_per_page, r + w)
            if t - marked_at[p] > hot_ticks:
                continue
            if credit < 1.0:
                continue  # over the promotion rate limit
            if used >= fast_pages:
                failed += 1.0
                continue
            in_fast[p] = True
            used += 1
            credit -= 1.0
            promoted += 1.0
        demoted = 0.0
        if fast_pages - used < low and fast_pages > 0:
            # kswapd: the least recently used fast pages go down to the high watermark.
            want = min(2 * low - (fast_pages - used), used)
            key = np.full(n, np.inf)
            for p in range(n):
                if in_fast[p]:
                    key[p] = last_use[p]
            order = np.argsort(key)
            for i in range(want):
                p = order[i]
                if not np.isfinite(key[p]):
                    break
                in_fast[p] = False
                used -= 1
                demoted += 1.0
        out[t, 0] = fr
        out[t, 1] = fw
        out[t, 2] = sr
        out[t, 3] = sw
        out[t, 4] = faults
        out[t, 5] = promoted
        out[t, 6] = demoted
        out[t, 7] = failed
    return out


def _tick_seconds(stream: Stream, host: Host, cols: NDArray[np.float64]) -> NDArray[np.float64]:
    w = stream.workload
    page = w.page_bytes
    fr, fw, sr, sw, faults, promoted, demoted, _, scans = (cols[:, i] for i in range(9))
    huge = page / HUGE_PAGE_BYTES
    fast_read = (fr + fw) * LINE_BYTES + demoted * page
    fast_write = fw * LINE_BYTES + promoted * page
    slow_read = (sr + sw) * LINE_BYTES + promoted * page
    slow_write = sw * LINE_BYTES + demoted * page
    busy_fast = _tier_seconds(host.fast_tier, fast_read, fast_write)
    busy_slow = _tier_seconds(host.slow_tier, slow_read, slow_write)
    overhead = (
        faults * HINT_FAULT_NS / w.threads
        + (promoted + demoted) * huge * SHOOTDOWN_NS
        + scans * w.pages * huge * SCAN_NS_PER_HUGE_PAGE
    ) * 1e-9
    compute = (fr + fw + sr + sw) * w.compute_ns_per_miss / w.threads * 1e-9
    in_flight = w.mlp * w.threads
    floor = np.maximum(
        busy_fast / (1.0 - host.fast_tier.background_utilization),
        busy_slow / (1.0 - host.slow_tier.background_utilization),
    )
    t = np.maximum(compute + overhead, floor) + 1e-12
    for _ in range(12):
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


def run_tpp(
    stream: Stream, host: Host, fast_bytes: int, knobs: TppKnobs | None = None, scan_ticks: int = 8
) -> TppRun:
    """The stream under the hint-fault manager with a fast tier of `fast_bytes`."""
    knobs = knobs or TppKnobs()
    w = stream.workload
    if not 1 <= scan_ticks <= w.ticks:
        raise ValueError(f"scan_ticks {scan_ticks} outside [1, {w.ticks}]")
    page = w.page_bytes
    fast_pages = int(min(fast_bytes, 4 * w.footprint_bytes) // page)
    tick = _nominal(stream, host)
    cols = _tpp(
        stream.reads,
        stream.writes,
        stream.first_touch,
        fast_pages,
        int(scan_ticks),
        knobs.hot_threshold_ms * 1e-3 / tick,
        knobs.promote_rate_limit_mbps * 1e6 * tick / page,
        round(knobs.low_watermark * fast_pages),
        max(1.0, page / HUGE_PAGE_BYTES),
    )
    seconds = _tick_seconds(stream, host, cols)
    moved = int(cols[:, 5].sum() + cols[:, 6].sum())
    return TppRun(
        wall_seconds=float(seconds.sum()),
        fast_bytes=fast_pages * page,
        promotions=int(cols[:, 5].sum()),
        demotions=int(cols[:, 6].sum()),
        promotion_failures=int(cols[:, 7].sum()),
        hint_faults=int(cols[:, 4].sum()),
        scans=int(cols[:, 8].sum()),
        migrated_bytes=moved * page,
    )


def tpp_profile(
    stream: Stream,
    host: Host,
    knobs: TppKnobs | None = None,
    scan_ticks: int = 8,
    current_fast_bytes: int | None = None,
    profile_seed: int = 0,
) -> TieringProfile:
    """What an agent records on a host running the hint-fault manager: the same samples and
    reference runs, this manager's state and its counters at the fast size in use."""
    knobs = knobs or TppKnobs()
    base = tiering_profile(stream, host, profile_seed=profile_seed)
    w = stream.workload
    current = w.footprint_bytes if current_fast_bytes is None else current_fast_bytes
    observed = run_tpp(stream, host, current, knobs, scan_ticks)
    tick = base.wall_seconds_fast / w.ticks
    return base.model_copy(
        update={
            "page_manager": PageManagerState(
                kind="tpp",
                version="hint-fault/1",
                knobs={
                    "hot_threshold_ms": knobs.hot_threshold_ms,
                    "promote_rate_limit_mbps": knobs.promote_rate_limit_mbps,
                },
                migration_period_seconds=scan_ticks * tick,
            ),
            "counters": ManagerCounters(
                fast_bytes=observed.fast_bytes,
                wall_seconds=observed.wall_seconds,
                promotions=observed.promotions,
                demotions=observed.demotions,
                promotion_failures=observed.promotion_failures,
                migrated_bytes=observed.migrated_bytes,
            ),
        }
    )
