"""The explanation's parts: candidates as a recommendation lists them, the promise on the chosen
one, what the intervals left out and why, and the account of verification runs that put an
objective out of reach."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import TypeAdapter

from model.misscurve import FloatArray
from model.objectives import Objective
from model.predict import Predictor
from model.priced_grid import PricedGrid
from model.recommendation import Candidate, DroppedCandidate, RunAgainstPrediction
from model.verification import Observation

RUNNERS_UP = 5  # other candidates, and dropped ones per reason, listed in an explanation
_CANDIDATES = TypeAdapter(list[Candidate])


@dataclass(frozen=True)
class Explainer:
    """Candidates of a priced grid as the explanation lists them (no packing penalty: the
    second round's, set by `choose`)."""

    priced: PricedGrid
    vcpus: int
    slowdown: FloatArray
    seconds_upper: FloatArray | None
    slowdown_upper: FloatArray | None
    cheapest_cost: float

    def candidates(self, indices: np.ndarray) -> list[Candidate]:
        # Gathered with numpy and validated in one call: per-object construction would cost
        # more than the whole prediction when dozens of candidates lie within T.
        priced, p = self.priced, self.priced.prediction
        vcpus = self.vcpus
        n_ways = len(p.llc_ways)
        r, w = indices // n_ways, indices % n_ways
        nothing = [None] * len(indices)
        columns = zip(
            p.slow_ratios[r].tolist(),
            p.llc_ways[w].tolist(),
            priced.dram_bytes[r].tolist(),
            priced.slow_bytes[r].tolist(),
            p.seconds.ravel()[indices].tolist(),
            self.slowdown[indices].tolist(),
            priced.cost[indices].tolist(),
            priced.demand[indices].tolist(),
            p.extrapolated[w].tolist(),
            nothing if self.seconds_upper is None else self.seconds_upper[indices].tolist(),
            nothing if self.slowdown_upper is None else self.slowdown_upper[indices].tolist(),
            strict=True,
        )
        cheapest_cost = self.cheapest_cost
        return _CANDIDATES.validate_python(
            [
                {
                    "configuration": {
                        "vcpus": vcpus,
                        "dram_bytes": dram,
                        "slow_bytes": slow,
                        "slow_ratio": ratio,
                        "llc_ways": ways,
                    },
                    "predicted_seconds": seconds,
                    "slowdown": sd,
                    "cost": cost,
                    "cost_vs_cheapest": cost / cheapest_cost - 1.0,
                    "packing_penalty": None,
                    "demand": {"cpu": d[0], "dram": d[1], "slow": d[2], "llc": d[3]},
                    "extrapolated": ext,
                    "predicted_seconds_upper": up_s,
                    "slowdown_upper": up_sd,
                }
                for ratio, ways, dram, slow, seconds, sd, cost, d, ext, up_s, up_sd in columns
            ]
        )


def promise(c: Candidate, confidence: float | None) -> str:
    """'+4.7 % (at most +6.1 % at 99 %)': the predicted slowdown and its upper bound."""
    point = f"{c.slowdown * 100:+.1f} %"
    if confidence is None or c.slowdown_upper is None:
        return f"{point} (the model's prediction, without an interval)"
    level = f"{confidence * 100:.1f}".rstrip("0").rstrip(".")
    return f"{point} (at most {c.slowdown_upper * 100:+.1f} % at {level} %)"


def dropped_candidates(
    priced: PricedGrid,
    best: int,
    acceptable: np.ndarray,
    in_within: np.ndarray,
    slowdown: FloatArray,
    slowdown_upper: FloatArray | None,
    cost_upper: FloatArray | None,
    objective: Objective,
    threshold: float,
    levels: tuple[float | None, float],
    relative: bool,
    candidates: Callable[[np.ndarray], list[Candidate]],
) -> list[DroppedCandidate]:
    """What the intervals left out that the point prediction would have kept: candidates within
    T of the best's predicted cost whose upper cost bound (paired with the best, at the band's
    level) is not, and, for an SLO, candidates cheaper than the best whose predicted slowdown
    meets it but whose upper bound (at the promise's level) does not."""
    confidence, band_confidence = levels
    if confidence is None or slowdown_upper is None or cost_upper is None:
        return []
    level = f"{confidence:.0%}"
    band_level = f"{band_confidence:.0%}"
    cost = priced.cost
    out: list[DroppedCandidate] = []
    if relative:
        limit = cost[best] * (1.0 + threshold)
        near = np.flatnonzero(acceptable & ~in_within & (cost <= limit))
        near = near[np.argsort(cost[near], kind="stable")][:RUNNERS_UP]
        for idx, cand in zip(near.tolist(), candidates(near), strict=True):
            out.append(
                DroppedCandidate(
                    candidate=cand,
                    reason=f"predicted {cost[idx] / cost[best] - 1.0:+.1%} against the best, but"
                    f" up to {cost_upper[idx] / cost[best] - 1.0:+.1%} at {band_level}: it may cost"
                    f" more than T ({threshold:.1%}) over the best",
                )
            )
    if objective.max_slowdown is not None:
        bound = objective.max_slowdown + 1e-12
        risky = np.flatnonzero(
            priced.feasible & (slowdown <= bound) & (slowdown_upper > bound) & (cost < cost[best])
        )
        risky = risky[np.argsort(cost[risky], kind="stable")][:RUNNERS_UP]
        for idx, cand in zip(risky.tolist(), candidates(risky), strict=True):
            out.append(
                DroppedCandidate(
                    candidate=cand,
                    reason=f"predicted {slowdown[idx]:+.1%} slower than fastmax, but up to"
                    f" {slowdown_upper[idx]:+.1%} at {level}: it may break {objective}."
                    " A verification run there would settle it",
                )
            )
    return out


def closest_after_runs(
    priced: PricedGrid,
    slowdown: FloatArray,
    slowdown_upper: FloatArray | None,
    objective: Objective,
    observations: Sequence[Observation],
) -> int | None:
    """The configuration closest to an SLO that verification runs put out of reach (least
    bound on the slowdown), or None when the answer is not of that kind."""
    if objective.max_slowdown is None or not observations or not priced.feasible.any():
        return None
    bound = slowdown if slowdown_upper is None else slowdown_upper
    feasible = np.flatnonzero(priced.feasible)
    return int(feasible[np.argmin(bound[feasible])])


def runs_against_prediction(
    predictor: Predictor, observations: Sequence[Observation]
) -> list[RunAgainstPrediction]:
    out = []
    for o in observations[:RUNNERS_UP]:
        predicted, _ = predictor.predict_one(o.slow_ratio, o.llc_ways)
        out.append(
            RunAgainstPrediction(
                run_id=o.run_id,
                slow_ratio=o.slow_ratio,
                llc_ways=o.llc_ways,
                measured_seconds=o.seconds,
                predicted_seconds=predicted,
                measured_over_predicted=o.seconds / predicted,
            )
        )
    return out


def infeasible_after_runs(
    runs: Sequence[RunAgainstPrediction],
    total: int,
    priced: PricedGrid,
    closest: int,
    slowdown: FloatArray,
    slowdown_upper: FloatArray | None,
) -> str:
    """What an operator needs when verification runs made an objective unreachable: each run
    against the model's prediction there, and the configuration that comes closest."""
    described = []
    for run in runs:
        name = f"run {run.run_id} at" if run.run_id else "a run at"
        described.append(
            f"{name} slow ratio {run.slow_ratio:g} / {run.llc_ways} ways measured"
            f" {run.measured_seconds:.4g} s against {run.predicted_seconds:.4g} s predicted"
            f" ({run.measured_over_predicted - 1.0:+.1%})"
        )
    more = total - len(described)
    text = (
        f", after {total} verification run{'s' if total > 1 else ''}: "
        + "; ".join(described)
        + (f"; and {more} more" if more > 0 else "")
    )
    bound = slowdown if slowdown_upper is None else slowdown_upper
    r, w = priced.ratio_and_ways(closest)
    return text + (
        f". The closest is slow ratio {r:g} / {w} ways: {slowdown[closest]:+.1%} predicted, at"
        f" most {bound[closest]:+.1%}. The runs are measurements, not errors in the request:"
        " relax the objective, or check that the runs ran the profiled input"
    )
