"""The decision log on real PostgreSQL: one row per distinct decision of a pair, repeats counted
on it; old decisions pruned, never one a pod was placed by or a pair's newest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from api.auth import Role
from api.settings import Settings
from api.utilization import take_snapshot
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import PlacementRecord, RecommendationRow
from tests.fixtures.service import auth, example

AGENT = auth(Role.agent)
SCHEDULER = auth(Role.scheduler)
OPERATOR = auth(Role.operator)


def decide(client: TestClient, objective: str = "cheapest", **extra: Any) -> dict[str, Any]:
    body = {"workload": "graph500", "objective": objective, **extra}
    got = client.post("/recommend", headers=SCHEDULER, json=body)
    assert got.status_code == 200, got.text
    answer: dict[str, Any] = got.json()
    return answer


def rows(settings: Settings) -> list[RecommendationRow]:
    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        found = session.scalars(select(RecommendationRow).order_by(RecommendationRow.created_at))
        return list(found)


def test_a_repeated_decision_is_counted_not_stored_again(
    client: TestClient, settings: Settings
) -> None:
    client.post("/v1/profiles", content=example("graph500"), headers=AGENT).raise_for_status()
    memo = client.app.state.tmc.models.decisions  # type: ignore[attr-defined]
    first = decide(client, utilization={"dram": 0.5})
    again = [decide(client, utilization={"dram": 0.5}) for _ in range(5)]
    assert {a["id"] for a in again} == {first["id"]}
    [row] = rows(settings)
    # Counts are written at most every `write_every` seconds: none yet, they are pending.
    assert row.repeats == 0 and row.last_decided_at is None
    memo.write_every = 0.0
    decide(client, utilization={"dram": 0.5})
    [row] = rows(settings)
    assert row.repeats == 6 and row.last_decided_at is not None
    # Another process, which never saw it, finds it by the pair's newest row.
    memo.ttl_seconds = 0.0
    assert decide(client, utilization={"dram": 0.5})["id"] == first["id"]
    [row] = rows(settings)
    assert row.repeats == 7
    metrics = client.get("/metrics").text
    assert 'tmc_decisions_logged_total{stored="repeat"} 7.0' in metrics
    assert 'tmc_decisions_logged_total{stored="stored"} 1.0' in metrics
    assert row.last_decided_at is not None and row.last_decided_at > row.created_at
    # Another objective is another pair; another choice (a full cluster's DRAM) another row.
    other = decide(client, "slo:5%", utilization={"dram": 0.5})
    assert other["id"] != first["id"]
    moved = decide(client, utilization={"dram": 1.0, "cpu": 0.0, "slow": 0.0, "llc": 0.0})
    was, now = (d["recommendation"]["chosen"]["configuration"] for d in (first, moved))
    assert (moved["id"] != first["id"]) == (was != now)
    # A new default price profile changes the inputs: a new row even for the same choice.
    prices = {
        "name": "dearer",
        "provenance": "test",
        "vcpu_hour": 0.05,
        "dram_gib_hour": 0.005,
        "slow_gib_hour": 0.002,
        "llc_way_hour": 0.001,
    }
    created = client.post("/v1/price-profiles", headers=OPERATOR, json=prices)
    assert created.status_code == 201, created.text
    key = created.json()["key"]
    assert client.post(f"/v1/price-profiles/{key}/default", headers=OPERATOR).status_code == 200
    repriced = decide(client, utilization={"dram": 0.5})
    assert repriced["id"] != first["id"]
    listed = client.get("/v1/recommendations?workload=graph500", headers=auth(Role.viewer))
    assert len(listed.json()) == len(rows(settings))


def test_retention_keeps_what_an_audit_needs(client: TestClient, settings: Settings) -> None:
    client.post("/v1/profiles", content=example("graph500"), headers=AGENT).raise_for_status()
    ids = [decide(client, "slo:5%")["id"], decide(client, "cheapest")["id"]]
    ids += [decide(client, f"slo:{p}%")["id"] for p in (3, 7, 10)]
    ids.append(decide(client, "slo:5%", threshold=0.05)["id"])  # the slo:5% pair's newest
    placed, pruned = ids[0], ids[1]
    sessions = make_session_factory(make_engine(settings))
    long_ago = datetime.now(UTC) - timedelta(days=90)
    with unit_of_work(sessions) as session:
        session.execute(update(RecommendationRow).values(created_at=long_ago))
        # Every pair but slo:5% and cheapest has a newer decision, made today.
        session.execute(
            update(RecommendationRow)
            .where(RecommendationRow.id.in_([ids[5]]))
            .values(created_at=datetime.now(UTC))
        )
        session.add(
            PlacementRecord(
                pod_uid="pod-1",
                namespace="ns",
                pod_name="p",
                node_name="n",
                recommendation_id=placed,
                slow_ratio=0.0,
                llc_ways=4,
            )
        )
    # Today, the cheapest pair is decided again at another threshold: a new decision, newer.
    ids.append(decide(client, "cheapest", threshold=0.1)["id"])
    with unit_of_work(sessions) as session:
        before = session.scalar(select(func.count()).select_from(RecommendationRow))
        take_snapshot(session, None, ttl_seconds=60, decision_retention=timedelta(days=30))
    left = {r.id for r in rows(settings)}
    assert placed in left  # a pod was placed by it, and its placement log row lives
    assert ids[5] in left  # recent
    assert {ids[2], ids[3], ids[4]} <= left  # slo:3%, 7%, 10%: each its pair's newest
    assert ids[6] in left and pruned not in left
    assert before is not None and len(left) == before - 1
