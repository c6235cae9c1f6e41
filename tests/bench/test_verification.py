"""Verification runs against ground truth: the simulator runs the configurations the model asks
to measure, as a host would (model/verification.py)."""

from __future__ import annotations

import numpy as np

from model import Predictor, fit, recommend
from model.grid import paper_grid
from model.objectives import DEFAULT_THRESHOLD
from model.price_profiles import price_profile
from model.priced_grid import price_grid
from model.recommendation import Candidate
from model.verification import VERIFICATION_BUDGET, Observation
from sim.catalog import workload
from sim.engine import prepare
from sim.host import run_many
from sim.machine import optane_host
from sim.profile import NoiseSpec, reference_bundle
from tests.model.support import PAPER_MACHINE


def test_on_the_simulator_verification_brings_canneals_choice_within_t() -> None:
    """canneal under the Msv2 least-squares prices: the model underestimates the ratio where
    the element index, the head of every pointer chase, goes slow, so its cost optimum is more
    than T over the true one (simulated with tmc's own placement). After the verification runs
    it asks for, every candidate it keeps is within T."""
    host = optane_host()
    w = workload("canneal").model_copy(
        update={"trace_accesses": 600_000, "warmup_accesses": 120_000}
    )
    predictor = Predictor(fit(reference_bundle(w, host, NoiseSpec(), seed=100)))
    grid = paper_grid()
    prices = price_profile("msv2-lsq")
    configs = [(r, k) for r in grid.slow_ratios for k in grid.llc_ways]
    runs = run_many(
        prepare(w, host, 0, list(grid.llc_ways)),
        [(r, k, predictor.placement(r, k)) for r, k in configs],
    )
    truth = {c: x.wall_seconds for c, x in zip(configs, runs, strict=True)}
    hourly = price_grid(predictor, prices, grid, PAPER_MACHINE).hourly
    true_cost = dict(zip(configs, hourly * np.asarray([truth[c] for c in configs]), strict=True))
    limit = (1.0 + DEFAULT_THRESHOLD) * min(true_cost.values())

    def key(c: Candidate) -> tuple[float, int]:
        return (c.configuration.slow_ratio, c.configuration.llc_ways)

    rec = recommend(predictor, machine=PAPER_MACHINE, prices=prices)
    assert true_cost[key(rec.best)] > limit  # the model alone overspends T here
    observations: list[Observation] = []
    while (v := rec.verification) is not None and v.next_slow_ratio is not None:
        assert v.next_llc_ways is not None
        ran = (v.next_slow_ratio, v.next_llc_ways)
        observations.append(Observation(slow_ratio=ran[0], llc_ways=ran[1], seconds=truth[ran]))
        rec = recommend(predictor, machine=PAPER_MACHINE, prices=prices, observations=observations)
    assert 1 <= len(observations) <= VERIFICATION_BUDGET
    assert all(true_cost[key(c)] <= limit for c in rec.within_threshold)
