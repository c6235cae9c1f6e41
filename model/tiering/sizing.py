"""The smallest fast tier within a loss target τ under the page manager (Tuna's question).

The loss at each fast-tier share comes from the manager model (model/tiering/manager_model.py):
misses the manager cannot keep fast, priced at the measured slow-tier cost of a miss, plus the
migrations, samples and passes it spends. When the profile carries the manager's counters from a
run at some fast-tier size, the model is corrected there, either way: the measured loss minus the
predicted one is added everywhere (a model that over-predicts is brought down as much as one that
under-predicts is brought up; no loss goes below zero). Runs at other sizes (`measured`, e.g. one
at the size advised before: a verification run) correct the curve at their sizes too, the
correction interpolated between them. The smallest share whose loss stays within `margin` × τ is
advised.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from model.errors import InvalidRequest
from model.tiering.manager_model import predicted_loss
from model.tiering.profile import ManagerCounters, TieringProfile

# Advise within this share of τ: the model's loss has errors of a few points either way, and
# under-predicting costs the loss target (docs/tiering.md, the sizing study).
MARGIN = 0.8
STEP = 0.01


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
    margin: float
    fast_share: float = Field(description="of the footprint, kept in the fast tier")
    fast_bytes: int
    saved_share: float
    saved_bytes: int
    predicted_loss: float
    anchor_offset: float = Field(description="measured minus predicted loss at the counters' size")
    curve: list[SizingPoint]


def size_fast_tier(
    profile: TieringProfile,
    loss_target: float = 0.05,
    knobs: dict[str, float] | None = None,
    period_seconds: float | None = None,
    margin: float = MARGIN,
    measured: Sequence[SizeMeasurement] = (),
) -> SizingAdvice:
    if not 0.0 < loss_target <= 1.0:
        raise InvalidRequest("loss_target", f"{loss_target} is outside (0, 1]")
    if not 0.0 < margin <= 1.0:
        raise InvalidRequest("margin", f"{margin} is outside (0, 1]")
    knobs = dict(profile.page_manager.knobs) if knobs is None else knobs
    period = (
        profile.page_manager.migration_period_seconds if period_seconds is None else period_seconds
    )
    # (fast bytes, wall seconds) of every run measured at a known fast-tier size.
    runs = [(m.fast_bytes, m.wall_seconds) for m in measured]
    c = profile.counters
    if c is not None and c.fast_bytes > 0:
        runs.append((c.fast_bytes, c.wall_seconds))
    # Measured minus predicted loss at each measured share (the fastest run where one share was
    # measured twice).
    anchors: dict[float, float] = {}
    for fast_bytes, wall_seconds in runs:
        share = min(1.0, fast_bytes / profile.footprint_bytes)
        loss = wall_seconds / profile.wall_seconds_fast - 1.0
        diff = loss - predicted_loss(profile, knobs, period, share)
        anchors[share] = min(anchors.get(share, math.inf), diff)
    at = sorted(anchors)
    offsets = [anchors[x] for x in at]
    # The correction at the size in use (the counters'), for the explanation; 0 without runs.
    offset = anchors[min(at, key=lambda x: abs(x - _share(profile, c)))] if at else 0.0
    shares = np.abs(np.round(np.arange(1.0, -1e-9, -STEP), 4))  # no "-0.0" in the answer

    counters_at = _share(profile, c) if c is not None and c.fast_bytes > 0 else None
    baseline = anchors.get(counters_at, 0.0) if counters_at is not None else 0.0

    def corrected(share: float) -> float:
        shift = float(np.interp(share, at, offsets)) if at else 0.0
        if at and share < at[0] and at[0] != counters_at:
            # Below the smallest size a run measured, a lower loss than predicted there is not
            # carried down past what the counters alone say: the model's error in what the fast
            # tier keeps grows as it shrinks, and only a run there can show it is small. A
            # higher loss is carried down.
            shift = max(shift, baseline)
        return max(0.0, float(predicted_loss(profile, knobs, period, share)) + shift)

    curve = [
        SizingPoint(
            fast_share=float(s),
            fast_bytes=_bytes(profile, float(s)),
            predicted_loss=corrected(float(s)),
        )
        for s in shares
    ]
    chosen = curve[0]
    for point in curve:  # from all-fast down: stop at the first share over the target
        if point.predicted_loss > margin * loss_target:
            break
        chosen = point
    return SizingAdvice(
        loss_target=loss_target,
        margin=margin,
        fast_share=chosen.fast_share,
        fast_bytes=chosen.fast_bytes,
        saved_share=1.0 - chosen.fast_bytes / profile.footprint_bytes,
        saved_bytes=profile.footprint_bytes - chosen.fast_bytes,
        predicted_loss=chosen.predicted_loss,
        anchor_offset=offset,
        curve=curve,
    )


def _share(profile: TieringProfile, counters: ManagerCounters | None) -> float:
    if counters is None:
        return 1.0
    return min(1.0, counters.fast_bytes / profile.footprint_bytes)


def _bytes(profile: TieringProfile, share: float) -> int:
    # Whole pages: the manager moves pages, a limit between two pages helps no one.
    pages = int(np.floor(share * profile.footprint_bytes / profile.page_bytes + 1e-9))
    return pages * profile.page_bytes
