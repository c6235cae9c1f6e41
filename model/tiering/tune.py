"""Knob settings by Bayesian optimisation warm-started from the manager model.

The search space is a grid of knob values (the page manager's documented ranges). Every grid point
gets a prior: the manager model's predicted run time (model/tiering/manager_model.py). The first
trial is always the current (default) setting, which is also the guard: the advice is the best
*measured* setting, so it is never worse than what runs now. The next trials are the model's best
points; after them a Gaussian process over the grid models the measured run time minus the
prior, and expected improvement picks each next trial. A knob's importance is how far the
posterior mean moves when that knob alone sweeps its values around the best setting.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Annotated

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, model_validator

from model.errors import InvalidRequest
from model.tiering.budget import Budget, unlimited
from model.tiering.manager_model import DEFAULT_KNOBS, MODEL_KNOBS, predicted_loss
from model.tiering.profile import TieringProfile

MODEL_SEEDS = 3  # trials after the default taken from the model's ranking
SPREAD_TRIALS = 6  # then settings as far as possible from those tried
LENGTH_SCALES = (0.2, 0.35, 0.6, 1.0, 3.0)
NOISE = 1e-3  # of the signal variance
PRIOR_WEIGHTS = (0.0, 0.5, 1.0)
LOCAL_TRIALS = 10  # the last trials of the budget search one knob at a time around the best
XI = 0.002  # EI's exploration margin, in log-seconds
# The GP is exact (cubic in its trials): it models at most this many, the fastest measured, which
# are the ones that decide where the optimum lies.
MAX_GP_TRIALS = 200


class KnobDimension(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_]*$")]
    values: tuple[Annotated[float, Field(ge=0.0, le=1e15)], ...] = Field(
        min_length=1, max_length=32
    )
    default: float = Field(ge=0.0, le=1e15)


MAX_GRID = 20_000  # grid points a knob space may have: the prior is computed on each


class KnobSpace(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    dimensions: tuple[KnobDimension, ...] = Field(min_length=1, max_length=16)

    @model_validator(mode="after")
    def _bounded(self) -> KnobSpace:
        names = [d.name for d in self.dimensions]
        if len(set(names)) != len(names):
            raise ValueError("knob names repeat")
        if math.prod(len(d.values) for d in self.dimensions) > MAX_GRID:
            raise ValueError(f"the knob grid has more than {MAX_GRID} points")
        return self

    def grid(self) -> list[dict[str, float]]:
        names = [d.name for d in self.dimensions]
        return [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(d.values for d in self.dimensions))
        ]

    def default(self) -> dict[str, float]:
        return {d.name: d.default for d in self.dimensions}

    def encode(self, points: Sequence[dict[str, float]]) -> NDArray[np.float64]:
        """Each knob as its value's position in its ordered list, scaled to [0, 1]."""
        out = np.zeros((len(points), len(self.dimensions)))
        for j, d in enumerate(self.dimensions):
            span = max(len(d.values) - 1, 1)
            for i, p in enumerate(points):
                out[i, j] = nearest_index(d.values, p[d.name]) / span
        return out


def nearest_index(values: Sequence[float], x: float) -> int:
    return int(np.argmin([abs(math.log(max(v, 1e-12)) - math.log(max(x, 1e-12))) for v in values]))


# A HeMem-like manager's knobs over its documented ranges (BO paper 000, Table 2), batch in bytes.
HEMEM_SPACE = KnobSpace(
    dimensions=(
        KnobDimension(name="sampling_period", values=(500, 1000, 2500, 5000, 10000), default=5000),
        KnobDimension(name="read_hot_threshold", values=(1, 2, 4, 8, 16), default=8),
        KnobDimension(name="write_hot_threshold", values=(2, 4, 16), default=4),
        KnobDimension(name="cooling_threshold", values=(6, 12, 18, 36), default=18),
        KnobDimension(
            name="migrate_batch_bytes", values=(1 << 28, 1 << 30, 1 << 32), default=1 << 30
        ),
        # The migration-rate limit (MB/s of pages moved, both ways); the largest is no limit.
        KnobDimension(
            name="migration_rate_limit_mbps", values=(512, 2048, 8192, 65536), default=65536
        ),
    )
)


