"""What a (workload, objective) pair should get: TMC's recommendation against the cluster's live
utilization, or why there is none (a fallback reason).

The recommendation is computed **in-process** through the service's one typed entry point for
the scheduler (`api.decisions.DecisionService`), not over HTTP: the API service being down does
not stop publishing, there is no token to manage and no extra hop, while every decision is still
written to the same decision log (`/v1/recommendations/{id}`) that the pod's placement points
to. The publisher writes the outcome as the pair's TieredRecommendation; the Go engine places
pods with it (a fallback reason makes it place the pod with all of its memory in DRAM and every
way of the longest free run).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from api.decisions import DecisionRequest, DecisionService, NoDecision
from model import TmcError, Utilization, parse_objective
from model.node_contract import StructurePlan

log = logging.getLogger("tmc.scheduler.decisions")


@dataclass(frozen=True)
class Recommended:
    """A recommendation for a (workload, objective), independent of any one pod."""

    vcpus: int
    dram_bytes: int
    slow_bytes: int
    slow_ratio: float
    llc_ways: int
    recommendation_id: str
    computed_at: float
    plan: tuple[StructurePlan, ...] = ()
    repeated: bool = False  # the decision log counted it on an identical one, not a new row
    profile_bytes: int = 0  # the footprint the profile traced (0: not recorded)


# Why a workload cannot be recommended: a fallback reason.
Outcome = Recommended | str


class FallbackReason(str):
    """Why a pair has no recommendation (the text), with its cause as one CamelCase word: the
    reason of the TieredRecommendation's Fallback condition."""

    cause: str

    def __new__(cls, text: str, cause: str) -> FallbackReason:
        made = super().__new__(cls, text)
        made.cause = cause
        return made


def decide_pair(
    service: DecisionService,
    workload: str,
    objective: str,
    threshold: float,
    utilization: Utilization,
    memory_bytes: int | None = None,
) -> Outcome | None:
    """The recommendation for a (workload, objective), or why there is none (a fallback
    reason), or None when nothing can be said now (the database is unreachable).
    `memory_bytes`: the size of the pods naming it, which it is priced at (None: the profile's
    traced footprint)."""
    try:
        parsed = parse_objective(objective)
    except TmcError as exc:
        return FallbackReason(f"objective {objective!r} is not valid: {exc}", "InvalidObjective")
    req = DecisionRequest(
        workload=workload,
        objective=parsed,
        threshold=threshold,
        utilization=utilization,
        memory_bytes=memory_bytes,
    )
    try:
        decided = service.decide(req)
    except NoDecision as exc:
        if exc.transient:
            # Not a verdict on the workload: nothing is published, the pair is tried again.
            log.warning("recommendation for %s: %s", workload, exc.reason)
            return None
        log.info("fallback for workload %s: %s", workload, exc.reason)
        # The model's error class names the cause (NoFeasibleConfiguration, ...): a condition's
        # reason, which must be one CamelCase word.
        cause = type(exc.__cause__).__name__ if isinstance(exc.__cause__, TmcError) else ""
        return FallbackReason(exc.reason, cause or "NoRecommendation")
    c = decided.configuration
    return Recommended(
        vcpus=c.vcpus,
        dram_bytes=c.dram_bytes,
        slow_bytes=c.slow_bytes,
        slow_ratio=c.slow_ratio,
        llc_ways=c.llc_ways,
        recommendation_id=decided.recommendation_id,
        computed_at=time.monotonic(),
        plan=decided.plan,
        repeated=decided.repeated,
        profile_bytes=decided.profile_bytes or 0,
    )
