"""The recommendation publisher: tmc's recommendations written where the scheduler plugin reads
them, before the pods that need them are scheduled (the pattern of VPA's recommender, which
writes a recommendation per workload into a custom resource that the admission side reads).

One `TieredRecommendation` object per (workload, objective) that live opted-in pods name: its
spec is `model.node_contract.Recommendation`, computed by the service's one typed entry point for
the scheduler (`api.decisions.DecisionService`) against the cluster's live utilization. The
plugin watches these objects, so placing a pod costs no call to the service or its database,
and pods of a workload whose recommendation is published keep being placed while the service or
PostgreSQL is down (with the last recommendation).

* A pending pod naming a pair with nothing published yet is published at once (the feeder
  hands every pending opted-in pod it watches, tmc's labelled pods, to `prefetch`); the plugin
  makes such a pod wait a few
  seconds for it before it falls back.
* A profile's new fit is published at once: every `fit_poll_seconds` the publisher looks for
  fits newer than the last it saw (one indexed query), and decides again the published pairs
  of their workloads, so the next pod of the workload is placed with it.
* The publisher's work grows with what changed, not with the pairs: a profile's new fit or a
  workload's new verification run decides that workload's pairs again, another default price
  profile every pair (looked for every `fit_poll_seconds`, three indexed queries); every
  `refresh_seconds` the cluster's utilization is read, and every pair is decided again only if
  some resource moved by more than `utilization_tolerance` since (Algorithm 1's packing penalty
  moves with it) or the decisions are `max_age_seconds` old. An object is rewritten only when the
  configuration, plan or alternatives (the other configurations within T, which tmc's DRA claim
  templates offer) changed.
* A pair that cannot be recommended (no usable profile, an invalid objective, nothing feasible)
  is published as a fallback with its reason, so its pods are placed at once, not after a wait.
* A transient failure (the database is down) publishes nothing: the last object stays.
* An object that no live opted-in pod has named for `gc_grace_seconds` is deleted (the feeder
  counts the pairs live pods name), so objects do not outlive their workloads; a pod naming the
  pair again has it published again at once. An object someone else deleted is published again
  at the next look if a live pod names it (the engine makes such a pod wait for it).
* Utilization (Algorithm 1's packing penalty) is read from the ledger's mirror of the bound pods'
  placements, which the feeder keeps: the publisher places nothing and keeps no cache of nodes.
* Objects are bounded per namespace (`max_pairs_per_namespace`): a pair counts against the
  namespaces whose live pods name it (the feeder says which), and a pair with no object yet is
  published only if one of them holds fewer; the others wait, their pending pods told by an Event,
  until a namespace naming them has room. TieredRecommendations are cluster-scoped, so no
  ResourceQuota can count them, and the publisher is their only writer.
* Its own Prometheus series (scheduler/metrics.py) say what it holds, how old the decisions
  behind its objects are, how far the mirror is behind, and what the bound refused.

`python -m scheduler.publisher` runs it with the feeder, which keeps the PostgreSQL ledger a
mirror of the bound pods' placements for the dashboard, the planner and the rebalancer.
"""

from __future__ import annotations

import argparse
import logging
import math
import queue
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import config
from kubernetes.client.exceptions import ApiException
from pydantic import Field

from api.collection import DEFAULT_GEN0_THRESHOLD, Gen0Threshold, tune_collection
from model import Utilization
from model.node_contract import ContractError, Recommendation, SealKeyError
from model.resources import quantity_text
from scheduler.bounds import BOUND_REASON, MAX_EVENTS_PER_REFUSAL
from scheduler.decisions import Changed, LedgerUtilization, Pair, ServiceDecisions, WhatChanged
from scheduler.feeder import Feeder
from scheduler.kube import (
    REQUEST_TIMEOUT,
    KubeCluster,
    KubeEvents,
    KubeNodeReports,
    KubeRecommendations,
    api_client,
)
from scheduler.metrics import OBJECT_STATES, PublishedFigures, PublisherMetrics, serve
from scheduler.node_reports import REPORTS_NAMESPACE, REPORTS_SELECTOR, NodeReportRelay
from scheduler.pods import PodAsk, PodRef
from scheduler.settings import FeederSettings, load_settings
from scheduler.status import (
    Decided,
    configuration_of,
    fallback_reason,
    now_stamp,
    status_of,
    written_at,
)
from store.db import make_engine, make_session_factory

