"""The migration period: a few trials either way from the period in use, guarded by it.

Cori's dominant reuse is a weighted mean of the reuse histogram's bins, sorted from the shortest
reuse up: bin i of N weighs (N - i) x its count, so frequent and short reuses dominate (Cori,
Eq. 1), and its multiples are Cori's candidates (Eq. 2). A period shorter than the reuse "breaks"
it (a page still in use looks idle at a pass and may be demoted); a longer one chases a moving hot
set late. Which side wins depends on the workload and the manager, so the ladder reaches both
ways: powers of four times the dominant reuse, from a sixteenth of it to half the run, with the
period in use on it (a rung of ×4 lets three trials reach ×16 either way).

The first trial is the period in use (the guard: the advice is the fastest *measured* period, so
never slower than what runs now). The second is the rung the manager model prefers, at most two
rungs away; the third goes one rung further the same way if the second was faster, else one rung
the other way from the period in use.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field, computed_field

from model.errors import InvalidRequest
from model.tiering.manager_model import MIN_PERIOD_SECONDS, predicted_loss
from model.tiering.profile import TieringProfile

# The ladder: the dominant reuse times RATIO^j for j in this range (both ways), clipped to the run.
LADDER_EXPONENTS = range(-2, 7)
MAX_JUMP = 2  # rungs the model may move the second trial away from the period in use
RATIO = 4.0  # between rungs


class PeriodTrial(BaseModel):
    model_config = ConfigDict(frozen=True)
    period_seconds: float
    reuse_multiple: float = Field(description="the period over the dominant reuse")
    predicted_loss: float
    in_use: bool = False


class PeriodMeasurement(BaseModel):
    """A run at one migration period (the rest of the configuration as in use)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    period_seconds: float = Field(ge=1e-4, le=86_400.0)
    wall_seconds: float = Field(ge=1e-6, le=1e9)


class PeriodPlan(BaseModel):
    model_config = ConfigDict(frozen=True)
    dominant_reuse_misses: float
    dominant_reuse_seconds: float
    ladder: list[PeriodTrial]  # every candidate, shortest first
    current: int  # index in `ladder` of the period in use: the first trial and the guard
    start: int  # index of the model's preferred rung: the second trial
    max_trials: int
    measured: list[PeriodMeasurement] = Field(default_factory=list)
    best_period_seconds: float = Field(description="the fastest measured, else the one in use")
    next_period_seconds: float | None = Field(description="the next trial to run, if any")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def trials(self) -> list[PeriodTrial]:
        """The nominal order: the period in use, the model's rung, then the rung beyond it
        (`run_trials` takes the other side instead when the model's rung was slower)."""
        step = 1 if self.start >= self.current else -1
        order = [self.current, self.start, self.start + step]
        seen: list[int] = []
        for i in order:
            if 0 <= i < len(self.ladder) and i not in seen:
                seen.append(i)
        return [self.ladder[i] for i in seen][: self.max_trials]


def _rung(ladder: Sequence[PeriodTrial], period: float) -> int:
    return min(range(len(ladder)), key=lambda i: abs(math.log(ladder[i].period_seconds / period)))


def next_trial(plan: PeriodPlan, times: dict[int, float]) -> int | None:
    """The ladder index to measure next, given the times measured so far (by index)."""
    if len(times) >= plan.max_trials:
        return None
    if plan.current not in times:
        return plan.current
    if plan.start not in times and plan.start != plan.current:
        return plan.start
    step = 1 if plan.start >= plan.current else -1
    if times.get(plan.start, math.inf) < times[plan.current]:
        candidates = [plan.start + step, plan.current - step]  # further, else the other side
    else:
        candidates = [plan.current - step, plan.start + step]
    for i in candidates:
        if 0 <= i < len(plan.ladder) and i not in times:
            return i
    return None


def dominant_reuse(profile: TieringProfile) -> float:
    """Cori's Eq. 1 over the reuse histogram of all structures, in misses."""
    merged: dict[float, int] = defaultdict(int)
    for s in profile.structures:
        for b in s.reuse:
            merged[b.reuse_misses] += b.count
    bins = sorted((r, c) for r, c in merged.items() if c > 0)
    n = len(bins)
    if n == 0:
        raise InvalidRequest("structures[].reuse", "no reuse recorded: the period cannot be set")
    if n == 1:
        return bins[0][0]
    num = sum((n - i) * c * r for i, (r, c) in enumerate(bins, start=1))
    den = sum((n - i) * c for i, (_, c) in enumerate(bins, start=1))
    return num / den


