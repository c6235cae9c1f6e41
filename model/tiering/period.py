"""The migration period from the dominant reuse (Cori) and a short, ordered trial plan.

Cori's dominant reuse is a weighted mean of the reuse histogram's bins, sorted from the shortest
reuse up: bin i of N weighs (N - i) x its count, so frequent and short reuses dominate (Cori,
Eq. 1). Candidate periods are its multiples up to half the run (Eq. 2). A period shorter than the
reuse "breaks" it: a page still in use looks idle at a pass and may be demoted. Cori tries the
candidates from the shortest; tmc orders them by the manager model's predicted loss instead and
tries at most `max_trials`, stopping as soon as a trial is slower than the best so far.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, computed_field

from model.errors import InvalidRequest
from model.tiering.manager_model import MIN_PERIOD_SECONDS, predicted_loss
from model.tiering.profile import TieringProfile

MAX_CANDIDATES = 32


class PeriodTrial(BaseModel):
    model_config = ConfigDict(frozen=True)
    period_seconds: float
    reuse_multiple: int
    predicted_loss: float


class PeriodPlan(BaseModel):
    model_config = ConfigDict(frozen=True)
    dominant_reuse_misses: float
    dominant_reuse_seconds: float
    ladder: list[PeriodTrial]  # every candidate, shortest first
    start: int  # index in `ladder` of the model's best candidate: the first trial
    max_trials: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def trials(self) -> list[PeriodTrial]:
        """The nominal order: the model's best, then one rung longer, then one rung shorter
        (`run_trials` follows the rung that improved instead)."""
        order = [self.start, self.start + 1, self.start - 1]
        order += [i for i in range(len(self.ladder)) if i not in order]
        return [self.ladder[i] for i in order if 0 <= i < len(self.ladder)][: self.max_trials]


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
) -> PeriodPlan:
    """`offset` is the sizing's anchor (measured minus predicted loss), added to each rung's
    predicted loss so that the two read alike; it does not change the order."""
    if not 1 <= max_trials <= 16:
        raise InvalidRequest("max_trials", f"{max_trials} is outside 1..16")
    knobs = dict(profile.page_manager.knobs) if knobs is None else knobs
    dr = dominant_reuse(profile)
    # The schema keeps both above zero; the floor keeps a quotient that underflows finite too.
    dr_seconds = max(dr / max(profile.misses_per_second, 1e-300), 1e-12)
    longest = profile.wall_seconds_fast / 2.0
    # Cori's multiples of the dominant reuse, on a ladder that thins out (x1.5 a rung) so that a
    # few trials reach from short to long periods rather than stepping between neighbours.
    rungs = sorted({max(1, round(1.5**j)) for j in range(MAX_CANDIDATES)})
    multiples = [k for k in rungs if MIN_PERIOD_SECONDS <= k * dr_seconds <= longest] or [
        max(1, min(rungs[-1], round(MIN_PERIOD_SECONDS / dr_seconds)))
    ]
    ladder = [
        PeriodTrial(
            period_seconds=k * dr_seconds,
            reuse_multiple=k,
            predicted_loss=predicted_loss(profile, knobs, k * dr_seconds, fast_share) + offset,
        )
        for k in multiples
    ]
    start = min(range(len(ladder)), key=lambda i: (round(ladder[i].predicted_loss, 4), i))
    return PeriodPlan(
        dominant_reuse_misses=dr,
        dominant_reuse_seconds=dr_seconds,
        ladder=ladder,
        start=start,
        max_trials=max_trials,
    )


def run_trials(
    plan: PeriodPlan, measure: Callable[[float], float]
) -> tuple[PeriodTrial, float, int]:
    """A line search on the ladder from the model's best rung: try one rung longer, then keep
    going the way that improved; stop when a step is slower or the trials are spent. `measure`
    returns wall seconds. Returns the best trial, its time and the trials spent."""
    ladder = plan.ladder
    times: dict[int, float] = {plan.start: measure(ladder[plan.start].period_seconds)}
    best = plan.start
    step = 1 if plan.start + 1 < len(ladder) else -1
    turned = False
    while len(times) < plan.max_trials:
        nxt = best + step
        if not 0 <= nxt < len(ladder) or nxt in times:
            if turned:
                break
            step, turned = -step, True
            continue
        times[nxt] = measure(ladder[nxt].period_seconds)
        if times[nxt] < times[best]:
            best = nxt
        elif turned or best != plan.start:
            break
        else:
            step, turned = -step, True
    return ladder[best], times[best], len(times)
