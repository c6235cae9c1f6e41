"""Priced as the VM it stands for (4 GiB per vCPU), the cheapest choice takes slow memory where
the simulator's ground truth says it is cheaper: judged by the true run times at that size, not
by what the model predicts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from model import DEFAULT_PRICE_PROFILE, Predictor, fit, machine_of_host, parse_bundle, recommend
from model.grid import paper_grid
from model.objectives import DEFAULT_THRESHOLD
from model.priced_grid import price_grid
from model.resources import GIB
from sim.catalog import workload
from sim.engine import prepare
from sim.host import run_many
from sim.machine import optane_host

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PER_VCPU = 4 * GIB


@pytest.mark.parametrize("name", ["xsbench", "memcached"])
def test_sized_as_a_vm_the_cheapest_takes_slow_memory_cheaper_in_truth(name: str) -> None:
    bundle = parse_bundle((EXAMPLES / f"{name}.json").read_bytes())
    predictor = Predictor(fit(bundle))
    machine = machine_of_host(bundle.host)
    size = PER_VCPU * bundle.vcpus
    assert size > 4 * bundle.footprint_bytes  # a real share of the bill, unlike the profile's

    at_profile = recommend(predictor, machine=machine).chosen.configuration
    rec = recommend(predictor, machine=machine, memory_bytes=size)
    chosen = rec.chosen.configuration
    assert at_profile.slow_ratio == 0.0  # its traced footprint costs next to nothing
    assert chosen.slow_ratio > 0.0 and chosen.dram_bytes + chosen.slow_bytes == size

    # Ground truth: the simulator runs the workload at the chosen configuration and at every
    # all-DRAM one, each with the model's plan at the traced size (the run's own shape); their
    # true cost is the deployed size's hourly price times the true run time.
    grid = paper_grid()
    priced = price_grid(predictor, DEFAULT_PRICE_PROFILE, grid, machine, (), size)
    n_ways = len(grid.llc_ways)
    hourly = priced.hourly.reshape(len(grid.slow_ratios), n_ways)
    configs = [(0.0, w) for w in grid.llc_ways]
    if chosen.slow_ratio != 0.0:
        configs.append((chosen.slow_ratio, chosen.llc_ways))
    prep = prepare(workload(name), optane_host(), 0, list(grid.llc_ways))
    runs = run_many(prep, [(r, w, predictor.placement(r, w)) for r, w in configs])
    true_cost = np.asarray(
        [
            hourly[grid.slow_ratios.index(r), grid.llc_ways.index(w)] * run.wall_seconds / 3600.0
            for (r, w), run in zip(configs, runs, strict=True)
        ]
    )
    all_dram_best = float(true_cost[:n_ways].min())
    assert true_cost[-1] < all_dram_best * (1.0 - DEFAULT_THRESHOLD)
