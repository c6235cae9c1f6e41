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
from model.priced_grid import price_grid
from model.pricing import DEFAULT_PRICE_PROFILE
from model.verification import (
    MAX_OBSERVATIONS,
    VERIFICATION_BUDGET,
    Observation,
    confirmation_point,
    expected_overshoot,
    grid_correction,
    next_point,
    observed_grid,
    packing_point,
)
from tests.model.support import PAPER_MACHINE, fitted

RATIOS = np.asarray(paper_grid().slow_ratios)
WAYS = np.asarray(paper_grid().llc_ways, dtype=np.int64)


def test_impossible_observations_are_refused() -> None:
    with pytest.raises(ValueError):
        Observation(slow_ratio=1.5, llc_ways=4, seconds=1.0)
    with pytest.raises(ValueError):
        Observation(slow_ratio=0.5, llc_ways=4, seconds=float("inf"))


def test_the_budget_ends_the_runs_and_a_lighter_candidate_follows_the_chosen() -> None:
    assert VERIFICATION_BUDGET == 4
    cost = np.asarray([1.00, 1.01, 1.02, 1.10])
    sigma = np.full(4, 0.01)
    chance = np.ones(4)
    measured = np.asarray([False, False, False, False])
    assert next_point(cost, sigma, chance, 0, measured, 0, packing=2) == 0
    measured[0] = True
    assert next_point(cost, sigma, chance, 0, measured, 1, packing=2) == 2
    assert next_point(cost, sigma, chance, 0, measured, VERIFICATION_BUDGET, packing=2) is None


def test_a_packing_run_is_a_lighter_candidate_the_band_leaves_out() -> None:
    cost = np.asarray([1.00, 1.01, 1.02, 1.02, 1.10])
    band_upper = np.asarray([1.00, 1.03, 1.03, 1.02, 1.12])  # limit 1.025: 1 and 2 are left out
    demand = np.asarray(
        [
            [0.5, 0.5, 0.0, 0.5],
            [0.5, 0.6, 0.0, 0.5],  # heavier in DRAM: not worth a run for packing
            [0.5, 0.5, 0.0, 0.3],  # fewer ways: this one
            [0.5, 0.4, 0.1, 0.5],  # lighter, but already in the band
            [0.5, 0.1, 0.4, 0.1],  # lighter, but not within T even by the prediction
        ]
    )
    none = np.zeros(5, dtype=bool)
    every = np.ones(5, dtype=bool)
    assert packing_point(cost, band_upper, 1.025, demand, 0, none, every) == 2
    measured = none.copy()
    measured[2] = True
    assert packing_point(cost, band_upper, 1.025, demand, 0, measured, every) is None


def test_a_band_candidate_the_promise_would_not_keep_is_confirmed_before_a_packing_run() -> None:
    cost = np.asarray([1.00, 1.01, 1.02, 1.015])
    # The band (0, 1, 2, 3) at its level; at the promise's level 1 and 2 are over the limit 1.025,
    # 2 the most.
    promise_upper = np.asarray([1.00, 1.03, 1.06, 1.02])
    band = np.asarray([0, 1, 2, 3], dtype=np.int64)
    none = np.zeros(4, dtype=bool)
    assert confirmation_point(cost, promise_upper, 1.025, band, 0, none) == 2
    measured = none.copy()
    measured[2] = True
    assert confirmation_point(cost, promise_upper, 1.025, band, 0, measured) == 1
    measured[1] = True
    assert confirmation_point(cost, promise_upper, 1.025, band, 0, measured) is None
    # In the order of runs: the chosen first, then the confirmation, then the packing run.
    sigma = np.full(4, 0.01)
    chance = np.ones(4)
    measured = none.copy()
    assert next_point(cost, sigma, chance, 0, measured, 0, packing=3, confirm=2) == 0
    measured[0] = True
    assert next_point(cost, sigma, chance, 0, measured, 1, packing=3, confirm=2) == 2
    measured[2] = True
    assert next_point(cost, sigma, chance, 0, measured, 2, packing=3, confirm=2) == 3


