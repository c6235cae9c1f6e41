"""The publisher's own series hold the values they claim: objects by state and fallback reason,
the age of the oldest decision behind one, decisions by outcome and by what the decision log did;
the ledger mirror's pending changes, its lag (PostgreSQL, real) and whether it is in step; bound
pods placed with the fallback by reason; and the bound per namespace, with the real feeder
telling the publisher which namespaces name which pairs. Served over HTTP as Prometheus scrapes
it. The same publisher on the real control plane: tests/scheduler/test_publisher_quota.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Role
from api.settings import Settings
from bench.publisher_refresh import InMemoryObjects
from model import Utilization
from model.node_contract import PlacedConfiguration, Placement, Recommendation
from model.objectives import DEFAULT_THRESHOLD
from model.resources import GIB
from scheduler.bounds import BOUND_REASON
from scheduler.decisions import ServiceDecisions
from scheduler.feeder import Feeder
from scheduler.metrics import (
    FALLBACK_CLASSES,
    FALLBACK_REASONS,
    PublisherMetrics,
    fallback_class,
    serve,
)
from scheduler.pods import PodRef
from scheduler.publisher import RecommendationPublisher
from scheduler.status import Decided
from store.db import make_engine, make_session_factory
from tests.fixtures.service import auth, example
from tests.scheduler.test_ledger import TIERED_NODE, ListedCluster, bound_pod, opted_in
from tests.services import PostgresServer

CONTRACT_SCHEMA = (
    Path(__file__).resolve().parents[2]
    / "scheduler/plugin/pkg/apis/tmc/contract/contract.schema.json"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def decide(workload: str, objective: str) -> Decided:
    """Workloads named `fb-*` cannot be recommended; `rep-*` repeat their last decision."""
    if workload.startswith("fb-"):
        rec = Recommendation(workload=workload, objective=objective, fallback="nothing fits")
        return Decided(rec, "NoFeasibleConfiguration")
    rec = Recommendation(workload=workload, objective=objective, llc_ways=2, dram_bytes=GIB)
    return Decided(rec, logged="repeat" if workload.startswith("rep-") else "stored")


def scraped(registry_port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://127.0.0.1:{registry_port}/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_published_objects_by_state_and_the_age_of_their_oldest_decision() -> None:
    clock = Clock()
    metrics = PublisherMetrics()
    pub = RecommendationPublisher(InMemoryObjects(), decide, clock=clock, metrics=metrics)
    metrics.watch(pub.figures)
    for pair in [("a", "cheapest"), ("rep-b", "cheapest"), ("c", "slo:5%"), ("fb-d", "cheapest")]:
        assert pub.publish(pair)
    f = pub.figures()
    assert f.objects == {"recommended": 3, "fallback": 1}
    assert f.fallbacks == {"NoFeasibleConfiguration": 1}
    assert f.oldest_decision_seconds == 0 and f.queued == 0
    clock.now += 100
    # Decided again with the same configuration: no write, but the decision behind it is new.
    assert pub.publish(("a", "cheapest"))
    clock.now += 20
    assert pub.figures().oldest_decision_seconds == 120  # rep-b, c and fb-d: 120 s
    for pair in [("rep-b", "cheapest"), ("c", "slo:5%"), ("fb-d", "cheapest")]:
        pub.publish(pair)
    assert pub.figures().oldest_decision_seconds == 20  # a, decided 20 s ago
    pub.request(("e", "cheapest"))
    assert pub.figures().queued == 1

    server = serve(metrics.registry, 0, "127.0.0.1")
    try:
        got = scraped(server.server_address[1])
    finally:
        server.shutdown()
    assert got["tmc_published_recommendations", (("state", "recommended"),)] == 3
    assert got["tmc_published_recommendations", (("state", "fallback"),)] == 1
    assert got["tmc_published_fallbacks", (("reason", "NoFeasibleConfiguration"),)] == 1
    assert got["tmc_published_oldest_decision_seconds", ()] == 20
    assert got["tmc_publisher_queued_pairs", ()] == 1
    # 8 decisions: 6 recommended (3 of them rep-b's and a's repeats), 2 fallbacks; 4 objects
    # written (the repeats changed nothing).
    assert got["tmc_publisher_decisions_total", (("outcome", "recommended"),)] == 6
    assert got["tmc_publisher_decisions_total", (("outcome", "fallback"),)] == 2
    assert got["tmc_publisher_decisions_total", (("outcome", "unavailable"),)] == 0
    assert got["tmc_decisions_logged_total", (("stored", "stored"),)] == 4
    assert got["tmc_decisions_logged_total", (("stored", "repeat"),)] == 2
    assert got["tmc_publisher_writes_total", (("kind", "written"),)] == 4
    assert ("tmc_publisher_max_pairs_per_namespace", ()) not in got  # no bound without tenants


def test_a_decision_that_cannot_be_made_leaves_the_object_aging() -> None:
    clock = Clock()
    down = [False]

    def flaky(workload: str, objective: str) -> Decided | None:
        return None if down[0] else decide(workload, objective)

    pub = RecommendationPublisher(InMemoryObjects(), flaky, clock=clock)
    pub.publish(("a", "cheapest"))
    down[0] = True
    clock.now += 7200
    assert not pub.publish(("a", "cheapest"))
    assert pub.figures().oldest_decision_seconds == 7200  # what TmcPublishedStale fires on
    assert pub.metrics.registry.get_sample_value(
        "tmc_publisher_decisions_total", {"outcome": "unavailable"}
    )


def test_an_object_found_at_start_ages_from_its_last_write() -> None:
    objects = InMemoryObjects()
    rec = Recommendation(workload="w", objective="cheapest", fallback="no profile")
    body = rec.to_object()
    written = time.time() - 300
    body["metadata"]["generation"] = 1
    body["metadata"]["managedFields"] = [
        {"manager": "tmc", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(written))}
    ]
    body["status"] = {
        "observedGeneration": 1,
        "conditions": [{"type": "Fallback", "status": "True", "reason": "NoRecommendation"}],
    }
    objects.bodies[body["metadata"]["name"]] = body
    pub = RecommendationPublisher(objects, decide, clock=Clock())
    assert pub.load() == 1
    f = pub.figures()
    assert f.objects == {"recommended": 0, "fallback": 1}
    assert f.fallbacks == {"NoRecommendation": 1}
    assert 299 <= f.oldest_decision_seconds <= 310


def test_the_mirror_says_what_waits_and_how_long_its_rows_took(
    sessions: sessionmaker[Session], postgres: PostgresServer
) -> None:
    listed = ListedCluster()
    listed.nodes = [TIERED_NODE]
    metrics = PublisherMetrics()
    feeder = Feeder(listed, sessions, metrics=metrics)  # type: ignore[arg-type]
    metrics.watch(mirror=feeder.figures)
    assert not feeder.figures().in_step  # nothing mirrored yet
    feeder.sync()
    feeder.mirror_pending()
    f = feeder.figures()
    assert f.in_step and f.pending_changes == 0 and f.oldest_pending_seconds == 0
    for i in range(2):
        feeder.on_pod("ADDED", bound_pod(f"p{i}", "node-7", 0x1 << i))
    time.sleep(0.2)
    f = feeder.figures()
    assert f.pending_changes == 2 and f.oldest_pending_seconds >= 0.2 and f.bound_pods == 2
    feeder.mirror_pending()
    assert feeder.figures().pending_changes == 0
    lag = metrics.registry.get_sample_value
    assert lag("tmc_mirror_lag_seconds_count") == 2
    assert (lag("tmc_mirror_lag_seconds_sum") or 0) >= 0.4
    assert lag("tmc_mirror_lag_seconds_bucket", {"le": "0.1"}) == 0
    # The database down: the change waits, the mirror is no longer in step, and the wait is
    # counted from the change's event, through the failed write, until the rewrite.
    postgres.stop()
    try:
        feeder.on_pod("DELETED", bound_pod("p0", "node-7", 0x1))
        with pytest.raises(OperationalError):
            feeder.mirror_pending()
        time.sleep(0.3)
        f = feeder.figures()
        assert not f.in_step and f.oldest_pending_seconds >= 0.3
        assert metrics.registry.get_sample_value("tmc_mirror_in_step") == 0
    finally:
        postgres.start()
    listed.pods = {"p1": bound_pod("p1", "node-7", 0x2)}
    feeder.mirror_pending()
    f = feeder.figures()
    assert f.in_step and f.oldest_pending_seconds == 0


def test_a_listing_that_replaces_waiting_changes_keeps_their_wait(
    sessions: sessionmaker[Session],
) -> None:
    """A resync's listing covers the changes queued before it: what waits is counted from the
    oldest of them until the listing is written, and nothing is left counting after."""
    listed = ListedCluster()
    listed.nodes = [TIERED_NODE]
    feeder = Feeder(listed, sessions)  # type: ignore[arg-type]
    feeder.sync()
    feeder.mirror_pending()
    feeder.on_pod("ADDED", bound_pod("q0", "node-7", 0x1))
    time.sleep(0.3)
    listed.pods = {"q0": bound_pod("q0", "node-7", 0x1)}
    feeder.sync()  # the periodic resync
    f = feeder.figures()
    assert f.pending_changes == 0 and f.oldest_pending_seconds >= 0.3
    feeder.mirror_pending()
    assert feeder.figures().oldest_pending_seconds == 0
    feeder.on_pod("ADDED", bound_pod("q1", "node-7", 0x2))
    listed.pods["q1"] = bound_pod("q1", "node-7", 0x2)
    feeder.sync()
    feeder.mirror_all()  # a full rewrite takes the waiting listing with it
    f = feeder.figures()
    assert f.in_step and f.oldest_pending_seconds == 0


def placed_with_fallback(uid: str, why: str | None, code: str | None = None) -> dict[str, Any]:
    pod = bound_pod(uid, "node-7", 0x1)
    placement = Placement(
        node="node-7",
        workload="w",
        configuration=PlacedConfiguration(
            vcpus=1, dram_bytes=GIB, slow_bytes=0, slow_ratio=0, llc_ways=1
        ),
        llc_mask="0x1",
        fallback=why,
        fallback_reason=code,
    )
    pod["metadata"]["annotations"] = dict(placement.to_annotations())
    return pod


def test_bound_pods_placed_with_the_fallback_are_counted_by_reason() -> None:
    """By the placement's code, never its text: a code this publisher does not know (a newer
    engine's) and a placement written without one are `other`."""
    listed = ListedCluster()
    listed.pods = {
        "a": placed_with_fallback("a", "reworded, whatever it says", "Unpublished"),
        "b": placed_with_fallback("b", None),
    }
    feeder = Feeder(listed, None)  # type: ignore[arg-type]
    feeder.sync()
    assert feeder.figures().fallback_pods == {"unpublished": 1}
    assert feeder.figures().bound_pods == 2
    feeder.on_pod("MODIFIED", placed_with_fallback("c", "x", "NoConfiguration"))
    feeder.on_pod("MODIFIED", placed_with_fallback("d", "something new", "SomethingNewer"))
    feeder.on_pod(
        "MODIFIED", placed_with_fallback("e", "tmc has no configuration for the workload: x")
    )
    assert feeder.figures().fallback_pods == {"unpublished": 1, "no_configuration": 1, "other": 2}
    feeder.on_pod("DELETED", listed.pods["a"])
    assert feeder.figures().fallback_pods == {"no_configuration": 1, "other": 2}
    assert feeder.figures().bound_pods == 4


