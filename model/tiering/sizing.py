"""The smallest fast tier within a loss target τ under the page manager (Tuna's question).

The loss at each fast-tier share comes from the manager model (model/tiering/manager_model.py):
misses the manager cannot keep fast, priced at the measured slow-tier cost of a miss, plus the
migrations, samples and passes it spends. When the profile carries the manager's counters from a
run at some fast-tier size, the model is corrected there, either way: the measured loss minus the
predicted one is added everywhere (a model that over-predicts is brought down as much as one that
under-predicts is brought up; no loss goes below zero). The smallest share whose loss stays
within `margin` × τ is advised.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from model.errors import InvalidRequest
from model.tiering.manager_model import predicted_loss
from model.tiering.profile import TieringProfile

# Advise within this share of τ: the model's loss has errors of a few points either way, and
# under-predicting costs the loss target (docs/tiering.md, the sizing study).
MARGIN = 0.8
STEP = 0.01


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
) -> SizingAdvice:
    if not 0.0 < loss_target <= 1.0:
        raise InvalidRequest("loss_target", f"{loss_target} is outside (0, 1]")
    if not 0.0 < margin <= 1.0:
        raise InvalidRequest("margin", f"{margin} is outside (0, 1]")
    knobs = dict(profile.page_manager.knobs) if knobs is None else knobs
    period = (
        profile.page_manager.migration_period_seconds if period_seconds is None else period_seconds
    )
    offset = 0.0
    c = profile.counters
    if c is not None and c.fast_bytes > 0:
        measured = c.wall_seconds / profile.wall_seconds_fast - 1.0
        share = min(1.0, c.fast_bytes / profile.footprint_bytes)
        offset = measured - predicted_loss(profile, knobs, period, share)
    shares = np.abs(np.round(np.arange(1.0, -1e-9, -STEP), 4))  # no "-0.0" in the answer
    curve = [
        SizingPoint(
            fast_share=float(s),
            fast_bytes=_bytes(profile, float(s)),
            predicted_loss=max(
                0.0, float(predicted_loss(profile, knobs, period, float(s)) + offset)
            ),
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


def _bytes(profile: TieringProfile, share: float) -> int:
    # Whole pages: the manager moves pages, a limit between two pages helps no one.
    pages = int(np.floor(share * profile.footprint_bytes / profile.page_bytes + 1e-9))
    return pages * profile.page_bytes
