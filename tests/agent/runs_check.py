"""Checks shared by the tests of runs beyond the reference runs, whichever backend took them."""

from __future__ import annotations

import pytest

from model import Predictor, fit
from model.bundle import ProfileBundle
from model.grid import paper_grid
from model.priced_grid import machine_of_host, price_grid
from model.pricing import DEFAULT_PRICE_PROFILE


def passes_through(bundle: ProfileBundle) -> None:
    """Every run beyond the reference runs is a measured configuration of the fit."""
    assert bundle.profile_runs is not None
    predictor = Predictor(fit(bundle))
    reference = {(r.configuration.slow_ratio, r.configuration.llc_ways) for r in bundle.runs}
    priced = price_grid(
        predictor, DEFAULT_PRICE_PROFILE, paper_grid(), machine_of_host(bundle.host)
    )
    for run in bundle.profile_runs.runs:
        at = (run.configuration.slow_ratio, run.configuration.llc_ways)
        assert at not in reference
        i = next(j for j in range(priced.cost.size) if priced.ratio_and_ways(j) == at)
        assert priced.measured.ravel()[i], at
        assert priced.prediction.seconds.ravel()[i] == pytest.approx(run.wall_seconds, rel=1e-6)
