"""`POST /v1/planner/capacity` with kinds that state their sockets, one socket's LLC size and
their slow tier, and classes that name the host their ways were measured on (the real service:
PostgreSQL, Redis, the plan in its own process)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.auth import Role
from tests.fixtures.service import auth

GIB = 1 << 30
MIB = 1 << 20


def _request(**kind_fields: Any) -> dict[str, Any]:
    option = {"vcpus": 1, "dram_bytes": GIB, "slow_bytes": 0, "llc_ways": 12, "seconds": 3600,
              "cost": 1.0}  # fmt: skip
    return {
        "classes": [
            {
                "name": "w",
                "arrivals_per_hour": 30,
                "options": [option],
                "measured_on": {
                    "llc_ways": 48,
                    "llc_size_bytes": 48 * MIB,
                    "slow_tier": "optane",
                },
            }
        ],
        "kinds": [
            {
                "name": "15w",
                "cpus": 64,
                "dram_bytes": "256GiB",
                "local_slow_bytes": "1TiB",
                "llc_ways": 15,
                "llc_size_bytes": "45MiB",
                "slow_tier": "cxl_local",
                "sockets": 2,
                **kind_fields,
            },
            # An old kind: no sockets, size or slow tier; 48 ways like the profile's host.
            {"name": "old", "cpus": 64, "dram_bytes": "256GiB", "llc_ways": 48},
            {"name": "15w-unsized", "cpus": 64, "dram_bytes": "256GiB", "llc_ways": 15},
        ],
        "time_limit_seconds": 3.0,
    }


def test_a_profile_is_planned_in_each_kinds_ways_with_the_reasons(client: TestClient) -> None:
    r = client.post("/v1/planner/capacity", json=_request(), headers=auth(Role.scheduler))
    assert r.status_code == 200, r.text
    kinds = {k["kind"]: k for k in r.json()["kinds"]}
    assert kinds["15w"]["option_ways"] == {"w": [4]}
    assert kinds["15w"]["reasons"] == [
        "w: measured with optane slow memory, this kind has cxl_local: its times and costs"
        " assume the measured slow tier's latency",
        "w: rescaled from 12 of 48 ways (12 MiB) to 4 of 15 ways",
    ]
    # Two sockets of 15 ways: three VMs of 4 ways in each, six a machine (not the seven that
    # 30 ways in all would take).
    assert kinds["15w"]["status"] != "infeasible" and kinds["15w"]["machines"] >= 1
    assert max(sum(m.values()) for m in kinds["15w"]["machines_content"]) == 6
    assert kinds["old"]["option_ways"] == {"w": [12]} and kinds["old"]["reasons"] == []
    assert kinds["15w-unsized"]["machines"] == -1
    assert kinds["15w-unsized"]["note"].startswith(
        "w: refused: this kind's LLC size is unknown (llc_size_bytes, one socket's)"
    )
    assert kinds["15w-unsized"]["total_hour"] is None


def test_only_kinds_that_refuse_the_profile_is_a_422_with_the_reason(client: TestClient) -> None:
    body = _request()
    body["kinds"] = body["kinds"][2:]
    r = client.post("/v1/planner/capacity", json=body, headers=auth(Role.scheduler))
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "no machine kind can host w" in r.text and "LLC size is unknown" in r.text


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"sockets": -1}, "body.kinds[0].sockets"),
        ({"sockets": 10**30}, "body.kinds[0].sockets"),
        ({"llc_ways": 10**30}, "body.kinds[0].llc_ways"),
        ({"llc_size_bytes": "1PiB"}, "body.kinds[0].llc_size_bytes"),
        ({"llc_size_bytes": 0}, "body.kinds[0].llc_size_bytes"),
        ({"slow_tier": "nvme"}, "body.kinds[0].slow_tier"),
        ({"slow_tier": "none"}, "body.kinds[0]"),
    ],
)
def test_a_bad_kind_is_a_problem_naming_its_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    r = client.post("/v1/planner/capacity", json=_request(**change), headers=auth(Role.scheduler))
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert field in [e["field"] for e in r.json()["errors"]], r.json()


def test_a_measured_on_host_is_bounded(client: TestClient) -> None:
    for host, says in (
        ({"llc_ways": 10**30}, "body.classes[0].measured_on.llc_ways"),
        ({"llc_ways": 8}, "body.classes[0]"),  # the option's 12 ways are more than 8
        ({"llc_ways": 48, "llc_size_bytes": -1}, "body.classes[0].measured_on.llc_size_bytes"),
    ):
        body = _request()
        body["classes"][0]["measured_on"] = host
        r = client.post("/v1/planner/capacity", json=body, headers=auth(Role.scheduler))
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert says in [e["field"] for e in r.json()["errors"]], r.json()
