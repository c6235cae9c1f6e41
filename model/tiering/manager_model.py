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
    """The model's run-time loss against all-fast with no memory pressure."""
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
