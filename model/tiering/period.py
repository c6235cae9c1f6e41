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

from pydantic import BaseModel, ConfigDict

from model.errors import InvalidRequest
from model.tiering.manager_model import predicted_loss
from model.tiering.profile import TieringProfile

MAX_CANDIDATES = 64


class PeriodTrial(BaseModel):
    model_config = ConfigDict(frozen=True)
    period_seconds: float
    reuse_multiple: int
    predicted_loss: float


class PeriodPlan(BaseModel):
    model_config = ConfigDict(frozen=True)
    dominant_reuse_misses: float
    dominant_reuse_seconds: float
    trials: list[PeriodTrial]  # in the order to try them
    candidates: int


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
) -> PeriodPlan:
    if not 1 <= max_trials <= MAX_CANDIDATES:
        raise InvalidRequest("max_trials", f"{max_trials} is outside 1..{MAX_CANDIDATES}")
    knobs = dict(profile.page_manager.knobs) if knobs is None else knobs
    dr = dominant_reuse(profile)
    dr_seconds = dr / profile.misses_per_second
    longest = profile.wall_seconds_fast / 2.0
    multiples = [k for k in range(1, MAX_CANDIDATES + 1) if k * dr_seconds <= longest] or [1]
    scored = [
        PeriodTrial(
            period_seconds=k * dr_seconds,
            reuse_multiple=k,
            predicted_loss=predicted_loss(profile, knobs, k * dr_seconds, fast_share),
        )
        for k in multiples
    ]
    scored.sort(key=lambda t: (round(t.predicted_loss, 4), t.reuse_multiple))
    return PeriodPlan(
        dominant_reuse_misses=dr,
        dominant_reuse_seconds=dr_seconds,
        trials=scored[:max_trials],
        candidates=len(multiples),
    )


def run_trials(
    plan: PeriodPlan, measure: Callable[[float], float]
) -> tuple[PeriodTrial, float, int]:
    """Try the plan in order (measure returns wall seconds); stop at the first trial slower than
    the best so far. Returns the best trial, its time and the trials spent."""
    best: tuple[PeriodTrial, float] | None = None
    spent = 0
    for trial in plan.trials:
        seconds = measure(trial.period_seconds)
        spent += 1
        if best is not None and seconds > best[1]:
            break
        if best is None or seconds < best[1]:
            best = (trial, seconds)
    assert best is not None
    return best[0], best[1], spent
