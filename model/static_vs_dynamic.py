"""The static plan beside the dynamic-tiering advice, for one program on one host.

Kept apart from both: the static model (`model.predict`) and the tiering advisor
(`model.tiering`) know nothing of each other, and this is the one place that reads both.
"""

from __future__ import annotations

from model.bundle import ProfileBundle
from model.errors import TmcError
from model.fit import fit
from model.grid import PAPER_SLOW_RATIOS
from model.predict import Predictor
from model.tiering.advise import StaticPlanComparison, TieringAdvice, size_text


def compare_with_static_plan(advice: TieringAdvice, predictor: Predictor) -> TieringAdvice:
    """The advice with the static plan's answer beside it. The two answer different questions on
    the same facts: the static plan places each tagged structure once, at allocation, by its
    measured miss rate, and never moves a page; a page manager finds hot pages at run time, pays
    for finding them (sampling or hint faults) and for promotions, and runs a page slow until it
    is promoted. When the static plan keeps more in the slow tier, the answer says so and why,
    rather than leaving "nothing can be saved" unexplained."""
    m = predictor.model
    target = advice.sizing.loss_target
    ways = m.ways_max
    best_ratio, best_slowdown = 0.0, 0.0
    for ratio in PAPER_SLOW_RATIOS:
        _, slowdown = predictor.predict_one(ratio, ways)
        if slowdown <= target + 1e-12 and ratio > best_ratio:
            best_ratio, best_slowdown = ratio, slowdown
    slow_bytes = sum(p.slow_bytes for p in predictor.placement(best_ratio, ways))
    saved = advice.sizing.saved_bytes
    agrees = saved >= slow_bytes
    footprint = size_text(m.footprint_bytes)
    if best_ratio == 0.0:
        reason = (
            f"The static plan keeps nothing in the slow tier within {target:.1%} either: every"
            " slow ratio of its grid is predicted over the target with all LLC ways."
        )
    elif agrees:
        reason = (
            f"The static plan keeps {size_text(slow_bytes)} of {footprint} in the slow tier at"
            f" {best_slowdown:+.1%} predicted; this advice gives up {size_text(saved)}, at least as"
            " much."
        )
    else:
        manager = advice.page_manager
        why = (
            advice.sizing.why_no_saving
            if advice.sizing.saved_share == 0 and advice.sizing.why_no_saving
            else f"the advised size costs {advice.sizing.predicted_loss:.1%} under {manager}"
        )
        reason = (
            f"The static plan keeps {size_text(slow_bytes)} of {footprint} in the slow tier at"
            f" {best_slowdown:+.1%} predicted (slow ratio {best_ratio:g}, {ways} ways), where"
            f" this advice gives up {size_text(saved)}. They answer different questions: the static"
            " plan places each tagged structure once, at allocation, and never moves a page; the"
            f" page manager ({manager}) finds hot pages while the program runs, pays for finding"
            " and promoting them, and runs a page slow until it is promoted. Here " + why + "."
            " With the shim's per-structure plan in force (`tmc recommend`), the page manager"
            " can be left off for this program."
        )
    comparison = StaticPlanComparison(
        slow_ratio=best_ratio,
        slow_bytes=slow_bytes,
        footprint_bytes=m.footprint_bytes,
        llc_ways=ways,
        predicted_slowdown=best_slowdown,
        agrees=agrees,
        reason=reason,
    )
    return advice.model_copy(
        update={"static_plan": comparison, "explanation": [*advice.explanation, reason]}
    )


def with_static_plan(advice: TieringAdvice, bundle: ProfileBundle | None) -> TieringAdvice:
    """The advice, compared with the static plan when the tiering profile came in a bundle whose
    reference runs the static model can be fitted on (otherwise as it is, and it says why)."""
    if bundle is None:
        return advice
    try:
        predictor = Predictor(fit(bundle))
    except TmcError as exc:
        line = f"No static plan to compare with: the bundle's reference runs do not fit ({exc})."
        return advice.model_copy(update={"explanation": [*advice.explanation, line]})
    return compare_with_static_plan(advice, predictor)
