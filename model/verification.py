"""Verification runs: the workload measured once in a configuration the model chose, and the
model corrected where it was checked.

The fitted model is exact at its three reference runs and interpolates between them. It can be
wrong by more than T exactly where a choice is made: at the slow ratio where the first hot
structure goes slow. There one structure's misses may head chains of dependent misses, and in
slowmax (the only run with that structure slow) they hid behind the others' slow misses
(docs/evaluation.md, "Why the model alone cannot stay within T"). No interval drawn from three
runs sees this. One run in the chosen configuration does.

So tmc asks for verification runs:

1. Recommend as usual. The recommendation names the configuration to measure
   (`VerificationState.next_*`, `next_point`): the chosen configuration, until it was measured
   (its run checks the promise); then a candidate of the band that the promise's level would
   not keep (`confirmation_point`: the packing penalty may choose it); then a lighter one the
   band left out (`packing_point`); then the unmeasured candidate whose run is expected to save
   the most against the chosen cost, if that is worth a run. The budget's last run goes to that
   candidate instead of an unmeasured chosen one when it is expected to save more.
2. The workload runs once there, with tmc's placement plan, on the same input as profiled. Its
   wall time is an `Observation`.
3. Recommend again with the observations (`observed_grid`, `grid_correction`). The model's error
   is taken as a slow-memory part per slow ratio and a miss-curve part per way count, each
   correlated with its neighbours, with the prediction interval as its prior: a run corrects
   its ratio at every way count, its way count at every ratio, and their neighbours in
   proportion. Where runs err by more than the interval allowed, the whole prior widens: the
   model is trusted no better where it was not checked than where it was. A broken SLO at the
   chosen configuration moves the decision.
4. Repeat while a run is wanted, at most `VERIFICATION_BUDGET` runs.

What was measured is known. A configuration measured by a reference run (fastmax, fastmin,
slowmax: `reference_points`), by the way sweep all in DRAM (`sweep_points`) or by verification
runs carries its measured time, with an interval from run-to-run noise only (`measured_sigma`:
the profile's measured noise for its own runs, `RUN_NOISE` for verification runs; never wider
than the model's there), so an objective judges it by what was measured, not by the model's
uncertainty; the next run never goes there. Runs that err no more than the interval said never widen an interval (the
correction's sigma and the uncovered gap are capped by theirs before the runs). And no bound on a
configuration's time says more than a measured configuration with at least as much slow memory
and no more ways allows (`dominated_cap`): with slowmax measured at +132 %, no configuration at
slowmax's way count is promised worse than that and its noise.

The regime map's bench runs this loop in the simulator (`bench.regimes.verified`): the same
correction and the same choice of runs, with the cheapest predicted in place of the chosen. Unlike
the service, it does not start from the reference runs' measured times, and may run there
(docs/evaluation.md, "Weaker than it looks").

Runs are reported by agents and operators, so none is trusted blindly (`screen`). A run outside
what the profile and the model make physically plausible is ignored and reported with its
reason, never an exception: faster than fastmax (all DRAM, the most profiled ways: no
configuration with more slow memory or fewer ways runs faster, up to run noise), or more than
`PLAUSIBLE_FACTOR` times faster or slower than predicted (the model's largest error measured on
the simulator is 58 %; a factor of two past it is a wrong input, another machine or another
program). Runs at the same configuration are summarised by their median, so that among three
or more one outlier never decides.

On the simulator's held-out protocol (docs/model.md, "Held-out calibration") the runs take 1.5-1.7
per workload for the cheapest objective and 2.2-2.4 for `slo:5%`, after which every `slo:5%` and
`slo:10%` decision keeps its bound in truth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Annotated, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from model.bundle import DEFAULT_RUN_NOISE
from model.confidence import WAYS_CORRELATION
from model.misscurve import FloatArray
from model.predict import GridPrediction, Predictor

MAX_OBSERVATIONS = 32
VERIFICATION_BUDGET = 4  # runs tmc asks for, per workload profile
# Relative standard deviation of one verification run's wall time: a run made later, on a node,
# whose noise the profile did not measure (its own runs' noise is `FittedModel.run_noise`).
RUN_NOISE = DEFAULT_RUN_NOISE
_RATIO_TOLERANCE = 1e-9
# How far apart two slow ratios may be and still share most of the model's slow-memory error:
# neighbouring ratios put mostly the same structures in the slow tier.
RATIO_CORRELATION = 0.2
# A run more than this factor away from its prediction is not the profiled workload in tmc's
# configuration (the model's worst error on the simulator's workloads is 1.58x).
PLAUSIBLE_FACTOR = 2.0
# How much faster than fastmax a run at or below fastmax's ways may be: run-to-run noise, many
# times over.
FASTMAX_SLACK = 0.1


class Observation(BaseModel):
    """One measured run of the profiled workload, with tmc's placement plan, on the profiled
    input."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    slow_ratio: float = Field(ge=0.0, le=1.0)
    llc_ways: int = Field(ge=1, le=64)
    seconds: float = Field(gt=0.0, le=1e9, description="wall time of the whole run")
    run_id: str | None = Field(default=None, description="the reporter's id, named in flags")


