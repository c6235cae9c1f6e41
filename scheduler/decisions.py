"""What configuration a pod should get: TMC's recommendation for its workload and objective,
against the cluster's live utilization, or the documented fallback.

The recommendation is computed **in-process** through the service's one typed entry point for
the scheduler (`api.decisions.DecisionService`), not over HTTP: the API service being down does
not stop placement, there is no token to manage and no extra hop, while every decision is still
written to the same decision log (`/v1/recommendations/{id}`) that the pod's annotation points
to.

Utilization is the extender's own live cache (what the next bind will change), passed
explicitly: fresher than the periodic Redis snapshot. Recommendations are cached per (workload,
objective) for `ttl` seconds and refreshed in the background after that, and the feeder asks for
them as soon as it sees a pending pod, so the verbs read the cache and never wait on the
database in the steady state; only the first pod of a workload waits for one transaction (within
`budget_seconds`).

**Stale is better than the fallback.** When a refresh fails (PostgreSQL down), the cached
outcome for (workload, objective) stays in use, however old, until a refresh succeeds: the
workload's last recommendation is a better placement than all-DRAM. A workload never decided
before cannot be decided while the database is down: its pods are answered an error and retried.

**Fallback** (never a scheduling failure): a pod without a workload annotation, or whose workload
has no usable profile, or for which no configuration is feasible, gets all of its memory request
in DRAM and every way of the longest free run of LLC ways on its node (at least one), marked
`"fallback": "<reason>"` in its placement annotation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from api.decisions import DecisionRequest, DecisionService, NoDecision
from model import DEFAULT_THRESHOLD, TmcError, Utilization, parse_objective
from model.node_contract import StructurePlan
from model.packing import Ask
from scheduler.pods import PodAsk

log = logging.getLogger("tmc.scheduler.decisions")


@dataclass(frozen=True)
class Decision:
    workload: str | None
    objective: str
    vcpus: int
    dram_bytes: int
    slow_bytes: int
    slow_ratio: float
    llc_ways: int | None  # None: the fallback's every way of the longest free run
    recommendation_id: str | None
    fallback: str | None  # why the fallback was used; None for a recommendation
    computed_at: float
    plan: tuple[StructurePlan, ...] = ()  # per structure; empty for a fallback

    def ask(self) -> Ask:
        return Ask(self.vcpus, self.dram_bytes, self.slow_bytes, self.llc_ways or 1)


def fallback(pod: PodAsk, reason: str) -> Decision:
    return Decision(
        workload=pod.workload,
        objective=pod.objective,
        vcpus=pod.cpus,
        dram_bytes=pod.memory_bytes,
        slow_bytes=0,
        slow_ratio=0.0,
        llc_ways=None,
        recommendation_id=None,
        fallback=reason,
        computed_at=time.monotonic(),
    )


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


class DecisionPending(Exception):
    """The recommendation is not ready within the verb's budget: answer an error, retry later."""


# Why a workload cannot be recommended: a fallback reason (cached like a recommendation).
Outcome = Recommended | str


class Recommender:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        utilization: Callable[[], Utilization],
        *,
        ttl_seconds: float = 10.0,
        threshold: float = DEFAULT_THRESHOLD,
        budget_seconds: float = 2.0,
    ) -> None:
        self._sessions = sessions
        self._utilization = utilization
        self._ttl = ttl_seconds
        self._threshold = threshold
        self._service = DecisionService(sessions)
        self._cache: dict[tuple[str, str], Outcome] = {}
        self._at: dict[tuple[str, str], float] = {}
        self._refreshing: dict[tuple[str, str], threading.Event] = {}
        self._budget = budget_seconds
        self._lock = threading.Lock()
        self.computed = 0  # recommendations computed (for tests and metrics)

    def decide(self, pod: PodAsk) -> Decision:
        if pod.workload is None:
            return fallback(pod, "the pod names no workload (tmc.dev/workload annotation)")
        key = (pod.workload, pod.objective)
        with self._lock:
            found = self._cache.get(key)
            age = time.monotonic() - self._at.get(key, 0.0)
        if found is None:
            # The first pod of a workload: computed in the background, waited for within a
            # budget below kube-scheduler's httpTimeout. A database that hangs cannot hold the
            # verb past it: the caller answers an error and the scheduler retries the pod.
            done = self._refresh_later(key)
            if not done.wait(self._budget):
                raise DecisionPending(
                    f"the recommendation for workload {pod.workload!r} is still being computed"
                )
            with self._lock:
                found = self._cache.get(key)
            if found is None:
                raise DecisionPending(f"no recommendation for workload {pod.workload!r} yet")
        elif age > self._ttl:
            self._refresh_later(key)
        if isinstance(found, str):
            return fallback(pod, found)
        return Decision(
            workload=pod.workload,
            objective=pod.objective,
            # CPUs are what the pod requests (its cgroup enforces that); memory, its split and
            # the ways are the recommendation's, from the workload's profiled footprint.
            vcpus=pod.cpus,
            dram_bytes=found.dram_bytes,
            slow_bytes=found.slow_bytes,
            slow_ratio=found.slow_ratio,
            llc_ways=found.llc_ways,
            recommendation_id=found.recommendation_id,
            fallback=None,
            computed_at=found.computed_at,
            plan=found.plan,
        )

    def remember(self, workload: str, objective: str, outcome: Outcome) -> None:
        """Put an outcome in the cache (benchmarks; an operator's pinned configuration)."""
        with self._lock:
            self._cache[(workload, objective)] = outcome
            self._at[(workload, objective)] = time.monotonic()

    def prefetch(self, pod: PodAsk) -> None:
        """Warm the cache for a pod the scheduler will soon ask about (called by the feeder)."""
        if pod.workload is None:
            return
        key = (pod.workload, pod.objective)
        with self._lock:
            fresh = key in self._cache and time.monotonic() - self._at[key] <= self._ttl
        if not fresh:
            self._refresh_later(key)

    def _refresh_later(self, key: tuple[str, str]) -> threading.Event:
        """Compute `key` in the background (once at a time); the event is set when it is done."""
        with self._lock:
            running = self._refreshing.get(key)
            if running is not None:
                return running
            done = self._refreshing[key] = threading.Event()

        def run() -> None:
            try:
                self._compute(key)
            except Exception:
                # Whatever failed, the cached outcome (if any) stays in use: stale is better
                # than the fallback, and the next refresh tries again.
                log.exception("recommendation for %s failed", key[0])
            finally:
                with self._lock:
                    self._refreshing.pop(key, None)
                done.set()

        threading.Thread(target=run, name="tmc-recommend", daemon=True).start()
        return done

    def _compute(self, key: tuple[str, str]) -> Outcome | None:
        outcome = decide_pair(self._service, *key, self._threshold, self._utilization())
        if outcome is None:
            return None  # transient (the database): nothing cached, asked again next time
        with self._lock:
            self._cache[key] = outcome
            self._at[key] = time.monotonic()
            self.computed += 1
        return outcome


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
) -> Outcome | None:
    """The recommendation for a (workload, objective), or why there is none (a fallback
    reason), or None when nothing can be said now (the database is unreachable)."""
    try:
        parsed = parse_objective(objective)
    except TmcError as exc:
        return FallbackReason(f"objective {objective!r} is not valid: {exc}", "InvalidObjective")
    req = DecisionRequest(
        workload=workload, objective=parsed, threshold=threshold, utilization=utilization
    )
    try:
        decided = service.decide(req)
    except NoDecision as exc:
        if exc.transient:
            # Not a verdict on the workload: nothing is cached, the pod is retried.
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
    )
