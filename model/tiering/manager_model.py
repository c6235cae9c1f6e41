"""A closed-form picture of a sampling page manager, from the tiering profile alone.

The manager's counters are cumulative and halved whenever the hottest page's count reaches the
cooling threshold κ, so in steady state a page's count sits near 0.75 κ × (its miss rate / the
hottest page's): whether it looks hot depends on the ratio of the hot threshold θ to κ, with
Poisson noise around it. A page looks recently used if it was sampled at least once since the
last pass. The manager keeps the hot pages fast (as many as fit under the watermark) and fills the
rest of the fast tier by recency, which is only as good as recency separates warm pages from cold
ones. A hot set that moves (turnover) is chased with a delay: the time a new hot page needs to
collect θ samples, plus half a period.

This is the model's view; the simulator's page manager (sim/tiering) is the ground truth, and
docs/tiering.md says where the two part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from model.tiering.profile import TieringProfile

HUGE_PAGE_BYTES = 2 << 20
STEADY_COUNT = 0.75  # a count's mean position between two coolings, as a share of κ
SAMPLE_SECONDS = 200e-9  # a PEBS assist per sample (the same figure docs/tiering.md cites)
SHOOTDOWN_SECONDS = 4e-6  # per migrated huge page
PASS_SECONDS = 200e-6  # a migration pass's wake-up and list walk
# The shortest migration period the profile schema admits; a shorter one (from a tiny reuse) is
# read as this, so that passes per second stay finite.
MIN_PERIOD_SECONDS = 1e-4
DEFAULT_KNOBS = {
    "sampling_period": 5000.0,
    "read_hot_threshold": 8.0,
    "write_hot_threshold": 4.0,
    "cooling_threshold": 18.0,
    "migrate_batch_bytes": float(1 << 30),
    "demotion_watermark": 0.02,
    "migration_rate_limit_mbps": 65536.0,
}


# The knobs the model reads (everything else leaves its prediction unchanged).
MODEL_KNOBS = (
    "sampling_period",
    "read_hot_threshold",
    "write_hot_threshold",
    "cooling_threshold",
    "demotion_watermark",
    "migration_rate_limit_mbps",
)


# The model works on at most this many pages: a larger footprint is seen as groups of pages that
# share a rank (the curves carry no finer detail anyway).
MODEL_PAGES = 2048


def knob(knobs: dict[str, float], name: str) -> float:
    value = float(knobs.get(name, DEFAULT_KNOBS[name]))
    # Periods and thresholds divide: a zero from a caller must not become a division by zero.
    return value if name == "demotion_watermark" else max(value, 1e-6)


def poisson_below(mean: NDArray[np.float64], k: float) -> NDArray[np.float64]:
    """P(X < k) for X ~ Poisson(mean), elementwise."""
    kk = int(np.ceil(k))
    term = np.exp(-mean)
    total = np.zeros_like(mean)
    for i in range(min(kk, 400)):
        total += term
        term = term * mean / (i + 1)
    out: NDArray[np.float64] = np.clip(total, 0.0, 1.0)
    return out


def page_shares(profile: TieringProfile) -> NDArray[np.float64]:
    """Each page group's share of a window's misses, hottest first (from the window curve)."""
    n = min(profile.pages, MODEL_PAGES)
    x = np.concatenate([[0.0], profile.hotness.page_shares])
    y = np.concatenate([[0.0], profile.hotness.window_miss_share])
    cum = np.interp(np.arange(n + 1) / n, x, y)
    shares: NDArray[np.float64] = np.maximum(np.diff(cum), 0.0)
    return shares


@dataclass(frozen=True)
class ManagerView:
    shares: NDArray[np.float64]  # per page, hottest first
    p_hot: NDArray[np.float64]
    p_recent: NDArray[np.float64]
    samples_per_second: float
    detect_seconds: float
    group: float  # real pages per model page


def manager_view(
    profile: TieringProfile, knobs: dict[str, float], period_seconds: float
) -> ManagerView:
    a = page_shares(profile)
    group = profile.pages / a.size
    huge = max(1.0, profile.page_bytes / HUGE_PAGE_BYTES)
    period = knob(knobs, "sampling_period")
    cooling = knob(knobs, "cooling_threshold")
    theta_r = knob(knobs, "read_hot_threshold")
    theta_w = knob(knobs, "write_hot_threshold")
    writes = sum(s.miss_share * s.write_share for s in profile.structures)
    top = max(a[0], 1e-12)
    mean = STEADY_COUNT * cooling * a / top
    # Cooling never lets a count pass κ, so a threshold at or above κ is never reached.
    p_cold = poisson_below(mean * (1.0 - writes), min(theta_r, cooling + 1)) * poisson_below(
        mean * writes, min(theta_w, cooling + 1)
    )
    p_hot = 1.0 - p_cold
    rate = profile.misses_per_second / (period * huge)  # samples per second per page, per share
    p_recent = 1.0 - np.exp(-a / group * rate * period_seconds)
    hot_mass = float((p_hot * a).sum())
    typical = float((p_hot * a * a).sum() / hot_mass) if hot_mass > 0 else top
    detect = min(theta_r, cooling) / max(typical / group * rate, 1e-12) + period_seconds / 2.0
    return ManagerView(a, p_hot, p_recent, profile.misses_per_second / period, detect, group)


def kept_share(
    profile: TieringProfile, view: ManagerView, fast_share: float, watermark: float
) -> tuple[float, float]:
    """(share of misses served fast, pages moved per second) with `fast_share` of the footprint
    fast."""
    a, p_hot = view.shares, view.p_hot
    n = a.size
    capacity = max(0.0, fast_share * (1.0 - watermark) * n)
    if capacity >= n:
        return 1.0, 0.0
    hot_pages = float(p_hot.sum())
    hot_mass = float((p_hot * a).sum())
    if hot_pages >= capacity:
        kept = hot_mass * capacity / max(hot_pages, 1e-12)
        held = capacity
    else:
        rest = capacity - hot_pages
        cold_w = 1.0 - p_hot
        cum_pages = np.cumsum(cold_w)
        take = np.clip(rest - (cum_pages - cold_w), 0.0, cold_w)  # the warmest non-hot pages
        good = float((take * a).sum())
        cold_mass = float((cold_w * a).sum())
        at_random = cold_mass * rest / max(n - hot_pages, 1e-12)
        chosen = take > 0
        others = ~chosen & (cold_w > 0)
        q_in = float(view.p_recent[chosen].mean()) if chosen.any() else 0.0
        q_out = float(view.p_recent[others].mean()) if others.any() else 0.0
        q = float(np.clip(q_in - q_out, 0.0, 1.0))
        kept = hot_mass + q * good + (1.0 - q) * at_random
        held = hot_pages
    turnover = moving_turnover(profile, capacity / n)
    window = profile.window_seconds
    lost = turnover * min(hot_mass, kept) * min(1.0, view.detect_seconds / window)
    moved_per_second = 2.0 * turnover * held * view.group / window
    return float(np.clip(kept - lost, 0.0, 1.0)), moved_per_second


def moving_turnover(profile: TieringProfile, x_share: float) -> float:
    """The turnover of the hottest `x_share` that is the hot set moving, not sampling noise.

    Measured turnover also counts equally warm pages that trade ranks between windows by sampling
    noise alone; a manager with a hot threshold does not chase those, and they cost nothing if
    it did. What a moving hot set costs shows as the gap between the window curve and the run
    curve: the misses a perfect mover keeps fast and a static placement does not. The turnover
    is read only up to that gap's share of the window's misses."""
    h = profile.hotness
    x = np.concatenate([[0.0], h.page_shares])
    turnover = float(np.interp(x_share, x, np.concatenate([[0.0], h.turnover])))
    window = float(np.interp(x_share, x, np.concatenate([[0.0], h.window_miss_share])))
    run = float(np.interp(x_share, x, np.concatenate([[0.0], h.run_miss_share])))
    if window <= 0.0:
        return 0.0
    return min(turnover, max(0.0, window - run) / window)


def seconds_per_moved_page(profile: TieringProfile) -> float:
    slow_bw = profile.slow_write_bandwidth_bytes_per_second or 5e9
    fast_bw = profile.fast_write_bandwidth_bytes_per_second or 50e9
    huge = max(1.0, profile.page_bytes / HUGE_PAGE_BYTES)
    # A move reads one tier and writes the other; charge the slower write and the shootdowns.
    return profile.page_bytes / min(slow_bw, fast_bw) + huge * SHOOTDOWN_SECONDS


def predicted_loss(
    profile: TieringProfile, knobs: dict[str, float], period_seconds: float, fast_share: float
) -> float:
    """The model's run-time loss against all-fast with no memory pressure, under the profile's
    page manager: hint-fault promotion for `tpp`, sampling for the others."""
    if profile.page_manager.kind in HINT_FAULT_MANAGERS:
        return hint_fault_loss(profile, knobs, period_seconds, fast_share)
    return sampling_loss(profile, knobs, period_seconds, fast_share)


def sampling_loss(
    profile: TieringProfile, knobs: dict[str, float], period_seconds: float, fast_share: float
) -> float:
    """A sampling (HeMem-like) manager's loss."""
    view = manager_view(profile, knobs, period_seconds)
    kept, moved = kept_share(profile, view, fast_share, knob(knobs, "demotion_watermark"))
    # A rate limit below what chasing needs leaves that share of the moves undone, and the pages
    # they would have brought up stay slow.
    cap = knob(knobs, "migration_rate_limit_mbps") * 1e6 / profile.page_bytes
    if moved > cap:
        turnover = moving_turnover(profile, fast_share)
        kept = max(0.0, kept - turnover * kept * (1.0 - cap / moved))
        moved = cap
    t0 = profile.wall_seconds_fast
    slow_cost = (profile.wall_seconds_slow - t0) * (1.0 - kept)
    migration = moved * t0 * seconds_per_moved_page(profile)
    passes = t0 / max(period_seconds, MIN_PERIOD_SECONDS) * PASS_SECONDS
    sampling = view.samples_per_second * t0 * SAMPLE_SECONDS / profile.threads
    loss = (slow_cost + migration + passes + sampling) / t0
    return float(min(loss, 1e6))  # finite whatever the inputs: it goes out as JSON


