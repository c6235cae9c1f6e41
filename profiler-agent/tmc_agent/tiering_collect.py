"""Measuring a tiering profile (`tmc.tiering/v1`): page-granular miss samples cut into time
windows, the reuse histogram, and the page manager's state and counters.

The samples come from a backend: every LLC miss of a traced run (the trace backend, sampling
period 1) or PEBS samples of `perf record -d` with their time stamps (the hardware backend). From
them, per window, the share of the window's misses that its hottest x % of pages take (what a
perfect mover could keep fast), the same over the whole run (what a static placement could keep
fast) and how much of a window's hottest x % was not among the previous window's (what a mover
has to chase). The reuse of a page is the number of misses between two consecutive samples of it.

The page manager is read from the host where one runs: Linux NUMA balancing in tiering mode (the
mode bit of `kernel.numa_balancing`, its sysctl and debugfs knobs) and its counters in
`/proc/vmstat` (promotions, demotions, promotion candidates). Where none runs, the operator names
the manager the profile is for, with that manager's documented defaults.

Pure numpy and the model's types: no simulator, no server stack.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from model.tiering.profile import (
    HotnessCurves,
    ManagerCounters,
    PageManagerState,
    ReuseBin,
    StructureReuse,
    TieringProfile,
)
from tmc_agent.hostpaths import HostPaths, read_text
from tmc_agent.tiering import NUMA_BALANCING_TIERING

CURVE_POINTS = 100
MIN_WINDOW_SECONDS = 1e-4
WINDOWS = 24  # windows per run: enough pairs for turnover, enough samples per window
BASE_PAGE_BYTES = 4096  # /proc/vmstat counts base pages
MAX_REUSE_BINS = 64

# The managers' knobs as they ship (HeMem: the BO paper 000, Table 2; TPP: the kernel's defaults
# for hot_threshold_ms and the promotion rate limit, which is unlimited unless set).
MANAGER_DEFAULTS: dict[str, tuple[dict[str, float], float]] = {
    "hemem": (
        {
            "sampling_period": 5000.0,
            "read_hot_threshold": 8.0,
            "write_hot_threshold": 4.0,
            "cooling_threshold": 18.0,
            "migrate_batch_bytes": float(1 << 30),
            "demotion_watermark": 0.02,
        },
        0.01,
    ),
    "tpp": ({"hot_threshold_ms": 1000.0, "promote_rate_limit_mbps": 65536.0}, 1.0),
}


class TieringCollectError(ValueError):
    """Samples that cannot make a profile (none, or too few pages to tell hot from cold)."""


@dataclass(frozen=True)
class PageSamples:
    """Sampled LLC misses in time order: when, which page, which structure, read or write."""

    seconds: NDArray[np.float64]  # since the run's start
    page: NDArray[np.int64]  # the address divided by the page size
    tag: NDArray[np.int64]  # index into `tags`
    is_write: NDArray[np.bool_]
    tags: list[str]

    def __post_init__(self) -> None:
        n = self.seconds.shape[0]
        if not self.page.shape[0] == self.tag.shape[0] == self.is_write.shape[0] == n:
            raise ValueError("page samples: arrays of different lengths")


def hotness_curves(
    window_of: NDArray[np.int64],
    page: NDArray[np.int64],
    points: int = CURVE_POINTS,
    pages: int | None = None,
) -> HotnessCurves:
    """The window, run and turnover curves over `points` shares of the pages.

    `page` is a dense page index (0..n-1) per sample, `window_of` its window; `pages` counts the
    pages no sample fell on too (sparse sampling), which are the coldest."""
    n = max(int(page.max()) + 1, pages or 0)
    shares = np.arange(1, points + 1) / points
    ks = np.maximum(1, np.ceil(shares * n - 1e-9).astype(np.int64))
    window_curve = np.zeros(points)
    turnover = np.zeros(points)
    weight = 0.0
    pairs = 0
    previous: NDArray[np.int64] | None = None
    for w in np.unique(window_of):
        counts = np.bincount(page[window_of == w], minlength=n).astype(np.float64)
        total = counts.sum()
        # Hottest first; ties in page order, so that a tie is not read as a moving hot set.
        order = np.lexsort((np.arange(n), -counts))
        cum = np.cumsum(counts[order]) / total
        window_curve += cum[ks - 1] * total
        weight += total
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        if previous is not None:
            before = previous[order]  # last window's rank of this window's k-th hottest page
            for j, k in enumerate(ks):
                turnover[j] += 1.0 - np.count_nonzero(before[:k] < k) / k
            pairs += 1
        previous = rank
    run_counts = np.bincount(page, minlength=n).astype(np.float64)
    run_cum = np.cumsum(np.sort(run_counts)[::-1]) / run_counts.sum()
    return HotnessCurves(
        page_shares=[float(s) for s in shares],
        window_miss_share=[
            float(x)
            for x in np.maximum.accumulate(np.clip(window_curve / max(weight, 1.0), 0.0, 1.0))
        ],
        run_miss_share=[float(x) for x in np.maximum.accumulate(np.clip(run_cum[ks - 1], 0, 1))],
        turnover=[float(x) for x in np.clip(turnover / max(pairs, 1), 0.0, 1.0)],
    )


def reuse_histogram(page: NDArray[np.int64], sampling_period: int) -> list[ReuseBin]:
    """Misses between consecutive samples of the same page, in power-of-two bins (centre: the
    bin's geometric mean)."""
    if page.size < 2:
        return []
    order = np.argsort(page, kind="stable")  # each page's samples stay in time order
    position = np.arange(page.size, dtype=np.int64)[order]
    same = page[order][1:] == page[order][:-1]
    gaps = (np.diff(position)[same] * sampling_period).astype(np.float64)
    if gaps.size == 0:
        return []
    exponent = np.floor(np.log2(np.maximum(gaps, 1.0))).astype(np.int64)
    bins = np.bincount(exponent)
    return [
        ReuseBin(reuse_misses=float(2.0**e * np.sqrt(2.0)) if e > 0 else 1.0, count=int(c))
        for e, c in enumerate(bins)
        if c > 0
    ][:MAX_REUSE_BINS]


def build_profile(
    samples: PageSamples,
    *,
    page_bytes: int,
    llc_misses: float,
    sampling_period: int,
    wall_seconds_fast: float,
    wall_seconds_slow: float,
    manager: PageManagerState,
    threads: int = 1,
    slow_write_bandwidth: float | None = None,
    fast_write_bandwidth: float | None = None,
    counters: ManagerCounters | None = None,
    windows: int = WINDOWS,
    structure_bytes: Mapping[str, int] | None = None,
) -> TieringProfile:
    """The profile from the samples of one run and the reference runs' times.

    `structure_bytes`: the structures' allocated sizes (the shim's region log) where sampling is
    sparse: a structure then counts its allocated pages, the unsampled ones as the coldest."""
    # A window is at least the schema's shortest (0.1 ms); a short run gets fewer of them.
    windows = min(windows, int(wall_seconds_fast / MIN_WINDOW_SECONDS))
    if windows < 2:
        raise TieringCollectError(
            f"the run lasts {wall_seconds_fast * 1e3:.3f} ms: too short for two windows of"
            f" {MIN_WINDOW_SECONDS * 1e3:g} ms"
        )
    if samples.seconds.size < 2 * windows:
        raise TieringCollectError(
            f"{samples.seconds.size} sampled misses: too few to cut into {windows} windows"
        )
    pages, dense = np.unique(samples.page, return_inverse=True)
    if pages.size < 2:
        raise TieringCollectError("every sample fell on one page: nothing to tier")
    dense = dense.astype(np.int64)
    # Windows of equal time over the run; the last sample closes the last window.
    span = max(float(samples.seconds.max()), 1e-12)
    window_of = np.minimum((samples.seconds / span * windows).astype(np.int64), windows - 1)
    window_seconds = min(wall_seconds_fast / windows, wall_seconds_fast)
    # A page belongs to the structure that most of its samples name.
    by_page_tag = np.zeros((pages.size, len(samples.tags)))
    np.add.at(by_page_tag, (dense, samples.tag), 1.0)
    owner = by_page_tag.argmax(axis=1)
    structures: list[StructureReuse] = []
    total = float(samples.seconds.size)
    all_pages = 0
    for t, name in enumerate(samples.tags):
        mine = owner[dense] == t
        n_pages = int(np.count_nonzero(owner == t))
        if structure_bytes is not None and name in structure_bytes:
            n_pages = max(n_pages, -(-int(structure_bytes[name]) // page_bytes))
        if n_pages == 0:
            continue
        all_pages += n_pages
        hits = int(np.count_nonzero(mine))
        structures.append(
            StructureReuse(
                tag=name,
                size_bytes=n_pages * page_bytes,
                miss_share=hits / total,
                write_share=float(np.count_nonzero(samples.is_write[mine]) / hits) if hits else 0.0,
                reuse=reuse_histogram(dense[mine], sampling_period),
            )
        )
    try:
        return _profile(
            samples,
            all_pages,
            dense,
            window_of,
            window_seconds,
            structures,
            page_bytes=page_bytes,
            llc_misses=llc_misses,
            sampling_period=sampling_period,
            wall_seconds_fast=wall_seconds_fast,
            wall_seconds_slow=wall_seconds_slow,
            manager=manager,
            threads=threads,
            slow_write_bandwidth=slow_write_bandwidth,
            fast_write_bandwidth=fast_write_bandwidth,
            counters=counters,
        )
    except ValidationError as exc:
        raise TieringCollectError(f"the measured profile is not valid: {exc}") from None


def _profile(
    samples: PageSamples,
    pages: int,
    dense: NDArray[np.int64],
    window_of: NDArray[np.int64],
    window_seconds: float,
    structures: list[StructureReuse],
    *,
    page_bytes: int,
    llc_misses: float,
    sampling_period: int,
    wall_seconds_fast: float,
    wall_seconds_slow: float,
    manager: PageManagerState,
    threads: int,
    slow_write_bandwidth: float | None,
    fast_write_bandwidth: float | None,
    counters: ManagerCounters | None,
) -> TieringProfile:
    return TieringProfile(
        footprint_bytes=pages * page_bytes,
        page_bytes=page_bytes,
        llc_misses=max(1.0, float(llc_misses)),
        threads=threads,
        wall_seconds_fast=wall_seconds_fast,
        wall_seconds_slow=max(wall_seconds_slow, wall_seconds_fast * 0.5),
        slow_write_bandwidth_bytes_per_second=slow_write_bandwidth,
        fast_write_bandwidth_bytes_per_second=fast_write_bandwidth,
        sampling_period=sampling_period,
        window_seconds=window_seconds,
        hotness=hotness_curves(window_of, dense, pages=pages),
        structures=structures,
        page_manager=manager,
        counters=counters,
    )


# --- the page manager on this host -------------------------------------------------------------


def read_vmstat(paths: HostPaths) -> dict[str, int]:
    """`/proc/vmstat` as counters; an absent or unreadable file is an empty map."""
    out: dict[str, int] = {}
    for line in (read_text(paths.proc / "vmstat") or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


PROMOTED = ("pgpromote_success",)
DEMOTED = ("pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged", "pgdemote_proactive")


def counters_from_vmstat(
    before: Mapping[str, int], after: Mapping[str, int], fast_bytes: int, wall_seconds: float
) -> ManagerCounters | None:
    """The kernel tiering's counters over one run (base pages), or None on a kernel without
    them (no `pgpromote_success`: no memory tiering)."""
    if "pgpromote_success" not in after:
        return None

    def delta(names: Sequence[str]) -> int:
        return sum(max(0, after.get(n, 0) - before.get(n, 0)) for n in names)

    promoted = delta(PROMOTED)
    demoted = delta(DEMOTED)
    # A candidate that was not promoted was refused (rate limit, no free fast page).
    failed = max(0, delta(("pgpromote_candidate",)) - promoted)
    return ManagerCounters(
        fast_bytes=fast_bytes,
        wall_seconds=wall_seconds,
        promotions=promoted,
        demotions=demoted,
        promotion_failures=failed,
        migrated_bytes=(promoted + demoted) * BASE_PAGE_BYTES,
    )


def _number(path_text: str | None) -> float | None:
    if path_text is None or not re.fullmatch(r"\d+", path_text):
        return None
    return float(path_text)


def kernel_tiering(paths: HostPaths, debugfs: str = "kernel/debug") -> PageManagerState | None:
    """Linux NUMA balancing in tiering mode, with its knobs, if this host runs it."""
    mode = _number(read_text(paths.proc / "sys/kernel/numa_balancing"))
    if mode is None or not int(mode) & NUMA_BALANCING_TIERING:
        return None
    knobs, period = dict(MANAGER_DEFAULTS["tpp"][0]), MANAGER_DEFAULTS["tpp"][1]
    rate = _number(read_text(paths.proc / "sys/kernel/numa_balancing_promote_rate_limit_MBps"))
    if rate is not None and rate > 0:
        knobs["promote_rate_limit_mbps"] = rate
    sched = paths.sys / debugfs / "sched/numa_balancing"
    hot = _number(read_text(sched / "hot_threshold_ms"))
    if hot is not None and hot > 0:
        knobs["hot_threshold_ms"] = hot
    scan = _number(read_text(sched / "scan_period_min_ms"))
    if scan is not None and scan > 0:
        period = scan / 1000.0
    return PageManagerState(
        kind="tpp", version="linux-numa-balancing", knobs=knobs, migration_period_seconds=period
    )


def named_manager(kind: str, knobs: Mapping[str, float] | None = None) -> PageManagerState:
    """The manager the operator names, at its documented defaults unless knobs are given."""
    if kind not in MANAGER_DEFAULTS:
        raise TieringCollectError(
            f"no defaults known for page manager {kind!r}: one of {sorted(MANAGER_DEFAULTS)}"
        )
    defaults, period = MANAGER_DEFAULTS[kind]
    return PageManagerState(
        kind=kind,
        version="defaults",
        knobs={**defaults, **(knobs or {})},
        migration_period_seconds=period,
    )


def page_manager(paths: HostPaths, kind: str) -> PageManagerState:
    """`auto`: the kernel's tiering where it runs, else a HeMem-like manager at its defaults."""
    if kind == "auto":
        return kernel_tiering(paths) or named_manager("hemem")
    if kind == "tpp":
        return kernel_tiering(paths) or named_manager("tpp")
    return named_manager(kind)


# --- PEBS samples (hardware backend) -------------------------------------------------------------

_TIMED = re.compile(r"^\s*(\d+\.\d+):\s+([0-9a-fA-F]+)\s*$")


def parse_perf_script_timed(text: str) -> tuple[NDArray[np.float64], NDArray[np.uint64]]:
    """`perf script -F time,addr`: `<seconds>: <hex address>` per sample; seconds from the
    first sample. Lines of any other shape are skipped."""
    times: list[float] = []
    addrs: list[int] = []
    for line in text.splitlines():
        m = _TIMED.match(line)
        if m is None:
            continue
        times.append(float(m.group(1)))
        addrs.append(int(m.group(2), 16))
    t = np.asarray(times, dtype=np.float64)
    if t.size:
        t -= t.min()
    return t, np.asarray(addrs, dtype=np.uint64)
