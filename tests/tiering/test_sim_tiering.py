"""The dynamic-tiering simulator's mechanisms, each checked where it can be seen on its own."""

from __future__ import annotations

import numpy as np
import pytest

from sim.machine import cxl_local_host, optane_host
from sim.tiering import Knobs, Stream, run
from sim.tiering.manager import (
    HUGE_PAGE_BYTES,
    LINE_BYTES,
    SAMPLE_NS,
    SHOOTDOWN_NS,
    roomy_fast_bytes,
    tick_times,
)
from sim.tiering.streams import (
    STUDY_WORKLOADS,
    HotSpot,
    Phase,
    Structure,
    Sweep,
    TieringWorkload,
    Uniform,
    draw_stream,
)
from tests.tiering.conftest import profile, stream


def half(s: Stream, share: float = 0.5) -> int:
    w = s.workload
    pages: int = int(share * w.pages) * w.page_bytes
    return pages


def test_same_seed_same_stream_and_misses_add_up() -> None:
    w = STUDY_WORKLOADS["moving-hot"]()
    a, b = draw_stream(w, 3), draw_stream(w, 3)
    assert np.array_equal(a.reads, b.reads) and np.array_equal(a.luck_reads, b.luck_reads)
    assert not np.array_equal(a.reads, draw_stream(w, 4).reads)
    assert a.misses.sum() == pytest.approx(w.misses, rel=1e-9)


def test_hot_set_moves_and_the_load_phase_writes_every_page() -> None:
    s = stream("moving-hot")
    w = s.workload
    load = w.phases[0].ticks
    assert (s.writes[:load].sum(axis=0) > 0).all()  # every page written at start-up
    early = s.misses[load : load + 12].sum(axis=0).argsort()[-20:]
    late = s.misses[-12:].sum(axis=0).argsort()[-20:]
    assert len(set(early) & set(late)) < 5  # the hot window has moved on


def test_phase_shares_must_add_up() -> None:
    with pytest.raises(ValueError, match="add up"):
        Phase(ticks=4, patterns=[Uniform(share=0.5), HotSpot(share=0.3, fraction=0.1)])


def test_samples_follow_the_sampling_period() -> None:
    s = stream("warm-background")
    w = s.workload
    huge = w.page_bytes / HUGE_PAGE_BYTES
    for period in (1000, 5000):
        r = run(s, cxl_local_host(), w.footprint_bytes, Knobs(sampling_period=period))
        assert r.samples == pytest.approx(w.misses / (period * huge), rel=0.05)


def test_unmanaged_runs_sample_and_move_nothing() -> None:
    s = stream("strided")
    r = run(s, optane_host(), half(s), managed=False)
    assert r.samples == r.promotions == r.demotions == r.passes == 0
    fast = run(s, optane_host(), s.workload.footprint_bytes, managed=False)
    slow = run(s, optane_host(), 0, managed=False)
    assert fast.wall_seconds < r.wall_seconds < slow.wall_seconds


