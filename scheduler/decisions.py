"""What a (workload, objective) pair should get: TMC's recommendation against the cluster's live
utilization, or why there is none (a fallback reason).

The recommendation is computed **in-process** through the service's one typed entry point for
the scheduler (`api.decisions.DecisionService`), not over HTTP: the API service being down does
not stop publishing, there is no token to manage and no extra hop, while every decision is still
written to the same decision log (`/v1/recommendations/{id}`) that the pod's placement points
to. The publisher writes the outcome as the pair's TieredRecommendation; the Go engine places
pods with it (a fallback reason makes it place the pod with all of its memory in DRAM and every
way of the longest free run).

Also here, what the publisher reads of the service: `ServiceDecisions` (a pair decided against
the ledger's utilization, at the size its pods request), `LedgerUtilization`, and `WhatChanged`
(new fits, verification runs and default prices, which make pairs be decided again).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from api.decisions import (
    DecisionRequest,
    DecisionService,
    NewFit,
    NoDecision,
    default_prices,
    fits_since,
    runs_since,
)
from ledger import store as ledger
from model import TmcError, Utilization, parse_objective
from model.node_contract import MAX_ALTERNATIVES, Alternative, Recommendation, StructurePlan
from scheduler.bounds import bounded
from scheduler.status import Decided
from store.db import unit_of_work

Pair = tuple[str, str]  # (workload, objective)

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
    # Algorithm 1's next configurations within T, in its order, at the same size.
    alternatives: tuple[Alternative, ...] = ()


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
    vcpus: int | None = None,
) -> Outcome | None:
    """The recommendation for a (workload, objective), or why there is none (a fallback
    reason), or None when nothing can be said now (the database is unreachable).
    `memory_bytes`: the size of the pods naming it, which it is priced at (None: the profile's
    traced footprint); `vcpus` likewise (None: the profile's)."""
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
        vcpus=vcpus,
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
        # Each candidate's bytes are the priced grid's, split from the same size by the same
        # rule as the pick's (model.resources.split_memory): taken as they are.
        alternatives=tuple(
            Alternative(
                llc_ways=a.llc_ways,
                slow_ratio=a.slow_ratio,
                dram_bytes=a.dram_bytes,
                slow_bytes=a.slow_bytes,
            )
            for a in decided.alternatives[:MAX_ALTERNATIVES]
        ),
    )


class ServiceDecisions:
    """Decides a pair with the service's typed entry point against live utilization."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        utilization: Callable[[], Utilization],
        threshold: float,
        size_of: Callable[[Pair], int | None] | None = None,
        vcpus_of: Callable[[Pair], int | None] | None = None,
    ) -> None:
        """`size_of`: the memory request of the pods naming a pair, the size its recommendation
        is priced at (None, or no callable: the profile's traced footprint); `vcpus_of`: their
        CPU request in whole vCPUs, likewise (None: the profile's vCPUs)."""
        self._service = DecisionService(sessions)
        self._utilization = utilization
        self._threshold = threshold
        self._size_of = size_of
        self._vcpus_of = vcpus_of

    def __call__(self, workload: str, objective: str) -> Decided | None:
        pair = (workload, objective)
        size = self._size_of(pair) if self._size_of is not None else None
        vcpus = self._vcpus_of(pair) if self._vcpus_of is not None else None
        outcome = decide_pair(
            self._service, workload, objective, self._threshold, self._utilization(), size, vcpus
        )
        if outcome is None:
            return None
        if isinstance(outcome, str):
            cause = outcome.cause if isinstance(outcome, FallbackReason) else "NoRecommendation"
            rec = Recommendation(workload=workload, objective=objective, fallback=outcome[:512])
            return Decided(rec, cause)
        return bounded(
            Recommendation(
                workload=workload,
                objective=objective,
                recommendation_id=outcome.recommendation_id,
                dram_bytes=outcome.dram_bytes,
                slow_bytes=outcome.slow_bytes,
                profile_bytes=outcome.profile_bytes,
                llc_ways=outcome.llc_ways,
                slow_ratio=outcome.slow_ratio,
                plan=list(outcome.plan),
                alternatives=list(outcome.alternatives),
            ),
            logged="repeat" if outcome.repeated else "stored",
        )


class LedgerUtilization:
    """The cluster's utilization from the ledger's mirror of the bound pods, read at most every
    `max_age_seconds` (a burst of decisions shares one read)."""

    def __init__(self, sessions: sessionmaker[Session], max_age_seconds: float = 2.0) -> None:
        self._sessions = sessions
        self._max_age = max_age_seconds
        self._lock = threading.Lock()
        self._at = -math.inf
        self._value = Utilization()

    def __call__(self) -> Utilization:
        with self._lock:
            if time.monotonic() - self._at >= self._max_age:
                with unit_of_work(self._sessions) as session:
                    self._value = ledger.utilization(session)
                self._at = time.monotonic()
            return self._value


@dataclass(frozen=True)
class Changed:
    """What changed since the last look: workloads with a new fit or a new verification run
    (their pairs are decided again), and whether the default price profile changed (every
    pair is)."""

    workloads: set[str]
    prices: bool = False


class _Since:
    """Rows made after the newest one seen, by an indexed creation time. A row is stamped before
    its transaction commits, so each look reaches back LOOKBACK past the newest row seen and
    skips the rows it already returned."""

    LOOKBACK = timedelta(seconds=60)

    def __init__(self, rows: Callable[[datetime | None], list[NewFit]]) -> None:
        self._rows = rows
        self._since: datetime | None = None
        self._seen: set[str] = set()

    def __call__(self) -> set[str]:
        since = self._since - self.LOOKBACK if self._since is not None else None
        rows = [(r.fit_id, r.created_at, r.workload) for r in self._rows(since)]
        first = self._since is None
        fresh = {name for row_id, _, name in rows if row_id not in self._seen}
        self._seen = {row_id for row_id, _, _ in rows}
        if rows:
            self._since = max(created for _, created, _ in rows)
        elif first:
            self._since = datetime.now(UTC)
        # The first look learns what exists: those rows are what the published objects hold.
        return set() if first else fresh


class WhatChanged:
    """The changes a published decision depends on, other than utilization: a profile's new fit,
    a workload's new verification run, another default price profile. Three indexed queries a
    look, whatever the number of pairs."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._fits = _Since(lambda after: fits_since(sessions, after))
        self._runs = _Since(lambda after: runs_since(sessions, after))
        self._sessions = sessions
        self._default: str | None = None
        self._looked = False

    def __call__(self) -> Changed:
        workloads = self._fits() | self._runs()
        default = default_prices(self._sessions)
        prices = self._looked and default != self._default
        self._default, self._looked = default, True
        return Changed(workloads, prices)
