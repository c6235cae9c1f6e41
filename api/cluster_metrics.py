"""Gauges of the cluster's state for Prometheus, read from the ledger when scraped: utilization
per resource, nodes by readiness and stranding, fits waiting. A scrape reads the database at
most every `cache_seconds`; when it cannot, the gauges are left out (the scrape still answers)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api import repositories as repo
from api.services.cluster import node_utilizations
from ledger import store as ledger
from model.resources import RESOURCES
from model.stranding import stranding

log = logging.getLogger("tmc.metrics")


@dataclass(frozen=True)
class ClusterFigures:
    utilization: tuple[float, float, float, float]
    nodes_ready: int
    nodes_not_ready: int
    stranding: dict[tuple[str, str], int]  # (full resource, idle resource) -> nodes
    nodes_stranding: int
    pending_fits: int


def read_figures(session: Session) -> ClusterFigures:
    per_node = node_utilizations(session)
    pairs: dict[tuple[str, str], int] = {}
    stranding_nodes = 0
    for use, util in per_node:
        if not use.node.ready:
            continue
        found = stranding(util)
        if found is None:
            continue
        stranding_nodes += 1
        for full in found.full:
            for idle in found.idle:
                pairs[full, idle] = pairs.get((full, idle), 0) + 1
    ready = sum(1 for use, _ in per_node if use.node.ready)
    return ClusterFigures(
        utilization=ledger.utilization(session).as_tuple(),
        nodes_ready=ready,
        nodes_not_ready=len(per_node) - ready,
        stranding=pairs,
        nodes_stranding=stranding_nodes,
        pending_fits=repo.pending_fits(session),
    )


class ClusterCollector(Collector):
    def __init__(self, sessions: sessionmaker[Session], cache_seconds: float = 15.0) -> None:
        self._sessions = sessions
        self._cache_seconds = cache_seconds
        self._cached: tuple[float, ClusterFigures] | None = None
        self._lock = threading.Lock()

    def figures(self) -> ClusterFigures | None:
        with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._cached[0] < self._cache_seconds:
                return self._cached[1]
            try:
                with self._sessions() as session:  # read only: closed, so rolled back
                    figures = read_figures(session)
            except SQLAlchemyError as exc:
                log.warning("cluster metrics not read: %s", exc)
                return None
            self._cached = (now, figures)
            return figures

    def collect(self) -> Iterator[Metric]:
        f = self.figures()
        if f is None:
            return
        util = GaugeMetricFamily(
            "tmc_cluster_utilization_ratio",
            "The cluster's reserved share of each resource on ready nodes (Algorithm 1's U)",
            labels=["resource"],
        )
        for resource, value in zip(RESOURCES, f.utilization, strict=True):
            util.add_metric([resource], value)
        yield util
        nodes = GaugeMetricFamily("tmc_nodes", "Nodes in the ledger by readiness", labels=["ready"])
        nodes.add_metric(["true"], f.nodes_ready)
        nodes.add_metric(["false"], f.nodes_not_ready)
        yield nodes
        yield GaugeMetricFamily(
            "tmc_nodes_stranding",
            "Ready nodes with a resource at least 85 % reserved while another is at most 35 %",
            value=f.nodes_stranding,
        )
        pairs = GaugeMetricFamily(
            "tmc_nodes_stranding_by_resource",
            "Stranding ready nodes by the resource that is full and the one left idle",
            labels=["full", "idle"],
        )
        for (full, idle), count in sorted(f.stranding.items()):
            pairs.add_metric([full, idle], count)
        yield pairs
        yield GaugeMetricFamily(
            "tmc_profiles_pending_fit", "Profiles whose fit has not run yet", value=f.pending_fits
        )