log = logging.getLogger("tmc.scheduler.publisher")


class RecommendationObjects(Protocol):
    """Where published recommendations live (the API server's custom resources)."""

    def list(self) -> list[dict[str, Any]]: ...

    # The object as written; a `Written` also holds the object it replaced, whose generation's
    # plan the status then keeps even if the status write after that spec failed.
    def upsert(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def write_status(self, name: str, status: dict[str, Any]) -> None: ...

    def delete(self, name: str) -> None: ...


class Tenants(Protocol):
    """Who names which pairs: the namespaces of the live opted-in pods (the feeder)."""

    def naming(self) -> dict[Pair, frozenset[str]]: ...

    def namespaces_naming(self, pair: Pair) -> frozenset[str]: ...

    def waiting_pods(self, pair: Pair, namespace: str) -> list[PodRef]: ...


class PodEvents(Protocol):
    """Where a pod is told why it waits (Kubernetes Events)."""

    def warn(self, pod: PodRef, reason: str, message: str) -> None: ...


class RecommendationPublisher:
    def __init__(
        self,
        objects: RecommendationObjects,
        decide: Callable[[str, str], Decided | None],
        *,
        refresh_seconds: float = 60.0,
        changes: Callable[[], Changed] | None = None,
        fit_poll_seconds: float = 2.0,
        named: Callable[[], set[Pair]] | None = None,
        gc_grace_seconds: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        utilization: Callable[[], Utilization] | None = None,
        utilization_tolerance: float = 0.05,
        max_age_seconds: float = 3600.0,
        tenants: Tenants | None = None,
        max_pairs_per_namespace: int | None = None,
        events: PodEvents | None = None,
        metrics: PublisherMetrics | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """`named`: the pairs live opted-in pods name now (None: objects are never deleted).
        An object none of them has named for `gc_grace_seconds` is deleted.

        `tenants` and `max_pairs_per_namespace` (both, or no bound): a pair is charged to the
        namespaces whose live pods name it (while its object lives, to those that named it
        last); a pair with no object yet is published only if one of the namespaces naming it
        holds fewer than the bound. The others wait, their pending pods told why (`events`),
        and are published once their namespace's count drops.

        Every `refresh_seconds` the pairs are decided again only if the cluster's utilization
        (`utilization`) moved by more than `utilization_tolerance` in some resource since they
        were, or `max_age_seconds` passed; `changes` names the rest of what a decision depends
        on (new fits and verification runs: those workloads' pairs; new default prices: all)."""
        self._objects = objects
        self._decide = decide
        self._refresh = refresh_seconds
        self._changes = changes
        self._fit_poll = fit_poll_seconds
        self._utilization = utilization
        self._tolerance = utilization_tolerance
        self._max_age = max_age_seconds
        self._decided_at = -math.inf  # when every pair was last decided
        self._decided_with: Utilization | None = None  # against what utilization
        self._published: dict[Pair, Recommendation] = {}
        self._named = named
        self._grace = gc_grace_seconds
        self._clock = clock
        self._unnamed_since: dict[Pair, float] = {}
        self._queued: set[Pair] = set()
        self._work: queue.Queue[Pair] = queue.Queue()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.metrics = metrics if metrics is not None else PublisherMetrics()
        self._wall = wall_clock
        # When the decision behind each published object was made (clock()), and the reason of
        # each fallback object's Fallback condition.
        self._decision_at: dict[Pair, float] = {}
        self._causes: dict[Pair, str] = {}
        # Objects found at start whose status is stale: they exist, so the bound lets them be.
        self._existing: set[Pair] = set()
        # The bound per namespace: each object's namespaces, each namespace's objects, the pairs
        # refused (with the namespaces that named them) and the pods told of it (uid -> pair).
        self._tenants = tenants
        self._bound = max_pairs_per_namespace if tenants is not None else None
        self._events = events
        self._owners: dict[Pair, frozenset[str]] = {}
        self._owned: dict[str, set[Pair]] = {}
        self._refused: dict[Pair, frozenset[str]] = {}
        self._told: dict[str, Pair] = {}
        self._charged_once = False

    # -- what is wanted ------------------------------------------------------------------------

    def load(self) -> int:
        """Learn what is already published (at start): those pairs are refreshed, not redone.
        An object whose status does not describe its spec's generation (written by an older
        publisher, or the status write failed) is published again at once."""
        loaded = 0
        for obj in self._objects.list():
            try:
                rec = Recommendation.from_object(obj)
            except ContractError as exc:
                log.warning("published recommendation %s unreadable: %s", obj.get("metadata"), exc)
                continue
            if rec.workload is not None and rec.objective is not None:
                pair = (rec.workload, rec.objective)
                generation = (obj.get("metadata") or {}).get("generation")
                observed = (obj.get("status") or {}).get("observedGeneration")
                if generation is not None and observed != generation:
                    with self._lock:
                        self._existing.add(pair)
                    self.request(pair)
                else:
                    with self._lock:
                        self._published[pair] = rec
                        # Its decision is at least as old as the object's last write.
                        age = max(0.0, self._wall() - written_at(obj, self._wall()))
                        self._decision_at[pair] = self._clock() - age
                        if rec.fallback is not None:
                            self._causes[pair] = fallback_reason(obj)
                loaded += 1
        return loaded

    def prefetch(self, pod: PodAsk) -> None:
        """A pending opted-in pod: publish its pair now if nothing is published for it."""
        if pod.workload is None:
            return
        pair = (pod.workload, pod.objective)
        with self._lock:
            if pair in self._published:
                return
        self.request(pair)

    def request(self, pair: Pair) -> None:
        with self._lock:
            if pair in self._queued:
                return
            self._queued.add(pair)
        self._work.put(pair)

    # -- publishing ----------------------------------------------------------------------------

    def publish(self, pair: Pair) -> bool:
        """Decide the pair and write its object if what a pod would get changed. False when
        nothing could be decided now (the database is down), or the pair has no object and its
        namespaces are at their bound (`admit`): the last object stays."""
        charge = self.admit(pair)
        if charge is None:
            return False
        decided = self._decide(*pair)
        if decided is None:
            self.metrics.decisions.labels("unavailable").inc()
            return False
        rec = decided.recommendation
        self.metrics.decisions.labels("fallback" if rec.fallback else "recommended").inc()
        if decided.logged:
            self.metrics.decisions_logged.labels(decided.logged).inc()
        with self._lock:
            before = self._published.get(pair)
            if before is not None:
                self._decision_at[pair] = self._clock()  # the object stands: decided again
        if before is not None and configuration_of(before) == configuration_of(rec):
            return True
        body = rec.to_object()
        written = self._objects.upsert(body)
        # Remembered only once the status says so: a failed status write is retried.
        self._objects.write_status(body["metadata"]["name"], status_of(decided, written))
        self.metrics.writes.labels("written").inc()
        with self._lock:
            self._published[pair] = rec
            self._existing.discard(pair)
            self._decision_at[pair] = self._clock()
            if rec.fallback is not None:
                self._causes[pair] = decided.fallback_cause or "NoRecommendation"
            else:
                self._causes.pop(pair, None)
            if charge:
                self._charge(pair, charge)
        log.info(
            "published %s/%s: %s",
            pair[0],
            pair[1],
            rec.fallback
            or f"{quantity_text(rec.dram_bytes)} DRAM, {quantity_text(rec.slow_bytes)} slow,"
            f" {rec.llc_ways} ways",
        )
        return True

    def collect(self) -> list[Pair]:
        """Delete the objects of pairs that no live pod has named for the grace period; returns
        the pairs deleted. A pair named again keeps its object and its clock restarts."""
        if self._named is None:
            return []
        named = self._named()
        if self._tenants is not None:
            self.recharge(self._tenants.naming())
        now = self._clock()
        with self._lock:
            published = list(self._published)
        expired: list[Pair] = []
        for pair in published:
            if pair in named:
                self._unnamed_since.pop(pair, None)
                continue
            since = self._unnamed_since.setdefault(pair, now)
            if now - since >= self._grace:
                expired.append(pair)
        for pair in expired:
            with self._lock:
                if pair in self._queued:
                    continue  # a pod named it meanwhile: it is being published again
                rec = self._published.pop(pair, None)
            if rec is None:
                continue
            try:
                self._objects.delete(rec.to_object()["metadata"]["name"])
            except Exception:
                with self._lock:
                    self._published.setdefault(pair, rec)  # tried again at the next collection
                raise
            self._unnamed_since.pop(pair, None)
            self._forget(pair)
            self.metrics.writes.labels("deleted").inc()
            log.info("deleted %s/%s: no live pod has named it for %.0f s", *pair, self._grace)
        for pair in list(self._unnamed_since):
            if pair not in published:
                del self._unnamed_since[pair]
        return expired

    def reconcile(self) -> list[Pair]:
        """Learn of objects deleted by someone else (an operator, a namespace's cleanup): their
        pairs are forgotten, and those a live pod names are published again, so that a pod
        waiting for its pair's object is not left waiting. Returns the pairs published again."""
        if self._named is None:
            return []
        listed: set[Pair] = set()
        for obj in self._objects.list():
            spec = obj.get("spec") or {}
            if isinstance(spec.get("workload"), str) and isinstance(spec.get("objective"), str):
                listed.add((spec["workload"], spec["objective"]))
        named = self._named()
        again: list[Pair] = []
        with self._lock:
            gone = [pair for pair in self._published if pair not in listed]
            for pair in gone:
                del self._published[pair]
            self._existing &= listed
        for pair in gone:
            self._forget(pair)
        for pair in gone:
            if pair in named:
                log.info("%s/%s was deleted by someone else; publishing it again", *pair)
                self.request(pair)
                again.append(pair)
        return again

    # -- the bound per namespace ----------------------------------------------------------------

    def admit(self, pair: Pair) -> frozenset[str] | None:
        """Whether `pair` may be published: the namespaces to charge it to (empty: its object
        exists, or there is no bound), or None when it may not. A pair with no object yet needs
        a namespace naming it with room under the bound; when none has room, the pair waits
        (counted once, its pending pods told) until one has."""
        if self._tenants is None or self._bound is None:
            return frozenset()
        with self._lock:
            if pair in self._published or pair in self._existing:
                return frozenset()
            charged = self._charged_once
        if not charged:
            self.recharge(self._tenants.naming())
        namers = self._tenants.namespaces_naming(pair)
        with self._lock:
            if not namers:
                # No live pod names it any more: nothing waits for it.
                self._drop_refused(pair)
                return None
            counts = {ns: len(self._owned.get(ns, ())) for ns in namers}
            if any(n < self._bound for n in counts.values()):
                self._drop_refused(pair)
                return namers
            first = pair not in self._refused
            self._refused[pair] = namers
        if first:
            self.metrics.refusals.inc()
            log.info(
                "not publishing %s/%s: namespaces %s are at their bound of %d pairs",
                *pair,
                ", ".join(sorted(namers)),
                self._bound,
            )
        self._tell(pair, counts)
        return None

    def _charge(self, pair: Pair, namespaces: frozenset[str]) -> None:
        """Attribute `pair` to `namespaces` (under the lock)."""
        old = self._owners.get(pair, frozenset())
        for ns in old - namespaces:
            owned = self._owned.get(ns)
            if owned is not None:
                owned.discard(pair)
                if not owned:
                    del self._owned[ns]
        for ns in namespaces - old:
            self._owned.setdefault(ns, set()).add(pair)
        if namespaces:
            self._owners[pair] = namespaces
        else:
            self._owners.pop(pair, None)

    def _forget(self, pair: Pair) -> None:
        """A pair's object is gone: nothing is held for it any more."""
        with self._lock:
            self._decision_at.pop(pair, None)
            self._causes.pop(pair, None)
            self._charge(pair, frozenset())

    def _drop_refused(self, pair: Pair) -> None:
        """(Under the lock.)"""
        if self._refused.pop(pair, None) is not None:
            for uid in [uid for uid, p in self._told.items() if p == pair]:
                del self._told[uid]

    def recharge(self, naming: Mapping[Pair, frozenset[str]]) -> None:
        """Attribute every object to the namespaces whose live pods name its pair now; an object
        no live pod names stays with the namespaces that named it last, until it is deleted (so
        that pods created and deleted in turn cannot make a namespace's objects pile up)."""
        with self._lock:
            self._charged_once = True
            held = set(self._published) | self._existing
            for pair in held:
                namers = naming.get(pair)
                if namers:
                    self._charge(pair, namers)
            for pair in [p for p in self._owners if p not in held]:
                self._charge(pair, frozenset())

    def retry_refused(self) -> list[Pair]:
        """Ask again for the refused pairs that a namespace naming them now has room for (its
        pods went away and its objects were deleted); forget those no live pod names. Returns
        the pairs asked for."""
        if self._tenants is None or self._bound is None:
            return []
        bound = self._bound
        with self._lock:
            refused = list(self._refused)
        again: list[Pair] = []
        for pair in refused:
            namers = self._tenants.namespaces_naming(pair)
            waiting = {pod.uid for ns in namers for pod in self._tenants.waiting_pods(pair, ns)}
            with self._lock:
                for uid in [u for u, p in self._told.items() if p == pair and u not in waiting]:
                    del self._told[uid]  # gone or bound: told no more
                if not namers:
                    self._drop_refused(pair)
                    continue
                room = any(len(self._owned.get(ns, ())) < bound for ns in namers)
            if room:
                self.request(pair)
                again.append(pair)
        return again

    def _tell(self, pair: Pair, counts: Mapping[str, int]) -> None:
        """An Event on each pending pod that waits for `pair` (once per pod)."""
        if self._events is None or self._tenants is None:
            return
        told = 0
        for ns in sorted(counts):
            for pod in self._tenants.waiting_pods(pair, ns):
                with self._lock:
                    if pod.uid in self._told:
                        continue
                    self._told[pod.uid] = pair
                message = (
                    f"no TieredRecommendation is published for workload {pair[0]!r} and"
                    f" objective {pair[1]!r}: namespace {ns} already holds {counts[ns]} published"
                    f" (workload, objective) pairs and its bound is {self._bound} (the chart's"
                    " plugin.maxPairsPerNamespace). It is published once the namespace holds"
                    " fewer: pods naming other pairs go away and their objects are deleted after"
                    " the grace period."
                )
                try:
                    self._events.warn(pod, BOUND_REASON, message)
                except Exception as exc:  # the pod still waits; told at its next event
                    log.warning("telling %s/%s of its bound failed: %s", ns, pod.name, exc)
                    with self._lock:
                        self._told.pop(pod.uid, None)
                told += 1
                if told >= MAX_EVENTS_PER_REFUSAL:
                    return

    def figures(self) -> PublishedFigures:
        """What is published now, for the metrics: objects by state and fallback reason, the
        age of the oldest decision behind one, the queue, and the bound's refusals."""
        now = self._clock()
        with self._lock:
            objects = dict.fromkeys(OBJECT_STATES, 0)
            fallbacks: dict[str, int] = {}
            oldest = now
            for pair, rec in self._published.items():
                if rec.fallback is None:
                    objects["recommended"] += 1
                else:
                    objects["fallback"] += 1
                    cause = self._causes.get(pair, "NoRecommendation")
                    fallbacks[cause] = fallbacks.get(cause, 0) + 1
                oldest = min(oldest, self._decision_at.get(pair, now))
            bound = self._bound
            at_bound = (
                sum(1 for pairs in self._owned.values() if len(pairs) >= bound)
                if bound is not None
                else 0
            )
            return PublishedFigures(
                objects=objects,
                fallbacks=fallbacks,
                oldest_decision_seconds=max(0.0, now - oldest),
                queued=len(self._queued),
                waiting_for_bound=len(self._refused),
                namespaces_at_bound=at_bound,
                max_pairs_per_namespace=bound,
            )

    def _collect_loop(self) -> None:
        # A quarter of the grace period between looks: an object lives at most 1.25 graces past
        # its last pod, and one deleted by someone else is back within a look.
        while not self._stop.wait(max(1.0, min(self._grace / 4, 60.0))):
            try:
                self.reconcile()
                self.collect()
            except Exception as exc:  # the API server refused: tried again at the next look
                log.warning("deleting unnamed recommendations failed: %s", exc)
            self.retry_refused()

    def take(self, timeout: float | None = None) -> Pair | None:
        """The next pair asked for (None when none came within `timeout`; at once with 0)."""
        try:
            pair = self._work.get(timeout=timeout) if timeout else self._work.get_nowait()
        except queue.Empty:
            return None
        with self._lock:
            self._queued.discard(pair)
        return pair

    def publish_pending(self) -> int:
        """Publish, in this thread, every pair asked for so far (what the work loop does in
        its own); returns how many."""
        n = 0
        while (pair := self.take()) is not None:
            self.publish(pair)
            n += 1
        return n

    def _work_loop(self) -> None:
        while not self._stop.is_set():
            pair = self.take(timeout=0.5)
            if pair is None:
                continue
            try:
                self.publish(pair)
            except (ApiException, OSError) as exc:
                # The API server refused or was unreachable: the next refresh tries again.
                log.warning("publishing %s/%s failed: %s", pair[0], pair[1], exc)
            except Exception:
                # Whatever went wrong with one pair, the others are still published.
                log.exception("publishing %s/%s failed", pair[0], pair[1])

    def refresh(self) -> int:
        """Decide every published pair again if what they all depend on moved: the utilization
        by more than the tolerance in some resource, or the decisions are `max_age_seconds`
        old. Returns the pairs asked for (0 when nothing changed: no decision is made)."""
        now = self._clock()
        util = None
        if self._utilization is not None:
            try:
                util = self._utilization()
            except Exception as exc:  # the database is down: the last objects stay
                log.warning("reading utilization failed: %s", exc)
                return 0
        basis = self._decided_with
        moved = (
            util is not None
            and basis is not None
            and max(abs(a - b) for a, b in zip(util.as_tuple(), basis.as_tuple(), strict=True))
            > self._tolerance
        )
        if not moved and now - self._decided_at < self._max_age:
            return 0
        with self._lock:
            pairs = list(self._published)
        for pair in pairs:
            self.request(pair)
        self._decided_at, self._decided_with = now, util
        if pairs:
            log.info("utilization moved or decisions aged: %d pairs decided again", len(pairs))
        return len(pairs)

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self._refresh):
            self.refresh()

    def changed(self, what: Changed) -> int:
        """Decide again the published pairs a change touches: those of workloads with a new fit
        or verification run; every pair when the default prices changed."""
        with self._lock:
            pairs = [pair for pair in self._published if what.prices or pair[0] in what.workloads]
        for pair in pairs:
            self.request(pair)
        return len(pairs)

    def _fit_loop(self) -> None:
        assert self._changes is not None
        try:
            self._changes()  # what exists at start: what is published already holds
        except Exception as exc:
            log.warning("looking for changes failed: %s", exc)
        while not self._stop.wait(self._fit_poll):
            try:
                what = self._changes()
            except Exception as exc:  # the database is down: the refresh still runs
                log.warning("looking for changes failed: %s", exc)
                continue
            if what.workloads or what.prices:
                n = self.changed(what)
                log.info(
                    "new fits or runs for %s%s: %d published pairs decided again",
                    sorted(what.workloads),
                    ", new default prices" if what.prices else "",
                    n,
                )

    def start(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._work_loop, name="tmc-publish", daemon=True),
            threading.Thread(target=self._refresh_loop, name="tmc-publish-refresh", daemon=True),
        ]
        if self._changes is not None:
            threads.append(threading.Thread(target=self._fit_loop, name="tmc-fits", daemon=True))
        if self._named is not None:
            threads.append(threading.Thread(target=self._collect_loop, name="tmc-gc", daemon=True))
        for t in threads:
            t.start()
        return threads

    def stop(self) -> None:
        self._stop.set()


