"""Slow misses that wait alone: where a profile's runs at partial slow ratios are slower than
the sharing can explain, the prediction moves the share of the way to the uncovered charge that
the runs support.

Without such a run, or where the sharing explains it, nothing changes; with one, the all-DRAM
and all-slow points stay where the reference runs put them and no point passes the uncovered
charge.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from model import Predictor, fit, parse_bundle
from model.fit import FittedModel
from model.grid import paper_grid
from model.predict import SHARING_MAX
from tests.model.test_per_structure import per_structure_bundle

GRID = paper_grid()
RATIOS = np.asarray(GRID.slow_ratios)
WAYS = np.asarray(GRID.llc_ways, dtype=np.int64)
RUN = (0.3, 2)


def _bounds(data: dict[str, Any]) -> tuple[float, float]:
    """At RUN: the most the sharing can predict, and the uncovered charge."""
    plain = fit(parse_bundle(data))
    shared = Predictor(plain, slow_sharing=SHARING_MAX, slow_uncovered=0.0)
    grid = shared.predict(RATIOS, WAYS)
    assert grid.seconds_uncovered is not None
    i, j = list(GRID.slow_ratios).index(RUN[0]), list(GRID.llc_ways).index(RUN[1])
    return float(grid.seconds[i, j]), float(grid.seconds_uncovered[i, j])


def with_profile_runs(data: dict[str, Any], runs: list[tuple[float, int, float]]) -> FittedModel:
    """The bundle `data` fitted with profile runs (slow ratio, ways, seconds)."""
    return fit(
        parse_bundle(
            {
                **data,
                "profile_runs": {
                    "schema_version": "tmc.profile-runs/v1",
                    "runs": [
                        {"configuration": {"slow_ratio": r, "llc_ways": w}, "wall_seconds": t}
                        for r, w, t in runs
                    ],
                },
            }
        )
    )


def _with_run(data: dict[str, Any], seconds: float) -> FittedModel:
    return with_profile_runs(data, [(*RUN, seconds)])


def test_the_fixture_leaves_room_between_the_sharing_and_the_uncovered_charge() -> None:
    most, uncovered = _bounds(per_structure_bundle())
    assert uncovered > most * 1.05


def test_without_partial_runs_nothing_moves() -> None:
    plain = fit(parse_bundle(per_structure_bundle()))
    assert plain.slow_uncovered == 0.0
    assert Predictor(plain).slow_uncovered == 0.0


@pytest.mark.parametrize("share", [0.3, 0.7])
def test_a_run_past_what_the_sharing_reaches_is_fitted_by_the_share_it_supports(
    share: float,
) -> None:
    data = per_structure_bundle()
    most, uncovered = _bounds(data)
    measured = most + share * (uncovered - most)
    fitted = _with_run(data, measured)
    assert fitted.slow_sharing == pytest.approx(SHARING_MAX, rel=0.01)
    assert fitted.slow_uncovered == pytest.approx(share, abs=0.02)
    p = Predictor(fitted)
    assert p.predict_one(*RUN)[0] == pytest.approx(measured, rel=0.005)
    before = Predictor(fitted, slow_uncovered=0.0).predict(RATIOS, WAYS)
    after = p.predict(RATIOS, WAYS)
    assert after.seconds_uncovered is not None and before.seconds_uncovered is not None
    # The reference runs' rows stay exact; partial ratios rise, never past the uncovered charge.
    np.testing.assert_allclose(after.seconds[0], before.seconds[0], rtol=1e-12)
    np.testing.assert_allclose(after.seconds[-1], before.seconds[-1], rtol=1e-12)
    assert (after.seconds >= before.seconds * (1.0 - 1e-12)).all()
    assert (after.seconds <= after.seconds_uncovered * (1.0 + 1e-12)).all()
    np.testing.assert_allclose(after.seconds_uncovered, before.seconds_uncovered, rtol=1e-12)
    # Still never cheaper in time with more slow memory or fewer ways.
    assert (np.diff(after.seconds, axis=0) >= -1e-12).all()
    assert (np.diff(after.seconds, axis=1) <= 1e-12).all()


def test_a_run_the_sharing_explains_takes_no_share() -> None:
    data = per_structure_bundle()
    linear = Predictor(fit(parse_bundle(data)), slow_sharing=0.0).predict_one(*RUN)[0]
    most, _ = _bounds(data)
    fitted = _with_run(data, 0.5 * (linear + most))
    assert 0.0 < (fitted.slow_sharing or 0.0) < SHARING_MAX
    assert fitted.slow_uncovered == 0.0


def test_a_stored_model_keeps_the_share_and_one_stored_before_it_fits_it_again() -> None:
    data = per_structure_bundle()
    most, uncovered = _bounds(data)
    fitted = _with_run(data, 0.5 * (most + uncovered))
    assert fitted.slow_uncovered is not None and fitted.slow_uncovered > 0.0
    stored = FittedModel.model_validate_json(fitted.model_dump_json())
    assert stored.slow_uncovered == fitted.slow_uncovered
    old = FittedModel.model_validate(fitted.model_dump(mode="json", exclude={"slow_uncovered"}))
    assert old.slow_uncovered is None
    assert Predictor(old).slow_uncovered == fitted.slow_uncovered


def test_a_run_the_model_reaches_or_passes_leaves_no_share() -> None:
    data = per_structure_bundle()
    most, uncovered = _bounds(data)
    far = most + 0.7 * (uncovered - most)
    # Another run at the same ratio predicted at or above its measurement: the runs disagree,
    # and none is lifted. (Runs at two ratios or more fit both terms together:
    # tests/model/test_slow_shape.py.)
    other = (0.3, 12)
    at_other = Predictor(fit(parse_bundle(data)), slow_sharing=0.0).predict_one(*other)[0]
    mixed = with_profile_runs(data, [(*RUN, far), (*other, at_other * 0.98)])
    assert mixed.slow_uncovered == 0.0
    # A run under-predicted by less than a run's noise (1 %) says nothing either.
    close = with_profile_runs(data, [(*RUN, most * 1.005)])
    assert close.slow_uncovered == 0.0