def test_the_fallback_reasons_are_the_engines_codes() -> None:
    """The classes are the engine's codes, in its order, as the generator writes them beside the
    contract's schema (x-tmc-fallback-reasons, from v1alpha1.FallbackReasons): a code the engine
    adds fails here rather than falling silently into `other`."""
    codes = json.loads(CONTRACT_SCHEMA.read_text())["x-tmc-fallback-reasons"]
    assert tuple(codes) == FALLBACK_REASONS
    assert FALLBACK_CLASSES[:-1] == tuple(fallback_class(code) for code in codes)
    assert fallback_class("AnnotationsTooLarge") == "annotations_too_large"
    assert len(set(FALLBACK_CLASSES)) == len(FALLBACK_CLASSES)
    assert fallback_class(None) == fallback_class("") == fallback_class("Zzz") == "other"


class Told:
    """Where the publisher's Events go in this test (the API server's, on the control plane)."""

    def __init__(self) -> None:
        self.events: list[tuple[PodRef, str, str]] = []

    def warn(self, pod: PodRef, reason: str, message: str) -> None:
        self.events.append((pod, reason, message))


def pod_in(ns: str, uid: str, workload: str) -> dict[str, Any]:
    pod = opted_in(uid, workload, "cheapest")
    pod["metadata"]["namespace"] = ns
    return pod


