"""Prediction intervals (model/confidence.py) and the confident Algorithm 1 (model/select.py)."""

from __future__ import annotations

import numpy as np
import pytest

from model import DEFAULT_PRICE_PROFILE, Predictor, Utilization, recommend
from model.confidence import prediction_interval, slow_stall_share
from model.errors import InvalidRequest
from model.grid import paper_grid
from model.predict import GridPrediction
from model.priced_grid import price_grid
from model.select import algorithm1, confident_algorithm1
from tests.model.support import PAPER_MACHINE, fitted


def _predicted() -> tuple[Predictor, GridPrediction]:
    predictor = Predictor(fitted())
    g = paper_grid()
    p = predictor.predict(np.asarray(g.slow_ratios), np.asarray(g.llc_ways, dtype=np.int64))
    return predictor, p


def test_the_interval_widens_with_the_time_spent_on_slow_memory() -> None:
    predictor, p = _predicted()
    interval = prediction_interval(p, predictor.model.diagnostics)
    phi = slow_stall_share(p)
    assert (phi[0] == 0).all() and (phi[-1] > 0).all()
    # Along the slow ratio at fixed ways, more slow stalls never narrow the interval.
    assert (np.diff(interval.sigma, axis=0) >= -1e-12).all()
    assert interval.sigma[-1, 0] > interval.sigma[0, 0]
    upper = interval.upper(p.seconds)
    assert (upper >= p.seconds).all()
    wider = prediction_interval(p, predictor.model.diagnostics, confidence=0.99)
    assert (wider.upper(p.seconds) >= upper).all()


def test_confidence_outside_its_range_is_refused() -> None:
    predictor, p = _predicted()
    with pytest.raises(ValueError, match="confidence"):
        prediction_interval(p, predictor.model.diagnostics, confidence=1.0)


def test_an_uncertain_candidate_needs_a_margin_a_certain_one_does_not() -> None:
    cost = np.asarray([1.00, 1.02, 1.02])
    upper = np.asarray([1.01, 1.024, 1.30])  # the third leans on what the model cannot see
    seconds = np.asarray([10.0, 10.0, 10.0])
    demand = np.asarray([[0.5, 0.5, 0, 0], [0.5, 0.2, 0.1, 0], [0.5, 0.1, 0.2, 0]])
    util = np.asarray([0.0, 0.9, 0.0, 0.0])  # DRAM is scarce: plain Algorithm 1 takes the third
    plain = algorithm1(cost, cost, np.ones(3, bool), demand, util, 0.025)
    assert plain is not None and plain.chosen == 2
    sel = confident_algorithm1(cost, upper, seconds, np.ones(3, bool), demand, util, 0.025)
    assert sel is not None
    assert sel.chosen == 1 and 2 not in sel.within and sel.best == 0


def test_a_packing_gain_that_lengthens_the_run_loses_to_one_that_does_not() -> None:
    cost = np.asarray([1.00, 1.01, 1.01])
    upper = cost * 1.01
    seconds = np.asarray([10.0, 13.0, 10.0])  # the second frees DRAM but holds it 30 % longer
    demand = np.asarray([[0.5, 0.6, 0, 0], [0.5, 0.3, 0.3, 0], [0.5, 0.35, 0.25, 0]])
    util = np.asarray([0.0, 0.9, 0.0, 0.0])
    plain = algorithm1(cost, cost, np.ones(3, bool), demand, util, 0.025)
    assert plain is not None and plain.chosen == 1  # 0.27 < 0.315: the lighter one
    sel = confident_algorithm1(cost, upper, seconds, np.ones(3, bool), demand, util, 0.025)
    assert sel is not None and sel.chosen == 2  # 0.27 x 1.3 > 0.315 x 1.0


def test_a_candidate_is_kept_only_if_its_bound_stays_within_t_of_the_predicted_optimum() -> None:
    # Both neighbours of the optimum are as uncertain as it is (bounds 4 % above their
    # predictions); anchoring on the optimum's own bound would keep them, but their bounds lie
    # 4.0-4.5 % over the predicted optimum: with T = 2.5 %, only the optimum is safe.
    cost = np.asarray([1.00, 1.005, 1.02])
    upper = cost * 1.04
    seconds = np.full(3, 10.0)
    demand = np.asarray([[0.5, 0.6, 0, 0], [0.5, 0.3, 0.3, 0], [0.5, 0.2, 0.4, 0]])
    util = np.asarray([0.0, 0.9, 0.0, 0.0])
    sel = confident_algorithm1(cost, upper, seconds, np.ones(3, bool), demand, util, 0.025)
    assert sel is not None and sel.within.tolist() == [0] and sel.chosen == 0
    narrower = confident_algorithm1(
        cost, cost * 1.004, seconds, np.ones(3, bool), demand, util, 0.025
    )
    assert narrower is not None and set(narrower.within.tolist()) == {0, 1, 2}