class PublisherSettings(FeederSettings):
    # How often the publisher looks whether the cluster's utilization moved (every published
    # pair is decided again only then, or when the decisions are publisher_max_age_seconds old).
    publisher_refresh_seconds: float = Field(default=60.0, ge=1, le=86_400)
    # How far a resource's utilization (a share, 0-1) must move to decide every pair again:
    # Algorithm 1's packing penalty moves with it, little below this.
    publisher_utilization_tolerance: float = Field(default=0.05, ge=0.0, le=1.0)
    # Every pair is decided again at least this often, whatever changed.
    publisher_max_age_seconds: float = Field(default=3600.0, ge=1, le=7 * 86_400)
    # How often the publisher looks for new fits, verification runs and default prices.
    publisher_fit_poll_seconds: float = Field(default=2.0, ge=0.2, le=3_600)
    # How long an object may go unnamed by any live pod before it is deleted.
    publisher_gc_grace_seconds: float = Field(default=600.0, ge=1, le=30 * 86_400)
    # The most (workload, objective) pairs published for the pods of one namespace: past it, the
    # namespace's new pairs wait (their pods get an Event) until it holds fewer.
    publisher_max_pairs_per_namespace: int = Field(default=100, ge=1, le=100_000)
    # The port of the publisher's Prometheus /metrics (0: not served), and where it listens.
    publisher_metrics_port: int = Field(default=9466, ge=0, le=65_535)
    publisher_metrics_address: str = Field(default="0.0.0.0", min_length=1, max_length=253)
    # api.collection; a burst's pod events, each decoded into fresh dicts, are most of what the
    # publisher allocates.
    gc_gen0_threshold: Gen0Threshold = DEFAULT_GEN0_THRESHOLD


