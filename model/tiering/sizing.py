"""The smallest fast tier within a loss target τ under the page manager (Tuna's question).

The loss at each fast-tier share comes from the manager model (model/tiering/manager_model.py):
misses the manager cannot keep fast, priced at the measured slow-tier cost of a miss, plus the
migrations, samples and passes it spends. When the profile carries the manager's counters from a
run at some fast-tier size, the model is corrected there, either way: the measured loss minus the
predicted one is added everywhere (a model that over-predicts is brought down as much as one that
under-predicts is brought up; no loss goes below zero). Runs at other sizes (`measured`: size
trials) correct the curve at their sizes too, the correction interpolated between them.

The advice is the smallest share, from all-fast down, whose corrected loss plus its uncertainty
stays within τ, or a smaller size measured within τ less the noise in every run made of it: the
uncertainty is the run-to-run noise at a measured size and grows with the distance below the
nearest measured size (both measured on the study's shapes). Where one size was run more than
once, the noise is at least the spread those runs showed: the workload's own, which can be far
wider than the calibrated one. Because the model is right on
average but not case by case, the advice also names the next size trial, read from what the
runs measured: below the smallest measured size, the model's rise scaled as the measured sizes
rose (a model that overstates the rise does not stop the search), between the advice and a size
measured over τ less the noise, the loss through both (bisecting where nothing between fits);
and at the end the advised size once more, so that it rests on two runs. The trials are bounded
(`max_trials`); the advice is stateless, a caller runs the named size and asks again with it
added. When the whole footprint fast is already over τ less the noise, no size reliably meets it
under the manager as configured: the advice says so and probes once below.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from model.errors import InvalidRequest
from model.tiering.manager_model import HINT_FAULT_MANAGERS, hint_fault_loss, predicted_loss
from model.tiering.profile import ManagerCounters, TieringProfile

STEP = 0.01
# The sizing's uncertainty per manager model, (noise, slope), as shares of the workload's slowdown
# all-slow (T_slow / T_fast - 1): noise is how much more loss another run of a workload shows at a
# size than one measured run did; slope is how fast the corrected model's under-prediction beyond
# that grows per share of the footprint below the nearest measured size. Both are the 95th
# percentile on the study's shapes, never the held-out ones (`python -m bench.tiering_calibrate`:
# both judges, two hosts, two seeds).
UNCERTAINTY: dict[str, tuple[float, float]] = {
    "sampling": (0.0231, 0.0),
    "hint-fault": (0.0026, 1.98),
}
# Size trials the advice names at most (each one run of the workload at a proposed size).
MAX_SIZE_TRIALS = 4


class SizeMeasurement(BaseModel):
    """A run at one fast-tier size (the rest of the configuration as in use)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    fast_bytes: int = Field(ge=1, le=1 << 50)
    wall_seconds: float = Field(ge=1e-6, le=1e9)


class SizingPoint(BaseModel):
    model_config = ConfigDict(frozen=True)
    fast_share: float
    fast_bytes: int
    predicted_loss: float


class SizingAdvice(BaseModel):
    model_config = ConfigDict(frozen=True)
    loss_target: float
    noise: float = Field(description="the loss a measured run may understate, kept free of τ")
    slope: float = Field(description="more uncertainty per share away from a measured size")
    fast_share: float = Field(description="of the footprint, kept in the fast tier")
    fast_bytes: int
    saved_share: float
    saved_bytes: int
    predicted_loss: float
    verified: bool = Field(description="the advised size was measured within τ less the noise")
    target_reachable: bool = Field(
        description="some size is expected within τ under the manager as configured (false when"
        " the whole footprint fast is already over τ: the manager's own overhead)"
    )
    why_no_saving: str | None = Field(
        default=None,
        description="when nothing is saved: the loss that stops the first size below all-fast",
    )
    next_trial_fast_bytes: int | None = Field(
        description="the size to run next and send back as a size trial, if any"
    )
    trials_done: int
    max_trials: int
    anchor_offset: float = Field(description="measured minus predicted loss at the counters' size")
    curve: list[SizingPoint]


def model_family(profile: TieringProfile) -> str:
    return "hint-fault" if profile.page_manager.kind in HINT_FAULT_MANAGERS else "sampling"


