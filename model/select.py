"""Algorithm 1 (paper §3.5): the cheapest within a threshold T, then the lowest packing penalty.

Vectorised over a flat list of candidates so that a 528-point grid stays well under a millisecond.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from model.misscurve import FloatArray

# Penalties closer than this are a tie, broken by cost: float noise must not pick a dearer config.
PENALTY_TIE = 1e-9


@dataclass(frozen=True)
class Selection:
    chosen: int
    best: int  # the best by the objective's score alone (T = 0, no penalty)
    within: NDArray[np.int64]  # candidates within T, lowest penalty first (chosen is within[0])
    penalty: FloatArray  # per candidate; NaN where not acceptable


def packing_penalties(demand: FloatArray, utilization: FloatArray) -> FloatArray:
    """D_i . U for every candidate: demand is [n, 4] (cpu, dram, slow, llc), utilization [4]."""
    out: FloatArray = demand @ utilization
    return out


@dataclass(frozen=True)
class FirstRound:
    """Algorithm 1's first round: the candidates within T of the best, which do not depend on
    the cluster's utilization (only the second round's order does), with what the second round
    reads of them."""

    best: int
    within: NDArray[np.int64]  # ascending
    cost: FloatArray  # per candidate of `within`
    demand: FloatArray  # [len(within), 4]
    hold: FloatArray | None  # seconds_i / seconds_best (the confident round), or None


def first_round(
    score: FloatArray,
    cost: FloatArray,
    acceptable: NDArray[np.bool_],
    demand: FloatArray,
    threshold: float,
    relative: bool = True,
) -> FirstRound | None:
    """`algorithm1`'s first round; None when nothing is acceptable."""
    idx = np.flatnonzero(acceptable)
    if idx.size == 0:
        return None
    s = score[idx]
    best_local = int(np.lexsort((cost[idx], s))[0])
    best_score = s[best_local]
    if relative:
        ok = s <= best_score * (1.0 + threshold) if best_score > 0 else s <= best_score
    else:
        ok = s <= best_score + threshold
    within = idx[ok]
    return FirstRound(int(idx[best_local]), within, cost[within], demand[within], None)


def confident_first_round(
    cost: FloatArray,
    upper_cost: FloatArray,
    seconds: FloatArray,
    acceptable: NDArray[np.bool_],
    demand: FloatArray,
    threshold: float,
    paired_upper: Callable[[int], FloatArray] | None = None,
) -> FirstRound | None:
    """`confident_algorithm1`'s first round; None when nothing is acceptable."""
    idx = np.flatnonzero(acceptable)
    if idx.size == 0:
        return None
    best_local = int(np.lexsort((upper_cost[idx], cost[idx]))[0])
    best = int(idx[best_local])
    limit = cost[best] * (1.0 + threshold)
    near = idx[cost[idx] <= limit]
    bound = upper_cost if paired_upper is None else paired_upper(best)
    within = near[(bound[near] <= limit) | (near == best)]
    hold = seconds[within] / seconds[best]
    return FirstRound(best, within, cost[within], demand[within], hold)


def second_round(first: FirstRound, size: int, utilization: FloatArray) -> Selection:
    """The lowest packing penalty D_i . U among the first round's candidates (weighed by how
    long each holds its resources, after the confident round), ties broken by cost, then by
    index. `size`: the number of candidates, for the per-candidate penalty."""
    within = first.within
    chosen_penalty = packing_penalties(first.demand, utilization)
    penalty = np.full(size, np.nan)
    penalty[within] = chosen_penalty
    weighed = chosen_penalty if first.hold is None else chosen_penalty * first.hold
    rounded = np.round(weighed / PENALTY_TIE)
    order = np.lexsort((within, first.cost, rounded))
    ranked = within[order]
    return Selection(chosen=int(ranked[0]), best=first.best, within=ranked, penalty=penalty)


def algorithm1(
    score: FloatArray,
    cost: FloatArray,
    acceptable: NDArray[np.bool_],
    demand: FloatArray,
    utilization: FloatArray,
    threshold: float,
    relative: bool = True,
) -> Selection | None:
    """First round: keep acceptable candidates whose score is within T of the best (relative,
    C_i / C_min - 1 <= T, or absolute for scores that are already shares). Second round: the
    lowest packing penalty, ties broken by cost. None when nothing is acceptable."""
    first = first_round(score, cost, acceptable, demand, threshold, relative)
    return None if first is None else second_round(first, score.size, utilization)


def confident_algorithm1(
    cost: FloatArray,
    upper_cost: FloatArray,
    seconds: FloatArray,
    acceptable: NDArray[np.bool_],
    demand: FloatArray,
    utilization: FloatArray,
    threshold: float,
    paired_upper: Callable[[int], FloatArray] | None = None,
) -> Selection | None:
    """Algorithm 1 that does not overspend T on the model's optimism.

    First round: the candidates whose predicted cost is within T of the cheapest predicted
    (`best`) *and* whose upper cost bound (`upper_cost`, e.g.
    `model.confidence.PredictionInterval.upper`: the cost the model is confident not to exceed)
    is within (1 + T) x the cheapest's predicted cost; `best` itself always qualifies. A
    candidate is kept only if it stays within T of the predicted optimum even when the model
    has been as optimistic about it as its interval allows. (Anchoring on the cheapest's own
    bound instead lets candidates that lean on the same blind spot through, e.g. a neighbouring
    slow ratio; anchoring on the lowest bound drifts to the configurations the model knows best,
    e.g. the profiled 28 ways, which may hog a resource.) Second round: the packing penalty
    D_i . U weighted by how long the candidate holds its resources against the cheapest
    (seconds_i / seconds_best): a configuration that saves 10 % of a scarce resource but runs
    10 % longer saves nothing. Ties by cost. `penalty` is the plain D_i . U, as in Algorithm 1.

    With `paired_upper` (best -> per candidate, the upper bound of its cost judged by the
    uncertainty of its *difference* from `best`, `model.confidence.ErrorTerms`), the first round
    keeps the candidates whose paired bound is within the limit: the error a candidate shares
    with the optimum (the same fit, the same miss curve) cannot make it dearer than the optimum."""
    first = confident_first_round(
        cost, upper_cost, seconds, acceptable, demand, threshold, paired_upper
    )
    return None if first is None else second_round(first, cost.size, utilization)