# --- Hint-fault promotion (Linux NUMA balancing in tiering mode, TPP) -------------------------
#
# Every scan period the scanner makes the slow pages' entries inaccessible; the first access to
# such a page faults, and the page is promoted if the fault came within the hot threshold of the
# scan that marked it (and a fast page is free, and the promotion rate limit allows). Reclaim
# demotes the least recently used fast pages when free fast memory falls under the watermark. So
# the fast tier behaves as an LRU cache whose admission waits for a scan and a fault: a page
# stays fast while it is used at least once every T seconds (T set by the capacity, Che's
# approximation), and once demoted it is served slow until the next scan marks it and it faults
# within the threshold.

HINT_FAULT_MANAGERS = frozenset({"tpp"})
HINT_FAULT_SECONDS = 2e-6  # the trap, the fault handler and the return, per huge page
PTE_SCAN_SECONDS = 20e-9  # making one huge page's entry inaccessible, per scan
DEFAULT_HOT_THRESHOLD_MS = 1000.0  # the kernel's default
DEFAULT_PROMOTE_LIMIT_MBPS = 65536.0  # unlimited in practice


@dataclass(frozen=True)
class HintFaultView:
    kept: float  # share of misses served fast
    promotions_per_second: float
    faults_per_second: float
    scans_per_second: float