class AppliedConfiguration(BaseModel):
    """What the node's runtime plugin applied to a run's containers when the runtime created
    them, as it recorded (docs/agent.md, "tmc-nri"): the run is reported only when every
    container started with all of it, and the report carries it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    enforced_by: Literal["tmc-nri"] = "tmc-nri"
    llc_mask: str = Field(pattern=r"^0x[0-9a-f]{1,16}$", description="the CAT ways, as hex")
    dram_bytes: int = Field(ge=0, le=1 << 50)
    slow_bytes: int = Field(ge=0, le=1 << 50)
    containers: int = Field(ge=1, le=256, description="containers of the run, all adjusted")
    applied: list[Annotated[str, Field(max_length=200)]] = Field(
        default_factory=list,
        max_length=32,
        description="each adjustment as the plugin named it (ways, memory nodes, limit, plan)",
    )


class MeasuredRun(BaseModel):
    """A verification run as the agent (or an operator) reports it to the service
    (`POST /v1/workloads/{key}/verification-runs`): the workload's run with tmc's placement plan
    in a configuration, on the profiled input."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    run_id: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._:/-]+$",
        description="the caller's id for the run (e.g. a pod uid): posting it again is a no-op",
    )
    slow_ratio: float = Field(ge=0.0, le=1.0)
    llc_ways: int = Field(ge=1, le=64)
    seconds: float = Field(gt=0.0, le=1e9, description="wall time of the whole run")
    applied: AppliedConfiguration | None = Field(
        default=None,
        description="what the node enforced at the containers' creation (a node agent with"
        " tmc-nri sends it; an operator's run outside the cluster has none)",
    )


class VerifiedRatio(BaseModel):
    model_config = ConfigDict(frozen=True)
    slow_ratio: float
    runs: int
    measured_over_predicted: float


class IgnoredRun(BaseModel):
    """A verification run the model did not use, and why."""

    model_config = ConfigDict(frozen=True)
    run_id: str | None = None
    slow_ratio: float
    llc_ways: int
    seconds: float
    code: str = Field(description="implausible_run or unpredictable")
    reason: str


class VerificationState(BaseModel):
    """What the recommendation knows from verification runs, and which run to make next."""

    model_config = ConfigDict(frozen=True)
    runs: int = Field(description="observations used")
    budget: int = VERIFICATION_BUDGET
    verified: list[VerifiedRatio] = Field(default_factory=list)
    largest_error: float = Field(
        default=0.0, description="largest |measured / predicted - 1| over the observations"
    )
    next_slow_ratio: float | None = Field(
        default=None, description="run the workload here next (with the placement plan), if set"
    )
    next_llc_ways: int | None = None
    chosen_measured: bool = Field(
        default=False, description="a run was made at the chosen configuration itself"
    )
    chosen_slowdown_measured: float | None = Field(
        default=None,
        description="the chosen configuration's slowdown as corrected by its own runs (the promise,"
        " checked)",
    )
    ignored: list[IgnoredRun] = Field(
        default_factory=list,
        description="runs left out, each with the reason (re-run the workload there if it was"
        " genuine)",
    )


