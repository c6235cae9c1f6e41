"""Whatever reaches the tiering advisor at the schema's bounds is refused (a 422 at the edges) or
answered with finite advice: never a division by zero, a log of zero or an overflow."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from model.bundle import parse_bundle
from model.errors import InvalidBundle, TmcError
from model.tiering import HEMEM_SPACE, TieringProfile, TieringRequest, Trial, advise

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SUBNORMAL = 5e-324  # the smallest positive double
TINY = sys.float_info.min  # the smallest normal double


def base_profile() -> dict[str, Any]:
    """A small, plausible profile: 1 GiB in 2 MiB pages, two structures, a HeMem-like manager."""
    shares = [0.1, 0.25, 0.5, 1.0]
    return {
        "schema_version": "tmc.tiering/v1",
        "footprint_bytes": 1 << 30,
        "page_bytes": 2 << 20,
        "llc_misses": 2.0e8,
        "threads": 4,
        "wall_seconds_fast": 10.0,
        "wall_seconds_slow": 14.0,
        "slow_write_bandwidth_bytes_per_second": 5e9,
        "fast_write_bandwidth_bytes_per_second": 50e9,
        "sampling_period": 1000,
        "window_seconds": 0.5,
        "hotness": {
            "page_shares": shares,
            "window_miss_share": [0.5, 0.7, 0.9, 1.0],
            "run_miss_share": [0.4, 0.6, 0.85, 1.0],
            "turnover": [0.2, 0.15, 0.1, 0.0],
        },
        "structures": [
            {
                "tag": "table",
                "size_bytes": 3 << 28,
                "miss_share": 0.8,
                "write_share": 0.1,
                "reuse": [
                    {"reuse_misses": 1e5, "count": 40},
                    {"reuse_misses": 1e6, "count": 10},
                ],
            },
            {
                "tag": "log",
                "size_bytes": 1 << 28,
                "miss_share": 0.2,
                "write_share": 0.5,
                "reuse": [{"reuse_misses": 4e6, "count": 5}],
            },
        ],
        "page_manager": {
            "kind": "hemem",
            "knobs": {"sampling_period": 5000.0, "read_hot_threshold": 8.0},
            "migration_period_seconds": 0.01,
        },
        "counters": {
            "fast_bytes": 3 << 28,
            "wall_seconds": 10.6,
            "promotions": 1000,
            "demotions": 900,
            "promotion_failures": 3,
            "migrated_bytes": 1900 * (2 << 20),
        },
    }


def answer(data: dict[str, Any], request: TieringRequest | None = None) -> str | None:
    """The advice as JSON, or None where the profile is refused by validation (a 422)."""
    try:
        profile = TieringProfile.model_validate(data)
    except ValidationError:
        return None
    try:
        advice = advise(profile, request)
    except TmcError as exc:
        assert exc.status == 422, exc  # a refusal the edges turn into a 422 problem
        return None
    text = advice.model_dump_json()
    assert "NaN" not in text and "Infinity" not in text
    assert 0.0 <= advice.sizing.saved_share <= 1.0
    assert all(
        math.isfinite(t.period_seconds) and t.period_seconds > 0 for t in advice.period.ladder
    )
    return text


def test_base_profile_gets_advice() -> None:
    assert answer(base_profile()) is not None


def test_subnormal_llc_misses_never_reaches_a_division() -> None:
    data = base_profile()
    data["llc_misses"] = SUBNORMAL
    answer(data)


def test_subnormal_reuse_never_reaches_a_division() -> None:
    data = base_profile()
    for s in data["structures"]:
        for b in s["reuse"]:
            b["reuse_misses"] = SUBNORMAL
    answer(data)


def test_a_stored_bundle_with_subnormal_misses_is_refused_at_upload() -> None:
    bundle = json.loads((EXAMPLES / "graph500.json").read_text())
    tiering = base_profile()
    tiering["llc_misses"] = SUBNORMAL
    bundle["tiering"] = tiering
    with pytest.raises(InvalidBundle, match="llc_misses"):
        parse_bundle(bundle)


# Numeric leaves of the profile with the values at and around their bounds. Paths index into the
# base profile; "*" applies the value to every element of a list.
FLOATS = [0.0, SUBNORMAL, TINY, 1e-300, 1e-4, 1.0, 1e9, 1e13, 1e15, 1e18, 1e300]
INTS = [0, 1, 2, 4096, 10**9, 1 << 40, 1 << 50, 1 << 62]
LEAVES: list[tuple[tuple[str | int, ...], list[float] | list[int]]] = [
    (("llc_misses",), FLOATS),
    (("wall_seconds_fast",), FLOATS),
    (("wall_seconds_slow",), FLOATS),
    (("window_seconds",), FLOATS),
    (("slow_write_bandwidth_bytes_per_second",), FLOATS),
    (("fast_write_bandwidth_bytes_per_second",), FLOATS),
    (("sampling_period",), INTS),
    (("threads",), INTS),
    (("page_bytes",), INTS),
    (("structures", 0, "reuse", "*", "reuse_misses"), FLOATS),
    (("structures", 1, "reuse", 0, "count"), INTS),
    (("structures", 0, "miss_share"), [0.0, SUBNORMAL, 1.0]),
    (("structures", 0, "write_share"), [0.0, SUBNORMAL, 1.0]),
    (("hotness", "window_miss_share", "*"), [0.0, SUBNORMAL, 1.0]),
    (("hotness", "turnover", "*"), [0.0, SUBNORMAL, 1.0]),
    (("page_manager", "migration_period_seconds"), FLOATS),
    (("page_manager", "knobs", "sampling_period"), FLOATS),
    (("page_manager", "knobs", "read_hot_threshold"), FLOATS),
    (("page_manager", "knobs", "cooling_threshold"), FLOATS),
    (("page_manager", "knobs", "demotion_watermark"), [0.0, SUBNORMAL, 0.5, 1.0, 1e15]),
    (("counters", "fast_bytes"), INTS),
    (("counters", "wall_seconds"), FLOATS),
    (("counters", "migrated_bytes"), INTS),
    (("counters", "promotions"), INTS),
]


def put(data: Any, path: tuple[str | int, ...], value: float) -> None:
    key = path[0]
    if len(path) == 1:
        if key == "*":
            for i in range(len(data)):
                data[i] = value
        else:
            data[key] = value
        return
    targets = data if key == "*" else [data[key]]
    for t in targets:
        put(t, path[1:], value)


@st.composite
def bounded_profiles(draw: st.DrawFn) -> dict[str, Any]:
    data = base_profile()
    picks = draw(st.lists(st.sampled_from(range(len(LEAVES))), min_size=1, max_size=4))
    for i in picks:
        path, values = LEAVES[i]
        put(data, path, draw(st.sampled_from(values)))
    if draw(st.booleans()):
        data["page_manager"]["kind"] = draw(st.sampled_from(["tpp", "hmsdk", "memtis", "tmc-sim"]))
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bounded_profiles())
def test_bounded_inputs_are_refused_or_answered(data: dict[str, Any]) -> None:
    # A cheap request: the point is that the answer is finite, not that the search is deep.
    answer(data, TieringRequest(knob_budget=4, time_budget_seconds=5.0))


@settings(max_examples=20, deadline=None)
@given(loss_target=st.sampled_from([SUBNORMAL, TINY, 1e-9, 0.5]))
def test_bounded_requests_are_refused_or_answered(loss_target: float) -> None:
    profile = TieringProfile.model_validate(base_profile())
    advice = advise(profile, TieringRequest(loss_target=loss_target, knob_budget=4))
    text = advice.model_dump_json()
    assert "NaN" not in text and "Infinity" not in text


def test_advice_stops_at_its_cpu_budget_and_says_so() -> None:
    profile = TieringProfile.model_validate(base_profile())
    grid = HEMEM_SPACE.grid()
    trials = [Trial(knobs=k, wall_seconds=10.0 + (i % 7) / 10) for i, k in enumerate(grid[:600])]
    request = TieringRequest(trials=trials, knob_budget=1000, time_budget_seconds=0.05)
    start = time.thread_time()
    advice = advise(profile, request)
    used = time.thread_time() - start
    assert advice.budget.exhausted and advice.budget.cut
    assert any("CPU budget" in line for line in advice.explanation)
    assert advice.knobs is not None and advice.knobs.next_trial is not None
    # Bounded: the budget, plus what one step in progress may take past it.
    assert used < 1.5
    roomy = advise(profile, TieringRequest(trials=trials[:10], time_budget_seconds=30.0))
    assert not roomy.budget.exhausted and roomy.budget.cpu_seconds_used < 30.0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    walls=st.lists(st.sampled_from([1e-6, 1e-3, 1.0, 1e9]), min_size=1, max_size=12),
    knob_value=st.sampled_from([0.0, SUBNORMAL, 1.0, 1e15]),
    period=st.sampled_from([1e-4, 1.0, 86_400.0]),
    fast=st.sampled_from([1, 1 << 20, 1 << 50]),
)
def test_measured_runs_at_their_bounds_are_answered(
    walls: list[float], knob_value: float, period: float, fast: int
) -> None:
    """Knob, period and size trials at the bounds of their schemas: finite advice."""
    profile = TieringProfile.model_validate(base_profile())
    grid = HEMEM_SPACE.grid()
    trials = [Trial(knobs=grid[i * 37 % len(grid)], wall_seconds=w) for i, w in enumerate(walls)]
    odd = {name: knob_value for name in HEMEM_SPACE.default()}
    trials.append(Trial(knobs=odd, wall_seconds=walls[0]))
    request = TieringRequest.model_validate(
        {
            "trials": trials,
            "knob_budget": 20,
            "period_trials": [{"period_seconds": period, "wall_seconds": w} for w in walls[:3]],
            "size_trials": [{"fast_bytes": fast, "wall_seconds": w} for w in walls[:3]],
            "in_use_wall_seconds": walls[-1],
            "current_period_seconds": period,
            "current_fast_bytes": fast,
        }
    )
    text = advise(profile, request).model_dump_json()
    assert "NaN" not in text and "Infinity" not in text