class Trial(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    knobs: dict[Annotated[str, Field(max_length=64)], Annotated[float, Field(ge=0.0, le=1e15)]] = (
        Field(max_length=64)
    )
    wall_seconds: float = Field(ge=1e-6, le=1e9)


class KnobAdvice(BaseModel):
    model_config = ConfigDict(frozen=True)
    best: dict[str, float]
    in_use_wall_seconds: float | None = Field(
        default=None, description="the configuration in use, measured: the guard of the advice"
    )
    best_wall_seconds: float | None
    default_wall_seconds: float | None
    speedup_over_default: float | None
    is_default: bool
    next_trial: dict[str, float] | None
    trials_done: int
    importance: dict[str, float]
    predicted_best_loss: float


def _kernel(
    a: NDArray[np.float64], b: NDArray[np.float64], scale: float, lengths: NDArray[np.float64]
) -> NDArray[np.float64]:
    d2 = (((a[:, None, :] - b[None, :, :]) / lengths) ** 2).sum(axis=2)
    out: NDArray[np.float64] = scale * np.exp(-0.5 * d2)
    return out


def _fit(
    x: NDArray[np.float64], r: NDArray[np.float64], scale: float, lengths: NDArray[np.float64]
) -> tuple[float, NDArray[np.float64]]:
    kxx = _kernel(x, x, scale, lengths) + (NOISE * scale + 1e-9) * np.eye(len(x))
    chol = np.asarray(np.linalg.cholesky(kxx), dtype=np.float64)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, r))
    return -0.5 * float(r @ alpha) - float(np.log(np.diag(chol)).sum()), chol


def gp_posterior(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    xq: NDArray[np.float64],
    budget: Budget | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """A constant-mean GP with a squared-exponential kernel (numpy, exact). Each knob has its own
    length scale, the likeliest of a few, found one knob at a time: a knob that does not matter
    gets a long one, so the search stops spending trials on it."""
    mu0 = float(y.mean())
    scale = float(max(y.var(), 1e-6))
    r = y - mu0
    lengths = np.full(x.shape[1], LENGTH_SCALES[1])
    best, chol = _fit(x, r, scale, lengths)
    budget = budget or unlimited()
    for _ in range(2):
        for j in range(x.shape[1]):
            if budget.spent():
                budget.note("GP length scales: the search stopped at the CPU budget")
                break
            for length in LENGTH_SCALES:
                trial = lengths.copy()
                trial[j] = length
                loglik, c = _fit(x, r, scale, trial)
                if loglik > best + 1e-9:
                    best, chol, lengths = loglik, c, trial
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, r))
    kq = _kernel(xq, x, scale, lengths)
    mean = mu0 + kq @ alpha
    v = np.linalg.solve(chol, kq.T)
    var = np.maximum(scale - (v * v).sum(axis=0), 1e-12)
    return mean, np.sqrt(var)


def expected_improvement(
    mean: NDArray[np.float64], std: NDArray[np.float64], best: float
) -> NDArray[np.float64]:
    z = (best - XI - mean) / std
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    ei: NDArray[np.float64] = (best - XI - mean) * cdf + std * pdf
    return ei