def plausibility(predictor: Predictor, o: Observation, predicted: float) -> tuple[str, str] | None:
    """Why a run cannot be the profiled workload in its configuration (a flag code and the
    reason), or None if it can."""
    m = predictor.model
    if not (math.isfinite(predicted) and predicted > 0):
        return "unpredictable", "the model predicts no usable time there"
    floor = m.fastmax_seconds * (1.0 - FASTMAX_SLACK) if o.llc_ways <= m.ways_max else 0.0
    if o.seconds < floor:
        return "implausible_run", (
            f"{o.seconds:.3g} s is faster than fastmax ({m.fastmax_seconds:.3g} s, all DRAM and"
            f" {m.ways_max} ways): with slow memory or fewer ways the workload cannot run faster."
            " Check that the run used the profiled input"
        )
    # Compared in logs: a subnormal over a large time underflows to 0.
    error = math.log(o.seconds) - math.log(predicted)
    if abs(error) > math.log(PLAUSIBLE_FACTOR):
        side = "faster" if error < 0 else "slower"
        return "implausible_run", (
            f"{o.seconds:.3g} s is more than {PLAUSIBLE_FACTOR:g}x {side} than predicted"
            f" ({predicted:.3g} s): not the profiled workload and input in this configuration,"
            " or a disturbed run. Check the run's input and host, then run it again"
        )
    return None


def screen(
    predictor: Predictor, observations: Sequence[Observation]
) -> tuple[list[tuple[Observation, float]], list[IgnoredRun]]:
    """The plausible runs with their predicted seconds, and the others with the reason."""
    kept: list[tuple[Observation, float]] = []
    ignored: list[IgnoredRun] = []
    for o in observations:
        predicted = predictor.predict_one(o.slow_ratio, o.llc_ways)[0]
        why = plausibility(predictor, o, predicted)
        if why is None:
            kept.append((o, predicted))
            continue
        code, reason = why
        ignored.append(
            IgnoredRun(
                run_id=o.run_id,
                slow_ratio=o.slow_ratio,
                llc_ways=o.llc_ways,
                seconds=o.seconds,
                code=code,
                reason=reason,
            )
        )
    return kept, ignored


# -- Both axes: the model's error as a slow-memory part and an LLC-way part ---------------------

# A run is worth making when it is expected to save at least this share of the chosen
# configuration's cost (or to show that a cheaper one keeps the objective): a run costs about as
# much as one run of the workload, and the saving repeats on every later run.
MIN_EXPECTED_SAVING = 0.01
# How many runs' worth of belief the interval's own width carries against what runs show.
INFLATION_PRIOR_RUNS = 4


@dataclass(frozen=True)
class GridCorrection:
    """What the runs say about every grid point: [ratio, ways] arrays."""

    factor: FloatArray  # measured / predicted, expected (1 where nothing was learnt)
    sigma: FloatArray  # relative standard deviation of a run's time after the runs
    runs: NDArray[np.int64]  # runs made exactly at each point
    largest_error: float
    observations: int
    inflation: float  # how much wider the model's errors were than its interval said (>= 1)
    ignored: tuple[IgnoredRun, ...] = ()

    @property
    def measured(self) -> NDArray[np.bool_]:
        out: NDArray[np.bool_] = self.runs > 0
        return out

    def ratio_runs(self) -> NDArray[np.int64]:
        out: NDArray[np.int64] = self.runs.sum(axis=1)
        return out


