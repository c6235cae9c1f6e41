"""The tiering advisor: the profile schema, sizing, the period plan, knob tuning, advise()."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from model.bundle import parse_bundle
from model.errors import InvalidRequest
from model.tiering import TieringProfile, TieringRequest, Trial, advise
from model.tiering.period import (
    PeriodMeasurement,
    PeriodPlan,
    PeriodTrial,
    dominant_reuse,
    period_plan,
    run_trials,
)
from model.tiering.profile import ReuseBin, StructureReuse
from model.tiering.sizing import size_fast_tier
from model.tiering.tune import HEMEM_SPACE, KnobTuner, advise_knobs, gp_posterior
from tests.tiering.conftest import profile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def with_structures(p: TieringProfile, reuse: list[tuple[float, int]]) -> TieringProfile:
    s = StructureReuse(
        tag="all",
        size_bytes=p.footprint_bytes,
        miss_share=1.0,
        write_share=0.0,
        reuse=[ReuseBin(reuse_misses=r, count=c) for r, c in reuse],
    )
    return p.model_copy(update={"structures": [s]})


def test_profile_round_trips_and_rides_in_a_bundle(strided_profile: TieringProfile) -> None:
    again = TieringProfile.model_validate_json(strided_profile.model_dump_json())
    assert again == strided_profile
    bundle = json.loads((EXAMPLES / "graph500.json").read_text())
    assert parse_bundle(bundle).tiering is None  # older bundles still parse
    bundle["tiering"] = json.loads(strided_profile.model_dump_json())
    assert parse_bundle(bundle).tiering == strided_profile


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("hotness", "window_miss_share", 5), 0.0, "must not fall"),
        (("hotness", "turnover"), [0.1, 0.2, 0.3], "points"),
        (("footprint_bytes",), (1 << 33) + (1 << 24), "structure sizes"),
        (("wall_seconds_slow",), 1.0, "half"),
        (("llc_misses",), float("nan"), "finite"),
        (("page_manager", "knobs", "sampling_period"), -1.0, "greater than or equal"),
    ],
)
def test_profile_rejects_what_no_agent_could_measure(
    strided_profile: TieringProfile, path: tuple[str | int, ...], value: object, message: str
) -> None:
    data = json.loads(strided_profile.model_dump_json())
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ValidationError, match=message):
        TieringProfile.model_validate(data)


def test_dominant_reuse_is_coris_equation_1(strided_profile: TieringProfile) -> None:
    p = with_structures(strided_profile, [(40.0, 1), (10.0, 1), (20.0, 2)])
    # Sorted 10, 20, 40; weights (N - i) = 2, 1, 0: (2*1*10 + 1*2*20) / (2*1 + 1*2) = 15.
    assert dominant_reuse(p) == pytest.approx(15.0)
    assert dominant_reuse(with_structures(strided_profile, [(7.0, 3)])) == 7.0
    with pytest.raises(InvalidRequest, match="no reuse"):
        dominant_reuse(with_structures(strided_profile, []))


def ladder_plan(n: int, current: int, start: int, max_trials: int = 3) -> PeriodPlan:
    return PeriodPlan(
        dominant_reuse_misses=1.0,
        dominant_reuse_seconds=1.0,
        ladder=[
            PeriodTrial(
                period_seconds=float(i + 1),
                reuse_multiple=i + 1,
                predicted_loss=0.0,
                in_use=i == current,
            )
            for i in range(n)
        ],
        current=current,
        start=start,
        max_trials=max_trials,
        best_period_seconds=float(current + 1),
        next_period_seconds=None,
    )


@pytest.mark.parametrize(
    ("current", "start", "best", "found"),
    [
        (3, 4, 5, 5),  # the model's side is right: one rung further
        (3, 4, 1, 2),  # the model's side is wrong: one rung the other way
        (3, 1, 0, 0),  # the model says shorter, and shorter still is better
        (3, 4, 3, 3),  # the period in use is best: it is kept (the guard)
    ],
)
def test_period_trials_go_either_way_from_the_period_in_use(
    current: int, start: int, best: int, found: int
) -> None:
    seen: list[float] = []

    def measure(period: float) -> float:
        seen.append(period)
        return 10.0 + abs(period - (best + 1))

    trial, seconds, spent = run_trials(ladder_plan(8, current, start), measure)
    assert spent == len(seen) <= 3 and seen[0] == current + 1
    assert trial.period_seconds == found + 1
    assert seconds <= 10.0 + abs(current - best)  # never slower than the period in use


def test_period_plan_reaches_both_sides_of_the_dominant_reuse(
    strided_profile: TieringProfile,
) -> None:
    plan = period_plan(strided_profile)
    assert len(plan.trials) <= 3 and plan.trials[0].in_use
    assert plan.trials[0].period_seconds == strided_profile.page_manager.migration_period_seconds
    multiples = [t.reuse_multiple for t in plan.ladder]
    assert min(multiples) < 1.0 < max(multiples)
    for t in plan.ladder:
        assert t.period_seconds == pytest.approx(t.reuse_multiple * plan.dominant_reuse_seconds)
        assert t.period_seconds <= strided_profile.wall_seconds_fast / 2 or t.in_use
    assert abs(plan.start - plan.current) <= 2 and plan.start != plan.current
    # Stateless: given the trials so far, the plan names the next and the best.
    first = plan.trials[0].period_seconds
    again = period_plan(
        strided_profile, measured=[PeriodMeasurement(period_seconds=first, wall_seconds=10.0)]
    )
    assert again.next_period_seconds == plan.trials[1].period_seconds
    assert again.best_period_seconds == first
    faster = period_plan(
        strided_profile,
        measured=[
            PeriodMeasurement(period_seconds=first, wall_seconds=10.0),
            PeriodMeasurement(period_seconds=plan.trials[1].period_seconds, wall_seconds=9.0),
        ],
    )
    assert faster.best_period_seconds == plan.trials[1].period_seconds
    with pytest.raises(InvalidRequest):
        period_plan(strided_profile, max_trials=0)


def test_sizing_saves_more_for_a_looser_target_and_keeps_its_uncertainty_free() -> None:
    p = profile("init-lookup")
    tight = size_fast_tier(p, 0.02)
    loose = size_fast_tier(p, 0.10)
    assert 0.0 <= tight.saved_share <= loose.saved_share < 1.0
    assert loose.saved_share > 0.0
    assert loose.predicted_loss + loose.noise <= 0.10 or loose.saved_share == 0
    assert loose.fast_bytes % p.page_bytes == 0
    assert loose.saved_bytes + loose.fast_bytes == p.footprint_bytes
    with pytest.raises(InvalidRequest, match="loss_target"):
        size_fast_tier(p, 0.0)


def test_sizing_corrects_both_ways_on_the_measured_counters() -> None:
    p = profile("moving-hot", "optane")
    assert p.counters is not None
    advice = size_fast_tier(p, 0.05)
    measured = p.counters.wall_seconds / p.wall_seconds_fast - 1.0
    share = p.counters.fast_bytes / p.footprint_bytes
    at = min(advice.curve, key=lambda c: abs(c.fast_share - share))
    assert at.predicted_loss == pytest.approx(max(0.0, measured), abs=0.01)
    # Counters that show less loss than predicted bring the curve down, and save more.
    lucky = p.model_copy(
        update={
            "counters": p.counters.model_copy(update={"wall_seconds": p.wall_seconds_fast * 1.001})
        }
    )
    bold = size_fast_tier(lucky, 0.05)
    assert bold.anchor_offset < advice.anchor_offset
    assert bold.saved_share >= advice.saved_share
    assert all(c.predicted_loss >= 0.0 for c in bold.curve)


def test_gp_interpolates_its_observations() -> None:
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    y = np.array([1.0, 2.0, 3.0])
    mean, std = gp_posterior(x, y, x)
    assert mean == pytest.approx(y, abs=0.05)
    _, far_std = gp_posterior(x, y, np.array([[1.0, 1.0]]))
    assert far_std[0] > std.max()


def test_tuner_starts_from_the_default_then_the_models_picks(
    strided_profile: TieringProfile,
) -> None:
    tuner = KnobTuner(strided_profile)
    first = tuner.ask()
    assert first == HEMEM_SPACE.default()
    tuner.tell(first, 10.0)
    second = tuner.ask()
    assert second is not None and second != first
    # The model's best setting among those that keep the knobs it does not read (the batch).
    batch = first["migrate_batch_bytes"]
    ranked = sorted(
        (i for i, p in enumerate(tuner.grid) if p["migrate_batch_bytes"] == batch),
        key=lambda i: tuner.prior[i],
    )
    assert tuner.index_of(second) == ranked[0]


def test_the_default_guards_the_advice(strided_profile: TieringProfile) -> None:
    default = HEMEM_SPACE.default()
    worse = {**default, "read_hot_threshold": 1.0}
    advice = advise_knobs(
        strided_profile,
        [Trial(knobs=default, wall_seconds=10.0), Trial(knobs=worse, wall_seconds=12.0)],
    )
    assert advice.is_default and advice.best == default and advice.speedup_over_default == 1.0
    better = advise_knobs(
        strided_profile,
        [Trial(knobs=default, wall_seconds=10.0), Trial(knobs=worse, wall_seconds=8.0)],
    )
    assert not better.is_default and better.speedup_over_default == pytest.approx(1.25)
    assert (
        math.isclose(sum(better.importance.values()), 1.0) or sum(better.importance.values()) == 0
    )
    assert (
        advise_knobs(
            strided_profile, [Trial(knobs=default, wall_seconds=10.0)], budget=1
        ).next_trial
        is None
    )


def test_trials_must_name_every_knob(strided_profile: TieringProfile) -> None:
    with pytest.raises(InvalidRequest, match="missing"):
        advise_knobs(strided_profile, [Trial(knobs={"sampling_period": 1000}, wall_seconds=1.0)])


def test_advise_explains_and_picks_the_managers_knob_space(strided_profile: TieringProfile) -> None:
    advice = advise(strided_profile, TieringRequest(loss_target=0.05))
    assert advice.knobs is not None and advice.knobs.next_trial == HEMEM_SPACE.default()
    assert any("Fast tier" in line for line in advice.explanation)
    assert any("importance" in line for line in advice.explanation)
    tpp = strided_profile.model_copy(
        update={
            "page_manager": strided_profile.page_manager.model_copy(
                update={"kind": "tpp", "knobs": {"hot_threshold_ms": 900.0}}
            )
        }
    )
    advice = advise(tpp)
    assert advice.knobs is not None and advice.knobs.next_trial == {
        "hot_threshold_ms": 1000,
        "promote_rate_limit_mbps": 65536,
    }
    hmsdk = strided_profile.model_copy(
        update={"page_manager": strided_profile.page_manager.model_copy(update={"kind": "hmsdk"})}
    )
    assert advise(hmsdk).knobs is None
    with pytest.raises(InvalidRequest, match="no knob space"):
        advise(hmsdk, TieringRequest(trials=[Trial(knobs={"x": 1.0}, wall_seconds=1.0)]))


def test_extreme_but_valid_profiles_get_finite_advice(strided_profile: TieringProfile) -> None:
    """Whatever the schema admits must come back as finite JSON (the API must not 500)."""
    big = with_structures(strided_profile, [(1.0, 1), (1e18, 1)]).model_copy(
        update={"footprint_bytes": 1 << 40, "page_bytes": 1 << 20, "llc_misses": 1e18}
    )
    big = big.model_copy(
        update={
            "structures": [big.structures[0].model_copy(update={"size_bytes": 1 << 40})],
            "wall_seconds_fast": 1e-3,
            "wall_seconds_slow": 1e9,
            "window_seconds": 1e-4,
            "counters": None,
            "page_manager": big.page_manager.model_copy(
                update={"knobs": dict.fromkeys(big.page_manager.knobs, 0.0)}
            ),
        }
    )
    advice = advise(TieringProfile.model_validate(big.model_dump()))
    text = advice.model_dump_json()
    assert "Infinity" not in text and "NaN" not in text
    assert 0.0 <= advice.sizing.saved_share <= 1.0