def _lru_occupancy(
    rate: NDArray[np.float64], delay: NDArray[np.float64], horizon: float
) -> NDArray[np.float64]:
    """The share of time (and, for Poisson accesses, of accesses) each page spends fast when it is
    demoted after `horizon` seconds unused and comes back `delay` seconds after its next use."""
    r = np.exp(-rate * horizon)
    return (1.0 - r) / np.maximum((1.0 - r) + r * (1.0 + rate * delay), 1e-300)


def reused_pages(profile: TieringProfile) -> float:
    """How many pages are reused at all, from the reuse histogram: the footprint of a long
    window, touches per second times the mean time between touches."""
    reuse = sum(b.count * b.reuse_misses for s in profile.structures for b in s.reuse)
    # Touches per second × mean reuse time = Σ count × reuse (misses) / the run's misses.
    return float(min(profile.pages, reuse / max(profile.llc_misses, 1.0)))


def hint_fault_view(
    profile: TieringProfile, knobs: dict[str, float], period_seconds: float, fast_share: float
) -> HintFaultView:
    a = page_shares(profile)
    n = a.size
    group = profile.pages / n
    huge = max(1.0, profile.page_bytes / HUGE_PAGE_BYTES)
    scan = max(period_seconds, MIN_PERIOD_SECONDS)
    threshold = max(float(knobs.get("hot_threshold_ms", DEFAULT_HOT_THRESHOLD_MS)), 1e-3) * 1e-3
    limit = max(float(knobs.get("promote_rate_limit_mbps", DEFAULT_PROMOTE_LIMIT_MBPS)), 1e-6)
    watermark = knob(knobs, "demotion_watermark")
    rate = a * profile.misses_per_second / group  # accesses per second of one real page
    # Pages the reuse histogram never saw reused (touched once, at initialisation) are not
    # touched again: the coldest beyond the reused count get no rate.
    rate[int(np.ceil(reused_pages(profile) / group)) :] = 0.0
    # A marked page is promoted if its first access after the scan comes within the threshold;
    # else it waits for the next scan.
    q = 1.0 - np.exp(-rate * min(threshold, scan))
    delay = scan / 2.0 + scan * (1.0 - q) / np.maximum(q, 1e-12)
    # Reclaim refills the free watermark from the low mark to twice it: on average 1.5 marks free.
    capacity = max(0.0, fast_share * (1.0 - 1.5 * watermark)) * n
    cap_moves = limit * 1e6 / profile.page_bytes
    occupancy = np.zeros(n)
    promotions = 0.0
    for _ in range(2):  # a second pass when the rate limit stretches the delay
        if float((rate > 0).sum()) <= capacity:
            occupancy = (rate > 0).astype(float)
            horizon = np.inf
        else:
            lo, hi = -12.0, 12.0  # log10 seconds
            for _ in range(60):
                mid = 0.5 * (lo + hi)
                if _lru_occupancy(rate, delay, 10.0**mid).sum() > capacity:
                    hi = mid
                else:
                    lo = mid
            horizon = 10.0**lo
            occupancy = _lru_occupancy(rate, delay, horizon)
        # One promotion per cycle of fast and slow time: rate x (1 - occupancy) x e^{-rate T}
        # / (e^{-rate T} (1 + rate delay)) simplifies to (1 - occupancy) / (1/rate + delay).
        cycles = (1.0 - occupancy) / np.maximum(1.0 / np.maximum(rate, 1e-300) + delay, 1e-300)
        cycles = np.where(np.isfinite(horizon) & (rate > 0), cycles, 0.0)
        promotions = float(cycles.sum()) * group
        if promotions <= cap_moves:
            break
        delay = delay * promotions / cap_moves
    # Pages never reused stay where first touch put them, in the room the reused ones leave.
    cold = rate <= 0
    if cold.any():
        room = max(0.0, capacity - float(occupancy[~cold].sum()))
        occupancy[cold] = min(1.0, room / float(cold.sum()))
    kept = float((a * occupancy).sum())
    # A moving hot set: pages new to the hottest set wait a scan and a fault before they come up.
    turnover = moving_turnover(profile, min(1.0, capacity / n))
    window = profile.window_seconds
    hot = a > 0
    typical = float((a[hot] * delay[hot]).sum() / max(a[hot].sum(), 1e-12)) if hot.any() else 0.0
    kept -= turnover * kept * min(1.0, typical / window)
    promotions += turnover * capacity * group / window
    if promotions > cap_moves:
        kept -= turnover * kept * (1.0 - cap_moves / promotions)
        promotions = cap_moves
    # Faults: a marked slow page faults once per huge page it touches before the next scan.
    touched = huge * (1.0 - np.exp(-rate * scan / huge))
    faults = float(((1.0 - occupancy) * touched).sum()) * group / scan
    return HintFaultView(
        kept=float(np.clip(kept, 0.0, 1.0)),
        promotions_per_second=promotions,
        faults_per_second=faults,
        scans_per_second=1.0 / scan,
    )