def test_the_bound_per_namespace_with_the_feeder_naming_the_pairs() -> None:
    """Two pairs per namespace: the third waits (its pod told once, the refusal counted once),
    another namespace naming it publishes it; a namespace's pods created and deleted in turn do
    not let it past its bound; its count drops when its objects are collected."""
    listed = ListedCluster()
    feeder = Feeder(listed, None)  # type: ignore[arg-type]
    feeder.sync()
    clock, told = Clock(), Told()
    published = InMemoryObjects()
    pub = RecommendationPublisher(
        published,
        decide,
        clock=clock,
        named=feeder.pairs_named,
        gc_grace_seconds=60,
        tenants=feeder,
        max_pairs_per_namespace=2,
        events=told,
    )

    def arrive(ns: str, uid: str, workload: str) -> None:
        feeder.on_pod("ADDED", pod_in(ns, uid, workload))
        pub.publish_pending()  # the feeder prefetched the pod's pair

    def workloads() -> set[str]:
        return {b["spec"]["workload"] for b in published.bodies.values()}

    feeder.recommender = pub
    for uid, workload in [("a1", "w1"), ("a2", "w2"), ("a3", "w3")]:
        arrive("a", uid, workload)
    assert workloads() == {"w1", "w2"}
    assert [(p.name, r) for p, r, _ in told.events] == [("a3", BOUND_REASON)]
    assert "namespace a already holds 2" in told.events[0][2]
    arrive("a", "a3-again", "w3")  # another pod of the waiting pair: told too, counted once
    assert [p.name for p, _, _ in told.events] == ["a3", "a3-again"]
    assert pub.metrics.registry.get_sample_value("tmc_publisher_pairs_refused_total") == 1
    f = pub.figures()
    assert (f.waiting_for_bound, f.namespaces_at_bound, f.max_pairs_per_namespace) == (1, 1, 2)

    arrive("b", "b1", "w3")  # namespace b has room: w3 is published, for both
    assert workloads() == {"w1", "w2", "w3"}
    assert pub.figures().waiting_for_bound == 0

    # Namespace a's pods of w3 go: b still names it, so it counts for b alone. Its pods of w1
    # go: no pod names w1, and its object still counts for a until it is collected, so w4
    # waits; pods created and deleted in turn pile nothing up.
    for uid in ("a3", "a3-again"):
        feeder.on_pod("DELETED", pod_in("a", uid, "w3"))
    feeder.on_pod("DELETED", pod_in("a", "a1", "w1"))
    pub.collect()
    arrive("a", "a4", "w4")
    feeder.on_pod("DELETED", pod_in("a", "a4", "w4"))
    arrive("a", "a5", "w5")
    assert workloads() == {"w1", "w2", "w3"}
    assert pub.retry_refused() == []
    clock.now += 61
    assert pub.collect() == [("w1", "cheapest")]
    # w4's pod is gone (nothing waits for it); w5's pod waits: published now.
    assert pub.retry_refused() == [("w5", "cheapest")]
    pub.publish_pending()
    assert workloads() == {"w2", "w3", "w5"}
    assert pub.figures().waiting_for_bound == 0


