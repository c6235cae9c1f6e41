"""The regime map's held-out confidence level and model floor (bench/regimes.py)."""

from __future__ import annotations

from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from bench import regimes
from bench.regimes import (
    calibrate_confidence,
    model_floor,
    overspends,
    paired_coverage,
    regime_prices,
    verified,
)
from bench.studies import Regime, Study, hourly
from model.grid import paper_grid
from model.verification import band_points as model_band_points

GIB = 1 << 30
REGIME = Regime("gce-n1", 0.2, 0.4, "paper", "run")
GRID_POINTS = len(paper_grid().slow_ratios) * len(paper_grid().llc_ways)


def _study(name: str, truth: list[float], predicted: list[float], sigma: list[float]) -> Study:
    """The first configurations of the paper grid as given, every other one far dearer (130 s);
    all differ only in how long they run (same hourly price), so their costs are in the ratio
    of their times. They share the lowest slow ratio: a verification run there corrects them
    alike and leaves one run's noise (1 %) as their sigma."""
    n = GRID_POINTS

    def padded(values: list[float], rest: float) -> np.ndarray:
        return np.asarray(values + [rest] * (n - len(values)))

    return Study(
        name=name,
        vcpus=4,
        footprint_bytes=4 * GIB,
        truth_seconds=padded(truth, 130.0),
        tmc_seconds=padded(truth, 130.0),
        predicted_seconds=padded(predicted, 130.0),
        sigma=padded(sigma, 0.0),
        dram_bytes=np.full(n, 4 * GIB, dtype=np.int64),
        slow_bytes=np.zeros(n, dtype=np.int64),
        ways=np.full(n, 2, dtype=np.int64),
    )


# Candidate 1 is predicted 1 % dearer than the optimum but truly runs 6 % longer. After the
# verification run at the optimum its sigma is its own 1 % and a run's noise (1.55 %), which
# puts its 80 % bound within T of the predicted optimum (+2.3 %) and its 90 % bound beyond
# (+3.0 %).
RISKY = _study("risky", [100.0, 106.0, 130.0], [100.0, 101.0, 130.0], [0.0, 0.01, 0.0])
SAFE = _study("safe", [100.0, 101.0, 130.0], [100.0, 101.0, 130.0], [0.0, 0.001, 0.0])
# The cheapest predicted (config 1) is truly 10 % over the optimum: a model floor.
WRONG = _study("wrong", [100.0, 110.0, 130.0], [105.0, 100.0, 130.0], [0.0, 0.0, 0.0])


@pytest.fixture
def no_confirmation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The band's level alone decides: no confirmation run of a band candidate (as when the
    budget is spent before one)."""

    def packing_only(*args: Any, **kwargs: Any) -> tuple[int | None, None]:
        return model_band_points(*args, **kwargs)[0], None

    monkeypatch.setattr(regimes, "band_points", packing_only)


def test_a_band_candidate_the_promise_would_not_keep_is_confirmed_by_a_run() -> None:
    # RISKY's candidate 1 is in the band at 80 % but not at 99 %: it is run, found 6 % dearer,
    # and dropped, where without the run it would be kept (next test).
    assert overspends(RISKY, REGIME, 0.8)[:2] == (False, False)
    h = hourly(RISKY, regime_prices(REGIME))
    assert verified(RISKY, h, NormalDist().inv_cdf(0.8), REGIME)[2] == 2
    # SAFE's candidate is run too, found as predicted, and kept.
    assert overspends(SAFE, REGIME, 0.8) == (False, False, 2)


@pytest.mark.usefixtures("no_confirmation")
def test_overspending_depends_on_the_confidence_level() -> None:
    assert overspends(RISKY, REGIME, 0.8)[:2] == (True, False)
    assert overspends(RISKY, REGIME, 0.9)[:2] == (False, False)
    assert overspends(SAFE, REGIME, 0.8)[:2] == (False, False)


@pytest.mark.usefixtures("no_confirmation")
def test_each_workload_is_judged_with_a_level_learnt_without_it() -> None:
    studies = {"paper": [RISKY, SAFE]}
    levels = calibrate_confidence(studies, [REGIME])
    # SAFE held out: RISKY (one cell, more than the 5 % tolerated) overspends below 0.9, so
    # SAFE gets 0.9. RISKY held out: SAFE never overspends, so RISKY gets the lowest level, and
    # indeed overspends with it.
    assert levels == {"safe": 0.9, "risky": 0.7}
    assert overspends(RISKY, REGIME, levels["risky"])[0]
    # With every cell tolerated, the lowest level is learnt for both.
    assert calibrate_confidence(studies, [REGIME], tolerance=1.0) == {"safe": 0.7, "risky": 0.7}


def test_studies_without_error_terms_are_left_out_of_the_coverage_check() -> None:
    (row,) = paired_coverage({"paper": [RISKY, SAFE]}, [REGIME], [0.9])
    assert row["pairs"] == 0 and row["paired_exceeded"] == 0.0


def test_the_model_floor_is_the_cheapest_predicted_over_t() -> None:
    assert model_floor([SAFE, WRONG, RISKY], REGIME) == [False, True, False]
    # a floor is not an overspend of the selection: the cheapest predicted is already over T
    assert overspends(WRONG, REGIME, 0.99)[:2] == (True, True)
