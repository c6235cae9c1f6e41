"""The shape of the partial slow ratios, from runs at two of them: the sharing (the first slow
bytes cost the most) and the uncovered share (a slow structure's misses waiting as its own, a
straight line in its slow share) fit one run alike, and part at the others. With runs at two
partial ratios or more the predictor fits both terms together (`Predictor._fitted_shape`); with
one, the sharing first and the share only where the runs all ask for it
(tests/model/test_slow_uncovered.py)."""

from __future__ import annotations

import numpy as np
import pytest

from model import Predictor, fit, parse_bundle
from model.fit import FittedModel
from model.grid import paper_grid
from tests.model.test_per_structure import per_structure_bundle
from tests.model.test_slow_uncovered import with_profile_runs

GRID = paper_grid()
RATIOS = np.asarray(GRID.slow_ratios)
WAYS = np.asarray(GRID.llc_ways, dtype=np.int64)


def _log_sse(p: Predictor, runs: list[tuple[float, int, float]]) -> float:
    return float(sum(np.log(p.predict_one(r, w)[0] / t) ** 2 for r, w, t in runs))


@pytest.mark.parametrize(("sharing", "share"), [(0.0, 0.5), (0.0, 0.9), (2.0, 0.4)])
def test_runs_at_two_partial_ratios_fit_both_terms_and_the_ratios_between(
    sharing: float, share: float
) -> None:
    # A program whose partial ratios follow a known shape; one run at a small ratio and one at
    # a large, as the agent's calibration runs take them.
    data = per_structure_bundle()
    truth = Predictor(fit(parse_bundle(data)), slow_sharing=sharing, slow_uncovered=share)
    runs = [(r, w, truth.predict_one(r, w)[0]) for r, w in ((0.1, 2), (0.7, 2))]
    fitted = with_profile_runs(data, runs)
    p = Predictor(fitted)
    for r, w, t in runs:
        assert p.predict_one(r, w)[0] == pytest.approx(t, rel=0.005)
    assert fitted.slow_uncovered == pytest.approx(share, abs=0.1)
    # Every partial ratio, not only the two measured, within 1 % of the shape.
    want = truth.predict(RATIOS, WAYS).seconds
    got = p.predict(RATIOS, WAYS).seconds
    assert np.max(np.abs(got / want - 1.0)) < 0.01
    # The reference runs' rows stay where they were; more slow memory never saves time.
    plain = Predictor(fit(parse_bundle(data))).predict(RATIOS, WAYS).seconds
    np.testing.assert_allclose(got[0], plain[0], rtol=1e-12)
    np.testing.assert_allclose(got[-1], plain[-1], rtol=1e-12)
    assert (np.diff(got, axis=0) >= -1e-12).all()


def test_the_joint_fit_never_fits_the_runs_worse_than_one_term_after_the_other() -> None:
    data = per_structure_bundle()
    plain = Predictor(fit(parse_bundle(data)), slow_sharing=0.0, slow_uncovered=0.0)
    rng = np.random.default_rng(7)
    for _ in range(6):
        runs = [
            (r, w, plain.predict_one(r, w)[0] * float(rng.uniform(0.97, 1.6)))
            for r, w in ((0.2, 4), (0.5, 12), (0.8, 2))
        ]
        fitted = with_profile_runs(data, runs)
        together = Predictor(fitted)
        refit = fitted.model_copy(update={"slow_sharing": None, "slow_uncovered": None})
        sharing = Predictor(refit, slow_uncovered=0.0).slow_sharing
        after = Predictor(refit, slow_sharing=sharing)
        assert _log_sse(together, runs) <= _log_sse(after, runs) * (1.0 + 1e-9)


def test_a_stored_model_keeps_both_terms() -> None:
    data = per_structure_bundle()
    truth = Predictor(fit(parse_bundle(data)), slow_sharing=0.0, slow_uncovered=0.6)
    fitted = with_profile_runs(
        data, [(r, w, truth.predict_one(r, w)[0]) for r, w in ((0.1, 2), (0.7, 2))]
    )
    stored = FittedModel.model_validate_json(fitted.model_dump_json())
    p = Predictor(stored)
    assert (p.slow_sharing, p.slow_uncovered) == (fitted.slow_sharing, fitted.slow_uncovered)
