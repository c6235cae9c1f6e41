"""The dynamic-tiering advice: fast-tier size, migration period trial plan and knob settings.

    advise(request) -> TieringAdvice      one pure function behind the CLI and the API

The request carries the tiering profile and, for knob tuning, the trials measured so far; the
advice is stateless (the same request gives the same advice), so a caller runs the next trial it
names and asks again with one more trial.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from model.errors import InvalidRequest
from model.tiering.budget import Budget, BudgetReport
from model.tiering.period import PeriodMeasurement, PeriodPlan, period_plan
from model.tiering.profile import PageManagerKind, TieringProfile
from model.tiering.sizing import (
    MAX_SIZE_TRIALS,
    SizeMeasurement,
    SizingAdvice,
    SizingPoint,
    size_fast_tier,
)
from model.tiering.tune import (
    HEMEM_SPACE,
    KnobAdvice,
    KnobDimension,
    KnobSpace,
    Trial,
    advise_knobs,
    nearest_index,
)

ADVICE_SCHEMA: Literal["tmc.tiering-advice/v1"] = "tmc.tiering-advice/v1"

# Linux NUMA balancing in tiering mode (TPP): the hot threshold and the promotion rate limit.
# The manager model has no view of them, so their search is guided by measurements alone.
TPP_SPACE = KnobSpace(
    dimensions=(
        KnobDimension(name="hot_threshold_ms", values=(250, 500, 1000, 2000, 4000), default=1000),
        KnobDimension(
            name="promote_rate_limit_mbps", values=(64, 256, 1024, 4096, 65536), default=65536
        ),
    )
)
SPACES: dict[str, KnobSpace] = {
    "hemem": HEMEM_SPACE,
    "memtis": HEMEM_SPACE,
    "tmc-sim": HEMEM_SPACE,
    "tpp": TPP_SPACE,
}


class TieringRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    loss_target: float = Field(default=0.05, gt=0.0, le=0.5)
    max_period_trials: int = Field(default=3, ge=1, le=16)
    knob_budget: int = Field(default=30, ge=1, le=1000)
    trials: list[Trial] = Field(default_factory=list, max_length=1000)
    time_budget_seconds: float = Field(
        default=2.0, gt=0.0, le=60.0, description="CPU seconds the advice may take at most"
    )
    # What the operator runs now (by default, what the profile says).
    current_fast_bytes: int | None = Field(
        default=None, ge=0, le=1 << 50, description="the fast-tier size in use"
    )
    current_period_seconds: float | None = Field(
        default=None, ge=1e-4, le=86_400.0, description="the migration period in use"
    )
    manager_kind: PageManagerKind | None = Field(
        default=None, description="the page manager in use, if not the profile's"
    )
    knob_space: KnobSpace | None = Field(
        default=None, description="the knobs to search and their values (default: the manager's)"
    )
    period_trials: list[PeriodMeasurement] = Field(
        default_factory=list, max_length=16, description="runs at other periods, so far"
    )
    max_size_trials: int = Field(
        default=MAX_SIZE_TRIALS, ge=0, le=16, description="size trials the advice may name"
    )
    size_trials: list[SizeMeasurement] = Field(
        default_factory=list,
        max_length=16,
        description="runs at other fast-tier sizes (e.g. at the size advised before)",
    )
    in_use_wall_seconds: float | None = Field(
        default=None,
        ge=1e-6,
        le=1e9,
        description="the configuration in use, measured (else the period trial at its period)",
    )


class StaticPlanComparison(BaseModel):
    """What the static per-structure plan (`tmc recommend`) says of the same program on the same
    facts: the most it keeps in the slow tier within the same loss target, with every LLC way."""

    model_config = ConfigDict(frozen=True)
    slow_ratio: float
    slow_bytes: int
    footprint_bytes: int
    llc_ways: int
    predicted_slowdown: float
    agrees: bool = Field(
        description="the dynamic advice gives up at least as much fast memory as the static plan"
    )
    reason: str


class TieringAdvice(BaseModel):
    model_config = ConfigDict(frozen=True)
    schema_version: Literal["tmc.tiering-advice/v1"] = ADVICE_SCHEMA
    page_manager: str
    sizing: SizingAdvice
    period: PeriodPlan
    knobs: KnobAdvice | None
    budget: BudgetReport
    explanation: list[str]
    static_plan: StaticPlanComparison | None = Field(
        default=None,
        description="the static plan's answer for the same program, when its profile has the"
        " reference runs the static model is fitted on",
    )


def space_for(profile: TieringProfile, given: KnobSpace | None = None) -> KnobSpace | None:
    """The page manager's knob grid (or the operator's), with its current values as the
    defaults (the guard)."""
    space = given or SPACES.get(profile.page_manager.kind)
    if space is None:
        return None
    current = profile.page_manager.knobs
    return KnobSpace(
        dimensions=tuple(
            d
            if d.name not in current
            else d.model_copy(
                update={"default": d.values[nearest_index(d.values, current[d.name])]}
            )
            for d in space.dimensions
        )
    )


def advise(profile: TieringProfile, request: TieringRequest | None = None) -> TieringAdvice:
    request = request or TieringRequest()
    cpu = Budget(request.time_budget_seconds)
    if request.manager_kind is not None:
        profile = profile.model_copy(
            update={
                "page_manager": profile.page_manager.model_copy(
                    update={"kind": request.manager_kind}
                )
            }
        )
    sizing = size_fast_tier(
        profile,
        request.loss_target,
        measured=request.size_trials,
        max_trials=request.max_size_trials,
    )
    # Periods and knobs are tried where the workload runs: the fast size in use, else the one
    # the counters were measured at, else the advised one.
    in_use = request.current_fast_bytes
    if in_use is None and profile.counters is not None and profile.counters.fast_bytes > 0:
        in_use = profile.counters.fast_bytes
    search_bytes = sizing.fast_bytes if in_use is None else min(in_use, profile.footprint_bytes)
    fast_share = search_bytes / profile.footprint_bytes
    plan = period_plan(
        profile,
        fast_share=fast_share,
        max_trials=request.max_period_trials,
        offset=sizing.anchor_offset,
        current_period_seconds=request.current_period_seconds,
        measured=request.period_trials,
    )
    in_use_seconds = request.in_use_wall_seconds
    if in_use_seconds is None:
        at_current = [
            m.wall_seconds
            for m in request.period_trials
            if abs(m.period_seconds / plan.ladder[plan.current].period_seconds - 1.0) < 0.05
        ]
        in_use_seconds = min(at_current) if at_current else None
    space = space_for(profile, request.knob_space)
    knobs: KnobAdvice | None = None
    if space is not None:
        knobs = advise_knobs(
            profile,
            request.trials,
            space,
            plan.best_period_seconds,
            fast_share,
            request.knob_budget,
            cpu,
            in_use_seconds,
        )
    elif request.trials:
        raise InvalidRequest(
            "trials", f"no knob space for page manager {profile.page_manager.kind!r}"
        )
    # Keep the answer small: the sizing curve every 5 points of the footprint.
    sizing = sizing.model_copy(update={"curve": _thin(sizing.curve)})
    return TieringAdvice(
        page_manager=profile.page_manager.kind,
        sizing=sizing,
        period=plan,
        knobs=knobs,
        budget=cpu.report(),
        explanation=explain(profile, sizing, plan, knobs, len(request.size_trials))
        + _budget_lines(cpu),
    )


def _budget_lines(cpu: Budget) -> list[str]:
    if not cpu.cut:
        return []
    return [
        f"The advice stopped at its CPU budget of {cpu.seconds:g} s: " + "; ".join(cpu.cut) + "."
    ]


def _seconds(x: float) -> str:
    if x >= 1.0:
        return f"{x:.3g} s"
    if x >= 1e-3:
        return f"{x * 1e3:.3g} ms"
    return f"{x * 1e6:.3g} µs"


def size_text(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number at least 1."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _thin(curve: list[SizingPoint]) -> list[SizingPoint]:
    return [p for i, p in enumerate(curve) if i % 5 == 0]


def explain(
    profile: TieringProfile,
    sizing: SizingAdvice,
    plan: PeriodPlan,
    knobs: KnobAdvice | None,
    size_trials: int = 0,
) -> list[str]:
    lines = [
        f"Fast tier: {size_text(sizing.fast_bytes)} of {size_text(profile.footprint_bytes)}"
        f" ({sizing.saved_share:.0%} saved); predicted loss {sizing.predicted_loss:.1%} against"
        f" a target of {sizing.loss_target:.1%}, with {sizing.noise:.1%} kept free for the"
        " run-to-run noise and more the further the size is from a measured one"
        + (" (this size was measured)." if sizing.verified else "."),
    ]
    if sizing.anchor_offset != 0:
        lines.append(
            f"The manager's counters at the current size show {abs(sizing.anchor_offset):.1%}"
            f" {'more' if sizing.anchor_offset > 0 else 'less'} loss than the model predicts"
            " there; every prediction carries that correction."
        )
    if size_trials:
        lines.append(
            f"{size_trials} run(s) at other fast-tier sizes correct the curve at their sizes"
            " (the correction interpolated between them)."
        )
    if sizing.next_trial_fast_bytes is not None:
        lines.append(
            f"Next size trial ({sizing.trials_done + 1} of at most {sizing.max_trials}): run at"
            f" {size_text(sizing.next_trial_fast_bytes)} of fast memory and send it back as a size"
            " trial; the advice moves to the smallest size measured within the target."
        )
    if not sizing.target_reachable:
        lines.append(
            "Even the whole footprint in the fast tier is over the target under this page"
            " manager as configured"
            + (f" ({sizing.why_no_saving})" if sizing.why_no_saving else " (its own overhead)")
            + ": no fast-tier size meets it. Keep the"
            " whole footprint fast, run the period and knob trials below at that size, and if"
            " the loss stays over the target turn the page manager off (all memory fast, no"
            " migrations)."
        )
    elif sizing.saved_share == 0:
        lines.append(
            "Nothing can be given up within the target: keep the fast tier as it is"
            + (f" ({sizing.why_no_saving})." if sizing.why_no_saving else ".")
        )
    cur = plan.ladder[plan.current]
    lines.append(
        f"Migration period: the dominant reuse is {_seconds(plan.dominant_reuse_seconds)}; the"
        f" period in use ({_seconds(cur.period_seconds)}) is the first trial and the guard, then"
        f" {', '.join(_seconds(t.period_seconds) for t in plan.trials[1:]) or 'none'}"
        f" (at most {plan.max_trials} trials; the fastest measured is kept)."
    )
    if plan.measured:
        lines.append(
            f"Best period measured so far: {_seconds(plan.best_period_seconds)}"
            + (
                f"; next trial {_seconds(plan.next_period_seconds)}."
                if plan.next_period_seconds is not None
                else "; no trial left."
            )
        )
    if knobs is None:
        lines.append(
            f"No knob grid is known for {profile.page_manager.kind}: knobs left as they are."
        )
    else:
        ranked = sorted(knobs.importance.items(), key=lambda kv: -kv[1])
        lines.append(
            "Knob importance: " + ", ".join(f"{k} {v:.0%}" for k, v in ranked if v > 0.005) + "."
        )
        if knobs.trials_done == 0:
            lines.append("No trials yet: run the current setting first (it is the guard).")
        elif knobs.is_default:
            lines.append(
                f"After {knobs.trials_done} trials the current setting is still the best: keep it."
            )
        else:
            lines.append(
                f"After {knobs.trials_done} trials the best setting is"
                f" {knobs.speedup_over_default or 1.0:.3f}x faster than the current one."
            )
        if knobs.next_trial is not None:
            lines.append(
                "Next trial: " + ", ".join(f"{k}={v:g}" for k, v in knobs.next_trial.items()) + "."
            )
    return lines
