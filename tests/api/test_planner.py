"""The planner endpoints over the real service (PostgreSQL, Redis): auth, plans, bad input."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.auth import Role
from tests.api.conftest import auth

GIB = 1 << 30


def _mix() -> dict[str, object]:
    return {
        "classes": [
            {
                "name": "a",
                "arrivals_per_hour": 60,
                "options": [
                    {
                        "vcpus": 1,
                        "dram_bytes": 8 * GIB,
                        "slow_bytes": 0,
                        "llc_ways": 2,
                        "seconds": 3600,
                        "cost": 1.0,
                    },
                    {
                        "vcpus": 1,
                        "dram_bytes": 2 * GIB,
                        "slow_bytes": 6 * GIB,
                        "llc_ways": 2,
                        "seconds": 3600,
                        "cost": 1.02,
                    },
                ],
            }
        ],
        "kinds": [
            {
                "name": "24G-128L",
                "cpus": 12,
                "dram_bytes": 24 * GIB,
                "local_slow_bytes": 128 * GIB,
                "llc_ways": 48,
            }
        ],
        "fill": 1.0,
    }


def test_capacity_plan_needs_a_token_and_beats_greedy(client: TestClient) -> None:
    assert client.post("/v1/planner/capacity", json=_mix()).status_code == 401
    viewer = client.post("/v1/planner/capacity", json=_mix(), headers=auth(Role.viewer))
    assert viewer.status_code == 403
    r = client.post("/v1/planner/capacity", json=_mix(), headers=auth(Role.scheduler))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["dry_run"] is True and body["price_profile"] == "paper-3dxp@1"
    # One class, 60 VMs at once on average, room for 73 (95th percentile): 7 machines of 12
    # CPUs; greedy puts them in 8 GiB of DRAM each, three to a machine: 25 whole machines.
    assert body["best"]["machines"] == 7 and body["best"]["greedy_machines"] == 25
    assert body["best"]["status"] == "optimal" and body["peak_quantile"] == 0.95


def test_capacity_rejects_nonsense_with_problem_json(client: TestClient) -> None:
    bad = _mix()
    bad["fill"] = 5
    r = client.post("/v1/planner/capacity", json=bad, headers=auth(Role.operator))
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
    huge = _mix()
    huge["classes"][0]["options"] = [  # type: ignore[index]
        {"vcpus": 64, "dram_bytes": GIB, "slow_bytes": 0, "llc_ways": 1, "seconds": 1, "cost": 1}
    ]
    r = client.post("/v1/planner/capacity", json=huge, headers=auth(Role.operator))
    assert r.status_code == 422 and "no machine kind" in r.text


def test_rebalance_is_a_dry_run_with_the_greedy_answer_beside_it(client: TestClient) -> None:
    node = {"cpus": 12, "dram_bytes": 24 * GIB, "slow_bytes": 128 * GIB, "llc_ways": 48}
    body = {
        "nodes": [{"name": f"n{i}", **node} for i in range(2)],
        "pods": [
            {
                "name": "a",
                "node": 0,
                "vcpus": 1,
                "dram_bytes": GIB,
                "llc_ways": 4,
                "way_start": 12,
                "movable": False,
            },
            {
                "name": "b",
                "node": 0,
                "vcpus": 1,
                "dram_bytes": GIB,
                "llc_ways": 4,
                "way_start": 28,
                "movable": False,
            },
            {
                "name": "c",
                "node": 0,
                "vcpus": 1,
                "dram_bytes": GIB,
                "llc_ways": 4,
                "way_start": 44,
                "movable": False,
            },
            {
                "name": "big",
                "node": 1,
                "vcpus": 1,
                "dram_bytes": GIB,
                "llc_ways": 20,
                "way_start": 0,
            },
        ],
    }
    r = client.post("/v1/planner/rebalance", json=body, headers=auth(Role.scheduler))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["dry_run"] is True
    assert out["plan"]["freed"] == ["n1"] and out["greedy"]["nodes_after"] == 2
    bad = {**body, "pods": [{**body["pods"][0], "way_start": 46}]}
    r = client.post("/v1/planner/rebalance", json=bad, headers=auth(Role.scheduler))
    assert r.status_code == 422 and "ways lie outside" in r.text