@dataclass
class _Prefetch:
    """The feeder's prefetch target, made before the publisher (which reads the feeder's pairs)."""

    to: list[RecommendationPublisher]

    def prefetch(self, pod: PodAsk) -> None:
        for publisher in self.to:
            publisher.prefetch(pod)


def main() -> None:
    argparse.ArgumentParser(
        prog="python -m scheduler.publisher",
        description="Publishes tmc's recommendations as TieredRecommendation objects for the "
        "scheduler plugin, and keeps the PostgreSQL ledger a mirror of the bound pods.",
    ).parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = load_settings(PublisherSettings, "tmc publisher")
    try:
        api = api_client(settings.kubeconfig)
    except (config.ConfigException, OSError) as exc:
        raise SystemExit(
            f"tmc publisher: no Kubernetes API to talk to ({exc}); run it in a pod with its "
            "service account, or set TMC_KUBECONFIG"
        ) from None
    try:
        # Read again here, after the settings' check: a Secret volume may change in between.
        seal_keys = settings.seal_keys()
    except SealKeyError as exc:
        raise SystemExit(f"tmc publisher: bad setting: TMC_PLACEMENT_SEAL_KEYS: {exc}") from None
    sessions = make_session_factory(make_engine(settings))
    metrics = PublisherMetrics()
    publisher_of: list[RecommendationPublisher] = []
    # The feeder tells the publisher of every pending opted-in pod it watches (tmc's labelled
    # pods, every pod with the DRA door; those already pending at
    # its first listing too), counts the pairs live pods name, and keeps the ledger a mirror of
    # the bound pods.
    feeder = Feeder(
        KubeCluster(api),
        sessions,
        _Prefetch(publisher_of),
        opt_in_resource=settings.opt_in_resource,
        resync_seconds=settings.resync_seconds,
        watch_timeout_seconds=settings.watch_timeout_seconds,
        mirror_retry_seconds=settings.mirror_retry_seconds,
        mirror_batch_seconds=settings.mirror_batch_seconds,
        rack_pools=settings.rack_pools,
        metrics=metrics,
        tenant_selector=settings.tenant_namespace_labels,
        dra_claims=settings.mirror_dra_claims,
        seal_keys=seal_keys,
    )
    utilization = LedgerUtilization(sessions)
    publisher = RecommendationPublisher(
        KubeRecommendations(api),
        # Each pair is priced at the memory and CPU its pods request: the size it runs at.
        ServiceDecisions(
            sessions,
            utilization,
            settings.default_threshold,
            size_of=feeder.memory_of,
            vcpus_of=feeder.vcpus_of,
        ),
        refresh_seconds=settings.publisher_refresh_seconds,
        changes=WhatChanged(sessions),
        utilization=utilization,
        utilization_tolerance=settings.publisher_utilization_tolerance,
        max_age_seconds=settings.publisher_max_age_seconds,
        fit_poll_seconds=settings.publisher_fit_poll_seconds,
        named=feeder.pairs_named,
        gc_grace_seconds=settings.publisher_gc_grace_seconds,
        tenants=feeder,
        max_pairs_per_namespace=settings.publisher_max_pairs_per_namespace,
        events=KubeEvents(api),
        metrics=metrics,
    )
    publisher_of.append(publisher)
    metrics.watch(publisher.figures, feeder.figures)
    if settings.publisher_metrics_port:
        try:
            server = serve(
                metrics.registry,
                settings.publisher_metrics_port,
                settings.publisher_metrics_address,
            )
        except OSError as exc:
            raise SystemExit(
                f"tmc publisher: cannot serve metrics on {settings.publisher_metrics_address}:"
                f"{settings.publisher_metrics_port} ({exc})"
            ) from None
        log.info("metrics on http://%s:%d/metrics", *server.server_address[:2])
    log.info("published recommendations found at start: %d", publisher.load())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    publisher.start()
    feeder.sync()
    # Start-up ends with the first listing: the modules, and that listing until the first
    # resync replaces it, are left out of later collections. Measured (`python -m
    # bench.feeder_events`), the pod watch's CPU an event fell by 36-41 %.
    tune_collection(metrics.registry, settings.gc_gen0_threshold)
    feeder.start()
    # What nodes report about their pods, put on the pods (a node may speak only of its own Node).
    NodeReportRelay(
        KubeNodeReports(api, REPORTS_NAMESPACE, REPORTS_SELECTOR, REQUEST_TIMEOUT),
        now=now_stamp,
        count=lambda outcome: metrics.node_reports.labels(outcome).inc(),
        watch_timeout_seconds=settings.watch_timeout_seconds,
    ).start(stop)
    log.info(
        "publishing recommendations (refresh every %.0f s)", settings.publisher_refresh_seconds
    )
    # Said once the ledger first equals a listing of the API server (the mirror's full write at
    # start; thousands of nodes take a few seconds): readers of the ledger may trust it from here.
    while not stop.is_set():
        if feeder.mirror_synced.wait(1):
            log.info("the ledger mirror is in step with the API server")
            break
    stop.wait()
    publisher.stop()
    feeder.stop()


if __name__ == "__main__":
    main()