def size_fast_tier(
    profile: TieringProfile,
    loss_target: float = 0.05,
    knobs: dict[str, float] | None = None,
    period_seconds: float | None = None,
    measured: Sequence[SizeMeasurement] = (),
    max_trials: int = MAX_SIZE_TRIALS,
) -> SizingAdvice:
    if not 0.0 < loss_target <= 1.0:
        raise InvalidRequest("loss_target", f"{loss_target} is outside (0, 1]")
    knobs = dict(profile.page_manager.knobs) if knobs is None else knobs
    period = (
        profile.page_manager.migration_period_seconds if period_seconds is None else period_seconds
    )
    slowdown = max(0.0, profile.wall_seconds_slow / profile.wall_seconds_fast - 1.0)
    noise, slope = (x * slowdown for x in UNCERTAINTY[model_family(profile)])
    # (fast bytes, wall seconds) of every run measured at a known fast-tier size.
    runs = [(m.fast_bytes, m.wall_seconds) for m in measured]
    c = profile.counters
    if c is not None and c.fast_bytes > 0:
        runs.append((c.fast_bytes, c.wall_seconds))
    # Measured minus predicted loss at each measured share, on the sizing grid (the slowest run
    # where one share was measured twice: the advice must hold for the unlucky run).
    anchors: dict[float, float] = {}
    losses: dict[float, float] = {}
    runs_at: dict[float, int] = {}
    # Each run's loss by its bytes: runs of one size are runs at the same bytes (a size trial is
    # run at the bytes the advice named); runs at nearby sizes differ by the size too.
    by_bytes: dict[int, list[float]] = {}
    for fast_bytes, wall_seconds in runs:
        share = _on_grid(min(1.0, fast_bytes / profile.footprint_bytes))
        loss = wall_seconds / profile.wall_seconds_fast - 1.0
        diff = loss - predicted_loss(profile, knobs, period, share)
        anchors[share] = max(anchors.get(share, -math.inf), diff)
        losses[share] = max(losses.get(share, -math.inf), loss)
        runs_at[share] = runs_at.get(share, 0) + 1
        by_bytes.setdefault(fast_bytes, []).append(loss)
    # Where a size was run more than once, the runs' spread is this workload's own noise: the
    # advice keeps at least that free of τ.
    noise = max([noise, *(max(v) - min(v) for v in by_bytes.values() if len(v) > 1)])
    at = sorted(anchors)
    offsets = [anchors[x] for x in at]
    # The correction at the size in use (the counters'), for the explanation; 0 without runs.
    offset = anchors[min(at, key=lambda x: abs(x - _share(profile, c)))] if at else 0.0
    shares = np.abs(np.round(np.arange(1.0, -1e-9, -STEP), 4))  # no "-0.0" in the answer

    counters_at = _on_grid(_share(profile, c)) if c is not None and c.fast_bytes > 0 else None
    baseline = anchors.get(counters_at, 0.0) if counters_at is not None else 0.0
    raw = {float(s): float(predicted_loss(profile, knobs, period, float(s))) for s in shares}

    def model_at(share: float) -> float:
        return raw[share] if share in raw else float(predicted_loss(profile, knobs, period, share))

    measured_losses = [losses[x] for x in at]

    def carried(share: float) -> float:
        """The model's loss with the correction of the measured sizes interpolated between them
        and carried as is beyond them. Between two measured sizes it is at least the straight
        line between what both measured: a model whose rise sits mostly near the smaller size
        would read the sizes just above it as nearly as good as the larger one, which no run
        showed."""
        shift = float(np.interp(share, at, offsets)) if at else 0.0
        loss = max(0.0, raw[share] + shift)
        if at and at[0] < share < at[-1]:
            loss = max(loss, float(np.interp(share, at, measured_losses)))
        return loss

    def corrected(share: float) -> float:
        if at and share < at[0] and at[0] != counters_at:
            # Below the smallest size a run measured, a lower loss than predicted there is not
            # carried down past what the counters alone say: the model's error in what the fast
            # tier keeps grows as it shrinks, and only a run there can show it is small. A
            # higher loss is carried down.
            shift = max(float(np.interp(share, at, offsets)), baseline)
            return max(0.0, raw[share] + shift)
        return carried(share)

    def uncertainty(share: float) -> float:
        # The model is read downwards from the nearest measured size above (less fast memory
        # costs more); without one, it is as uncertain as a whole footprint away.
        above = [x for x in at if x >= share - 1e-9]
        return noise + slope * (min(above) - share if above else 1.0)

    curve = [
        SizingPoint(
            fast_share=float(s),
            fast_bytes=_bytes(profile, float(s)),
            predicted_loss=corrected(float(s)),
        )
        for s in shares
    ]
    # From all-fast down, the last share before the loss plus its uncertainty first exceeds τ;
    # at a measured share that is the measured loss plus the noise. A smaller measured share
    # within τ less the noise is advised too (a loss that is not monotone in the size).
    good = [x for x in at if losses[x] + noise <= loss_target]
    chosen = curve[0]
    for point in curve:
        if point.predicted_loss + uncertainty(point.fast_share) > loss_target:
            break
        chosen = point
    if good and min(good) < chosen.fast_share:
        chosen = curve[_index(min(good))]
    # All-fast within τ less the noise (a run may show that much more), or a size measured so.
    reachable = curve[0].predicted_loss + noise <= loss_target or bool(good)
    # The next trial, read from the measured sizes (`_next_trial`). The advice ends on a size
    # measured within τ less the noise in two runs (the worse run counts, and their spread widens
    # the noise): one run may be the lucky one. The last trial is kept for that second run,
    # whatever the model: under the hint-fault model a run-to-run spread of several points at
    # one size was measured on workloads its calibration never saw (LRU's cliff moving between
    # runs), which a search step below cannot show.
    unsettled = chosen.fast_share < 1.0 and runs_at.get(chosen.fast_share, 0) < 2
    kept = 1 if unsettled else 0
    nxt: float | None = None
    if len(measured) < max_trials - kept and reachable:
        nxt = _next_trial(chosen.fast_share, at, losses, model_at, loss_target - noise, slope)
    if nxt is None and len(measured) < max_trials and unsettled and reachable:
        nxt = chosen.fast_share
    below = [x for x in at if x < 1.0 and x != counters_at]
    if not reachable and not below and len(measured) < max_trials:
        # All-fast is over τ as measured: the manager's own overhead there (at a tier exactly
        # full, reclaim keeps demoting warm pages that the next scan brings back). One run
        # below shows whether a smaller tier escapes it: where the model without that measured
        # overhead, plus its uncertainty, stays within τ. If not, the advice stays all-fast and
        # says so.
        probe = 1.0
        for point in curve[1:]:
            x = point.fast_share
            bare = (
                hint_fault_loss(profile, knobs, period, x, with_churn=False)
                if model_family(profile) == "hint-fault"
                else raw[x]
            )
            if bare + noise + slope * (1.0 - x) > loss_target:
                break
            probe = x
        if probe < 1.0:
            nxt = probe
    return SizingAdvice(
        loss_target=loss_target,
        noise=noise,
        slope=slope,
        fast_share=chosen.fast_share,
        fast_bytes=chosen.fast_bytes,
        saved_share=1.0 - chosen.fast_bytes / profile.footprint_bytes,
        saved_bytes=profile.footprint_bytes - chosen.fast_bytes,
        predicted_loss=chosen.predicted_loss,
        verified=chosen.fast_share in good,
        target_reachable=reachable,
        why_no_saving=_why_no_saving(curve, uncertainty, loss_target, reachable, noise)
        if chosen.fast_share >= 1.0
        else None,
        next_trial_fast_bytes=None if nxt is None else max(1, _bytes(profile, nxt)),
        trials_done=len(measured),
        max_trials=max_trials,
        anchor_offset=offset,
        curve=curve,
    )