class KnobTuner:
    """Ask/tell over the grid; stateless across requests: rebuild it from the trials so far."""

    def __init__(
        self,
        profile: TieringProfile,
        space: KnobSpace = HEMEM_SPACE,
        period_seconds: float | None = None,
        fast_share: float = 1.0,
        budget: int = 30,
        cpu: Budget | None = None,
    ) -> None:
        self.space = space
        self.budget = budget
        self.cpu = cpu or unlimited()
        self._posterior: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None
        self.local_trials = LOCAL_TRIALS
        self.grid = space.grid()
        self.x = space.encode(self.grid)
        period = (
            profile.page_manager.migration_period_seconds
            if period_seconds is None
            else period_seconds
        )
        base = {**DEFAULT_KNOBS, **profile.page_manager.knobs}
        # The model reads only some knobs (not the batch size): settings that differ only in the
        # others share one prediction.
        memo: dict[tuple[float, ...], float] = {}

        def loss(point: dict[str, float]) -> float:
            knobs = {**base, **point}
            key = tuple(knobs[k] for k in MODEL_KNOBS if k in knobs)
            if key not in memo:
                memo[key] = predicted_loss(profile, knobs, period, fast_share)
            return memo[key]

        flat = predicted_loss(profile, base, period, fast_share)
        losses = np.empty(len(self.grid))
        for i, p in enumerate(self.grid):
            if self.cpu.spent():
                # Out of CPU: the rest of the grid gets the current setting's prediction (a flat
                # prior there, so measurements alone steer the search).
                self.cpu.note("knob prior: part of the grid left flat at the CPU budget")
                losses[i:] = flat
                break
            losses[i] = loss(p)
        self.prior_loss = losses
        self.prior = np.log(profile.wall_seconds_fast * (1.0 + losses))
        self.default_index = self.index_of(space.default())
        self.measured: dict[int, float] = {}

    def index_of(self, knobs: dict[str, float]) -> int:
        missing = [d.name for d in self.space.dimensions if d.name not in knobs]
        if missing:
            raise InvalidRequest("trials[].knobs", f"missing {', '.join(missing)}")
        key = [nearest_index(d.values, knobs[d.name]) for d in self.space.dimensions]
        idx = 0
        for d, pos in zip(self.space.dimensions, key, strict=True):
            idx = idx * len(d.values) + pos
        return idx

    def tell(self, knobs: dict[str, float], wall_seconds: float) -> None:
        self.measured[self.index_of(knobs)] = math.log(wall_seconds)
        self._posterior = None

    def ask(self) -> dict[str, float] | None:
        if len(self.measured) >= len(self.grid):
            return None
        if self.default_index not in self.measured:
            return dict(self.grid[self.default_index])
        if len(self.measured) <= MODEL_SEEDS:
            for i in self.model_seeds():
                if i not in self.measured:
                    return dict(self.grid[i])
        if len(self.measured) <= MODEL_SEEDS + SPREAD_TRIALS:
            # A few settings far from everything tried: the model can be wrong about the basin.
            tried = self.x[list(self.measured)]
            gap = np.sqrt(((self.x[:, None, :] - tried[None, :, :]) ** 2).sum(axis=2)).min(axis=1)
            return dict(self.grid[int(np.argmax(gap - 1e-6 * self.prior))])
        if self.cpu.spent():
            # No CPU left for the GP: the cheapest sound step is one knob moved from the best.
            self.cpu.note("next trial: a neighbour of the best, without the GP")
            near = [i for i in self.neighbours(self.incumbent()) if i not in self.measured]
            if near:
                return dict(self.grid[min(near, key=lambda i: self.prior[i])])
            free = [i for i in range(len(self.grid)) if i not in self.measured]
            return dict(self.grid[min(free, key=lambda i: self.prior[i])])
        mean, std = self.posterior()
        best = min(self.measured.values())
        ei = expected_improvement(mean, std, best)
        ei[list(self.measured)] = -np.inf
        if len(self.measured) >= self.budget - self.local_trials:
            # The last trials refine around the best setting: one knob moved at a time.
            near = [i for i in self.neighbours(self.incumbent()) if i not in self.measured]
            if near:
                return dict(self.grid[max(near, key=lambda i: (ei[i], -mean[i]))])
        return dict(self.grid[int(np.argmax(ei))])

    def model_seeds(self) -> list[int]:
        """The model's best settings, one per setting it can tell apart; knobs it does not read
        stay at their current values."""
        default = self.grid[self.default_index]
        seen: set[tuple[float, ...]] = set()
        out: list[int] = []
        for i in np.argsort(self.prior, kind="stable"):
            point = self.grid[int(i)]
            if any(point[k] != default[k] for k in point if k not in MODEL_KNOBS):
                continue
            key = tuple(point[k] for k in point if k in MODEL_KNOBS)
            if key not in seen:
                seen.add(key)
                out.append(int(i))
            if len(out) == MODEL_SEEDS:
                break
        return out

    def incumbent(self) -> int:
        return min(self.measured, key=lambda j: self.measured[j])

    def strides(self) -> list[int]:
        out: list[int] = []
        stride = 1
        for d in reversed(self.space.dimensions):
            out.append(stride)
            stride *= len(d.values)
        return out[::-1]

    def neighbours(self, center: int) -> list[int]:
        """Every grid point that differs from `center` in one knob only."""
        out = []
        for d, st in zip(self.space.dimensions, self.strides(), strict=True):
            pos = (center // st) % len(d.values)
            out += [center + (v - pos) * st for v in range(len(d.values)) if v != pos]
        return out

    def posterior(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The GP models the measurements minus w x the prior, w the weight (0, 1/2 or 1) under
        which the residuals are smallest: a model that ranks badly for this workload stops
        steering the search once the trials contradict it."""
        if self._posterior is not None:
            return self._posterior
        idx = np.array(sorted(self.measured, key=lambda j: self.measured[j])[:MAX_GP_TRIALS])
        if len(self.measured) > MAX_GP_TRIALS:
            self.cpu.note(f"GP: the {MAX_GP_TRIALS} fastest trials only")
        y = np.array([self.measured[i] for i in idx])
        weight = min(PRIOR_WEIGHTS, key=lambda w: float(np.var(y - w * self.prior[idx])))
        mean, std = gp_posterior(self.x[idx], y - weight * self.prior[idx], self.x, self.cpu)
        self._posterior = (weight * self.prior + mean, std)
        return self._posterior

    def best(self) -> tuple[dict[str, float], float] | None:
        if not self.measured:
            return None
        i = min(self.measured, key=lambda j: self.measured[j])
        return dict(self.grid[i]), math.exp(self.measured[i])

    def importance(self) -> dict[str, float]:
        """How far the posterior (or, before any trial, the prior) moves per knob around the best."""
        if self.measured and self.cpu.spent() and self._posterior is None:
            self.cpu.note("importance: from the prior, not the GP")
            mean = self.prior
            center = min(self.measured, key=lambda j: self.measured[j])
        elif self.measured:
            mean, _ = self.posterior()
            center = min(self.measured, key=lambda j: self.measured[j])
        else:
            mean = self.prior
            center = int(np.argmin(self.prior))
        spans = {}
        for d, st in zip(self.space.dimensions, self.strides(), strict=True):
            pos = (center // st) % len(d.values)
            line = [center + (v - pos) * st for v in range(len(d.values))]
            spans[d.name] = float(np.ptp(mean[line]))
        total = sum(spans.values())
        return {k: (v / total if total > 0 else 0.0) for k, v in spans.items()}


def advise_knobs(
    profile: TieringProfile,
    trials: Sequence[Trial] = (),
    space: KnobSpace = HEMEM_SPACE,
    period_seconds: float | None = None,
    fast_share: float = 1.0,
    budget: int = 30,
    cpu: Budget | None = None,
    in_use_wall_seconds: float | None = None,
) -> KnobAdvice:
    """The best measured setting so far (the default until it is beaten) and the next trial.

    `in_use_wall_seconds` is the configuration in use as measured (its knobs at its own period
    and fast size): a setting is advised only if it was measured faster than that too."""
    if not 1 <= budget <= 1000:
        raise InvalidRequest("budget", f"{budget} is outside 1..1000")
    tuner = KnobTuner(profile, space, period_seconds, fast_share, budget, cpu)
    for t in trials:
        tuner.tell(t.knobs, t.wall_seconds)
    best = tuner.best()
    default = tuner.measured.get(tuner.default_index)
    nxt = tuner.ask() if len(tuner.measured) < budget else None
    chosen = best[0] if best else dict(tuner.grid[tuner.default_index])
    guard = [math.exp(default)] if default is not None else []
    if in_use_wall_seconds is not None:
        guard.append(in_use_wall_seconds)
    reference = min(guard) if guard else None
    if best is not None and reference is not None and best[1] >= reference:
        chosen = dict(tuner.grid[tuner.default_index])  # nothing beat what runs now: keep it
    return KnobAdvice(
        best=chosen,
        in_use_wall_seconds=in_use_wall_seconds,
        best_wall_seconds=best[1] if best else None,
        default_wall_seconds=math.exp(default) if default is not None else None,
        speedup_over_default=(reference / min(best[1], reference))
        if best and reference is not None
        else None,
        is_default=tuner.index_of(chosen) == tuner.default_index,
        next_trial=nxt,
        trials_done=len(tuner.measured),
        importance=tuner.importance(),
        predicted_best_loss=float(tuner.prior_loss.min()),
    )
