"""The publisher's work grows with what changed: a refresh decides nothing when the cluster's
utilization stayed within its tolerance, every pair when it moved or the decisions aged; a new
fit or verification run decides its workload's pairs only, new default prices all of them
(`WhatChanged` read from PostgreSQL)."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from api.auth import Role
from api.settings import Settings
from bench.publisher_refresh import InMemoryObjects
from model import Utilization
from model.node_contract import Recommendation
from scheduler.decisions import Changed, WhatChanged
from scheduler.publisher import RecommendationPublisher
from scheduler.status import Decided
from store.db import make_engine, make_session_factory
from tests.fixtures.service import auth, example


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def publisher(
    pairs: int,
) -> tuple[RecommendationPublisher, list[tuple[str, str]], Clock, list[Utilization]]:
    decided: list[tuple[str, str]] = []
    clock = Clock()
    util = [Utilization(cpu=0.5, dram=0.5, slow=0.2, llc=0.3)]

    def decide(workload: str, objective: str) -> Decided:
        decided.append((workload, objective))
        return Decided(Recommendation(workload=workload, objective=objective, llc_ways=2))

    pub = RecommendationPublisher(
        InMemoryObjects(),
        decide,
        clock=clock,
        utilization=lambda: util[0],
        utilization_tolerance=0.05,
        max_age_seconds=3600,
    )
    for i in range(pairs):
        pub.publish((f"w{i % 50}", f"slo:{i // 50}%"))
    decided.clear()
    return pub, decided, clock, util


def test_a_refresh_decides_nothing_unless_utilization_moved_or_decisions_aged() -> None:
    pub, decided, clock, util = publisher(3000)
    # The first refresh decides every pair (nothing is known of what they were decided with).
    assert pub.refresh() == 3000 and pub.publish_pending() == 3000
    decided.clear()
    # Utilization within the tolerance, for the rest of the hour: no decision at all.
    for minute in range(1, 60):
        clock.now += 60
        util[0] = Utilization(cpu=0.5 + 0.04 * (minute % 2), dram=0.52, slow=0.2, llc=0.3)
        assert pub.refresh() == 0
    assert pub.publish_pending() == 0 and decided == []
    # One resource moved past it: every pair, once.
    util[0] = Utilization(cpu=0.5, dram=0.6, slow=0.2, llc=0.3)
    assert pub.refresh() == 3000 and pub.publish_pending() == 3000
    assert len(set(decided)) == 3000
    decided.clear()
    # And the decisions age: every pair again after max_age_seconds, even if nothing moved.
    clock.now += 3599
    assert pub.refresh() == 0
    clock.now += 1
    assert pub.refresh() == 3000


def test_a_change_decides_the_pairs_it_touches() -> None:
    pub, decided, _, _ = publisher(3000)
    assert pub.changed(Changed({"w7"})) == 60 and pub.publish_pending() == 60
    assert {w for w, _ in decided} == {"w7"}
    decided.clear()
    assert pub.changed(Changed(set(), prices=True)) == 3000
    assert pub.changed(Changed(set())) == 0


def seen_within(changes: WhatChanged, seconds: float = 30.0) -> set[str]:
    """The workloads changes name until some do (a profile's fit is made by a worker)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = changes().workloads
        if found:
            return found
        time.sleep(0.2)
    return set()


def test_what_changed_is_read_from_the_database(client: TestClient, settings: Settings) -> None:
    sessions = make_session_factory(make_engine(settings))
    changes = WhatChanged(sessions)
    client.post("/v1/profiles", content=example("graph500"), headers=auth(Role.agent))
    changes()  # the first look learns what exists
    # A new fit of xsbench.
    client.post("/v1/profiles", content=example("xsbench"), headers=auth(Role.agent))
    decided = client.post("/recommend", json={"workload": "xsbench"}, headers=auth(Role.scheduler))
    assert decided.status_code == 200, decided.text  # its fit exists by now
    assert seen_within(changes) == {"xsbench"}
    assert changes() == Changed(set(), False)
    # A verification run of graph500 (an operator's).
    run = {"run_id": "r1", "slow_ratio": 0.5, "llc_ways": 12, "seconds": 400.0}
    got = client.post(
        "/v1/workloads/graph500/verification-runs", json=run, headers=auth(Role.operator)
    )
    assert got.status_code == 201, got.text
    assert changes().workloads == {"graph500"}
    # Another default price profile: every pair.
    made = client.post(
        "/v1/price-profiles",
        json={
            "name": "cheaper-slow",
            "vcpu_hour": 0.03,
            "dram_gib_hour": 0.004,
            "slow_gib_hour": 0.001,
            "llc_way_hour": 0.002,
            "provenance": "a test's prices",
        },
        headers=auth(Role.operator),
    )
    assert made.status_code == 201, made.text
    assert changes() == Changed(set(), False)  # a new profile is not the default yet
    key = made.json()["key"]
    swapped = client.post(f"/v1/price-profiles/{key}/default", headers=auth(Role.operator))
    assert swapped.status_code == 200, swapped.text
    assert changes().prices is True
    assert changes().prices is False