def test_nothing_acceptable_is_none() -> None:
    z = np.zeros(2)
    assert confident_algorithm1(z, z, z + 1, np.zeros(2, bool), np.zeros((2, 4)), z, 0.1) is None


def test_confident_choices_are_a_subset_of_algorithm_1s() -> None:
    predictor = Predictor(fitted())
    util = Utilization(cpu=0.3, dram=0.8, slow=0.1, llc=0.5)
    plain = recommend(
        predictor, machine=PAPER_MACHINE, threshold=0.1, utilization=util, confidence=None
    )
    confident = recommend(predictor, machine=PAPER_MACHINE, threshold=0.1, utilization=util)
    plain_set = {
        (c.configuration.slow_ratio, c.configuration.llc_ways) for c in plain.within_threshold
    }
    conf_set = {
        (c.configuration.slow_ratio, c.configuration.llc_ways) for c in confident.within_threshold
    }
    assert conf_set <= plain_set
    assert confident.best.configuration == plain.best.configuration
    priced = price_grid(predictor, DEFAULT_PRICE_PROFILE, paper_grid(), PAPER_MACHINE)
    assert confident.chosen.cost <= float(priced.cost[priced.feasible].min()) * 1.1 + 1e-12


def test_a_difference_between_neighbours_is_surer_than_either_time() -> None:
    predictor, p = _predicted()
    interval = prediction_interval(p, predictor.model.diagnostics)
    terms = interval.terms
    assert terms is not None
    sigma = interval.sigma.ravel()
    assert np.allclose(terms.sigma, sigma)
    n_ways = len(p.llc_ways)
    best = 3 * n_ways + n_ways - 1  # ratio 0.3 at the most ways
    diff = terms.difference_sigma(best)
    assert diff[best] == 0.0
    # never wider than two independent errors, and symmetric in the pair
    assert (diff <= np.sqrt(sigma**2 + sigma[best] ** 2) + 1e-12).all()
    other = 5 * n_ways + 2
    assert terms.difference_sigma(other)[best] == pytest.approx(diff[other])
    # the neighbour at the same slow ratio shares the slow-memory error: its difference is
    # surer than its own time; one at another ratio shares none of it
    neighbour = best - 1
    assert diff[neighbour] < sigma[neighbour]
    across = 6 * n_ways + n_ways - 1
    slow_only = np.hypot(terms.slow[across], terms.slow[best])
    assert diff[across] >= slow_only - 1e-12
    # scaled terms (verification runs) scale the difference with them
    assert np.allclose(terms.difference_sigma(best, np.full(sigma.shape, 2.0)), 2.0 * diff)


def test_a_paired_bound_keeps_a_neighbour_its_own_interval_would_drop() -> None:
    cost = np.asarray([1.00, 1.01, 1.02])
    own = cost * 1.03  # each time alone may be 3 % off: neither neighbour is safe
    seconds = np.full(3, 10.0)
    demand = np.asarray([[0.5, 0.6, 0, 0], [0.5, 0.3, 0.3, 0], [0.5, 0.2, 0.4, 0]])
    util = np.asarray([0.0, 0.9, 0.0, 0.0])

    def paired(best: int) -> np.ndarray:
        # the first neighbour shares the optimum's error, the second does not
        out: np.ndarray = cost * np.asarray([1.0, 1.004, 1.03])
        return out

    alone = confident_algorithm1(cost, own, seconds, np.ones(3, bool), demand, util, 0.025)
    assert alone is not None and alone.within.tolist() == [0]
    sel = confident_algorithm1(
        cost, own, seconds, np.ones(3, bool), demand, util, 0.025, paired_upper=paired
    )
    assert sel is not None and set(sel.within.tolist()) == {0, 1} and sel.chosen == 1


def test_the_band_level_is_checked() -> None:
    with pytest.raises(InvalidRequest, match="band_confidence"):
        recommend(Predictor(fitted()), machine=PAPER_MACHINE, band_confidence=1.0)
