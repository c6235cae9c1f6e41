"""The grid priced: every slow-ratio x LLC-way configuration predicted, priced at the size the
workload runs at and fitted to a machine, and what follows from that alone (the Pareto frontier,
the grid's table of predictions and prices)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from pydantic import TypeAdapter

from model.bundle import HostDescription
from model.confidence import ErrorTerms, cover_sigma, paired_bounds, prediction_interval
from model.fit import FittedModel
from model.grid import Grid, paper_grid
from model.misscurve import FloatArray
from model.predict import GridPrediction, IntArray, Predictor
from model.pricing import DEFAULT_PRICE_PROFILE, PriceProfile
from model.recommendation import GridPoint, ParetoPoint, sizing, vcpus_checked
from model.resources import GIB, MachineShape, split_memory
from model.verification import (
    GridCorrection,
    Observation,
    corrected_grid,
    measured_sigma,
    observed_grid,
    profile_points,
    reference_points,
    sweep_points,
)

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
    vcpus: int
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
    vcpus: int | None = None,
) -> PricedGrid:
    """Every grid point predicted and priced at `memory_bytes` (None: the profile's footprint)
    and `vcpus` (None: the profile's).

    A profile is the program's shape, traced on a small input, and the deployment gives its
    size: the DRAM and slow bytes that are priced, fitted to the machine and packed are the
    ratio's split of that size, while the predicted time is the profile's. At a traced
    footprint of megabytes memory costs next to nothing beside a vCPU and all-DRAM always
    wins: priced at the size it runs at, memory is its real share of the bill. Likewise a program
    traced on one thread and deployed on eight pays eight vCPUs for every second a slow
    configuration adds."""
    sizing(memory_bytes, None)
    m = predictor.model
    given = vcpus_checked(vcpus)
    cpus = m.vcpus if given is None else given
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
        cpus * prices.vcpu_hour + memory_hour[:, None] + p.llc_ways[None, :] * prices.llc_way_hour
    )
    cost = hourly * p.seconds / 3600.0
    fits_memory = (dram_bytes <= machine.dram_bytes) & (slow_bytes <= machine.slow_bytes)
    fits_ways = p.llc_ways <= machine.llc_ways
    feasible = (fits_memory[:, None] & fits_ways[None, :]) & (cpus <= machine.cpus)
    shape = cost.shape
    slow_share = (
        slow_bytes / machine.slow_bytes if machine.slow_bytes else np.zeros(len(slow_bytes))
    )
    demand = np.stack(
        [
            np.full(shape, cpus / machine.cpus),
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
        vcpus=cpus,
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
    references = [
        *reference_points(predictor, p),
        *sweep_points(predictor, p),
        *profile_points(predictor, p),
    ]
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
    # all in DRAM and the profile's runs beyond the reference runs (`profile_points`): each one
    # run of the profile, known up to the noise the profile's runs have
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