def _next_trial(
    advised: float,
    at: Sequence[float],
    losses: dict[float, float],
    model_at: Callable[[float], float],
    limit: float,
    slope: float,
) -> float | None:
    """The size to run next, or None: the smallest share below the advice, contiguous from it,
    whose loss read through the measured sizes (`_through_measured`) stays within `limit` (τ less
    the noise).

    Where a size below the advice was measured over the limit, the search stays above it, and
    where nothing between is a step below the advice it bisects the two. Else the search reaches
    at most twice as far below the smallest measured size as the last step between measured
    sizes (a rise measured over a short step says little about a long one). Each run either
    verifies a larger saving or brackets the boundary; where nothing below is left, the advice
    itself if it was not measured.
    """
    through = _through_measured(at, losses, model_at, trust_measured_rise=slope <= 0.0)
    failed = [x for x in at if x < advised - 1e-9 and losses[x] > limit]
    floor = max(failed, default=-STEP)
    if not failed and at:
        lowest = min(at)
        steps = [x - lowest for x in at if x > lowest]
        if steps:
            floor = max(floor, lowest - 2.0 * min(steps) - STEP)
    target = advised
    for i in range(_index(advised) + 1, _index(0.0) + 1):
        x = _on_grid(1.0 - i * STEP)
        if x <= floor + 1e-9 or through(x) > limit:
            break
        target = x
    if failed:
        # Halfway between the advice and the size measured over the limit where nothing between
        # is a step below the advice; and, where the measured rise is extrapolated (long steps),
        # never nearer the failed size than that: one failed long step says the model's shape
        # was wrong there, and halving the bracket still gains.
        middle = _on_grid((advised + max(failed)) / 2.0)
        room = advised - middle >= STEP - 1e-9 and middle - max(failed) >= STEP - 1e-9
        if room and (target > advised - STEP + 1e-9 or (slope <= 0.0 and target < middle)):
            target = middle
    if target < advised - 1e-9 and target not in losses:
        return target
    return advised if advised not in losses else None


