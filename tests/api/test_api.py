"""The REST API against real PostgreSQL and Redis, with migrations applied."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from api.auth import Role
from api.demo import example_host_kind
from api.settings import Settings
from api.utilization import take_snapshot
from model.resources import GIB
from store.db import make_engine, make_session_factory, unit_of_work
from tests.fixtures.service import auth, example

LOCAL_KIND = example_host_kind()
OPERATOR = auth(Role.operator)
AGENT = auth(Role.agent)
VIEWER = auth(Role.viewer)
SCHEDULER = auth(Role.scheduler)


def upload(client: TestClient, body: bytes, headers: dict[str, str] = AGENT):
    return client.post(
        "/v1/profiles", content=body, headers={**headers, "Content-Type": "application/json"}
    )


def register_local_kind(client: TestClient) -> None:
    """The §4.1 machine the example bundles were profiled on, as a host kind of the cluster."""
    client.put(
        "/v1/cluster/host-kinds",
        headers=OPERATOR,
        json={
            "name": LOCAL_KIND,
            "machine": {
                "cpus": 12,
                "dram_bytes": 24 * GIB,
                "slow_bytes": 128 * GIB,
                "llc_ways": 48,
            },
        },
    ).raise_for_status()


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "database": "ok", "redis": "ok"}


def test_upload_is_idempotent_by_content(client: TestClient) -> None:
    first = upload(client, example("graph500"))
    assert first.status_code == 201, first.text
    # Same measurements, other spacing and key order: the same profile.
    reordered = json.dumps(dict(reversed(list(json.loads(example("graph500")).items())))).encode()
    again = upload(client, reordered)
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    listed = client.get("/v1/workloads", headers=VIEWER).json()
    assert [w["name"] for w in listed] == ["graph500"]
    assert len(listed[0]["profiles"]) == 1


def test_concurrent_duplicate_uploads_store_one_profile(client: TestClient) -> None:
    body = example("memcached")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: upload(client, body), range(16)))
    assert sorted(r.status_code for r in results) == [200] * 15 + [201]
    assert len({r.json()["id"] for r in results}) == 1
    profiles = client.get("/v1/workloads/memcached", headers=VIEWER).json()["profiles"]
    assert len(profiles) == 1


def test_unknown_host_kind_is_accepted_but_flagged(client: TestClient) -> None:
    created = upload(client, example("xsbench")).json()
    assert created["host_kind_known"] is False
    register_local_kind(client)
    created = upload(client, example("canneal")).json()
    assert created["host_kind_known"] is True


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b["runs"][0].__setitem__("instructions", 0), "runs[0].instructions"),
        (lambda b: b["runs"][1].__setitem__("cycles", -5), "runs[1].cycles"),
        (lambda b: b.__setitem__("vcpus", "four"), "vcpus"),
        (lambda b: b["runs"][2]["samples"].__setitem__("ghost", 3), "runs[2].samples.ghost"),
        (
            lambda b: b.__setitem__("footprint_bytes", b["footprint_bytes"] + 1),
            "structures[].size_bytes",
        ),
    ],
)
def test_invalid_bundles_are_422_with_the_field(client: TestClient, mutate, field: str) -> None:
    bundle = json.loads(example("graph500"))
    mutate(bundle)
    response = upload(client, json.dumps(bundle).encode())
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == 422
    assert field in [e["field"] for e in body["errors"]]
    assert client.get("/v1/workloads", headers=VIEWER).json() == []  # nothing half-written


@pytest.mark.parametrize(
    "body", [b"{not json", b"\xff\xfe\x00", b"[" * 50_000, b"", b"null", b"[]"]
)
def test_malformed_bodies_are_422(client: TestClient, body: bytes) -> None:
    response = upload(client, body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"


def test_huge_body_is_413(client: TestClient) -> None:
    response = upload(client, b" " * (5 * 1024 * 1024))
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"


def test_auth_roles(client: TestClient) -> None:
    assert client.get("/v1/workloads").status_code == 401
    assert client.get("/v1/workloads", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert upload(client, example("graph500"), VIEWER).status_code == 403
    assert (
        client.post("/recommend", json={"workload": "graph500"}, headers=AGENT).status_code == 403
    )
    assert client.get("/v1/workloads", headers=AGENT).status_code == 403
    denied = client.post("/v1/price-profiles", headers=SCHEDULER, json={})
    assert denied.status_code == 403
    assert denied.headers["content-type"] == "application/problem+json"


def test_recommend_by_name_and_replay_from_the_log(client: TestClient) -> None:
    upload(client, example("graph500")).raise_for_status()
    response = client.post(
        "/recommend",
        headers=SCHEDULER,
        json={
            "workload": "graph500",
            "objective": "slo:5%",
            "utilization": {"dram": 0.9, "slow": 0.1},
        },
    )
    assert response.status_code == 200, response.text
    rec = response.json()
    assert rec["utilization_source"] == "request"
    chosen = rec["recommendation"]["chosen"]
    assert chosen["slowdown"] <= 0.05
    assert rec["recommendation"]["within_threshold"][0] == chosen
    stored = client.get(f"/v1/recommendations/{rec['id']}", headers=VIEWER).json()
    assert stored["recommendation"] == rec["recommendation"]
    assert stored["bundle_hash"] == rec["bundle_hash"]
    listed = client.get(
        "/v1/recommendations?workload=graph500&objective=slo:5%", headers=VIEWER
    ).json()
    assert [r["id"] for r in listed] == [rec["id"]]


def test_recommend_inline_bundle_and_v1_path(client: TestClient) -> None:
    bundle = json.loads(example("canneal"))
    response = client.post(
        "/v1/recommend", headers=OPERATOR, json={"profile": bundle, "grid": "host"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["recommendation"]["grid_size"] == 11 * 48


def test_recommend_errors(client: TestClient) -> None:
    unknown = client.post("/recommend", headers=SCHEDULER, json={"workload": "nope"})
    assert unknown.status_code == 404
    assert unknown.headers["content-type"] == "application/problem+json"
    bad_objective = client.post(
        "/recommend", headers=SCHEDULER, json={"workload": "nope", "objective": "fastest"}
    )
    assert bad_objective.status_code == 422
    wrong_type = client.post("/recommend", headers=SCHEDULER, json={"threshold": "high"})
    assert wrong_type.status_code == 422
    assert wrong_type.json()["errors"][0]["field"] == "body.threshold"
    neither = client.post("/recommend", headers=SCHEDULER, json={})
    assert neither.status_code == 422
    out_of_range = client.post(
        "/recommend", headers=SCHEDULER, json={"workload": "x", "utilization": {"cpu": 2}}
    )
    assert out_of_range.status_code == 422


def test_live_utilization_from_the_cluster(client: TestClient) -> None:
    register_local_kind(client)
    for i in range(2):
        client.put(
            "/v1/cluster/nodes",
            headers=OPERATOR,
            json={
                "name": f"n{i}",
                "host_kind": LOCAL_KIND,
                "cpus": 12,
                "dram_bytes": 24 * GIB,
                "slow_bytes": 128 * GIB,
                "llc_ways": 48,
            },
        ).raise_for_status()
    capacity = client.get("/v1/cluster/capacity", headers=VIEWER).json()
    assert capacity["cpus"] == 24 and capacity["nodes"] == 2
    util = client.get("/v1/cluster/utilization", headers=VIEWER).json()
    assert util["source"] == "database"
    upload(client, example("xsbench")).raise_for_status()
    rec = client.post("/recommend", headers=SCHEDULER, json={"workload": "xsbench"}).json()
    assert rec["utilization_source"] == "database"
    assert rec["host_kind_known"] is True


def test_price_profiles_are_versioned(client: TestClient) -> None:
    body = {
        "name": "cxl-pool",
        "vcpu_hour": 0.03,
        "dram_gib_hour": 0.004,
        "slow_gib_hour": 0.001,
        "llc_way_hour": 0.002,
        "provenance": "test",
    }
    v1 = client.post("/v1/price-profiles", headers=OPERATOR, json=body)
    assert v1.status_code == 201 and v1.json()["key"] == "cxl-pool@1"
    v2 = client.post("/v1/price-profiles", headers=OPERATOR, json={**body, "slow_gib_hour": 0.002})
    assert v2.json()["key"] == "cxl-pool@2"
    client.post("/v1/price-profiles/cxl-pool@2/default", headers=OPERATOR).raise_for_status()
    listed = {p["key"]: p for p in client.get("/v1/price-profiles", headers=VIEWER).json()}
    assert listed["cxl-pool@2"]["is_default"] and not listed["paper-3dxp@1"]["is_default"]
    upload(client, example("graph500")).raise_for_status()
    rec = client.post("/recommend", headers=SCHEDULER, json={"workload": "graph500"}).json()
    assert rec["recommendation"]["price_profile"] == "cxl-pool@2"
    assert client.get("/v1/price-profiles/cxl-pool@2", headers=VIEWER).json()["used"] is True
    assert client.get("/v1/price-profiles/nope@1", headers=VIEWER).status_code == 404
    assert client.get("/v1/price-profiles/nope", headers=VIEWER).status_code == 422


def test_workload_model_and_grid(client: TestClient) -> None:
    upload(client, example("graph500")).raise_for_status()
    # No worker runs here: the fit is queued, and reading the model never fits it.
    pending = client.get("/v1/workloads/graph500/model", headers=VIEWER)
    assert pending.status_code == 409, pending.text
    assert pending.json()["title"] == "Not fitted"
    # The first decision fits the profile (as the task would).
    client.post("/recommend", headers=SCHEDULER, json={"workload": "graph500"}).raise_for_status()
    model = client.get("/v1/workloads/graph500/model", headers=VIEWER).json()
    assert len(model["points"]) == 77
    assert model["diagnostics"]["path"] in {"stall_counters", "eq4"}


def test_metrics(client: TestClient) -> None:
    upload(client, example("graph500")).raise_for_status()
    text = client.get("/metrics").text
    assert "tmc_http_requests_total" in text
    assert 'tmc_profile_uploads_total{result="created"} 1.0' in text


def test_utilization_history_is_recorded_by_snapshots(
    client: TestClient, settings: Settings
) -> None:
    sessions = make_session_factory(make_engine(settings))
    for _ in range(3):
        with unit_of_work(sessions) as session:
            take_snapshot(session, None, ttl_seconds=60)
    history = client.get("/v1/cluster/history?minutes=5", headers=VIEWER).json()
    assert len(history) == 3
    assert [h["at"] for h in history] == sorted(h["at"] for h in history)
    assert set(history[0]) == {"at", "cpu", "dram", "slow", "llc"}