def _hint_fault_cost(profile: TieringProfile, view: HintFaultView) -> float:
    t0 = profile.wall_seconds_fast
    huge = max(1.0, profile.page_bytes / HUGE_PAGE_BYTES)
    slow_cost = (profile.wall_seconds_slow - t0) * (1.0 - view.kept)
    # A promotion copies in the faulting thread's fault path; its demotion copies in kswapd, in
    # the background. Both shoot down the page's entries on every thread.
    shootdowns = 2.0 * huge * SHOOTDOWN_SECONDS
    copy = seconds_per_moved_page(profile) - huge * SHOOTDOWN_SECONDS
    migration = view.promotions_per_second * t0 * (copy / profile.threads + shootdowns)
    faults = view.faults_per_second * t0 * HINT_FAULT_SECONDS / profile.threads
    scans = view.scans_per_second * t0 * profile.pages * huge * PTE_SCAN_SECONDS
    return (slow_cost + migration + faults + scans) / t0


def reclaim_churn(profile: TieringProfile, knobs: dict[str, float]) -> float:
    """The loss the counters show beyond the model, times the scan period they were measured at,
    where they also show more promotions than the model expects: reclaim demoting warm pages to
    its watermark and the next scan's faults bringing them back, a cost that repeats every scan.
    Zero without counters or without such promotions."""
    c = profile.counters
    if c is None or c.fast_bytes <= 0:
        return 0.0
    scan = max(profile.page_manager.migration_period_seconds, MIN_PERIOD_SECONDS)
    share = min(1.0, c.fast_bytes / profile.footprint_bytes)
    view = hint_fault_view(profile, knobs, scan, share)
    if c.promotions / c.wall_seconds <= view.promotions_per_second:
        return 0.0
    excess = c.wall_seconds / profile.wall_seconds_fast - 1.0 - _hint_fault_cost(profile, view)
    return max(0.0, excess) * scan


def hint_fault_loss(
    profile: TieringProfile,
    knobs: dict[str, float],
    period_seconds: float,
    fast_share: float,
    with_churn: bool = True,
) -> float:
    """A hint-fault (TPP-like) manager's loss: slow misses, moves (a promotion and its demotion),
    faults and scans, and the reclaim churn the counters measured, at most as often as measured."""
    view = hint_fault_view(profile, knobs, period_seconds, fast_share)
    if not with_churn:
        return float(min(_hint_fault_cost(profile, view), 1e6))
    # Longer scans churn less often; a shorter scan than the measured one is not read as more
    # churn (the demoted pages' own reuse bounds it, and nothing measured says by how much).
    measured = max(profile.page_manager.migration_period_seconds, MIN_PERIOD_SECONDS)
    churn = reclaim_churn(profile, knobs) / max(period_seconds, measured)
    return float(min(_hint_fault_cost(profile, view) + churn, 1e6))