def period_plan(
    profile: TieringProfile,
    knobs: dict[str, float] | None = None,
    fast_share: float = 1.0,
    max_trials: int = 3,
    offset: float = 0.0,
    current_period_seconds: float | None = None,
    measured: Sequence[PeriodMeasurement] = (),
) -> PeriodPlan:
    """`offset` is the sizing's correction (measured minus predicted loss), added to each rung's
    predicted loss so that the two read alike; it does not change the order. `measured` are the
    period trials run so far: the plan names the next one and the best so far."""
    if not 1 <= max_trials <= 16:
        raise InvalidRequest("max_trials", f"{max_trials} is outside 1..16")
    knobs = dict(profile.page_manager.knobs) if knobs is None else knobs
    current = (
        profile.page_manager.migration_period_seconds
        if current_period_seconds is None
        else current_period_seconds
    )
    dr = dominant_reuse(profile)
    # The schema keeps both above zero; the floor keeps a quotient that underflows finite too.
    dr_seconds = max(dr / max(profile.misses_per_second, 1e-300), 1e-12)
    longest = max(profile.wall_seconds_fast / 2.0, MIN_PERIOD_SECONDS)
    periods = [dr_seconds * RATIO**j for j in LADDER_EXPONENTS]
    periods = [p for p in periods if MIN_PERIOD_SECONDS <= p <= longest]
    # The ladder reaches half the run: where its last power of four falls short of that by more
    # than half a rung (×2), half the run is the top rung.
    if not periods or longest / periods[-1] > math.sqrt(RATIO):
        periods.append(longest)
    # The period in use takes the place of the rung nearest it: a rung within half a rung (×2)
    # of it would spend a trial on almost the same period.
    periods = [p for p in periods if abs(math.log(p / current)) > math.log(RATIO) / 2]
    periods = sorted([*periods, current])

    def rung(period: float) -> PeriodTrial:
        return PeriodTrial(
            period_seconds=period,
            reuse_multiple=period / dr_seconds,
            predicted_loss=predicted_loss(profile, knobs, period, fast_share) + offset,
            in_use=period == current,
        )

    ladder = [rung(p) for p in periods]
    at = periods.index(current)
    near = [i for i in range(len(ladder)) if i != at and abs(i - at) <= MAX_JUMP]
    # The model's preferred rung; ties (a flat prediction) go to the rung nearer the dominant
    # reuse, Cori's anchor.
    start = (
        min(
            near,
            key=lambda i: (
                round(ladder[i].predicted_loss, 4),
                abs(math.log(ladder[i].period_seconds / dr_seconds)),
            ),
        )
        if near
        else at
    )
    times: dict[int, float] = {}
    for m in measured:
        i = _rung(ladder, m.period_seconds)
        times[i] = min(times.get(i, math.inf), m.wall_seconds)
    draft = PeriodPlan(
        dominant_reuse_misses=dr,
        dominant_reuse_seconds=dr_seconds,
        ladder=ladder,
        current=at,
        start=start,
        max_trials=max_trials,
        measured=list(measured),
        best_period_seconds=current,
        next_period_seconds=None,
    )
    best = min(times, key=lambda i: (times[i], i != at)) if times else at
    nxt = next_trial(draft, times)
    return draft.model_copy(
        update={
            "best_period_seconds": ladder[best].period_seconds,
            "next_period_seconds": None if nxt is None else ladder[nxt].period_seconds,
        }
    )


def run_trials(
    plan: PeriodPlan, measure: Callable[[float], float]
) -> tuple[PeriodTrial, float, int]:
    """Run the plan: `measure` returns wall seconds at a period. Returns the fastest measured
    trial (the period in use unless another was faster), its time and the trials spent."""
    times: dict[int, float] = {}
    while (i := next_trial(plan, times)) is not None:
        times[i] = measure(plan.ladder[i].period_seconds)
    best = min(times, key=lambda i: (times[i], i != plan.current))
    return plan.ladder[best], times[best], len(times)
