"""Slow misses share their wait: the sharing fitted to a profile's runs at partial slow ratios.

Without such a run the model predicts exactly as before (every simulated bundle, and every
profile without `profile_runs`); with one measured above the linear charge, the fit raises the
partial ratios towards it and leaves every all-DRAM and all-slow point where it was.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from model import Predictor, fit, parse_bundle
from model.fit import FittedModel
from model.grid import paper_grid
from tests.model.test_per_structure import per_structure_bundle

GRID = paper_grid()
RATIOS = np.asarray(GRID.slow_ratios)
WAYS = np.asarray(GRID.llc_ways, dtype=np.int64)


def _with_runs(data: dict[str, Any], runs: list[tuple[float, int, float]]) -> FittedModel:
    """The bundle fitted with profile runs at (ratio, ways), each `factor` x the linear charge's
    predicted time there."""
    linear = Predictor(fit(parse_bundle(data)), slow_sharing=0.0)
    data = {
        **data,
        "profile_runs": {
            "schema_version": "tmc.profile-runs/v1",
            "runs": [
                {
                    "configuration": {"slow_ratio": r, "llc_ways": w},
                    "wall_seconds": linear.predict_one(r, w)[0] * factor,
                }
                for r, w, factor in runs
            ],
        },
    }
    return fit(parse_bundle(data))


def test_without_partial_runs_the_prediction_is_the_linear_charge() -> None:
    plain = fit(parse_bundle(per_structure_bundle()))
    assert Predictor(plain).slow_sharing == 0.0
    before = Predictor(plain, slow_sharing=0.0).predict(RATIOS, WAYS)
    after = Predictor(plain).predict(RATIOS, WAYS)
    np.testing.assert_array_equal(after.seconds, before.seconds)
    assert after.seconds_uncovered is not None and before.seconds_uncovered is not None
    np.testing.assert_array_equal(after.seconds_uncovered, before.seconds_uncovered)
    # Runs all in DRAM or all slow say nothing about sharing.
    ends = _with_runs(per_structure_bundle(), [(1.0, 1, 1.3), (0.0, 4, 1.1)])
    assert Predictor(ends).slow_sharing == 0.0


def test_a_partial_run_above_the_linear_charge_is_fitted() -> None:
    data = per_structure_bundle()
    linear = Predictor(fit(parse_bundle(data)), slow_sharing=0.0)
    fitted = _with_runs(data, [(0.2, 4, 1.06)])
    shared = Predictor(fitted)
    assert shared.slow_sharing > 0.0
    seconds, _ = shared.predict_one(0.2, 4)
    assert abs(seconds / (linear.predict_one(0.2, 4)[0] * 1.06) - 1.0) < 0.005
    before = linear.predict(RATIOS, WAYS).seconds
    after = shared.predict(RATIOS, WAYS).seconds
    # All in DRAM and all slow, at every way count, as before: the reference runs stay exact.
    np.testing.assert_allclose(after[0], before[0], rtol=1e-12)
    np.testing.assert_allclose(after[-1], before[-1], rtol=1e-12)
    # Partial ratios only ever rise (a slow miss waits at least its share of slowmax's wait).
    assert (after >= before * (1.0 - 1e-12)).all()
    assert (after[1:-1] > before[1:-1]).any()


def test_a_run_predicted_too_high_alone_allows_no_sharing() -> None:
    data = per_structure_bundle()
    over = _with_runs(data, [(0.5, 12, 0.97)])
    assert Predictor(over).slow_sharing == 0.0


def test_the_sharing_is_the_least_squares_fit_of_the_runs_even_past_one_of_them() -> None:
    data = per_structure_bundle()
    # One run far above the linear charge, one just below it: the fit goes past the second (it
    # is measured, known where it was made) to predict both best, where the rule before kept
    # every run at or below its measurement.
    fitted = _with_runs(data, [(0.2, 4, 1.20), (0.3, 4, 0.99)])
    shared = Predictor(fitted)
    assert shared.slow_sharing > 0.0

    def squared(sharing: float) -> float:
        p = Predictor(fitted, slow_sharing=sharing)
        return sum(
            float(
                np.log(p.predict_one(r.configuration.slow_ratio, r.configuration.llc_ways)[0])
                - np.log(r.wall_seconds)
            )
            ** 2
            for r in fitted.profile_runs
        )

    best = squared(shared.slow_sharing)
    assert best < squared(0.0)
    for step in (-0.1, 0.1):
        assert best <= squared(max(shared.slow_sharing + step, 0.0)) + 1e-12
    low = fitted.profile_runs[1]
    seconds, _ = shared.predict_one(low.configuration.slow_ratio, low.configuration.llc_ways)
    assert seconds > low.wall_seconds


def test_paper_path_is_untouched() -> None:
    data = per_structure_bundle()
    linear = Predictor(fit(parse_bundle(data), penalties="paper"))
    fitted = fit(parse_bundle(_with_runs_data(data)), penalties="paper")
    assert Predictor(fitted).slow_sharing == 0.0
    np.testing.assert_array_equal(
        Predictor(fitted).predict(RATIOS, WAYS).seconds, linear.predict(RATIOS, WAYS).seconds
    )


def _with_runs_data(data: dict[str, Any]) -> dict[str, Any]:
    linear = Predictor(fit(parse_bundle(data), penalties="paper"))
    return {
        **data,
        "profile_runs": {
            "schema_version": "tmc.profile-runs/v1",
            "runs": [
                {
                    "configuration": {"slow_ratio": 0.2, "llc_ways": 4},
                    "wall_seconds": linear.predict_one(0.2, 4)[0] * 1.06,
                }
            ],
        },
    }


def test_the_fit_stores_the_run_terms_and_a_model_stored_without_them_refits_them(
    monkeypatch: Any,
) -> None:
    fitted = _with_runs(per_structure_bundle(), [(0.4, 28, 1.1), (1.0, 1, 0.8)])
    assert fitted.slow_sharing is not None and fitted.slow_sharing > 0.0
    assert fitted.slow_few_ways is not None and fitted.slow_few_ways < 0.0
    stored = FittedModel.model_validate_json(fitted.model_dump_json())
    assert (stored.slow_sharing, stored.slow_few_ways) == (
        fitted.slow_sharing,
        fitted.slow_few_ways,
    )
    # A model stored before they were kept reads, and its predictor fits them as the fit did.
    old = FittedModel.model_validate(
        fitted.model_dump(mode="json", exclude={"slow_sharing", "slow_few_ways"})
    )
    assert old.slow_sharing is None and old.slow_few_ways is None
    refitted = Predictor(old)
    assert refitted.slow_sharing == fitted.slow_sharing
    assert refitted.slow_few_ways == fitted.slow_few_ways

    # A predictor of the stored model fits nothing again.
    def refit(_: Predictor) -> float:
        raise AssertionError("refitted")

    monkeypatch.setattr(Predictor, "_fitted_sharing", refit)
    monkeypatch.setattr(Predictor, "_fitted_few_ways", refit)
    again = Predictor(stored)
    np.testing.assert_array_equal(
        again.predict(RATIOS, WAYS).seconds, refitted.predict(RATIOS, WAYS).seconds
    )
