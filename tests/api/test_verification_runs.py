"""Verification runs over the real service (PostgreSQL, Redis): stored per profile, idempotent,
bounded, and used by the workload's next recommendation."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.auth import Role
from api.services import verification
from tests.fixtures.service import auth, example

AGENT = {**auth(Role.agent), "Content-Type": "application/json"}
URL = "/v1/workloads/graph500/verification-runs"


def _recommend(client: TestClient) -> dict[str, Any]:
    r = client.post("/recommend", headers=auth(Role.scheduler), json={"workload": "graph500"})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()["recommendation"]
    return out


def _run(rec: dict[str, Any], run_id: str, factor: float) -> dict[str, Any]:
    """The run the recommendation asks for, measured `factor` times its predicted time."""
    v = rec["verification"]
    predicted = rec["best"]["predicted_seconds"]
    return {
        "run_id": run_id,
        "slow_ratio": v["next_slow_ratio"],
        "llc_ways": v["next_llc_ways"],
        "seconds": factor * predicted,
    }


def test_a_measured_run_corrects_the_next_recommendation(client: TestClient) -> None:
    assert client.post("/v1/profiles", content=example("graph500"), headers=AGENT).is_success
    first = _recommend(client)
    v = first["verification"]
    assert v["runs"] == 0 and v["next_slow_ratio"] == first["best"]["configuration"]["slow_ratio"]
    run = _run(first, "pod-uid-1", 1.25)
    created = client.post(URL, json=run, headers=AGENT)
    assert created.status_code == 201, created.text
    assert created.json()["run_id"] == "pod-uid-1" and created.json()["workload"] == "graph500"
    again = client.post(URL, json=run, headers=AGENT)
    assert again.status_code == 200 and again.json()["id"] == created.json()["id"]
    changed = client.post(URL, json={**run, "seconds": run["seconds"] * 2}, headers=AGENT)
    assert changed.status_code == 409
    assert changed.headers["content-type"].startswith("application/problem+json")
    listed = client.get(URL, headers=auth(Role.viewer)).json()
    assert [x["run_id"] for x in listed] == ["pod-uid-1"]

    second = _recommend(client)
    v2 = second["verification"]
    assert v2["runs"] == 1 and v2["largest_error"] == pytest.approx(0.25)
    assert v2["verified"][0]["slow_ratio"] == run["slow_ratio"]
    assert v2["verified"][0]["measured_over_predicted"] == pytest.approx(1.25)
    # The measured ratio now costs 25 % more: the cost of the old optimum went up by that much.
    old = first["best"]["configuration"]
    same = [
        c
        for c in second["within_threshold"] + [second["best"]]
        if c["configuration"]["slow_ratio"] == old["slow_ratio"]
        and c["configuration"]["llc_ways"] == old["llc_ways"]
    ]
    for c in same:
        assert c["cost"] == pytest.approx(1.25 * first["best"]["cost"])


def test_runs_need_an_uploader_and_a_fitted_workload(client: TestClient) -> None:
    run = {"run_id": "r1", "slow_ratio": 0.5, "llc_ways": 4, "seconds": 10.0}
    assert client.post(URL, json=run).status_code == 401
    assert client.post(URL, json=run, headers=auth(Role.viewer)).status_code == 403
    assert client.post(URL, json=run, headers=AGENT).status_code == 404
    assert client.get(URL, headers=auth(Role.viewer)).status_code == 404


@pytest.mark.parametrize(
    "bad",
    [
        {"run_id": "r1", "slow_ratio": 1.5, "llc_ways": 4, "seconds": 10.0},
        {"run_id": "r1", "slow_ratio": 0.5, "llc_ways": 65, "seconds": 10.0},
        {"run_id": "r1", "slow_ratio": 0.5, "llc_ways": 4, "seconds": 0},
        {"run_id": "r1", "slow_ratio": 0.5, "llc_ways": 4, "seconds": 1e300},
        {"run_id": "has space", "slow_ratio": 0.5, "llc_ways": 4, "seconds": 10.0},
        {"run_id": "r1", "slow_ratio": 0.5, "llc_ways": 4, "seconds": 10.0, "extra": 1},
        {"run_id": "r1", "slow_ratio": "NaN", "llc_ways": 4, "seconds": 10.0},
    ],
)
def test_bad_runs_are_422_and_store_nothing(client: TestClient, bad: dict[str, Any]) -> None:
    assert client.post("/v1/profiles", content=example("graph500"), headers=AGENT).is_success
    r = client.post(URL, json=bad, headers=AGENT)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert client.get(URL, headers=auth(Role.viewer)).json() == []


def test_concurrent_posts_of_one_run_store_it_once(client: TestClient) -> None:
    assert client.post("/v1/profiles", content=example("graph500"), headers=AGENT).is_success
    run = {"run_id": "same", "slow_ratio": 0.3, "llc_ways": 4, "seconds": 12.5}
    with ThreadPoolExecutor(8) as pool:
        codes = sorted(
            pool.map(lambda _: client.post(URL, json=run, headers=AGENT).status_code, range(8))
        )
    assert codes.count(201) == 1 and set(codes) <= {200, 201}
    assert len(client.get(URL, headers=auth(Role.viewer)).json()) == 1


def test_a_profile_holds_a_bounded_number_of_runs(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verification, "MAX_STORED_RUNS", 3)
    assert client.post("/v1/profiles", content=example("graph500"), headers=AGENT).is_success
    for i in range(3):
        run = {"run_id": f"r{i}", "slow_ratio": 0.1 * i, "llc_ways": 4, "seconds": 10.0}
        assert client.post(URL, json=run, headers=AGENT).status_code == 201
    over = {"run_id": "r9", "slow_ratio": 0.5, "llc_ways": 4, "seconds": 10.0}
    r = client.post(URL, json=over, headers=AGENT)
    assert r.status_code == 409 and "already has 3" in r.text
