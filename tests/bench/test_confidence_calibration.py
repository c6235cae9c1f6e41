"""The regime map's held-out confidence level and model floor (bench/regimes.py)."""

from __future__ import annotations

import numpy as np

from bench.regimes import (
    calibrate_confidence,
    model_floor,
    overspends,
    regime_prices,
)
from bench.studies import Regime, Study

GIB = 1 << 30
REGIME = Regime("gce-n1", 0.2, 0.4, "paper", "run")


def _study(name: str, truth: list[float], predicted: list[float], sigma: list[float]) -> Study:
    """Three configurations of one VM that differ only in how long they run (same hourly price),
    so their costs are in the ratio of their times."""
    n = len(truth)
    return Study(
        name=name,
        vcpus=4,
        footprint_bytes=4 * GIB,
        truth_seconds=np.asarray(truth),
        tmc_seconds=np.asarray(truth),
        predicted_seconds=np.asarray(predicted),
        sigma=np.asarray(sigma),
        dram_bytes=np.full(n, 4 * GIB, dtype=np.int64),
        slow_bytes=np.zeros(n, dtype=np.int64),
        ways=np.full(n, 2, dtype=np.int64),
    )


# Candidate 1 is predicted 1 % dearer than the optimum but truly runs 6 % longer; its interval
# (sigma 1 %) puts its 90 % bound within T of the predicted optimum (+2.3 %) and its 95 % bound
# beyond (+2.7 %).
RISKY = _study("risky", [100.0, 106.0, 130.0], [100.0, 101.0, 130.0], [0.0, 0.01, 0.0])
SAFE = _study("safe", [100.0, 101.0, 130.0], [100.0, 101.0, 130.0], [0.0, 0.001, 0.0])
# The cheapest predicted (config 1) is truly 10 % over the optimum: a model floor.
WRONG = _study("wrong", [100.0, 110.0, 130.0], [105.0, 100.0, 130.0], [0.0, 0.0, 0.0])


def test_overspending_depends_on_the_confidence_level() -> None:
    prices = regime_prices(REGIME)
    assert overspends(RISKY, prices, 0.8)[:2] == (True, False)
    assert overspends(RISKY, prices, 0.99)[:2] == (False, False)
    assert overspends(SAFE, prices, 0.8)[:2] == (False, False)


def test_each_workload_is_judged_with_a_level_learnt_without_it() -> None:
    studies = {"paper": [RISKY, SAFE]}
    levels = calibrate_confidence(studies, [REGIME])
    # SAFE held out: RISKY overspends below 0.95, so SAFE gets 0.95. RISKY held out: SAFE never
    # overspends, so RISKY gets the lowest level, and indeed overspends with it.
    assert levels == {"safe": 0.95, "risky": 0.8}
    assert overspends(RISKY, regime_prices(REGIME), levels["risky"])[0]


def test_the_model_floor_is_the_cheapest_predicted_over_t() -> None:
    assert model_floor([SAFE, WRONG, RISKY], REGIME) == [False, True, False]
    # a floor is not an overspend of the selection: the cheapest predicted is already over T
    assert overspends(WRONG, regime_prices(REGIME), 0.99)[:2] == (True, True)