def test_the_last_run_goes_where_it_saves_most_when_the_chosen_is_still_unmeasured() -> None:
    # The chosen (0) is known to 1 %; configuration 2 is predicted 2 % dearer but the model
    # knows it only to 25 %: its run is expected to save far more than the chosen's shows.
    cost = np.asarray([1.00, 1.03, 1.02])
    sigma = np.asarray([0.01, 0.01, 0.25])
    chance = np.ones(3)
    none = np.zeros(3, dtype=bool)
    assert expected_overshoot(cost, sigma, 0, chance) < 0.01
    assert next_point(cost, sigma, chance, 0, none, VERIFICATION_BUDGET - 1) == 2
    # Before the last run, the chosen is run first, as always.
    assert next_point(cost, sigma, chance, 0, none, VERIFICATION_BUDGET - 2) == 0
    # A chosen configuration the model is even less sure of keeps its run.
    unsure = np.asarray([0.40, 0.01, 0.25])
    assert next_point(cost, unsure, chance, 0, none, VERIFICATION_BUDGET - 1) == 0
    # Under an SLO the chosen configuration's own run checks the promise: it keeps its run.
    assert (
        next_point(cost, sigma, chance, 0, none, VERIFICATION_BUDGET - 1, explore_last=False) == 0
    )
    # With nothing else that may meet the objective, the chosen's run is worth everything.
    assert expected_overshoot(cost, sigma, 0, np.asarray([1.0, 0.0, 0.0])) == math.inf


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
    points = [(r, r % len(WAYS), float(np.log(m) - np.log(p))) for r, p, m in runs if r is not None]
    c = grid_correction(
        RATIOS,
        WAYS,
        np.full((11, 7), 0.01),
        points,
        observations=len(runs),
        largest_error=0.0,
    )
    assert np.isfinite(c.factor).all() and (c.factor > 0).all()
    assert np.isfinite(c.sigma).all()


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
    predictor = Predictor(fitted())
    sigma = np.full((11, 7), 0.05)
    p = predictor.predict(RATIOS, WAYS)
    runs = [
        Observation(slow_ratio=float(RATIOS[2]), llc_ways=int(WAYS[3]), seconds=p.seconds[2, 3] * f)
        for f in (1.05, 1.04, 1.8)
    ]
    c = observed_grid(predictor, RATIOS, WAYS, sigma, runs)
    # the median's error (+5 %), nearly all of it learnt at the point; not pulled towards 1.8
    assert 1.04 < c.factor[2, 3] <= 1.05 + 1e-9


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


def test_runs_that_make_an_slo_unreachable_are_named_in_the_answer() -> None:
    from model.objectives import parse_objective  # noqa: PLC0415

    predictor = Predictor(fitted())
    m = predictor.model
    # fastmax's own configuration ran 30 % longer than fastmax did: nothing can keep 5 %.
    seconds = m.fastmax_seconds * 1.3
    run = Observation(slow_ratio=0.0, llc_ways=m.ways_max, seconds=seconds, run_id="run-7")
    rec = recommend(
        predictor,
        machine=PAPER_MACHINE,
        objective=parse_objective("slo:5%"),
        threshold=0.0,
        observations=[run],
    )
    # A result, not an error: the objective is out of reach, the closest configuration is given.
    assert not rec.objective_met and rec.unmet is not None
    assert [r.run_id for r in rec.unmet.runs] == ["run-7"]
    assert rec.unmet.runs[0].measured_over_predicted == pytest.approx(1.3, rel=1e-3)
    text = rec.unmet.reason
    assert "after 1 verification run" in text and "run run-7" in text and "+30.0%" in text
    assert "The closest is" in text and "fix the values" not in text
    closest = rec.chosen
    assert closest.slowdown_upper is not None and closest.slowdown_upper > 0.05
    assert rec.unmet.closest_slowdown_upper == pytest.approx(closest.slowdown_upper)
    # No other configuration has a lower bound on its slowdown.
    assert rec.within_threshold == [closest] and rec.other_candidates == []
    # Without the run, the same request is met.
    alone = recommend(
        predictor, machine=PAPER_MACHINE, objective=parse_objective("slo:5%"), threshold=0.0
    )
    assert alone.objective_met and alone.unmet is None
