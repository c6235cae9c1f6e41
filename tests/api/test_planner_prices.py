"""`POST /v1/planner/capacity` with a stored price profile by its one name, and the operator's own
machine kinds."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.auth import Role
from model import DEFAULT_PRICE_PROFILE
from tests.api.test_planner import _mix
from tests.fixtures.service import auth

GIB = 1 << 30
KIND = {"name": "lab-64G-512L", "cpus": 32, "dram_bytes": 64 * GIB, "llc_ways": 48}


def test_a_stored_price_profile_prices_the_operators_kind(client: TestClient) -> None:
    doubled = DEFAULT_PRICE_PROFILE.model_dump()
    doubled.update(
        name="lab-prices",
        vcpu_hour=doubled["vcpu_hour"] * 2,
        dram_gib_hour=doubled["dram_gib_hour"] * 2,
    )
    doubled.pop("version", None)
    made = client.post("/v1/price-profiles", json=doubled, headers=auth(Role.operator))
    assert made.status_code == 201, made.text
    key = made.json()["key"]
    body = {**_mix(), "kinds": [{**KIND, "local_slow_bytes": 512 * GIB}]}
    shipped = client.post("/v1/planner/capacity", json=body, headers=auth(Role.scheduler))
    assert shipped.status_code == 200, shipped.text
    mine = client.post(
        "/v1/planner/capacity", json={**body, "price_profile": key}, headers=auth(Role.scheduler)
    )
    assert mine.status_code == 200, mine.text
    assert mine.json()["price_profile"] == key and shipped.json()["price_profile"] == "paper-3dxp@1"
    (kind,) = mine.json()["kinds"]
    assert kind["kind"] == "lab-64G-512L"
    # Dearer CPUs and DRAM: the same machines cost more per hour.
    assert kind["machine_hour"] > shipped.json()["kinds"][0]["machine_hour"]


def test_an_unknown_price_profile_is_a_problem(client: TestClient) -> None:
    for key, status in (("nope@1", 404), ("no-version", 422)):
        r = client.post(
            "/v1/planner/capacity",
            json={**_mix(), "price_profile": key},
            headers=auth(Role.scheduler),
        )
        assert r.status_code == status, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert key in r.json()["detail"]
