"""Search baselines of paper §4.1 over one workload's 77 configurations (ground-truth costs).

- exhaustive search runs all 77 and keeps the cheapest;
- random takes one configuration without running anything (its expected cost is the mean);
- Bayesian optimisation (BO) runs configurations one at a time, guided by a Gaussian process
  and Expected Improvement, from three random initial samples, as CherryPick does.

BO comes from `bayesian-optimization` (bayes_opt, maintained, 3.x): its GP (scikit-learn, Matérn
5/2, normalised targets), its `ExpectedImprovement` acquisition and its integer parameters.
scikit-optimize, the other common choice, is no longer maintained. Parameters are the grid's
indices (ratio 0..10, way count 0..6), so a suggestion is always a grid point.

"EI 5 %": Expected Improvement with xi = 5 % of the cost (targets are normalised to the first
sample, so xi = 0.05). The paper gives no stopping rule; ours, after CherryPick's: stop when the
largest expected improvement over the configurations not yet run is below STOP_EI (1 %) of the
best cost so far, once at least BO_MIN_FOR_EI_STOP (6, CherryPick's N) runs were made — with
three points the GP's fitted length scale collapses and its EI is near zero everywhere, which
would stop every search at its initial samples — or, at any time, when BO's own suggestion is a
configuration it has already run (its acquisition sees nothing better left).
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass

import numpy as np
from bayes_opt import BayesianOptimization, acquisition
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

BO_INITIAL = 3
BO_EI = 0.05
STOP_EI = 0.01
BO_MIN_FOR_EI_STOP = 6


@dataclass(frozen=True)
class SearchResult:
    chosen: int  # flat index, ratio-major
    runs: int
    run_seconds: float  # wall time of the runs the search made


_ERF = np.vectorize(math.erf)


def _cdf(z: FloatArray) -> FloatArray:
    out: FloatArray = 0.5 * (1.0 + _ERF(z / math.sqrt(2.0)))
    return out


def exhaustive(cost: FloatArray, seconds: FloatArray) -> SearchResult:
    return SearchResult(int(np.argmin(cost)), cost.size, float(seconds.sum()))


def bayesian(
    cost: FloatArray, seconds: FloatArray, n_ratios: int, n_ways: int, seed: int
) -> SearchResult:
    """BO over the [n_ratios, n_ways] grid, costs flattened ratio-major. Targets are costs
    divided by the first sample's, negated (bayes_opt maximises)."""
    logging.getLogger("bayes_opt").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        # bayes_opt flags integer parameters as experimental; they are what a grid needs.
        warnings.simplefilter("ignore", UserWarning)
        opt = BayesianOptimization(
            f=None,
            pbounds={"r": (0, n_ratios - 1, int), "w": (0, n_ways - 1, int)},
            acquisition_function=acquisition.ExpectedImprovement(xi=BO_EI),
            random_state=seed,
            verbose=0,
        )
    rng = np.random.default_rng(seed)
    seen: list[int] = []
    scale = 0.0

    def run(i: int) -> None:
        nonlocal scale
        if not seen:
            scale = float(cost[i])
        seen.append(i)
        opt.register({"r": i // n_ways, "w": i % n_ways}, -float(cost[i]) / scale)

    for i in rng.choice(cost.size, size=min(BO_INITIAL, cost.size), replace=False):
        run(int(i))
    grid = [{"r": i // n_ways, "w": i % n_ways} for i in range(cost.size)]
    while len(seen) < cost.size:
        best = max(-float(cost[i]) / scale for i in seen)
        predicted = opt.predict(grid, return_std=True)
        assert isinstance(predicted, tuple)
        mean = np.asarray(predicted[0], dtype=np.float64)
        std = np.maximum(np.asarray(predicted[1], dtype=np.float64), 1e-12)
        a = mean - best - BO_EI * abs(best)
        ei = a * _cdf(a / std) + std * np.exp(-0.5 * (a / std) ** 2) / math.sqrt(2 * math.pi)
        ei[seen] = 0.0
        if len(seen) >= BO_MIN_FOR_EI_STOP and float(ei.max()) < STOP_EI * abs(best):
            break
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the GP's convergence chatter on tiny data
            s = opt.suggest()
        i = int(s["r"]) * n_ways + int(s["w"])
        if i in seen:
            break
        run(i)
    chosen = min(seen, key=lambda i: float(cost[i]))
    return SearchResult(chosen, len(seen), float(seconds[seen].sum()))