def test_first_touch_fills_the_fast_tier_in_touch_order() -> None:
    s = stream("strided")
    w = s.workload
    r = run(s, optane_host(), half(s), managed=False)
    fast_pages = s.first_touch[: w.pages // 2]
    in_fast = np.zeros(w.pages, bool)
    in_fast[fast_pages] = True
    expected = s.misses[:, ~in_fast].sum() / s.misses.sum()
    assert r.slow_miss_share == pytest.approx(expected, rel=1e-9)


def test_passes_come_every_period() -> None:
    s = stream("strided")
    for period in (1, 8, 50):
        assert (
            run(s, optane_host(), half(s), period_ticks=period).passes == s.workload.ticks // period
        )


def test_cooling_caps_counts_so_a_threshold_above_it_never_fires() -> None:
    s = stream("moving-hot")
    never = Knobs(read_hot_threshold=16, write_hot_threshold=16, cooling_threshold=6)
    assert run(s, optane_host(), half(s, 0.6), never).promotions == 0
    eager = Knobs(read_hot_threshold=2, write_hot_threshold=2, cooling_threshold=36)
    assert run(s, optane_host(), half(s, 0.6), eager).promotions > 0


def test_lower_hot_thresholds_promote_more() -> None:
    s = stream("moving-hot")
    counts = [
        run(
            s, optane_host(), half(s, 0.6), Knobs(read_hot_threshold=t, cooling_threshold=36)
        ).promotions
        for t in (24, 8, 2)
    ]
    assert counts[0] < counts[1] < counts[2]


def _churn() -> TieringWorkload:
    """A hot set that jumps to a new place often, on a fast tier with no slack."""
    return TieringWorkload(
        name="churn",
        footprint_bytes=1 << 30,
        pages=128,
        misses=2e9,
        phases=[
            Phase(
                ticks=200,
                patterns=[
                    HotSpot(share=0.9, fraction=0.25, exponent=0.0, shift=0.25, every_ticks=10),
                    Uniform(share=0.1),
                ],
            )
        ],
        structures=[Structure(tag="all", start=0.0, span=1.0)],
    )


def test_promotions_fail_when_the_fast_tier_is_full_and_adaptive_demotion_cuts_them() -> None:
    s = draw_stream(_churn(), 1)
    knobs = Knobs(read_hot_threshold=2, cooling_threshold=36, demotion_watermark=0.01)
    base = run(s, optane_host(), half(s, 0.4), knobs, period_ticks=2)
    adaptive = run(s, optane_host(), half(s, 0.4), knobs, period_ticks=2, adaptive_demotion=True)
    assert base.promotion_failures > 0
    assert adaptive.promotion_failures < base.promotion_failures
    assert adaptive.promotions > base.promotions


def test_roomy_fast_tier_never_demotes() -> None:
    s = stream("moving-hot")
    w = s.workload
    r = run(s, optane_host(), roomy_fast_bytes(w.footprint_bytes, w.page_bytes))
    assert r.demotions == 0 and r.slow_miss_share == 0.0


def _cols(ticks: int = 4) -> np.ndarray:
    cols = np.zeros((ticks, 9))
    cols[:, 0] = 1e6  # fast reads per tick
    return cols


def test_time_slow_misses_cost_more_than_fast_ones() -> None:
    s = stream("strided")
    host = optane_host()
    fast = _cols()
    slow = _cols()
    slow[:, 2], slow[:, 0] = slow[:, 0], 0.0
    assert (
        tick_times(s, host, slow, s.workload.page_bytes)
        > tick_times(s, host, fast, s.workload.page_bytes)
    ).all()


def test_time_charges_samples_shootdowns_and_copies() -> None:
    s = stream("strided")
    w = s.workload
    host = cxl_local_host()
    base = tick_times(s, host, _cols(), w.page_bytes)
    sampled = _cols()
    sampled[:, 4] = 1000
    extra = tick_times(s, host, sampled, w.page_bytes) - base
    assert extra == pytest.approx(1000 * SAMPLE_NS / w.threads * 1e-9, rel=0.05)
    moved = _cols()
    moved[:, 5] = 2  # two regions promoted: shootdowns on every thread, plus the copies' traffic
    extra = tick_times(s, host, moved, w.page_bytes) - base
    shootdowns = 2 * (w.page_bytes / HUGE_PAGE_BYTES) * SHOOTDOWN_NS * 1e-9
    assert (extra > shootdowns).all()


def test_time_never_beats_the_slow_tiers_write_bandwidth() -> None:
    s = stream("strided")
    host = optane_host()
    cols = np.zeros((1, 9))
    cols[0, 3] = 1e8  # slow write misses: a read and a write-back each
    t = tick_times(s, host, cols, s.workload.page_bytes)[0]
    floor = 1e8 * LINE_BYTES / host.slow_tier.write_bandwidth_bytes_per_second
    assert t >= floor


def test_run_rejects_impossible_settings() -> None:
    s = stream("strided")
    with pytest.raises(ValueError, match="fast_bytes"):
        run(s, optane_host(), -1)
    with pytest.raises(ValueError, match="period_ticks"):
        run(s, optane_host(), half(s), period_ticks=0)


def test_sweep_reuse_shows_in_the_profile(strided_profile) -> None:
    layers = next(x for x in strided_profile.structures if x.tag == "layers")
    w = stream("strided").workload
    peak = max(layers.reuse, key=lambda b: b.count)
    sweep = next(p for p in w.phases[1].patterns if isinstance(p, Sweep))
    assert 0.5 * sweep.sweep_ticks <= peak.reuse_misses / w.misses_per_tick <= 2 * sweep.sweep_ticks


def test_profile_curves_window_beats_static_for_a_moving_hot_set() -> None:
    moving = profile("moving-hot").hotness
    i = 9  # the hottest 10 % of pages
    assert moving.window_miss_share[i] > moving.run_miss_share[i] + 0.05
    assert moving.turnover[i] > 0.1
    # Turnover also counts sampling noise among equally warm pages: a measured, not a true, figure.
    assert all(0.0 <= x <= 1.0 for x in moving.turnover)


def test_the_simulator_never_imports_the_advisor() -> None:
    """Ground truth must not be the model in disguise: sim/tiering may use the profile schema
    (what it emits) and nothing else of model/tiering."""
    import ast  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    root = Path(__file__).resolve().parents[2] / "sim" / "tiering"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("model.tiering")
            ):
                assert node.module == "model.tiering.profile", f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("model.tiering") for a in node.names), path.name
