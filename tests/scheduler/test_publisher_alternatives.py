"""The publisher's object carries Algorithm 1's other candidates within T after its pick, sized as
the pick is (the pods' memory and vCPUs), as the service's decision log lists them; a fallback
carries none. On PostgreSQL, through the service's own decision path."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Role
from api.settings import Settings
from bench.publisher_refresh import InMemoryObjects
from model import Utilization
from model.node_contract import (
    MAX_ALTERNATIVES,
    Alternative,
    Recommendation,
    recommendation_object_name,
)
from model.objectives import DEFAULT_THRESHOLD
from model.resources import GIB, split_memory
from scheduler.decisions import ServiceDecisions
from scheduler.publisher import RecommendationPublisher
from scheduler.status import Decided
from store.db import make_engine, make_session_factory
from tests.fixtures.service import auth, example

UTIL = Utilization(cpu=0.2, dram=0.6, slow=0.1, llc=0.3)
# Not a whole number of MiB, so that splitting it rounds.
SIZE = 6 * GIB + 12_345
# The pods' CPU request in whole vCPUs (the example's profile has 4).
VCPUS = 6


def _publisher(
    sessions: sessionmaker[Session], objects: InMemoryObjects
) -> RecommendationPublisher:
    decide = ServiceDecisions(
        sessions,
        lambda: UTIL,
        DEFAULT_THRESHOLD,
        size_of=lambda _: SIZE,
        vcpus_of=lambda _: VCPUS,
    )
    return RecommendationPublisher(objects, decide)


def test_the_published_recommendation_offers_the_candidates_within_t_after_its_pick(
    client: TestClient, settings: Settings
) -> None:
    client.post("/v1/profiles", content=example("graph500"), headers=auth(Role.agent))
    fitted = client.post("/recommend", json={"workload": "graph500"}, headers=auth(Role.scheduler))
    assert fitted.status_code == 200, fitted.text
    objects = InMemoryObjects()
    pub = _publisher(make_session_factory(make_engine(settings)), objects)
    pair = ("graph500", "cheapest")
    assert pub.publish(pair)
    body = objects.bodies[recommendation_object_name(*pair)]
    rec = Recommendation.from_object(body)

    logged = client.get(f"/v1/recommendations/{rec.recommendation_id}", headers=auth(Role.viewer))
    decision = logged.json()["recommendation"]
    assert decision["memory_bytes"] == SIZE and decision["sized_from"] == "request"
    assert decision["vcpus"] == VCPUS and decision["chosen"]["configuration"]["vcpus"] == VCPUS
    chosen = decision["chosen"]["configuration"]
    others = [
        c["configuration"] for c in decision["within_threshold"] if c["configuration"] != chosen
    ]
    assert len(others) >= 2, "the example's profile leaves several candidates within T"
    assert (rec.llc_ways, rec.slow_ratio) == (chosen["llc_ways"], chosen["slow_ratio"])
    # Algorithm 1's order after the pick (lowest packing penalty first), at most three.
    assert [(a.llc_ways, a.slow_ratio) for a in rec.alternatives] == [
        (c["llc_ways"], c["slow_ratio"]) for c in others[:MAX_ALTERNATIVES]
    ]
    # Each sized as the pick: the pods' request, split by its own ratio.
    assert (rec.dram_bytes, rec.slow_bytes) == split_memory(SIZE, rec.slow_ratio)
    for a in rec.alternatives:
        assert (a.dram_bytes, a.slow_bytes) == split_memory(SIZE, a.slow_ratio)
    assert body["spec"]["alternatives"] == [a.model_dump(mode="json") for a in rec.alternatives]


def test_a_fallback_offers_no_alternatives(settings: Settings) -> None:
    objects = InMemoryObjects()
    pub = _publisher(make_session_factory(make_engine(settings)), objects)
    assert pub.publish(("nobody", "cheapest"))
    (body,) = objects.bodies.values()
    assert body["spec"]["fallback"] and "alternatives" not in body["spec"]


def test_an_object_is_rewritten_when_its_alternatives_change_and_only_then() -> None:
    """The alternatives are what a pod placed through DRA may be given: another order or set of
    them is a change worth writing, a new decision with the same ones is not."""
    first = Alternative(llc_ways=20, slow_ratio=0.25, dram_bytes=6 * GIB, slow_bytes=2 * GIB)
    second = Alternative(llc_ways=4, slow_ratio=0.0, dram_bytes=8 * GIB, slow_bytes=0)
    offered = [[first, second], [first, second], [second, first], []]
    decided = iter(offered)

    def decide(workload: str, objective: str) -> Decided:
        rec = Recommendation(
            workload=workload,
            objective=objective,
            recommendation_id=f"r-{len(offered)}",
            dram_bytes=7 * GIB,
            slow_bytes=GIB,
            llc_ways=12,
            slow_ratio=0.125,
            alternatives=next(decided),
        )
        return Decided(rec, logged="stored")

    objects = InMemoryObjects()
    pub = RecommendationPublisher(objects, decide)
    written, kept = [], []
    for _ in offered:
        assert pub.publish(("graph500", "cheapest"))
        (body,) = objects.bodies.values()
        written.append(
            pub.metrics.registry.get_sample_value("tmc_publisher_writes_total", {"kind": "written"})
        )
        kept.append([a.llc_ways for a in Recommendation.from_object(body).alternatives])
    assert written == [1, 1, 2, 3]
    assert kept == [[20, 4], [20, 4], [4, 20], []]
