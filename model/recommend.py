"""A recommendation: enumerate the grid, predict, price, select (Algorithm 1), explain."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from model.bundle import MAX_BYTES, HostDescription, WorkloadId
from model.confidence import (
    DEFAULT_BAND_CONFIDENCE,
    DEFAULT_CONFIDENCE,
    ErrorTerms,
    PredictionInterval,
    cover_sigma,
    paired_bounds,
    prediction_interval,
    promise_sigma,
    slowdown_sigma,
)
from model.errors import InvalidRequest, NoFeasibleConfiguration
from model.fit import FitDiagnostics, FittedModel
from model.grid import Grid, paper_grid
from model.misscurve import FloatArray
from model.objectives import CHEAPEST, DEFAULT_THRESHOLD, Objective
from model.predict import GridPrediction, IntArray, Predictor, StructurePlacement
from model.pricing import DEFAULT_PRICE_PROFILE, PriceProfile
from model.resources import GIB, Configuration, Demand, MachineShape, Utilization, split_memory
from model.select import (
    FirstRound,
    Selection,
    confident_first_round,
    first_round,
    packing_penalties,
    second_round,
)
from model.verification import (
    GridCorrection,
    Observation,
    VerificationState,
    VerifiedRatio,
    band_points,
    corrected_grid,
    dominated_cap,
    measured_sigma,
    next_point,
    observed_grid,
    reference_points,
    sweep_points,
)

RECOMMENDATION_SCHEMA = "tmc.recommendation/v1"
RUNNERS_UP = 5  # other candidates, and dropped ones per reason, listed in an explanation
# Where the memory size a recommendation is priced at came from: a pod's memory request, a size
# the caller gave (a VM size), or the profile's traced footprint (the default).
SizedFrom = Literal["request", "caller", "profile"]


def sizing(memory_bytes: int | None, sized_from: SizedFrom | None) -> SizedFrom:
    """Where a recommendation's size comes from, with the size checked: a caller that gives a
    size says whose it is (a caller's by default); without one, it is the profile's."""
    if memory_bytes is None:
        if sized_from not in (None, "profile"):
            raise InvalidRequest("sized_from", f"{sized_from!r} needs memory_bytes")
        return "profile"
    if isinstance(memory_bytes, bool) or not isinstance(memory_bytes, int):
        raise InvalidRequest("memory_bytes", "must be a whole number of bytes")
    if not 0 < memory_bytes <= MAX_BYTES:
        raise InvalidRequest(
            "memory_bytes", f"must lie between 1 and {MAX_BYTES} bytes (1 PiB), not {memory_bytes}"
        )
    if sized_from == "profile":
        raise InvalidRequest(
            "sized_from", "'profile' is the footprint's own size: give no memory_bytes with it"
        )
    return sized_from or "caller"


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)
    configuration: Configuration
    predicted_seconds: float
    slowdown: float = Field(description="against fastmax: predicted / fastmax - 1")
    cost: float = Field(
        description="Eq. 1: hourly price x predicted hours, in the profile's currency"
    )
    cost_vs_cheapest: float = Field(description="cost / cheapest feasible cost - 1")
    packing_penalty: float | None = None
    demand: Demand
    extrapolated: bool = Field(
        default=False, description="ways outside the profiled range; MAR held at the nearest end"
    )
    slowdown_upper: float | None = Field(
        default=None,
        description="the slowdown this configuration stays under with the recommendation's"
        " confidence (one-sided upper bound of the prediction interval)",
    )
    predicted_seconds_upper: float | None = Field(
        default=None, description="the run time it stays under with that confidence"
    )


class DroppedCandidate(BaseModel):
    """A candidate the point prediction would have kept, left out because its interval did
    not allow it, and why."""

    model_config = ConfigDict(frozen=True)
    candidate: Candidate
    reason: str


class RunAgainstPrediction(BaseModel):
    """One verification run beside what the model predicted for its configuration."""

    model_config = ConfigDict(frozen=True)
    run_id: str | None
    slow_ratio: float
    llc_ways: int
    measured_seconds: float
    predicted_seconds: float
    measured_over_predicted: float


class UnmetObjective(BaseModel):
    """Why the objective cannot be met after the verification runs: the runs that moved the
    answer and the configuration that comes closest (it is `chosen`, with its bound)."""

    model_config = ConfigDict(frozen=True)
    reason: str
    runs: list[RunAgainstPrediction]
    closest_slowdown: float
    closest_slowdown_upper: float | None


class ParetoPoint(BaseModel):
    model_config = ConfigDict(frozen=True)
    slow_ratio: float
    llc_ways: int
    predicted_seconds: float
    cost: float


class Recommendation(BaseModel):
    model_config = ConfigDict(frozen=True)
    schema_version: str = RECOMMENDATION_SCHEMA
    workload: WorkloadId
    host_kind: str
    model_version: str
    objective: str
    threshold: float
    grid: str
    grid_size: int
    feasible_count: int
    price_profile: str
    currency: str
    memory_bytes: int = Field(
        gt=0,
        le=MAX_BYTES,
        description="the memory size every candidate is priced, fitted to the machine and packed"
        " at: each configuration's DRAM and slow bytes add up to it, and the placement plan is"
        " scaled to it. The predicted times are the profile's (the program's shape)",
    )
    footprint_bytes: int | None = Field(
        default=None,
        gt=0,
        le=MAX_BYTES,
        description="the footprint the profile traced (its runs' size), whatever memory_bytes"
        " the candidates are priced at; absent in recommendations stored before it was recorded",
    )
    sized_from: SizedFrom = Field(
        default="profile",
        description="where memory_bytes came from: 'request' (a pod's memory request), 'caller'"
        " (a size the caller gave, e.g. a VM's) or 'profile' (the traced footprint, used when no"
        " size is given)",
    )
    machine: MachineShape
    utilization: Utilization
    fastmax_seconds: float
    chosen: Candidate
    best: Candidate = Field(description="the objective's best alone, before the packing round")
    within_threshold: list[Candidate] = Field(description="lowest packing penalty first")
    other_candidates: list[Candidate] = Field(
        default_factory=list,
        description="the next acceptable candidates beyond T, best score first (at most 5)",
    )
    dropped: list[DroppedCandidate] = Field(
        default_factory=list,
        description="candidates the prediction alone would have kept, left out by the"
        " confidence filter or an SLO's upper bound, each with its reason (at most 5 per reason)",
    )
    confidence: float | None = Field(
        default=None, description="the level of every upper bound and of the promise"
    )
    promise: str = Field(
        default="",
        description="the chosen configuration's predicted slowdown and the most it will be at"
        " the confidence level, e.g. '+4.7 % (at most +6.1 % at 99 %)'",
    )
    pareto_frontier: list[ParetoPoint] = Field(description="time vs cost, fastest first")
    placement: list[StructurePlacement]
    fit: FitDiagnostics
    verification: VerificationState | None = Field(
        default=None,
        description="verification runs used, and the configuration to measure next (cost "
        "objectives with a confidence level)",
    )
    objective_met: bool = Field(
        default=True,
        description="false when verification runs showed that no configuration meets the"
        " objective: `chosen` is then the closest one, and `unmet` says why",
    )
    unmet: UnmetObjective | None = None

    @model_validator(mode="before")
    @classmethod
    def _profile_sized(cls, data: Any) -> Any:
        """A recommendation stored before sizes were given was priced at the profile's
        footprint, which its chosen configuration's bytes add up to."""
        if not isinstance(data, dict) or "memory_bytes" in data:
            return data
        chosen = data.get("chosen")
        config = chosen.get("configuration") if isinstance(chosen, dict) else None
        if isinstance(config, dict):
            memory = config.get("dram_bytes", 0) + config.get("slow_bytes", 0)
        elif isinstance(chosen, Candidate):
            memory = chosen.configuration.dram_bytes + chosen.configuration.slow_bytes
        else:
            return data
        return {**data, "memory_bytes": memory, "sized_from": "profile"}


_CANDIDATES = TypeAdapter(list[Candidate])
_PARETO = TypeAdapter(list[ParetoPoint])


@dataclass(frozen=True)
class PricedGrid:
    """Prediction and price of every grid point, flattened [ratio-major] for selection."""

    prediction: GridPrediction
    hourly: FloatArray
    cost: FloatArray
    feasible: np.ndarray
    demand: FloatArray  # [n, 4]
    sigma: FloatArray  # [ratio, ways] relative standard deviation of each predicted time
    # The memory size the grid is priced at, and each ratio's DRAM and slow bytes at that size
    # (the prediction's own bytes are the profile's footprint's).
    memory_bytes: int
    dram_bytes: IntArray
    slow_bytes: IntArray
    correction: GridCorrection | None = None  # from verification runs, already applied
    terms: ErrorTerms | None = None  # the uncorrected sigma's terms, for paired differences
    # [ratio, ways] the uncovered gap as a one-sided sigma, for promises only (0 where a run
    # measured the point); None without one (`model.confidence.cover_sigma`)
    cover: FloatArray | None = None
    # [ratio, ways] the time measured by a reference run or verification runs, and its relative
    # sigma from run-to-run noise only; NaN where nothing was measured. None: as nothing.
    known: FloatArray | None = None
    known_sigma: FloatArray | None = None
    # [ratio, ways] sigma as the model gives it after the runs' correction, before the measured
    # configurations' own, and fastmax's sigma before any run (a slowdown's shared anchor).
    model_sigma: FloatArray | None = None
    anchor_sigma: float | None = None

    @property
    def measured(self) -> np.ndarray:
        """Per candidate: was it measured, by a reference run or a verification run."""
        if self.known is None:
            return np.zeros(self.cost.size, dtype=bool)
        out: np.ndarray = np.isfinite(self.known).ravel()
        return out

    def measured_upper(self, confidence: float) -> FloatArray | None:
        """[ratio, ways] each measured configuration's upper bound on a run's time at
        `confidence`, from run-to-run noise only (NaN elsewhere)."""
        if self.known is None or self.known_sigma is None:
            return None
        out: FloatArray = self.known * (1.0 + NormalDist().inv_cdf(confidence) * self.known_sigma)
        return out

    def paired_upper(self, confidence: float) -> Callable[[int], FloatArray]:
        """best -> every candidate's cost bound judged by its difference from best
        (`model.confidence.paired_bounds`)."""
        z = NormalDist().inv_cdf(confidence)
        return paired_bounds(self.terms, self.cost, self.sigma.ravel(), z)

    def ratio_and_ways(self, i: int) -> tuple[float, int]:
        n_ways = len(self.prediction.llc_ways)
        return float(self.prediction.slow_ratios[i // n_ways]), int(
            self.prediction.llc_ways[i % n_ways]
        )


def price_grid(
    predictor: Predictor,
    prices: PriceProfile,
    grid: Grid,
    machine: MachineShape,
    observations: Sequence[Observation] = (),
    memory_bytes: int | None = None,
) -> PricedGrid:
    """Every grid point predicted and priced at `memory_bytes` (None: the profile's footprint).

    A profile is the program's shape, traced on a small input, and the deployment gives its
    size: the DRAM and slow bytes that are priced, fitted to the machine and packed are the
    ratio's split of that size, while the predicted time is the profile's. At a traced
    footprint of megabytes memory costs next to nothing beside a vCPU and all-DRAM always
    wins: priced at the size it runs at, memory is its real share of the bill."""
    sizing(memory_bytes, None)
    m = predictor.model
    p, sigma, fix, terms, cover, known, known_sigma, model_sigma, anchor = predictor.kept(
        ("grid", grid, tuple(observations)),
        lambda: _predicted_grid(predictor, grid, observations),
    )
    memory = m.footprint_bytes if memory_bytes is None else memory_bytes
    if memory == m.footprint_bytes:
        dram_bytes, slow_bytes = p.dram_bytes, p.slow_bytes
    else:
        splits = [split_memory(memory, float(r)) for r in p.slow_ratios.tolist()]
        dram_bytes = np.asarray([d for d, _ in splits], dtype=np.int64)
        slow_bytes = np.asarray([sl for _, sl in splits], dtype=np.int64)
    dram_gib = dram_bytes / GIB
    slow_gib = slow_bytes / GIB
    memory_hour = dram_gib * prices.dram_gib_hour + slow_gib * prices.slow_gib_hour
    hourly = (
        m.vcpus * prices.vcpu_hour
        + memory_hour[:, None]
        + p.llc_ways[None, :] * prices.llc_way_hour
    )
    cost = hourly * p.seconds / 3600.0
    fits_memory = (dram_bytes <= machine.dram_bytes) & (slow_bytes <= machine.slow_bytes)
    fits_ways = p.llc_ways <= machine.llc_ways
    feasible = (fits_memory[:, None] & fits_ways[None, :]) & (m.vcpus <= machine.cpus)
    shape = cost.shape
    slow_share = (
        slow_bytes / machine.slow_bytes if machine.slow_bytes else np.zeros(len(slow_bytes))
    )
    demand = np.stack(
        [
            np.full(shape, m.vcpus / machine.cpus),
            np.broadcast_to((dram_bytes / machine.dram_bytes)[:, None], shape),
            np.broadcast_to(slow_share[:, None], shape),
            np.broadcast_to((p.llc_ways / machine.llc_ways)[None, :], shape),
        ],
        axis=-1,
    ).reshape(-1, 4)
    return PricedGrid(
        prediction=p,
        hourly=hourly.ravel(),
        cost=cost.ravel(),
        feasible=feasible.ravel(),
        demand=demand,
        sigma=sigma,
        memory_bytes=memory,
        dram_bytes=dram_bytes,
        slow_bytes=slow_bytes,
        correction=fix,
        terms=terms,
        cover=cover,
        known=known,
        known_sigma=known_sigma,
        model_sigma=model_sigma,
        anchor_sigma=anchor,
    )


def _predicted_grid(
    predictor: Predictor, grid: Grid, observations: Sequence[Observation]
) -> tuple[
    GridPrediction,
    FloatArray,
    GridCorrection | None,
    ErrorTerms | None,
    FloatArray | None,
    FloatArray,
    FloatArray,
    FloatArray,
    float | None,
]:
    """The grid's predictions, their uncertainty, the runs' correction and what was measured:
    what depends on the fit, the grid and the runs only (not on prices, machine, utilization or
    objective), so it is kept with the predictor. Its arrays are made read-only, as every caller
    shares them."""
    p = predictor.predict(np.asarray(grid.slow_ratios), np.asarray(grid.llc_ways, dtype=np.int64))
    interval = prediction_interval(p, predictor.model.diagnostics)
    sigma = interval.sigma
    references = [*reference_points(predictor, p), *sweep_points(predictor, p)]
    cover_before = cover_sigma(p)
    fix = None
    if observations:
        fix = observed_grid(predictor, p.slow_ratios, p.llc_ways, sigma, observations)
        p = corrected_grid(p, fix)
        sigma = fix.sigma
    # What was measured carries its measured time, known up to run-to-run noise: the runs' own
    # (already in the correction), and the reference runs' where no verification run was made.
    known = np.full(p.seconds.shape, np.nan)
    known_sigma = np.full(p.seconds.shape, np.nan)
    if fix is not None:
        known[fix.measured] = p.seconds[fix.measured]
        known_sigma[fix.measured] = sigma[fix.measured]
    # The reference runs first (the model is calibrated through them), then the way sweep's runs
    # all in DRAM: each one run of the profile, known up to the noise the profile's runs have
    # (measured by repeats when the bundle says it, `FittedModel.run_noise`).
    profiled = measured_sigma(1, predictor.model.run_noise)
    for i, j, seconds in references:
        if np.isnan(known[i, j]):
            # Never wider than the model was there: a measurement only ever teaches.
            known[i, j] = seconds
            known_sigma[i, j] = min(profiled, float(interval.sigma[i, j]))
    at = np.isfinite(known)
    if (at & (p.seconds != known)).any():
        factor = np.where(at, known / p.seconds, 1.0)
        # Only the factor is applied: the measured times in place of the predicted ones.
        p = corrected_grid(
            p,
            GridCorrection(
                factor=factor,
                sigma=sigma,
                runs=np.zeros(sigma.shape, dtype=np.int64),
                largest_error=0.0,
                observations=0,
                inflation=1.0,
            ),
        )
    model_sigma = sigma
    sigma = np.where(at, known_sigma, sigma)
    # The gap to the uncovered prediction, against the corrected times (a run that found the
    # model low has closed part of it), none where the point was measured, and never wider than
    # before runs that erred no more than the interval said.
    cover = cover_sigma(p)
    if cover is not None:
        if cover_before is not None:
            cover = np.minimum(cover, cover_before * (1.0 if fix is None else fix.inflation))
        cover = np.where(at, 0.0, cover)
    for shared in (p, fix):
        for value in vars(shared).values() if shared is not None else ():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
    for array in (sigma, known, known_sigma, model_sigma, cover):
        if array is not None:
            array.flags.writeable = False
    fastmax = np.flatnonzero(
        (p.slow_ratios == 0.0)[:, None] & (p.llc_ways == predictor.model.ways_max)[None, :]
    )
    anchor = float(interval.sigma.ravel()[fastmax[0]]) if fastmax.size else None
    return p, sigma, fix, interval.terms, cover, known, known_sigma, model_sigma, anchor


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
        priced = price_grid(predictor, prices, grid, machine, observations, memory_bytes)
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
        closest = _closest_after_runs(priced, slowdown, slowdown_upper, objective, observations)
        if closest is None:
            raise NoFeasibleConfiguration(f"no configuration of grid {grid.name} {why}")
        # The runs are measurements, not a bad request: the answer is a result that says the
        # objective is out of reach and gives the configuration that comes closest.
        runs = _runs_against_prediction(predictor, observations)
        unmet = UnmetObjective(
            reason=f"no configuration of grid {grid.name} {why}"
            + _infeasible_after_runs(
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
    explain = _Explainer(
        priced, fitted.vcpus, slowdown, seconds_upper, slowdown_upper, cheapest_cost
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
    dropped = _dropped(
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
    scaled to it; the predicted times are the profile's (`price_grid`).

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
    )
    return choose(short, utilization)


@dataclass(frozen=True)
class _Explainer:
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


def _dropped(
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


def _closest_after_runs(
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


def _runs_against_prediction(
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


def _infeasible_after_runs(
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
    if objective.kind == "least_dram":
        # Runs only check the promise here: their saving is not in cost.
        chance = np.zeros_like(chance)
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
    wanted = next_point(
        priced.cost,
        sigma,
        chance,
        chosen,
        measured,
        0 if c is None else c.observations,
        packing=packing,
        confirm=confirm,
        # An SLO is a promise on the chosen configuration's run time: its own run checks it.
        explore_last=objective.max_slowdown is None,
    )
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


def pareto_frontier(priced: PricedGrid) -> list[ParetoPoint]:
    """Feasible configurations no other beats on both predicted time and cost, fastest first."""
    idx = np.flatnonzero(priced.feasible)
    seconds = priced.prediction.seconds.ravel()[idx]
    cost = priced.cost[idx]
    order = np.lexsort((cost, seconds))
    best_cost = np.minimum.accumulate(cost[order])
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = cost[order][1:] < best_cost[:-1]
    kept = idx[order[keep]]
    n_ways = len(priced.prediction.llc_ways)
    return _PARETO.validate_python(
        [
            {"slow_ratio": ratio, "llc_ways": ways, "predicted_seconds": seconds, "cost": cost}
            for ratio, ways, seconds, cost in zip(
                priced.prediction.slow_ratios[kept // n_ways].tolist(),
                priced.prediction.llc_ways[kept % n_ways].tolist(),
                priced.prediction.seconds.ravel()[kept].tolist(),
                priced.cost[kept].tolist(),
                strict=True,
            )
        ]
    )


def machine_of_host(host: HostDescription) -> MachineShape:
    """The machine shape a bundle's own host offers (used when the caller names none)."""
    return MachineShape(
        cpus=host.cores,
        dram_bytes=host.fast_tier.capacity_bytes,
        slow_bytes=host.slow_tier.capacity_bytes,
        llc_ways=host.llc_ways,
        slow_pooled=host.slow_tier.kind == "cxl_pool",
    )


class GridPoint(BaseModel):
    """One configuration's prediction and price, for tables, heat maps and audits."""

    model_config = ConfigDict(frozen=True)
    slow_ratio: float
    llc_ways: int
    dram_bytes: int
    slow_bytes: int
    mar: float
    mar_slow: float
    cpi: float
    predicted_seconds: float
    slowdown: float
    hourly_price: float
    cost: float
    cost_vs_cheapest: float
    feasible: bool
    extrapolated: bool


def predicted_grid(
    model: FittedModel | Predictor,
    *,
    machine: MachineShape,
    prices: PriceProfile = DEFAULT_PRICE_PROFILE,
    grid: Grid | None = None,
    memory_bytes: int | None = None,
) -> list[GridPoint]:
    """Every grid point, ratio-major; cost_vs_cheapest is against the cheapest feasible point.
    Bytes and prices at `memory_bytes` (None: the profile's footprint), as `price_grid`."""
    predictor = model if isinstance(model, Predictor) else Predictor(model)
    priced = price_grid(predictor, prices, grid or paper_grid(), machine, (), memory_bytes)
    p = priced.prediction
    cheapest = float(priced.cost[priced.feasible].min()) if priced.feasible.any() else float("nan")
    n_ways = len(p.llc_ways)
    points = []
    for i in range(priced.cost.size):
        r, w = divmod(i, n_ways)
        points.append(
            GridPoint(
                slow_ratio=float(p.slow_ratios[r]),
                llc_ways=int(p.llc_ways[w]),
                dram_bytes=int(priced.dram_bytes[r]),
                slow_bytes=int(priced.slow_bytes[r]),
                mar=float(p.mar[w]),
                mar_slow=float(p.mar_slow[r, w]),
                cpi=float(p.cpi[r, w]),
                predicted_seconds=float(p.seconds[r, w]),
                slowdown=float(p.slowdown[r, w]),
                hourly_price=float(priced.hourly[i]),
                cost=float(priced.cost[i]),
                cost_vs_cheapest=float(priced.cost[i] / cheapest - 1.0),
                feasible=bool(priced.feasible[i]),
                extrapolated=bool(p.extrapolated[w]),
            )
        )
    return points
