"""The readers of the ledger show the LLC ways a DRA door's pod holds as a count (its run the
node's choice), never as a mask of 0, on PostgreSQL through the real app: the placements, the
reservations and each node's reserved ways."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.auth import Role
from api.settings import Settings
from ledger import store as ledger
from ledger.types import Held
from model.resources import GIB
from store.db import make_engine, make_session_factory, unit_of_work
from tests.fixtures.service import auth

VIEWER = auth(Role.viewer)


def seed(client: TestClient, settings: Settings) -> None:
    """One node of 16 ways: a pod placed by tmc on ways 0-3, and one through the DRA door
    holding 6 ways as a count."""
    node = {
        "name": "node-a",
        "host_kind": "dra-kind",
        "cpus": 16,
        "dram_bytes": 64 * GIB,
        "slow_bytes": 128 * GIB,
        "llc_ways": 16,
        "pool": None,
    }
    got = client.put("/v1/cluster/nodes", json=node, headers=auth(Role.operator))
    assert got.status_code == 200, got.text

    def held(uid: str, mask: int, counted: int) -> ledger.Placed:
        return ledger.Placed(
            Held(uid, "tenant", uid, "node-a", 2, 4 * GIB, 0, False, mask, counted_ways=counted),
            recommendation_id=None,
            slow_ratio=0.0,
        )

    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        ledger.record(session, [held("placed", 0b1111, 0), held("claimed", 0, 6)])


def test_a_dra_pods_ways_read_as_a_count(client: TestClient, settings: Settings) -> None:
    seed(client, settings)
    placements = {p["pod"]: p for p in client.get("/v1/placements", headers=VIEWER).json()}
    assert (placements["claimed"]["llc_mask"], placements["claimed"]["reserved_llc_ways"]) == (
        None,
        6,
    )
    assert (placements["placed"]["llc_mask"], placements["placed"]["reserved_llc_ways"]) == (
        0b1111,
        4,
    )
    one = client.get("/v1/placements/tenant/claimed", headers=VIEWER)
    assert one.status_code == 200, one.text
    assert (one.json()["llc_mask"], one.json()["reserved_llc_ways"]) == (None, 6)

    held = {r["pod_name"]: r for r in client.get("/v1/cluster/reservations", headers=VIEWER).json()}
    assert (held["claimed"]["llc_mask"], held["claimed"]["llc_ways"]) == (None, 6)
    assert (held["placed"]["llc_mask"], held["placed"]["llc_ways"]) == (0b1111, 4)

    (node,) = client.get("/v1/cluster/nodes", headers=VIEWER).json()
    # The mask is the union of tmc's runs; the node's reserved ways count the claim's too.
    assert node["llc_mask"] == 0b1111
    assert (node["reserved_llc_ways"], node["counted_llc_ways"]) == (10, 6)
    assert node["utilization"]["llc"] == 10 / 16
