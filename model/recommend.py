"""A recommendation: the grid priced (`model.priced_grid`), Algorithm 1's two rounds, the answer
(`model.recommendation`) and its explanation (`model.explanation`).

`shortlist` is the work the cluster's utilization does not change, `choose` the second round
under a utilization; `recommend` is both at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from model.confidence import (
    DEFAULT_BAND_CONFIDENCE,
    DEFAULT_CONFIDENCE,
    PredictionInterval,
    promise_sigma,
    slowdown_sigma,
)
from model.errors import InvalidRequest, NoFeasibleConfiguration
from model.explanation import (
    RUNNERS_UP,
    Explainer,
    closest_after_runs,
    dropped_candidates,
    infeasible_after_runs,
    promise,
    runs_against_prediction,
)
from model.fit import FittedModel
from model.grid import Grid, paper_grid
from model.misscurve import FloatArray
from model.objectives import CHEAPEST, DEFAULT_THRESHOLD, Objective
from model.predict import Predictor, StructurePlacement
from model.priced_grid import PricedGrid, machine_of_host, pareto_frontier, price_grid
from model.pricing import DEFAULT_PRICE_PROFILE, PriceProfile
from model.recommendation import (
    Candidate,
    DroppedCandidate,
    ParetoPoint,
    Recommendation,
    SizedFrom,
    UnmetObjective,
    sizing,
)
from model.resources import MachineShape, Utilization
from model.select import (
    FirstRound,
    Selection,
    confident_first_round,
    first_round,
    packing_penalties,
    second_round,
)
from model.verification import (
    VERIFICATION_BUDGET,
    Observation,
    VerificationState,
    VerifiedRatio,
    band_points,
    dominated_cap,
    next_point,
    slow_memory_point,
)

# The choice and the work before it are this module's own; the benchmarks take the grid's pricing
# and a bundle's machine from here too, beside `recommend`.
__all__ = ["Shortlist", "choose", "machine_of_host", "price_grid", "recommend", "shortlist"]


@dataclass(frozen=True)
class Shortlist:
    """Everything of a recommendation that the cluster's utilization does not change: the priced
    grid and its bounds, Algorithm 1's first round (the candidates within T of the best), and the
    explanation's parts that follow from them (the runners-up, the dropped candidates, the
    Pareto frontier). Only the second round's order, the penalties and what follows from the
    chosen configuration depend on the utilization (`choose`). Shared between threads: never
    changed, except for what it keeps per chosen configuration (a placement, the verification
    state), which is the same whichever thread computes it."""

    predictor: Predictor
    grid: Grid
    machine: MachineShape
    prices: PriceProfile
    objective: Objective
    threshold: float
    confidence: float | None
    sized_from: SizedFrom
    priced: PricedGrid
    slowdown: FloatArray
    slowdown_upper: FloatArray | None
    acceptable: np.ndarray  # after an unmet objective: the closest configuration alone
    first: FirstRound | None  # None: the objective is unmet (`unmet` says why)
    unmet: UnmetObjective | None
    closest: int | None
    cheapest_cost: float
    within_base: dict[int, Candidate]  # the first round's, without their packing penalty
    others: list[Candidate]
    dropped: list[DroppedCandidate]
    band_upper: FloatArray | None
    promise_upper: FloatArray | None  # the best's paired bounds at the promise's level
    chance: FloatArray | None  # per candidate, the chance it meets the objective in truth
    pareto: list[ParetoPoint]
    placements: dict[int, list[StructurePlacement]]
    verifications: dict[tuple[int, int | None, int | None], VerificationState]


def shortlist(
    model: FittedModel | Predictor,
    *,
    machine: MachineShape,
    prices: PriceProfile = DEFAULT_PRICE_PROFILE,
    objective: Objective = CHEAPEST,
    threshold: float = DEFAULT_THRESHOLD,
    grid: Grid | None = None,
    confidence: float | None = DEFAULT_CONFIDENCE,
    observations: Sequence[Observation] = (),
    band_confidence: float = DEFAULT_BAND_CONFIDENCE,
    memory_bytes: int | None = None,
    sized_from: SizedFrom | None = None,
    vcpus: int | None = None,
) -> Shortlist:
    """`recommend`'s work before the utilization is known (its arguments but that one): a
    caller that decides the same question under changing utilization keeps it and `choose`s."""
    sized = sizing(memory_bytes, sized_from)
    if not 0.0 <= threshold <= 1.0:
        raise InvalidRequest("threshold", "must lie between 0 and 1")
    if confidence is not None and not 0.5 <= confidence < 1.0:
        raise InvalidRequest("confidence", "must lie in [0.5, 1)")
    if not 0.5 <= band_confidence < 1.0:
        raise InvalidRequest("band_confidence", "must lie in [0.5, 1)")
    predictor = model if isinstance(model, Predictor) else Predictor(model)
    fitted = predictor.model
    grid = grid or paper_grid()
    try:
        priced = price_grid(predictor, prices, grid, machine, observations, memory_bytes, vcpus)
    except ValueError as exc:
        raise InvalidRequest("observations", str(exc)) from exc
    p = priced.prediction
    slowdown = p.slowdown.ravel()
    interval = (
        None
        if confidence is None
        else PredictionInterval(priced.sigma, confidence, cover=priced.cover)
    )
    seconds_upper = None if interval is None else interval.promise_upper(p.seconds).ravel()
    slowdown_upper = None
    cap = None
    if interval is not None:
        # A slowdown's anchor (fastmax's own noise, which cancels in it) is the model's sigma
        # there, whether or not fastmax counts as measured.
        model_sigma = priced.sigma if priced.model_sigma is None else priced.model_sigma
        relative_sigma = slowdown_sigma(
            promise_sigma(model_sigma, priced.cover), p, fitted.ways_max, priced.anchor_sigma
        )
        slowdown_upper = (
            PredictionInterval(relative_sigma, interval.confidence).upper(p.seconds).ravel()
            / fitted.fastmax_seconds
            - 1.0
        )
        measured_upper = priced.measured_upper(interval.confidence)
        if measured_upper is not None and seconds_upper is not None:
            # A measured configuration is bounded by its run-to-run noise alone, and no bound
            # says more than a measured configuration with at least as much slow memory and no
            # more ways allows (`model.verification.dominated_cap`).
            measured = np.isfinite(measured_upper).ravel()
            # fastmax's own configuration: its slowdown is 0 by definition, and certain.
            anchor = (
                (p.slow_ratios == 0.0)[:, None] & (p.llc_ways == fitted.ways_max)[None, :]
            ).ravel()
            own = measured_upper.ravel() / fitted.fastmax_seconds - 1.0
            slowdown_upper = np.where(
                measured & ~anchor, np.minimum(own, slowdown_upper), slowdown_upper
            )
            cap = dominated_cap(p.slow_ratios, p.llc_ways, measured_upper).ravel()
            seconds_upper = np.minimum(seconds_upper, cap)
            slowdown_upper = np.minimum(slowdown_upper, cap / fitted.fastmax_seconds - 1.0)

    acceptable = priced.feasible.copy()
    if objective.max_slowdown is not None:
        # The promise is kept on the bound, not the point prediction: a candidate is acceptable
        # when the model is confident (at the same level as the cost filter) that it meets it.
        decided_on = slowdown if slowdown_upper is None else slowdown_upper
        acceptable &= decided_on <= objective.max_slowdown + 1e-12
    if objective.kind == "least_dram":
        # By share of the memory, which is the same at every size.
        n_ways = len(p.llc_ways)
        dram_share = np.repeat(p.dram_bytes / fitted.footprint_bytes, n_ways)
        score, relative = dram_share, False
    else:
        score, relative = priced.cost, True

    cost_upper = (
        None if interval is None else interval.upper(priced.cost.reshape(p.seconds.shape)).ravel()
    )
    if cost_upper is not None and cap is not None:
        cost_upper = np.minimum(cost_upper, priced.hourly * cap / 3600.0)
    # The band's bounds against a best, computed once for it: the first round judges by them,
    # and the explanation says why a candidate was dropped.
    band_bounds = priced.paired_upper(band_confidence)
    band_kept: dict[int, FloatArray] = {}

    def band_of(best: int) -> FloatArray:
        if best not in band_kept:
            band_kept[best] = band_bounds(best)
        return band_kept[best]

    first: FirstRound | None
    if cost_upper is not None and relative:
        first = confident_first_round(
            priced.cost,
            cost_upper,
            p.seconds.ravel(),
            acceptable,
            priced.demand,
            threshold,
            paired_upper=band_of,
        )
    else:
        first = first_round(score, priced.cost, acceptable, priced.demand, threshold, relative)
    unmet = closest = None
    if first is None:
        why = "fits the machine" if not priced.feasible.any() else f"meets {objective}"
        if (
            objective.max_slowdown is not None
            and slowdown_upper is not None
            and (priced.feasible & (slowdown <= objective.max_slowdown + 1e-12)).any()
        ):
            why += f" with {confidence:.0%} confidence"
        closest = closest_after_runs(priced, slowdown, slowdown_upper, objective, observations)
        if closest is None:
            raise NoFeasibleConfiguration(f"no configuration of grid {grid.name} {why}")
        # The runs are measurements, not a bad request: the answer is a result that says the
        # objective is out of reach and gives the configuration that comes closest.
        runs = runs_against_prediction(predictor, observations)
        unmet = UnmetObjective(
            reason=f"no configuration of grid {grid.name} {why}"
            + infeasible_after_runs(
                runs, len(observations), priced, closest, slowdown, slowdown_upper
            ),
            runs=runs,
            closest_slowdown=float(slowdown[closest]),
            closest_slowdown_upper=None
            if slowdown_upper is None
            else float(slowdown_upper[closest]),
        )
        acceptable = np.zeros_like(acceptable)
        acceptable[closest] = True
    best = closest if first is None else first.best
    within = np.asarray([closest]) if first is None else first.within
    assert best is not None

    cheapest_cost = float(priced.cost[priced.feasible].min())
    explain = Explainer(
        priced, priced.vcpus, slowdown, seconds_upper, slowdown_upper, cheapest_cost
    )
    in_within = np.zeros(priced.cost.size, dtype=bool)
    in_within[within] = True
    beyond = acceptable & ~in_within
    if cost_upper is not None and relative:
        # Those within T by the prediction that the interval left out are listed in `dropped`.
        beyond &= priced.cost > priced.cost[best] * (1.0 + threshold)
    others = np.flatnonzero(beyond)
    others = others[np.lexsort((priced.cost[others], score[others]))][:RUNNERS_UP]
    # The band's bound of each candidate against the best: why one was dropped, and which
    # lighter one a run may admit.
    band_upper = None if cost_upper is None else band_of(best)
    dropped = dropped_candidates(
        priced,
        best,
        acceptable,
        in_within,
        slowdown,
        slowdown_upper,
        band_upper,
        objective,
        threshold,
        (confidence, band_confidence),
        relative,
        explain.candidates,
    )
    promise_upper = None
    if confidence is not None and band_upper is not None and relative:
        promise_upper = priced.paired_upper(confidence)(best)
    return Shortlist(
        predictor=predictor,
        grid=grid,
        machine=machine,
        prices=prices,
        objective=objective,
        threshold=threshold,
        confidence=confidence,
        sized_from=sized,
        priced=priced,
        slowdown=slowdown,
        slowdown_upper=slowdown_upper,
        acceptable=acceptable,
        first=first,
        unmet=unmet,
        closest=closest,
        cheapest_cost=cheapest_cost,
        within_base=dict(zip(within.tolist(), explain.candidates(within), strict=True)),
        others=explain.candidates(others),
        dropped=dropped,
        band_upper=band_upper,
        promise_upper=promise_upper,
        chance=None if confidence is None else _chance(priced, slowdown, objective),
        pareto=pareto_frontier(priced),
        placements={},
        verifications={},
    )


def choose(short: Shortlist, utilization: Utilization | None = None) -> Recommendation:
    """Algorithm 1's second round under `utilization` (None: an idle cluster) and the
    recommendation it makes, explained."""
    util = utilization or Utilization()
    u = np.asarray(util.as_tuple())
    priced = short.priced
    if short.first is not None:
        selection = second_round(short.first, priced.cost.size, u)
    else:
        closest = short.closest
        assert closest is not None
        penalty = np.full(priced.cost.size, np.nan)
        penalty[closest] = float(packing_penalties(priced.demand[closest : closest + 1], u)[0])
        selection = Selection(
            chosen=closest,
            best=closest,
            within=np.asarray([closest], dtype=np.int64),
            penalty=penalty,
        )
    # The first round's candidates as listed, each with its penalty under this utilization.
    within = [
        short.within_base[i].model_copy(update={"packing_penalty": p})
        for i, p in zip(
            selection.within.tolist(), selection.penalty[selection.within].tolist(), strict=True
        )
    ]
    best = within[selection.within.tolist().index(selection.best)]
    chosen_ratio, chosen_ways = priced.ratio_and_ways(selection.chosen)
    verification = None
    if short.confidence is not None:
        assert short.chance is not None
        packing = confirm = None
        if short.promise_upper is not None and short.band_upper is not None:
            packing, confirm = band_points(
                priced.cost,
                short.band_upper,
                short.promise_upper,
                short.threshold,
                priced.demand,
                selection.best,
                selection.within,
                priced.measured,
                short.acceptable,
            )
        # What follows from the chosen configuration and the band's two runs, kept per three:
        # the utilization moves the choice among a few candidates.
        key = (selection.chosen, packing, confirm)
        verification = short.verifications.get(key)
        if verification is None:
            verification = _verification(
                priced,
                selection.chosen,
                short.slowdown,
                short.chance,
                short.objective,
                packing,
                confirm,
            )
            short.verifications[key] = verification
    placement = short.placements.get(selection.chosen)
    if placement is None:
        placement = short.predictor.placement(chosen_ratio, chosen_ways, priced.memory_bytes)
        short.placements[selection.chosen] = placement
    fitted = short.predictor.model
    chosen = within[0]
    return Recommendation(
        workload=fitted.workload,
        host_kind=fitted.host_kind,
        model_version=fitted.model_version,
        objective=str(short.objective),
        threshold=short.threshold,
        grid=short.grid.name,
        grid_size=short.grid.size,
        feasible_count=int(priced.feasible.sum()),
        price_profile=short.prices.key,
        currency=short.prices.currency,
        memory_bytes=priced.memory_bytes,
        vcpus=priced.vcpus,
        footprint_bytes=fitted.footprint_bytes,
        sized_from=short.sized_from,
        machine=short.machine,
        utilization=util,
        fastmax_seconds=fitted.fastmax_seconds,
        chosen=chosen,
        best=best,
        within_threshold=within,
        other_candidates=short.others,
        dropped=short.dropped,
        confidence=short.confidence,
        promise=promise(chosen, short.confidence),
        pareto_frontier=short.pareto,
        placement=placement,
        fit=fitted.diagnostics,
        verification=verification,
        objective_met=short.unmet is None,
        unmet=short.unmet,
    )


def recommend(
    model: FittedModel | Predictor,
    *,
    machine: MachineShape,
    prices: PriceProfile = DEFAULT_PRICE_PROFILE,
    utilization: Utilization | None = None,
    objective: Objective = CHEAPEST,
    threshold: float = DEFAULT_THRESHOLD,
    grid: Grid | None = None,
    confidence: float | None = DEFAULT_CONFIDENCE,
    observations: Sequence[Observation] = (),
    band_confidence: float = DEFAULT_BAND_CONFIDENCE,
    memory_bytes: int | None = None,
    sized_from: SizedFrom | None = None,
    vcpus: int | None = None,
) -> Recommendation:
    """Recommend a configuration for one workload. Without utilization the cluster is taken as
    idle, every penalty is 0, and the choice is the objective's best.

    With `confidence` (the default), a cost objective keeps only candidates within T of the best
    with that confidence (`model.select.confident_algorithm1`, intervals from
    `model.confidence`) and weighs packing gains by how long a candidate holds its resources;
    `confidence=None` is the paper's Algorithm 1 as published. A promise (an SLO's slowdown
    bound) is kept at `confidence`; the cost band's first round judges each candidate by the
    uncertainty of its *difference* from the best (`model.confidence.ErrorTerms`) at
    `band_confidence`, the level the regime map learns on held-out workloads.

    `observations` are verification runs (`model.verification`): the predictions are corrected
    where they were measured, and the answer names the configuration to measure next.

    `memory_bytes` is the size the workload runs at (a pod's memory request, a VM's size; None:
    the profile's footprint, `sized_from` says which): every candidate's DRAM and slow bytes
    are its ratio's split of it, priced, fitted to the machine and packed at it, and the plan is
    scaled to it; the predicted times are the profile's (`price_grid`). `vcpus` likewise (a
    pod's CPU request rounded up, a VM's vCPUs; None: the profile's).

    The same as `choose(shortlist(...), utilization)`."""
    short = shortlist(
        model,
        machine=machine,
        prices=prices,
        objective=objective,
        threshold=threshold,
        grid=grid,
        confidence=confidence,
        observations=observations,
        band_confidence=band_confidence,
        memory_bytes=memory_bytes,
        sized_from=sized_from,
        vcpus=vcpus,
    )
    return choose(short, utilization)


def _chance(priced: PricedGrid, slowdown: FloatArray, objective: Objective) -> FloatArray:
    """Per candidate, the chance that a run finds it acceptable, for `next_point`."""
    sigma = priced.sigma.ravel()
    if objective.max_slowdown is not None:
        # The chance that a candidate meets the SLO in truth (log-normal around the prediction).
        margin = np.log1p(objective.max_slowdown) - np.log1p(np.maximum(slowdown, -0.999))
        z = margin / np.maximum(sigma, 1e-9)
        cdf = NormalDist().cdf
        chance = np.asarray([cdf(v) for v in z.tolist()])
    else:
        chance = np.ones(priced.cost.size)
    chance = np.where(priced.feasible, chance, 0.0)
    chance.flags.writeable = False
    return chance


def _verification(
    priced: PricedGrid,
    chosen: int,
    slowdown: FloatArray,
    chance: FloatArray,
    objective: Objective,
    packing: int | None = None,
    confirm: int | None = None,
) -> VerificationState:
    c = priced.correction
    p = priced.prediction
    measured = priced.measured
    sigma = priced.sigma.ravel()
    runs_made = 0 if c is None else c.observations
    least_dram = objective.kind == "least_dram"
    wanted = next_point(
        priced.cost,
        sigma,
        # least-dram's runs save DRAM, not cost: no run goes where only cost would improve.
        np.zeros_like(chance) if least_dram else chance,
        chosen,
        measured,
        runs_made,
        packing=packing,
        confirm=confirm,
        # An SLO is a promise on the chosen configuration's run time: its own run checks it.
        explore_last=objective.max_slowdown is None,
    )
    if wanted is None and least_dram and runs_made < VERIFICATION_BUDGET:
        # The chosen configuration is measured: the next run goes where it may free more DRAM.
        ratios = np.repeat(np.asarray(p.slow_ratios, dtype=np.float64), p.llc_ways.size)
        wanted = slow_memory_point(ratios, chance, priced.cost, chosen, measured)
    ratio, ways = (None, None) if wanted is None else priced.ratio_and_ways(wanted)
    verified = (
        []
        if c is None
        else [
            VerifiedRatio(
                slow_ratio=float(p.slow_ratios[i]),
                runs=int(c.ratio_runs()[i]),
                measured_over_predicted=float(np.exp(np.mean(np.log(c.factor[i][c.measured[i]])))),
            )
            for i in np.flatnonzero(c.ratio_runs() > 0)
        ]
    )
    # The verification state speaks of verification runs: a reference run's configuration is
    # measured (no run goes there) but not a checked choice.
    checked = bool(c is not None and c.measured.ravel()[chosen])
    return VerificationState(
        runs=0 if c is None else c.observations,
        verified=verified,
        largest_error=0.0 if c is None else c.largest_error,
        next_slow_ratio=ratio,
        next_llc_ways=ways,
        ignored=[] if c is None else list(c.ignored),
        chosen_measured=checked,
        chosen_slowdown_measured=float(slowdown[chosen]) if checked else None,
    )