def _through_measured(
    at: Sequence[float],
    losses: dict[float, float],
    model_at: Callable[[float], float],
    trust_measured_rise: bool,
) -> Callable[[float], float]:
    """The loss at a share as the measured sizes say it, the model giving its shape.

    At a measured size, the worst run there. Between two measured sizes, the model corrected by
    both measurements (the correction interpolated), bounded by what both measured. Above the
    largest, the model shifted through it. Below the smallest, the model's rise from there scaled
    as the measurements rose between the two smallest measured sizes (measured against
    predicted), so that a model that overstates how fast the loss grows is read as the runs
    show; for a model whose calibrated error grows away from a measured size (`trust_measured_rise`
    false: the hint-fault model, LRU's cliffs) the rise is never taken flatter than the model's.
    """
    ordered = sorted(at)

    def shifted(share: float, anchor: float) -> float:
        return max(0.0, losses[anchor] + model_at(share) - model_at(anchor))

    def through(share: float) -> float:
        if not ordered:
            return max(0.0, model_at(share))
        if share in losses:
            return losses[share]
        lowest, highest = ordered[0], ordered[-1]
        if share > highest:
            return shifted(share, highest)
        if share < lowest:
            if len(ordered) == 1:
                return shifted(share, lowest)
            upper = ordered[1]
            rise = model_at(lowest) - model_at(upper)
            measured_rise = losses[lowest] - losses[upper]
            scale = measured_rise / rise if rise > 1e-12 else 1.0
            scaled = losses[lowest] + max(0.0, scale) * (model_at(share) - model_at(lowest))
            if not trust_measured_rise:
                return max(shifted(share, lowest), scaled)
            return max(losses[lowest], scaled)
        upper = min(x for x in ordered if x > share)
        lower = max(x for x in ordered if x < share)
        w = (share - lower) / (upper - lower)
        offset = (1.0 - w) * (losses[lower] - model_at(lower)) + w * (
            losses[upper] - model_at(upper)
        )
        return min(max(losses[upper], losses[lower]), max(0.0, model_at(share) + offset))

    return through


def _why_no_saving(
    curve: Sequence[SizingPoint],
    uncertainty: Callable[[float], float],
    loss_target: float,
    reachable: bool,
    noise: float,
) -> str:
    """The numbers that stop the advice at all-fast, so that "nothing saved" is never bare."""
    if not reachable:
        return (
            f"with the whole footprint fast the page manager's own overhead is"
            f" {curve[0].predicted_loss:.1%}, plus {noise:.1%} of run-to-run noise, over the"
            f" target of {loss_target:.1%}"
        )
    step = curve[1] if len(curve) > 1 else curve[0]
    return (
        f"one step below all-fast ({step.fast_share:.0%} of the footprint fast) the page"
        f" manager's predicted loss is {step.predicted_loss:.1%}, plus"
        f" {uncertainty(step.fast_share):.1%} of uncertainty, over the target of"
        f" {loss_target:.1%}"
    )


def _index(share: float) -> int:
    """The sizing curve's index of a share on the grid (the curve runs from 1.0 down)."""
    return round((1.0 - share) / STEP)


def _on_grid(share: float) -> float:
    """The sizing grid's share nearest `share` (whole steps of the footprint)."""
    return float(abs(round(round(share / STEP) * STEP, 4)))


def _share(profile: TieringProfile, counters: ManagerCounters | None) -> float:
    if counters is None:
        return 1.0
    return min(1.0, counters.fast_bytes / profile.footprint_bytes)


def _bytes(profile: TieringProfile, share: float) -> int:
    # Whole pages: the manager moves pages, a limit between two pages helps no one.
    pages = int(np.floor(share * profile.footprint_bytes / profile.page_bytes + 1e-9))
    return pages * profile.page_bytes
