"""The second judge (a hint-fault, TPP-like manager), the migration-rate limit of the first, and
the held-out shapes: each mechanism where it shows alone."""

from __future__ import annotations

import json

import pytest

from bench.tiering_judges import QUICK, run_judges
from model.tiering import TieringProfile
from sim.machine import cxl_local_host
from sim.tiering import Knobs, draw_stream, run
from sim.tiering.heldout import HELD_OUT_WORKLOADS
from sim.tiering.streams import STUDY_WORKLOADS, Stream
from sim.tiering.tpp import TppKnobs, run_tpp, tpp_profile

_STREAMS: dict[str, Stream] = {}


def stream(name: str) -> Stream:
    if name not in _STREAMS:
        make = HELD_OUT_WORKLOADS.get(name) or STUDY_WORKLOADS[name]
        _STREAMS[name] = draw_stream(make(), 3)
    return _STREAMS[name]


def half(s: Stream) -> int:
    return s.workload.footprint_bytes // 2


def test_held_out_shapes_are_not_the_studys() -> None:
    assert len(HELD_OUT_WORKLOADS) == 7
    assert not set(HELD_OUT_WORKLOADS) & set(STUDY_WORKLOADS)
    for make in HELD_OUT_WORKLOADS.values():
        w = make()
        assert w.ticks == 480 and w.footprint_bytes == 8 << 30


def test_a_roomy_fast_tier_never_migrates_and_faults_only_on_slow_pages() -> None:
    s = stream("two-heats")
    host = cxl_local_host()
    roomy = run_tpp(s, host, 2 * s.workload.footprint_bytes)
    assert roomy.promotions == roomy.demotions == roomy.hint_faults == 0
    tight = run_tpp(s, host, half(s))
    assert tight.hint_faults > 0 and tight.promotions > 0 and tight.demotions > 0
    assert tight.wall_seconds > roomy.wall_seconds


def test_a_longer_hot_threshold_promotes_more_and_the_rate_limit_caps_it() -> None:
    s = stream("fast-frontier")
    host = cxl_local_host()
    short = run_tpp(s, host, half(s), TppKnobs(hot_threshold_ms=1.0))
    long = run_tpp(s, host, half(s), TppKnobs(hot_threshold_ms=600_000.0))
    assert long.promotions > short.promotions
    capped = run_tpp(
        s, host, half(s), TppKnobs(hot_threshold_ms=600_000.0, promote_rate_limit_mbps=1)
    )
    assert capped.promotions < long.promotions


def test_scans_come_every_period_and_cost_time() -> None:
    s = stream("sparse-hot")
    host = cxl_local_host()
    every = run_tpp(s, host, half(s), scan_ticks=1)
    rare = run_tpp(s, host, half(s), scan_ticks=240)
    assert every.scans == 480 and rare.scans == 2
    assert every.hint_faults > rare.hint_faults


def test_the_first_judges_rate_limit_caps_its_moves() -> None:
    s = stream("moving-hot")
    host = cxl_local_host()
    free = run(s, host, half(s))
    capped = run(s, host, half(s), Knobs(migration_rate_limit_mbps=1.0))
    assert capped.promotions + capped.demotions < free.promotions + free.demotions


def test_the_tpp_profile_carries_its_managers_state_and_counters() -> None:
    s = stream("two-heats")
    p = tpp_profile(s, cxl_local_host(), current_fast_bytes=half(s))
    assert isinstance(p, TieringProfile) and p.page_manager.kind == "tpp"
    assert set(p.page_manager.knobs) == {"hot_threshold_ms", "promote_rate_limit_mbps"}
    assert p.counters is not None and p.counters.fast_bytes == half(s)
    assert p.counters.promotions > 0


@pytest.mark.parametrize("kind", ["hemem-like", "tpp-like"])
def test_quick_report_against_both_judges(kind: str, tmp_path: object) -> None:
    from pathlib import Path  # noqa: PLC0415

    out = Path(str(tmp_path))
    data = run_judges(QUICK, out, quick=True)
    x = data["summary"][kind]
    assert x["cases"] == 1 and x["period_trials_max"] <= 3
    assert x["period_never_worse_share"] == 1.0 and x["knobs_never_slower_share"] == 1.0
    assert 0.0 <= x["saved_share_mean"] <= x["oracle_saved_share_mean"] + 0.1
    assert json.loads((out / "tiering-judges-quick.json").read_text())["quick"] is True
    assert 1 <= x["size_trials_max"] <= 4
    report = (out / "tiering-judges-quick.md").read_text()
    assert "| after the size trials: τ met" in report and "| size trials" in report