def split_sigma(sigma: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The interval's [ratio, ways] sigma as a slow-memory part [ratio, ways] and an LLC-way part
    [ways]: at the grid's lowest ratio nothing is slow, so all of its sigma belongs to the way
    count (miss curve and run noise); the rest, in quadrature, to slow memory."""
    ways_part = sigma[0, :].copy()
    slow_part: FloatArray = np.sqrt(np.maximum(sigma**2 - ways_part[None, :] ** 2, 0.0))
    return slow_part, ways_part


def grid_correction(
    slow_ratios: FloatArray,
    llc_ways: NDArray[np.int64],
    sigma: FloatArray,
    points: Sequence[tuple[int, int, float]],
    *,
    observations: int,
    largest_error: float,
    run_noise: float = RUN_NOISE,
    ignored: Sequence[IgnoredRun] = (),
) -> GridCorrection:
    """What runs at grid points (row, column, log(measured / predicted)) say about every grid
    point: the model's error corrected everywhere (`_posterior`), and what was measured known.
    Each measured point carries its measured time (the median of its runs), up to run-to-run
    noise. The service (`observed_grid`) and the regime map's simulated runs
    (`bench.regimes.verified`) both correct through this one rule."""
    # Robust: several runs at one point enter as their median, so that among three or more one
    # outlier never decides (and a repeated run does not shrink the interval below its noise
    # faster than independent runs would).
    merged: dict[tuple[int, int], list[float]] = {}
    for i, j, err in points:
        merged.setdefault((i, j), []).append(err)
    summary = [(i, j, float(np.median(e))) for (i, j), e in merged.items()]
    factor, post_sigma, inflation = _posterior(slow_ratios, llc_ways, sigma, summary, run_noise)
    runs = np.zeros(sigma.shape, dtype=np.int64)
    for (i, j), e in merged.items():
        runs[i, j] = len(e)
        # The model's uncertainty is no longer in a measured configuration. A run that agreed
        # with a model surer than one run's noise leaves it as sure.
        factor[i, j] = math.exp(float(np.median(e)))
        post_sigma[i, j] = min(measured_sigma(len(e), run_noise), float(sigma[i, j]) * inflation)
    return GridCorrection(
        factor, post_sigma, runs, largest_error, observations, inflation, tuple(ignored)
    )


def _posterior(
    slow_ratios: FloatArray,
    llc_ways: NDArray[np.int64],
    sigma: FloatArray,
    points: Sequence[tuple[int, int, float]],
    run_noise: float,
) -> tuple[FloatArray, FloatArray, float]:
    """The posterior of the model's log error over the grid, given one summary per measured
    grid point (row, column, log(measured / predicted)): [ratio, ways] measured / predicted
    expected, a run's relative standard deviation after the runs, and how much the prior was
    widened (>= 1).

    The prior is the prediction interval itself: at (r, w) the error is
    `slow(r, w) * a_r + b_w`, with `a` a standard normal per slow ratio (neighbouring ratios
    correlated over `RATIO_CORRELATION`) and `b_w` normal with the way count's own sigma
    (neighbouring way counts correlated over `WAYS_CORRELATION` octaves). A run
    at (r, w) then corrects its slow ratio at every way count (as far as that ratio's error is
    slow memory's), its way count at every ratio (as far as it is the miss curve's), and
    neighbouring ratios in proportion to their correlation. Where runs err by more than the
    interval allowed, the whole prior is widened by the ratio (an empirical-Bayes scale), so the
    model is trusted no better where it was not checked than where it was."""
    n_r, n_w = sigma.shape
    slow_part, ways_part = split_sigma(sigma)
    if not points:
        return np.ones((n_r, n_w)), sigma.copy(), 1.0
    dist = np.abs(slow_ratios[:, None] - slow_ratios[None, :])
    k_a = np.exp(-dist / RATIO_CORRELATION)
    # The ways part of the prior holds the reference runs' noise; a little floor keeps the
    # system well posed where the interval is 0.
    octaves = np.abs(np.log2(llc_ways.astype(np.float64))[:, None] - np.log2(llc_ways)[None, :])
    sd_b = np.maximum(ways_part, 1e-4)
    k_b = sd_b[:, None] * sd_b[None, :] * np.exp(-octaves / WAYS_CORRELATION)
    prior = np.zeros((n_r + n_w, n_r + n_w))
    prior[:n_r, :n_r] = k_a
    prior[n_r:, n_r:] = k_b
    h = np.zeros((len(points), n_r + n_w))
    y = np.zeros(len(points))
    for k, (i, j, err) in enumerate(points):
        h[k, i] = slow_part[i, j]
        h[k, n_r + j] = 1.0
        y[k] = err
    noise = np.full(len(points), run_noise**2)
    expected = np.einsum("ki,ij,kj->k", h, prior, h) + noise
    # The scale's estimate, with `INFLATION_PRIOR_RUNS` pseudo-runs that erred as the interval
    # said: one surprising run widens the model's errors, it does not replace them.
    surprise = float(np.sum(y**2 / expected))
    inflation = max(
        1.0, math.sqrt((surprise + INFLATION_PRIOR_RUNS) / (len(y) + INFLATION_PRIOR_RUNS))
    )
    prior = prior * inflation**2
    s = h @ prior @ h.T + np.diag(noise)
    gain = np.linalg.solve(s, h @ prior).T  # [params, runs]
    mean = gain @ y
    cov = prior - gain @ h @ prior
    # Per grid point: slow(r, w) * a_r + b_w.
    a_mean, b_mean = mean[:n_r], mean[n_r:]
    var_a = np.diag(cov)[:n_r]
    var_b = np.diag(cov)[n_r:]
    cov_ab = cov[:n_r, n_r:]
    log_factor = slow_part * a_mean[:, None] + b_mean[None, :]
    var = slow_part**2 * var_a[:, None] + var_b[None, :] + 2.0 * slow_part * cov_ab
    # A future run of the workload varies by one run's noise around the corrected prediction.
    # But runs only ever teach: where they erred no more than the interval said (inflation 1) no
    # point's interval is wider after them than before, and where they erred more, no wider
    # than the widened prior.
    post_sigma = np.minimum(np.sqrt(np.maximum(var, 0.0) + run_noise**2), sigma * inflation)
    return np.exp(log_factor), post_sigma, inflation


def observed_grid(
    predictor: Predictor,
    slow_ratios: FloatArray,
    llc_ways: NDArray[np.int64],
    sigma: FloatArray,
    observations: Sequence[Observation],
) -> GridCorrection:
    """`grid_correction` from observations: screened first (`screen`), then matched to grid
    points. A plausible run off the grid corrects nothing but counts towards the largest error."""
    if len(observations) > MAX_OBSERVATIONS:
        raise ValueError(f"at most {MAX_OBSERVATIONS} observations")
    kept, ignored = screen(predictor, observations)
    points: list[tuple[int, int, float]] = []
    largest = 0.0
    for o, predicted in kept:
        err = math.log(o.seconds) - math.log(predicted)
        largest = max(largest, abs(math.expm1(err)))
        row = np.flatnonzero(np.abs(slow_ratios - o.slow_ratio) <= _RATIO_TOLERANCE)
        col = np.flatnonzero(llc_ways == o.llc_ways)
        if row.size and col.size:
            points.append((int(row[0]), int(col[0]), err))
    return grid_correction(
        slow_ratios,
        llc_ways,
        sigma,
        points,
        observations=len(kept),
        largest_error=largest,
        ignored=ignored,
    )


def measured_sigma(runs: int, run_noise: float = RUN_NOISE) -> float:
    """The relative standard deviation of a future run's time at a configuration measured by
    `runs` runs: their mean's noise and the future run's own, nothing of the model's."""
    return run_noise * math.sqrt(1.0 + 1.0 / max(runs, 1))


def reference_points(
    predictor: Predictor, prediction: GridPrediction
) -> list[tuple[int, int, float]]:
    """The profile's reference runs that lie on the grid, (row, column, measured seconds):
    fastmax (all DRAM, the most ways), fastmin (all DRAM, the fewest) and slowmax (all slow, the
    most ways). Their times are measured, not predicted: each is the model's time there (the
    uncorrected `prediction`) with the fit's residual at that run taken out, on fastmax's clock
    (the fit's residuals are its CPI over the run's measured CPI)."""
    m = predictor.model
    residual = m.diagnostics.cpi_residuals
    out: list[tuple[int, int, float]] = []
    for name, ratio, ways in (
        ("fastmax", 0.0, m.ways_max),
        ("fastmin", 0.0, m.ways_min),
        ("slowmax", 1.0, m.ways_max),
    ):
        row = np.flatnonzero(np.abs(prediction.slow_ratios - ratio) <= _RATIO_TOLERANCE)
        col = np.flatnonzero(prediction.llc_ways == ways)
        if not (row.size and col.size):
            continue
        i, j = int(row[0]), int(col[0])
        if name == "fastmax":
            seconds = m.fastmax_seconds
        else:
            scale = (1.0 + residual.get("fastmax", 0.0)) / (1.0 + residual.get(name, 0.0))
            seconds = float(prediction.seconds[i, j]) * scale
        if math.isfinite(seconds) and seconds > 0:
            out.append((i, j, seconds))
    return out


def profile_points(
    predictor: Predictor, prediction: GridPrediction
) -> list[tuple[int, int, float]]:
    """The profile's runs beyond the reference runs that lie on the grid, (row, column, measured
    seconds): each ran the program at that configuration with the model's plan, on the reference
    runs' input and clock, so its time is measured. Like the reference runs and the sweep, they
    are known where they were made and correct nothing elsewhere: carried by the model's error
    structure, a ratio's error at many ways reaches the same ratio at few ways many times over,
    and a cost objective would then rest on that extrapolation alone."""
    out: list[tuple[int, int, float]] = []
    for run in predictor.model.profile_runs:
        c = run.configuration
        row = np.flatnonzero(np.abs(prediction.slow_ratios - c.slow_ratio) <= _RATIO_TOLERANCE)
        col = np.flatnonzero(prediction.llc_ways == c.llc_ways)
        if row.size and col.size and math.isfinite(run.wall_seconds) and run.wall_seconds > 0:
            out.append((int(row[0]), int(col[0]), run.wall_seconds))
    return out


def sweep_points(predictor: Predictor, prediction: GridPrediction) -> list[tuple[int, int, float]]:
    """The way sweep's runs that lie on the grid, (row, column, measured seconds): all in DRAM at
    each way count where the bundle carries the sweep's CPI. The sweep ran the program there as
    a reference run does, so its time is measured, not predicted: fastmax's time scaled by the
    sweep's CPI there over the sweep's own CPI at fastmax's way count (one instrument's ratio, so
    a sweep that counted a shorter window than the reference runs still says the same)."""
    m = predictor.model
    if m.curve_cpi is None or m.ways_max not in m.curve_ways:
        return []
    at_max = m.curve_cpi[m.curve_ways.index(m.ways_max)]
    rows = np.flatnonzero(np.abs(prediction.slow_ratios) <= _RATIO_TOLERANCE)
    if not rows.size or not at_max > 0:
        return []
    out: list[tuple[int, int, float]] = []
    for j, ways in enumerate(prediction.llc_ways):
        if int(ways) not in m.curve_ways:
            continue
        seconds = m.fastmax_seconds * m.curve_cpi[m.curve_ways.index(int(ways))] / at_max
        if math.isfinite(seconds) and seconds > 0:
            out.append((int(rows[0]), j, seconds))
    return out


def dominated_cap(
    slow_ratios: FloatArray, llc_ways: NDArray[np.int64], measured_upper: FloatArray
) -> FloatArray:
    """[ratio, ways] the most any bound on a configuration's time may say, from the measured
    configurations (`measured_upper`: each one's own upper bound, NaN where not measured): a
    configuration with no more slow memory and no fewer LLC ways than a measured one runs no
    slower than it (tmc's plan puts the coldest structures slow first, so more slow memory adds
    slow accesses; fewer ways add misses). Infinite where no measured configuration is worse."""
    cap = np.full(measured_upper.shape, np.inf)
    for i, j in zip(*np.nonzero(np.isfinite(measured_upper)), strict=True):
        worse_or_equal = (slow_ratios <= slow_ratios[i] + _RATIO_TOLERANCE)[:, None] & (
            llc_ways >= llc_ways[j]
        )[None, :]
        cap = np.where(worse_or_equal, np.minimum(cap, measured_upper[i, j]), cap)
    return cap


def corrected_grid(prediction: GridPrediction, c: GridCorrection) -> GridPrediction:
    """The grid's times (and CPI, slowdown) scaled by what the runs taught, point by point."""
    seconds = prediction.seconds * c.factor
    fastmax = prediction.seconds / (1.0 + prediction.slowdown)
    return replace(
        prediction,
        seconds=seconds,
        cpi=prediction.cpi * c.factor,
        slowdown=seconds / fastmax - 1.0,
    )


def expected_saving(
    cost: FloatArray,
    sigma: FloatArray,
    chosen_cost: float,
    chance_acceptable: FloatArray,
) -> FloatArray:
    """Per candidate, the expected saving against the chosen cost if it were measured and taken
    (expected improvement under a normal error of relative sigma), times the chance that it
    meets the objective, as a share of the chosen cost."""
    gain = _expected_excess(chosen_cost - cost, cost * sigma)
    out: FloatArray = gain * chance_acceptable / chosen_cost
    return out


def _expected_excess(margin: FloatArray, spread: FloatArray) -> FloatArray:
    """E[max(0, margin + spread * Z)] for a standard normal Z, element-wise."""
    spread = np.maximum(spread, 1e-300)
    # Beyond 40 standard deviations the normal's tail is 0 in doubles.
    d = np.clip(margin / spread, -40.0, 40.0)
    cdf = np.vectorize(NormalDist().cdf)(d)
    pdf = np.exp(-0.5 * d**2) / math.sqrt(2.0 * math.pi)
    out: FloatArray = np.maximum(margin * cdf + spread * pdf, 0.0)
    return out


def expected_overshoot(
    cost: FloatArray, sigma: FloatArray, chosen: int, chance_acceptable: FloatArray
) -> float:
    """What a run of the chosen configuration is expected to save, as a share of its cost: the
    expected amount by which it is dearer than the runner-up (the next cheapest configuration
    that may meet the objective), under a normal error of relative sigma."""
    others = chance_acceptable > 0
    others[chosen] = False
    if not others.any():
        return math.inf
    c = cost[chosen : chosen + 1]
    gain = _expected_excess(c - np.min(cost[others]), c * sigma[chosen : chosen + 1])
    return float(gain[0] / c[0])


def packing_point(
    cost: FloatArray,
    band_upper: FloatArray,
    limit: float,
    demand: FloatArray,
    best: int,
    measured: NDArray[np.bool_],
    acceptable: NDArray[np.bool_],
) -> int | None:
    """A lighter configuration worth a run (flat index), or None: one that uses no more of any
    resource than the best and less of one, that the point prediction puts within T of the best
    (cost <= limit) but its bound does not (band_upper > limit). Its run may admit it to the
    band, where the packing penalty can choose it: the model's way-count errors are about as
    large as T (docs/evaluation.md), and a measured difference is surer than a predicted one.
    The cheapest such configuration: the likeliest to be admitted."""
    lighter = (demand <= demand[best] + 1e-12).all(axis=1) & (demand < demand[best] - 1e-12).any(
        axis=1
    )
    wanted = np.flatnonzero(
        acceptable & lighter & ~measured & (cost <= limit) & (band_upper > limit)
    )
    if not wanted.size:
        return None
    return int(wanted[np.argmin(cost[wanted])])


def confirmation_point(
    cost: FloatArray,
    promise_upper: FloatArray,
    limit: float,
    band: NDArray[np.int64],
    best: int,
    measured: NDArray[np.bool_],
) -> int | None:
    """A candidate of the band worth a run before the packing penalty may choose it (flat
    index), or None: one that the band admits at its own level, but whose bound against the best
    at the promise's level (`promise_upper`) is over the limit. The band's level is lower than the
    promise's so that the penalty has neighbours to choose from; a candidate that would not be
    kept at the promise's level rests on the model alone until a run confirms it, and the model's
    errors between one and two ways are about as large as T (docs/evaluation.md). The one whose
    bound overshoots the limit most: the likeliest to be over T."""
    wanted = band[band != best]
    wanted = wanted[~measured[wanted] & (promise_upper[wanted] > limit)]
    if not wanted.size:
        return None
    return int(wanted[np.argmax(promise_upper[wanted] / cost[wanted])])


def band_points(
    cost: FloatArray,
    band_upper: FloatArray,
    promise_upper: FloatArray,
    threshold: float,
    demand: FloatArray,
    best: int,
    band: NDArray[np.int64],
    measured: NDArray[np.bool_],
    acceptable: NDArray[np.bool_],
) -> tuple[int | None, int | None]:
    """The runs the band asks for, for `next_point`: the lighter configuration it leaves out
    (`packing_point`, from the bounds at the band's level) and the candidate it keeps that the
    promise's level would not (`confirmation_point`), both against (1 + T) x the best's cost."""
    limit = float(cost[best]) * (1.0 + threshold)
    packing = packing_point(cost, band_upper, limit, demand, best, measured, acceptable)
    confirm = confirmation_point(cost, promise_upper, limit, band, best, measured)
    return packing, confirm


# For `least-dram:X%` a run is worth making when it is expected to free at least this share of
# the footprint from DRAM (the slow ratio gained times the chance the run keeps X): half a step of
# the paper's grid at an even chance.
MIN_EXPECTED_SLOW_GAIN = 0.05


def slow_memory_point(
    slow_ratio: FloatArray,
    chance_acceptable: FloatArray,
    cost: FloatArray,
    chosen: int,
    measured: NDArray[np.bool_],
    min_gain: float = MIN_EXPECTED_SLOW_GAIN,
) -> int | None:
    """For an objective that ranks by DRAM (`least-dram:X%`), the run that may move the choice
    to more slow memory (flat index), or None: the unmeasured configuration with more slow
    memory than the chosen one whose expected gain, the slow ratio it adds times the chance that
    a run finds it within X, is largest and at least `min_gain`; the cheaper on a tie. A
    measured configuration is judged by its run, so a run there that keeps X is taken: the
    model's bounds at partial ratios are what keep such configurations out without one."""
    gain = (slow_ratio - slow_ratio[chosen]) * chance_acceptable
    gain = np.where(measured | (slow_ratio <= slow_ratio[chosen]), 0.0, gain)
    best = float(gain.max(initial=0.0))
    if best < min_gain:
        return None
    ties = np.flatnonzero(gain >= best - 1e-12)
    return int(ties[np.argmin(cost[ties])])


def next_point(
    cost: FloatArray,
    sigma: FloatArray,
    chance_acceptable: FloatArray,
    chosen: int,
    measured: NDArray[np.bool_],
    runs_made: int,
    budget: int = VERIFICATION_BUDGET,
    min_saving: float = MIN_EXPECTED_SAVING,
    packing: int | None = None,
    confirm: int | None = None,
    explore_last: bool = True,
) -> int | None:
    """Where the next run goes (flat index), or None. First the chosen configuration itself: its
    run checks the promise. Then a candidate of the band that the promise's level would not keep
    (`confirmation_point`), if given: the packing penalty may choose it. Then a lighter
    configuration the band may admit (`packing_point`), if given. Then the unmeasured candidate
    whose run is most likely to change the choice for the better (`expected_saving`), if that is
    worth a run. With `explore_last`, the budget's last run goes to that candidate instead of an
    unmeasured chosen one when it is expected to save more than the chosen one's run shows
    (`expected_overshoot`); without it (a promise on the run time, such as an SLO, which only
    the chosen configuration's own run checks) the chosen one always has its run."""
    if runs_made >= budget:
        return None
    saving = expected_saving(cost, sigma, float(cost[chosen]), chance_acceptable)
    saving[measured] = 0.0
    saving[chosen] = 0.0
    best = int(np.argmax(saving))
    if not measured[chosen]:
        # The budget's last run, when the runs so far have not settled the choice, goes where it
        # is expected to save the most if that beats the chosen's own run: a model wrong at
        # every ratio it was checked at leads each run to the next unmeasured neighbour, and
        # the configuration it is least sure of (often the true optimum) is never measured.
        last = explore_last and runs_made + 1 >= budget
        if last and saving[best] > expected_overshoot(cost, sigma, chosen, chance_acceptable):
            return best
        return chosen
    if confirm is not None and not measured[confirm]:
        return confirm
    if packing is not None and not measured[packing]:
        return packing
    return best if saving[best] >= min_saving else None
