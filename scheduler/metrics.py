"""The publisher process's own Prometheus series: what it holds published and how old the
decisions behind them are, how far the ledger's mirror is behind the API server, the bound pods
placed with a fallback by reason, and the pairs a namespace's bound keeps from being published.

Counters and the mirror's lag histogram are kept as they happen; the gauges are read from the
publisher's and the feeder's state when scraped (`PublisherCollector`), so a scrape costs a few
dictionary walks and no call to the API server or the database. `serve` answers scrapes one at a
time, each bounded by a socket timeout: a slow or stuck scraper cannot pile up threads.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import HTTPServer

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import MetricsHandler
from prometheus_client.registry import Collector

from scheduler.node_reports import OUTCOMES as NODE_REPORT_OUTCOMES

log = logging.getLogger("tmc.scheduler.metrics")

# A scraper that opens a connection and says nothing is dropped after this long.
SCRAPE_TIMEOUT_SECONDS = 5.0

# What a published object can be: a configuration, or the fallback with its reason.
OBJECT_STATES = ("recommended", "fallback")
# Why a bound pod holds the fallback: the code the engine wrote into its placement
# (placement.fallback_reason), as a label in snake case. These are the engine's codes, the
# contract schema's x-tmc-fallback-reasons, which tests/scheduler/test_publisher_metrics.py holds
# this copy to. Bounded: a code not listed (a newer engine's) or none (a placement written before
# the code existed) is `other`.
FALLBACK_REASONS: tuple[str, ...] = (
    "Unpublished",
    "NoConfiguration",
    "NoWorkload",
    "Mismatched",
    "AnnotationsTooLarge",
    "Unreadable",
    "PlacementTooLarge",
)
_FALLBACK_CLASS = {
    code: re.sub(r"(?<!^)([A-Z])", r"_\1", code).lower() for code in FALLBACK_REASONS
}
FALLBACK_CLASSES = (*_FALLBACK_CLASS.values(), "other")
# How a publisher's decision went: a configuration, a fallback (the pair cannot be
# recommended), or none (the database was unavailable: the last object stays).
DECISION_OUTCOMES = ("recommended", "fallback", "unavailable")


def fallback_class(code: str | None) -> str:
    """The bounded class of a placement's fallback reason code (a label value)."""
    return _FALLBACK_CLASS.get(code or "", "other")


@dataclass(frozen=True)
class PublishedFigures:
    """What the publisher holds, at one instant."""

    objects: dict[str, int]  # by state, every state present
    fallbacks: dict[str, int]  # fallback objects by their condition's reason
    oldest_decision_seconds: float  # age of the oldest decision behind an object; 0: none
    queued: int  # pairs waiting to be decided
    waiting_for_bound: int  # pairs refused by their namespaces' bound, still named
    namespaces_at_bound: int
    max_pairs_per_namespace: int | None  # None: no bound


@dataclass(frozen=True)
class MirrorFigures:
    """The ledger's mirror, at one instant."""

    pending_changes: int  # pods and nodes whose change is not yet written
    oldest_pending_seconds: float  # how long the oldest unwritten change has waited; 0: none
    in_step: bool  # the ledger equals the API server up to the pending changes
    bound_pods: int  # live bound pods with tmc's placement
    fallback_pods: dict[str, int] = field(default_factory=dict)  # by fallback class


