"""Verification runs (model/verification.py): the correction where a ratio was measured, the
interval elsewhere, and the loop recommend drives (measure the optimum until its ratio is
known). Against the simulator: tests/bench/test_verification.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model import FittedModel, Predictor, fit, parse_bundle, recommend
from model.errors import InvalidRequest
from model.grid import paper_grid
from model.objectives import Objective
from model.pricing import DEFAULT_PRICE_PROFILE
from model.recommend import price_grid
from model.verification import (
    MAX_OBSERVATIONS,
    RUN_NOISE,
    VERIFICATION_BUDGET,
    Observation,
    corrected_sigma,
    correction,
    next_run,
)
from tests.model.support import PAPER_MACHINE, fitted

RATIOS = np.asarray(paper_grid().slow_ratios)


def test_a_measured_ratio_is_scaled_by_the_geometric_mean_and_narrowed_to_run_noise() -> None:
    c = correction(RATIOS, [3, 3, None], [10.0, 10.0, 5.0], [12.0, 13.0, 4.0])
    assert c.factor[3] == pytest.approx(np.sqrt(1.2 * 1.3))
    # Unmeasured ratios share the measured one's error in proportion to their correlation: the
    # neighbours most, the far end hardly.
    others = c.factor[np.arange(11) != 3]
    assert (others > 1.0).all() and (others < c.factor[3]).all()
    assert c.factor[2] == pytest.approx(c.factor[4]) and c.factor[4] > c.factor[6] > c.factor[10]
    assert c.factor[10] < 1.02
    assert c.runs.tolist() == [0, 0, 0, 2] + [0] * 7 and c.observations == 3
    assert c.largest_error == pytest.approx(0.3)
    sigma = np.full((11, 7), 0.05)
    s = corrected_sigma(sigma, c)
    assert s[3] == pytest.approx(np.full(7, RUN_NOISE / np.sqrt(2)))
    # Unmeasured ratios: no narrower than the largest error seen where the model was checked.
    assert s[np.arange(11) != 3] == pytest.approx(np.full((10, 7), 0.3))
    assert (sigma == 0.05).all()  # the input is left as it was


def test_impossible_observations_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        correction(RATIOS, [1], [10.0], [0.0])
    with pytest.raises(ValueError, match="positive"):
        correction(RATIOS, [1], [float("nan")], [1.0])
    with pytest.raises(ValueError):
        Observation(slow_ratio=1.5, llc_ways=4, seconds=1.0)
    with pytest.raises(ValueError):
        Observation(slow_ratio=0.5, llc_ways=4, seconds=float("inf"))


def test_the_budget_and_a_measured_optimum_end_the_runs() -> None:
    assert VERIFICATION_BUDGET == 4
    assert next_run(None, 4)
    one = correction(RATIOS, [4], [10.0], [11.0])
    assert not next_run(one, 4) and next_run(one, 5)
    spent = correction(RATIOS, [1, 2, 3, 6], [1.0] * 4, [1.0] * 4)
    assert not next_run(spent, 5) and next_run(spent, 5, budget=5)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(0, 10)),
            st.floats(1e-3, 1e6),
            st.floats(1e-3, 1e6),
        ),
        max_size=MAX_OBSERVATIONS,
    )
)
def test_the_correction_is_finite_and_positive_for_any_valid_runs(
    runs: list[tuple[int | None, float, float]],
) -> None:
    c = correction(RATIOS, [r for r, _, _ in runs], [p for _, p, _ in runs], [m for *_, m in runs])
    assert np.isfinite(c.factor).all() and (c.factor > 0).all()
    assert np.isfinite(corrected_sigma(np.full((11, 7), 0.01), c)).all()


def test_recommend_names_the_run_to_make_and_uses_the_runs_made() -> None:
    model = fitted()
    first = recommend(model, machine=PAPER_MACHINE)
    assert first.verification is not None and first.verification.runs == 0
    ratio = first.verification.next_slow_ratio
    ways = first.verification.next_llc_ways
    # The first run checks the promise: it goes to the chosen configuration.
    assert (ratio, ways) == (
        first.chosen.configuration.slow_ratio,
        first.chosen.configuration.llc_ways,
    )
    assert ratio is not None and ways is not None
    predicted = Predictor(model).predict_one(ratio, ways)[0]
    slow = Observation(slow_ratio=ratio, llc_ways=ways, seconds=1.3 * predicted)
    second = recommend(model, machine=PAPER_MACHINE, observations=[slow])
    v = second.verification
    assert v is not None and v.runs == 1 and v.largest_error == pytest.approx(0.3)
    assert [(x.slow_ratio, x.runs) for x in v.verified] == [(ratio, 1)]
    assert v.verified[0].measured_over_predicted == pytest.approx(1.3, rel=0.01)
    # A run as predicted keeps the choice and checks its promise; a further run, if any, goes
    # to another configuration that might be cheaper.
    exact = Observation(slow_ratio=ratio, llc_ways=ways, seconds=predicted)
    same = recommend(model, machine=PAPER_MACHINE, observations=[exact])
    assert same.chosen.configuration == first.chosen.configuration
    sv = same.verification
    assert sv is not None and sv.chosen_measured
    assert sv.chosen_slowdown_measured == pytest.approx(first.chosen.slowdown, abs=1e-3)
    if sv.next_slow_ratio is not None:
        assert (sv.next_slow_ratio, sv.next_llc_ways) != (ratio, ways)


def test_a_run_breaking_the_slo_at_the_chosen_configuration_moves_the_decision() -> None:
    model = fitted()
    slo = Objective(kind="slo", max_slowdown=0.1)
    first = recommend(model, machine=PAPER_MACHINE, objective=slo)
    c = first.chosen
    assert c.slowdown_upper is not None and c.slowdown_upper <= 0.1
    assert "at most" in first.promise and "at 99 %" in first.promise
    broken = (1.0 + 0.12) * model.fastmax_seconds  # 12 % slower than fastmax in truth
    run = Observation(
        slow_ratio=c.configuration.slow_ratio, llc_ways=c.configuration.llc_ways, seconds=broken
    )
    second = recommend(model, machine=PAPER_MACHINE, objective=slo, observations=[run])
    assert second.chosen.configuration != c.configuration
    assert second.chosen.slowdown_upper is not None and second.chosen.slowdown_upper <= 0.1


def test_a_run_corrects_the_llc_way_axis_as_well_as_its_slow_ratio() -> None:
    """A run at 0.5 / 4 ways that is 20 % slower than predicted moves 4 ways' neighbours at
    other ratios too, and does not move every way count at 0.5 by the same factor."""
    model = fitted()
    predictor = Predictor(model)
    grid = paper_grid()
    before = price_grid(predictor, DEFAULT_PRICE_PROFILE, grid, PAPER_MACHINE)
    seconds = predictor.predict_one(0.5, 4)[0] * 1.2
    after = price_grid(
        predictor,
        DEFAULT_PRICE_PROFILE,
        grid,
        PAPER_MACHINE,
        [Observation(slow_ratio=0.5, llc_ways=4, seconds=seconds)],
    )
    ratio = after.prediction.seconds / before.prediction.seconds
    row, col = grid.slow_ratios.index(0.5), grid.llc_ways.index(4)
    assert ratio[row, col] == pytest.approx(1.2, rel=0.01)
    assert np.ptp(ratio[row]) > 0.005  # not one factor for the whole ratio
    assert ratio[0, col] > 1.0 + 1e-6  # the way count's error, seen at every ratio
    assert ratio[0, -1] < ratio[0, col]  # and less at way counts far from it


def test_too_many_observations_are_a_clear_error() -> None:
    model = fitted()
    many = [Observation(slow_ratio=0.0, llc_ways=4, seconds=1.0)] * (MAX_OBSERVATIONS + 1)
    with pytest.raises(InvalidRequest, match="at most"):
        recommend(model, machine=PAPER_MACHINE, observations=many)


# -- Runs the model must not trust -------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _xsbench() -> FittedModel:
    return fit(parse_bundle(json.loads((EXAMPLES / "xsbench.json").read_text())))


def test_a_subnormal_run_is_ignored_with_a_flag_not_a_failed_recommendation() -> None:
    model = _xsbench()
    poison = Observation(slow_ratio=0.5, llc_ways=4, seconds=5e-324, run_id="x")
    rec = recommend(model, machine=PAPER_MACHINE, observations=[poison])
    clean = recommend(model, machine=PAPER_MACHINE)
    assert rec.chosen.configuration == clean.chosen.configuration
    v = rec.verification
    assert v is not None and v.runs == 0 and v.verified == []
    assert [(i.run_id, i.code) for i in v.ignored] == [("x", "implausible_run")]
    assert "faster than fastmax" in v.ignored[0].reason


def test_a_plausible_looking_fake_run_cannot_move_the_choice() -> None:
    model = _xsbench()
    clean = recommend(model, machine=PAPER_MACHINE)
    fake = Observation(slow_ratio=0.9, llc_ways=1, seconds=0.05)
    rec = recommend(model, machine=PAPER_MACHINE, observations=[fake])
    assert rec.chosen.configuration == clean.chosen.configuration
    assert rec.chosen.slowdown > -0.01  # no run of the workload beats fastmax
    assert rec.verification is not None and len(rec.verification.ignored) == 1


def test_a_run_far_slower_than_predicted_is_ignored_with_its_reason() -> None:
    model = _xsbench()
    predicted = Predictor(model).predict_one(0.3, 8)[0]
    slow = Observation(slow_ratio=0.3, llc_ways=8, seconds=predicted * 2.5)
    rec = recommend(model, machine=PAPER_MACHINE, observations=[slow])
    v = rec.verification
    assert v is not None and v.runs == 0
    assert "slower than predicted" in v.ignored[0].reason


def test_one_outlier_among_three_runs_does_not_decide() -> None:
    c = correction(RATIOS, [2, 2, 2], [10.0] * 3, [10.5, 10.4, 18.0])
    assert c.factor[2] == pytest.approx(1.05)  # the median, not pulled towards 1.8


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.builds(
            Observation,
            slow_ratio=st.one_of(st.sampled_from([0.0, 0.1, 0.5, 1.0]), st.floats(0.0, 1.0)),
            llc_ways=st.one_of(st.sampled_from([1, 2, 64]), st.integers(1, 64)),
            seconds=st.one_of(
                st.sampled_from([5e-324, 2.2250738585072014e-308, 1e-300, 1.0, 1e9]),
                st.floats(0.0, 1e9, exclude_min=True, allow_subnormal=True),
            ),
        ),
        max_size=MAX_OBSERVATIONS,
    )
)
def test_no_run_the_schema_accepts_makes_a_recommendation_fail(
    runs: list[Observation],
) -> None:
    rec = recommend(_XSBENCH, machine=PAPER_MACHINE, observations=runs)
    v = rec.verification
    assert v is not None and v.runs + len(v.ignored) == len(runs)
    assert math.isfinite(rec.chosen.predicted_seconds) and rec.chosen.predicted_seconds > 0
    assert rec.chosen.slowdown > -0.5


_XSBENCH = _xsbench()