def test_decisions_stored_and_repeated_by_the_service_on_postgresql(
    client: TestClient, settings: Settings
) -> None:
    """Through the service's decision log: the pair's first decision is a new row, the same
    decision again a repeat counted on it; a workload with no profile is a fallback, not logged."""
    client.post("/v1/profiles", content=example("graph500"), headers=auth(Role.agent))
    fitted = client.post("/recommend", json={"workload": "graph500"}, headers=auth(Role.scheduler))
    assert fitted.status_code == 200, fitted.text  # its fit exists by now
    sessions = make_session_factory(make_engine(settings))
    util = Utilization(cpu=0.2, dram=0.2, slow=0.1, llc=0.2)
    pub = RecommendationPublisher(
        InMemoryObjects(), ServiceDecisions(sessions, lambda: util, DEFAULT_THRESHOLD)
    )
    for _ in range(3):
        assert pub.publish(("graph500", "slo:10%"))
    assert pub.publish(("nobody", "cheapest"))
    value = pub.metrics.registry.get_sample_value
    assert value("tmc_decisions_logged_total", {"stored": "stored"}) == 1
    assert value("tmc_decisions_logged_total", {"stored": "repeat"}) == 2
    assert value("tmc_publisher_decisions_total", {"outcome": "recommended"}) == 3
    assert value("tmc_publisher_decisions_total", {"outcome": "fallback"}) == 1
    assert pub.figures().fallbacks == {"NotFound": 1}  # the model's error class names it