class PublisherMetrics:
    """The counters and the lag histogram; one per process (tests make their own)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.decisions = Counter(
            "tmc_publisher_decisions_total",
            "The publisher's decisions of a (workload, objective) by outcome: recommended,"
            " fallback, unavailable (nothing could be decided: the last object stays)",
            ["outcome"],
            registry=self.registry,
        )
        self.decisions_logged = Counter(
            "tmc_decisions_logged_total",
            "Decisions by what the decision log did with them: stored (a new row) or repeat"
            " (counted on the pair's identical newest decision)",
            ["stored"],
            registry=self.registry,
        )
        self.writes = Counter(
            "tmc_publisher_writes_total",
            "Writes of TieredRecommendation objects by kind: written (created or changed),"
            " deleted (no live pod named it for the grace period)",
            ["kind"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "tmc_publisher_pairs_refused_total",
            "Pairs not published because every namespace naming them was at its bound",
            registry=self.registry,
        )
        self.node_reports = Counter(
            "tmc_publisher_node_reports_total",
            "Nodes' reports about pods (what tmc-nri did not apply) by outcome: relayed onto"
            " the pod, elsewhere (the pod is bound to another node: not relayed), no-pod,"
            " malformed",
            ["outcome"],
            registry=self.registry,
        )
        self.mirror_lag = Histogram(
            "tmc_mirror_lag_seconds",
            "From a pod's event reaching the feeder to its row written in the ledger's mirror",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        for outcome in DECISION_OUTCOMES:
            self.decisions.labels(outcome)
        for stored in ("stored", "repeat"):
            self.decisions_logged.labels(stored)
        for kind in ("written", "deleted"):
            self.writes.labels(kind)
        for outcome in NODE_REPORT_OUTCOMES:
            self.node_reports.labels(outcome)

    def watch(
        self,
        published: Callable[[], PublishedFigures] | None = None,
        mirror: Callable[[], MirrorFigures] | None = None,
    ) -> None:
        """Export the gauges of what `published` (the publisher's figures) and `mirror` (the
        feeder's) say at each scrape."""
        self.registry.register(PublisherCollector(published, mirror))


class PublisherCollector(Collector):
    def __init__(
        self,
        published: Callable[[], PublishedFigures] | None,
        mirror: Callable[[], MirrorFigures] | None,
    ) -> None:
        self._published = published
        self._mirror = mirror

    def collect(self) -> Iterator[Metric]:
        if self._published is not None:
            yield from published_families(self._published())
        if self._mirror is not None:
            yield from mirror_families(self._mirror())


def published_families(f: PublishedFigures) -> Iterator[Metric]:
    objects = GaugeMetricFamily(
        "tmc_published_recommendations",
        "TieredRecommendation objects the publisher holds, by state (recommended, fallback)",
        labels=["state"],
    )
    for state in OBJECT_STATES:
        objects.add_metric([state], f.objects.get(state, 0))
    yield objects
    fallbacks = GaugeMetricFamily(
        "tmc_published_fallbacks",
        "Published fallback objects by the reason of their Fallback condition",
        labels=["reason"],
    )
    for reason, n in sorted(f.fallbacks.items()):
        fallbacks.add_metric([reason], n)
    yield fallbacks
    yield GaugeMetricFamily(
        "tmc_published_oldest_decision_seconds",
        "Age of the oldest decision behind a published object (each decision again renews it)",
        value=f.oldest_decision_seconds,
    )
    yield GaugeMetricFamily(
        "tmc_publisher_queued_pairs", "Pairs waiting to be decided", value=f.queued
    )
    yield GaugeMetricFamily(
        "tmc_publisher_pairs_waiting_for_bound",
        "Pairs live pods name that are not published: every namespace naming them is at its bound",
        value=f.waiting_for_bound,
    )
    yield GaugeMetricFamily(
        "tmc_publisher_namespaces_at_bound",
        "Namespaces holding as many published pairs as the bound per namespace",
        value=f.namespaces_at_bound,
    )
    if f.max_pairs_per_namespace is not None:
        yield GaugeMetricFamily(
            "tmc_publisher_max_pairs_per_namespace",
            "The bound on published pairs per namespace",
            value=f.max_pairs_per_namespace,
        )


def mirror_families(f: MirrorFigures) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "tmc_mirror_pending_changes",
        "Pods and nodes whose change the ledger's mirror has not written yet",
        value=f.pending_changes,
    )
    yield GaugeMetricFamily(
        "tmc_mirror_oldest_pending_seconds",
        "How long the oldest change not yet in the ledger's mirror has waited (0: none)",
        value=f.oldest_pending_seconds,
    )
    yield GaugeMetricFamily(
        "tmc_mirror_in_step",
        "1 when the ledger's mirror equals the API server up to the pending changes; 0 while"
        " it must be rewritten from a listing (the database was unavailable)",
        value=1 if f.in_step else 0,
    )
    yield GaugeMetricFamily(
        "tmc_pods_placed", "Live bound pods holding tmc's placement", value=f.bound_pods
    )
    fallback = GaugeMetricFamily(
        "tmc_pods_placed_fallback",
        "Live bound pods placed with the fallback (all memory in DRAM), by reason",
        labels=["reason"],
    )
    for reason in FALLBACK_CLASSES:
        fallback.add_metric([reason], f.fallback_pods.get(reason, 0))
    yield fallback


class _Handler(MetricsHandler):
    timeout = SCRAPE_TIMEOUT_SECONDS

    def log_message(self, format: str, *args: object) -> None:
        pass  # a scrape every 30 s is not worth a log line


def serve(registry: CollectorRegistry, port: int, address: str = "0.0.0.0") -> HTTPServer:
    """Serve `registry` at any path on `port` (0: a free one; `server_address` says which), one
    scrape at a time, from a daemon thread. Stop it with `shutdown()`."""
    handler = type("PublisherMetricsHandler", (_Handler,), {"registry": registry})
    server = HTTPServer((address, port), handler)
    server.timeout = SCRAPE_TIMEOUT_SECONDS
    threading.Thread(target=server.serve_forever, name="tmc-metrics", daemon=True).start()
    return server
