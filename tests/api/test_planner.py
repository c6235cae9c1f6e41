"""The planner endpoints over the real service (PostgreSQL, Redis): auth, plans, bad input."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.auth import Role
from api.settings import Settings
from ledger import nodes as ledger_nodes
from ledger.types import NodeCapacity
from store.db import make_engine, make_session_factory, unit_of_work
from tests.fixtures.ledger import hold
from tests.fixtures.service import auth

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


def ledger_cluster(settings: Settings) -> None:
    """Three ready nodes (two on a rack pool), one not ready, and bound pods as the mirror
    records them: the first node is nearly empty, the others have room for its pods."""
    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        ledger_nodes.register_pool(session, "rack-1", 256 * GIB)
        for name, pool, local in (("n0", "rack-1", 0), ("n1", "rack-1", 0), ("n2", None, 128)):
            ledger_nodes.register_node(
                session,
                NodeCapacity(name, "pooled", 12, 24 * GIB, local * GIB, 48, pool),
                256 * GIB if pool else None,
            )
        ledger_nodes.register_node(
            session, NodeCapacity("down", "pooled", 12, 24 * GIB, 0, 48, None), None
        )
        wants = [
            ("n0", "web", "a", 4 * GIB, 6),
            ("n1", "web", "b", 2 * GIB, 20),
            ("n2", "kube-system", "dns", 0, 2),
            ("n2", "web", "c", 8 * GIB, 12),
            ("down", "web", "lost", 0, 1),
        ]
        low: dict[str, int] = {}  # each node's next free way: the pods hold disjoint runs
        for where, ns, pod, slow, ways in wants:
            at = low.get(where, 0)
            hold(
                session,
                where,
                f"uid-{pod}",
                namespace=ns,
                pod_name=pod,
                vcpus=4,
                dram_bytes=4 * GIB,
                slow_bytes=slow,
                slow_from_pool=where in ("n0", "n1") and slow > 0,  # no slow memory of their own
                llc_mask=((1 << ways) - 1) << at,
            )
            low[where] = at + ways
        # "down" goes down once its pod is placed.
        ledger_nodes.set_ready(session, "down", False)


def test_the_live_cluster_is_planned_from_the_ledger(
    client: TestClient, settings: Settings
) -> None:
    ledger_cluster(settings)
    url = "/v1/planner/rebalance/live"
    assert client.post(url, json={}).status_code == 401
    assert client.post(url, json={}, headers=auth(Role.viewer)).status_code == 403
    r = client.post(url, json={"pinned_namespaces": ["kube-system"]}, headers=auth(Role.operator))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["dry_run"] is True
    cluster = out["cluster"]
    assert (cluster["source"], cluster["nodes"], cluster["pods"]) == ("ledger", 3, 4)
    assert cluster["pinned"] == 1 and cluster["pools"] == {"rack-1": 256 * GIB}
    assert cluster["skipped"] == [
        {"pod": "web/lost", "node": "down", "reason": "its node is not ready or not in the ledger"}
    ]
    plan = out["plan"]
    assert plan["nodes_before"] == 3 and plan["nodes_after"] <= out["greedy"]["nodes_after"]
    assert plan["nodes_after"] == 2 and "n2" not in plan["freed"]
    assert all(m["pod"] != "kube-system/dns" for m in plan["moves"])
    # Nothing was stored or moved: the ledger still holds every pod where it was.
    again = client.post(url, json={}, headers=auth(Role.scheduler)).json()
    assert again["plan"]["nodes_before"] == 3


def test_the_live_plan_refuses_unknown_nodes_and_bounds_its_input(
    client: TestClient, settings: Settings
) -> None:
    ledger_cluster(settings)
    url = "/v1/planner/rebalance/live"
    r = client.post(url, json={"nodes": ["n0", "nope"]}, headers=auth(Role.operator))
    assert r.status_code == 422 and "not in the ledger: nope" in r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    refused: list[dict[str, object]] = [
        {"time_limit_seconds": 1e9},
        {"max_moves": -1},
        {"extra": 1},
        {"nodes": []},
    ]
    for bad in refused:
        r = client.post(url, json=bad, headers=auth(Role.operator))
        assert r.status_code == 422, bad
    only = client.post(url, json={"nodes": ["n0", "n1"]}, headers=auth(Role.operator)).json()
    assert only["cluster"]["nodes"] == 2 and only["plan"]["nodes_after"] == 1


def test_shadow_prices_price_what_the_mix_is_short_of(client: TestClient) -> None:
    mix = _mix()
    light = mix["classes"][0]["options"][1]  # type: ignore[index]
    light["dram_bytes"] = GIB  # the light option: 1 GiB of DRAM and 6 GiB of slow memory
    body = {"classes": mix["classes"], "kind": mix["kinds"][0]}  # type: ignore[index]
    assert client.post("/v1/planner/shadow-prices", json=body).status_code == 401
    r = client.post("/v1/planner/shadow-prices", json=body, headers=auth(Role.scheduler))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["dry_run"] is True and out["price_profile"] == "paper-3dxp@1"
    # The class may shift DRAM to slow memory: 60 one-vCPU VMs need 5 machines' cores, and
    # their DRAM then fits (1 GiB each: 2.5 machines'); cores are what the mix is short of.
    assert out["binding"] == ["cpu"] and out["machines"] == 5.0
    shadow, listed, blend = (out["currencies"][k] for k in ("shadow", "list", "blend"))
    assert shadow["dram_gib_hour"] == 0.0 and shadow["vcpu_hour"] > listed["vcpu_hour"]
    assert blend["vcpu_hour"] == (listed["vcpu_hour"] + shadow["vcpu_hour"]) / 2
    bad = {**body, "blend": 2}
    r = client.post("/v1/planner/shadow-prices", json=bad, headers=auth(Role.scheduler))
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
