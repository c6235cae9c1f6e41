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
   (`VerificationState.next_*`): the cost optimum (`Selection.best`), unless its slow ratio was
   already measured (`next_run`).
2. The workload runs once there, with tmc's placement plan, on the same input as profiled. Its
   wall time is an `Observation`.
3. Recommend again with the observations. At a measured slow ratio every way count's predicted
   time is scaled by measured / predicted (the geometric mean when several were measured): the
   error there comes from which structures are slow, and that is the same at every way count.
   The interval at that ratio shrinks to one run's noise. Elsewhere the interval is widened to
   at least the largest relative error measured: the model is trusted no better where it was not
   checked than where it was.
4. Repeat while the optimum moves to an unmeasured ratio, at most `VERIFICATION_BUDGET` runs.

On the simulator this takes 1.2-2.2 runs per workload in the regime map, and keeps every decision
within T in all 24 of its regimes, where the model alone keeps 68-80 % in 10 of them
(docs/evaluation.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from model.misscurve import FloatArray
from model.predict import GridPrediction, Predictor

MAX_OBSERVATIONS = 32
VERIFICATION_BUDGET = 4  # runs tmc asks for, per workload profile
# Relative standard deviation of one measured run's wall time (PMU cycle counts and wall time
# vary by about 1 % between runs of the same input on a quiet host).
RUN_NOISE = 0.01
_RATIO_TOLERANCE = 1e-9


class Observation(BaseModel):
    """One measured run of the profiled workload, with tmc's placement plan, on the profiled
    input."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    slow_ratio: float = Field(ge=0.0, le=1.0)
    llc_ways: int = Field(ge=1, le=64)
    seconds: float = Field(gt=0.0, le=1e9, description="wall time of the whole run")


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


class VerifiedRatio(BaseModel):
    model_config = ConfigDict(frozen=True)
    slow_ratio: float
    runs: int
    measured_over_predicted: float


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


@dataclass(frozen=True)
class Correction:
    """Per grid slow ratio: the factor on predicted time, and how many runs measured it."""

    factor: FloatArray  # [ratios]; 1 where not measured
    runs: NDArray[np.int64]  # [ratios]
    largest_error: float
    observations: int
    run_noise: float = RUN_NOISE

    @property
    def measured(self) -> NDArray[np.bool_]:
        out: NDArray[np.bool_] = self.runs > 0
        return out


def correction(
    slow_ratios: FloatArray,
    rows: Sequence[int | None],
    predicted_seconds: Sequence[float],
    measured_seconds: Sequence[float],
    run_noise: float = RUN_NOISE,
) -> Correction:
    """From observations given as (grid row or None, predicted, measured) seconds. An
    observation off the grid's ratios corrects no row but counts towards the largest error."""
    n = len(slow_ratios)
    logs = np.zeros(n)
    runs = np.zeros(n, dtype=np.int64)
    largest = 0.0
    for row, pred, meas in zip(rows, predicted_seconds, measured_seconds, strict=True):
        if not (pred > 0 and meas > 0 and math.isfinite(pred) and math.isfinite(meas)):
            raise ValueError("predicted and measured times must be positive and finite")
        largest = max(largest, abs(meas / pred - 1.0))
        if row is not None:
            logs[row] += math.log(meas / pred)
            runs[row] += 1
    factor = np.exp(np.divide(logs, runs, out=np.zeros(n), where=runs > 0))
    return Correction(factor, runs, largest, len(rows), run_noise)


def observed(
    predictor: Predictor, slow_ratios: FloatArray, observations: Sequence[Observation]
) -> Correction:
    """The correction for a grid from observations, each predicted at its own configuration."""
    if len(observations) > MAX_OBSERVATIONS:
        raise ValueError(f"at most {MAX_OBSERVATIONS} observations")
    rows: list[int | None] = []
    predicted = []
    for o in observations:
        hit = np.flatnonzero(np.abs(slow_ratios - o.slow_ratio) <= _RATIO_TOLERANCE)
        rows.append(int(hit[0]) if hit.size else None)
        predicted.append(predictor.predict_one(o.slow_ratio, o.llc_ways)[0])
    return correction(slow_ratios, rows, predicted, [o.seconds for o in observations])


def corrected(prediction: GridPrediction, c: Correction) -> GridPrediction:
    """The grid's times (and CPI, slowdown) scaled at the measured ratios."""
    f = c.factor[:, None]
    seconds = prediction.seconds * f
    fastmax = prediction.seconds / (1.0 + prediction.slowdown)
    return replace(
        prediction,
        seconds=seconds,
        cpi=prediction.cpi * f,
        slowdown=seconds / fastmax - 1.0,
    )


def corrected_sigma(sigma: FloatArray, c: Correction) -> FloatArray:
    """[ratio, ways] relative standard deviation after the runs: one run's noise where measured
    (less with several), at least the largest measured error elsewhere."""
    out = np.maximum(sigma, c.largest_error)
    measured = c.measured
    noise = c.run_noise / np.sqrt(np.maximum(c.runs, 1))
    out[measured, :] = noise[measured, None]
    return out


def next_run(c: Correction | None, best_row: int, budget: int = VERIFICATION_BUDGET) -> bool:
    """Whether the optimum's slow ratio still needs a run."""
    runs = 0 if c is None else c.observations
    measured = False if c is None else bool(c.measured[best_row])
    return runs < budget and not measured
