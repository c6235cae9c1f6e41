"""List endpoints page with stable cursors on PostgreSQL: following `Link: rel="next"` visits
every row once, in order, even while rows are added; a cursor not given out is a 422."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.auth import Role
from api.paging import LIST_PAGE_MAX
from api.settings import Settings
from model.resources import GIB
from store.db import make_engine, make_session_factory, unit_of_work
from tests.fixtures.ledger import hold
from tests.fixtures.service import auth, example

AGENT = auth(Role.agent)
SCHEDULER = auth(Role.scheduler)
VIEWER = auth(Role.viewer)
WORKLOADS = ["canneal", "graph500", "xsbench"]


def follow(client: TestClient, url: str) -> list[list[dict[str, Any]]]:
    """Every page from `url`, by the Link header."""
    pages = []
    while True:
        got = client.get(url, headers=VIEWER)
        assert got.status_code == 200, got.text
        pages.append(got.json())
        link = got.headers.get("link")
        if link is None:
            assert "x-next-cursor" not in got.headers
            return pages
        assert link.endswith('>; rel="next"')
        assert got.headers["x-next-cursor"] in link
        url = link[1 : link.index(">")].removeprefix("http://testserver")


def decide(client: TestClient, threshold: float) -> str:
    body = {"workload": "graph500", "threshold": threshold, "utilization": {"dram": 0.5}}
    got = client.post("/recommend", headers=SCHEDULER, json=body)
    assert got.status_code == 200, got.text
    rec_id: str = got.json()["id"]
    return rec_id


def test_the_decision_log_pages_by_cursor_and_keeps_its_place(client: TestClient) -> None:
    for name in WORKLOADS:
        client.post("/v1/profiles", content=example(name), headers=AGENT).raise_for_status()
    made = [decide(client, t / 100) for t in range(7)]
    pages = follow(client, "/v1/recommendations?limit=3")
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [r["id"] for p in pages for r in p] == made[::-1]
    # A decision made between two pages is not seen on the later page, and none is repeated.
    first = client.get("/v1/recommendations?limit=3", headers=VIEWER)
    newer = decide(client, 0.2)
    rest = follow(client, first.headers["link"][1 : first.headers["link"].index(">")])
    seen = [r["id"] for r in first.json()] + [r["id"] for p in rest for r in p]
    assert seen == made[::-1] and newer not in seen
    # Filters hold across pages.
    filtered = follow(client, "/v1/recommendations?limit=2&workload=graph500&objective=cheapest")
    assert sum(len(p) for p in filtered) == 8
    # Workloads page by name.
    names = [w["name"] for p in follow(client, "/v1/workloads?limit=2") for w in p]
    assert names == sorted(WORKLOADS)
    assert all(w["profiles"] for w in client.get("/v1/workloads", headers=VIEWER).json())


def test_a_cursor_not_given_out_is_refused(client: TestClient) -> None:
    for url in [
        "/v1/recommendations?cursor=not-base64!",
        "/v1/recommendations?cursor=WyJ4Il0",  # ["x"]: the wrong shape
        "/v1/recommendations?cursor=WyJ4IiwieSJd",  # ["x","y"]: not a time
        "/v1/workloads?cursor=WzFd",  # [1]: not a name
        "/v1/workloads?cursor=" + "A" * 600,
    ]:
        got = client.get(url, headers=VIEWER)
        assert got.status_code == 422, (url, got.text)
        assert got.headers["content-type"] == "application/problem+json"
        assert "cursor" in got.json()["detail"]


def _fleet(client: TestClient, settings: Settings) -> None:
    """Seven nodes (three drawing on one rack pool) and two pods on each of five of them."""
    admin = auth(Role.operator)
    pool = {"name": "rack-a", "slow_bytes": 96 * GIB}
    assert client.put("/v1/cluster/pools", json=pool, headers=admin).status_code == 200
    for i in range(7):
        node = {
            "name": f"node-{i}",
            "host_kind": "pager-kind",
            "cpus": 16,
            "dram_bytes": 64 * GIB,
            "slow_bytes": 0 if i < 3 else 128 * GIB,
            "llc_ways": 16,
            "pool": "rack-a" if i < 3 else None,
        }
        got = client.put("/v1/cluster/nodes", json=node, headers=admin)
        assert got.status_code == 200, got.text
    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        for i in range(5):
            for j in range(2):
                hold(
                    session,
                    f"node-{i}",
                    f"uid-{i}-{j}",
                    namespace="tenant",
                    pod_name=f"pod-{i}-{j}",
                    vcpus=2,
                    dram_bytes=4 * GIB,
                    slow_bytes=8 * GIB,
                    slow_from_pool=i < 3,  # nodes 0-2 have no slow memory of their own
                    llc_mask=0b11 << (2 * j),
                )


def test_the_fleets_lists_page_by_cursor(client: TestClient, settings: Settings) -> None:
    _fleet(client, settings)
    whole = client.get(f"/v1/cluster/nodes?limit={LIST_PAGE_MAX}", headers=VIEWER).json()
    pages = follow(client, "/v1/cluster/nodes?limit=2")
    assert [len(p) for p in pages] == [2, 2, 2, 1]
    # A page says of each node what the whole list says: a pooled node's share of its pool
    # counts every member, not only those on its page.
    assert [n for p in pages for n in p] == whole
    assert [n["name"] for n in whole] == [f"node-{i}" for i in range(7)]
    pooled = whole[0]
    assert pooled["utilization"]["slow"] == pytest.approx(2 * 8 / 32)  # 16 GiB of 96/3 GiB

    admin = auth(Role.operator)
    client.put("/v1/cluster/pools", json={"name": "rack-b", "slow_bytes": GIB}, headers=admin)
    pools = follow(client, "/v1/cluster/pools?limit=1")
    # A full page names a next one, which may be empty.
    assert [[p["name"] for p in page] for page in pools] == [["rack-a"], ["rack-b"], []]
    rack_a = pools[0][0]
    assert rack_a["nodes"] == ["node-0", "node-1", "node-2"]
    assert rack_a["reserved_slow_bytes"] == 3 * 2 * 8 * GIB

    held = [r for p in follow(client, "/v1/cluster/reservations?limit=4") for r in p]
    assert [r["pod_uid"] for r in held] == [f"uid-{i}-{j}" for i in range(5) for j in range(2)]
    placed = follow(client, "/v1/placements?limit=4")
    assert [len(p) for p in placed] == [4, 4, 2]
    assert [p["pod_uid"] for page in placed for p in page] == [r["pod_uid"] for r in held]
    on_node = follow(client, "/v1/placements?limit=1&node=node-2")
    assert [p["pod_uid"] for page in on_node for p in page] == ["uid-2-0", "uid-2-1"]

    # A pod placed on an earlier node between two pages is not seen later; none is repeated.
    first = client.get("/v1/cluster/reservations?limit=4", headers=VIEWER)
    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        hold(
            session,
            "node-0",
            "uid-0-9",
            namespace="tenant",
            pod_name="late",
            dram_bytes=GIB,
            llc_mask=0b10000,
        )
    link = first.headers["link"]
    rest = follow(client, link[1 : link.index(">")].removeprefix("http://testserver"))
    seen = [r["pod_uid"] for r in first.json()] + [r["pod_uid"] for p in rest for r in p]
    assert seen == [r["pod_uid"] for r in held]

    for url in [
        "/v1/cluster/nodes?cursor=WzFd",  # [1]: not a name
        "/v1/cluster/reservations?cursor=WyJ4Il0",  # ["x"]: the wrong shape
        "/v1/placements?cursor=not-base64!",
        f"/v1/cluster/nodes?limit={LIST_PAGE_MAX + 1}",
        "/v1/placements?limit=0",
    ]:
        got = client.get(url, headers=VIEWER)
        assert got.status_code == 422, (url, got.text)
        assert got.headers["content-type"] == "application/problem+json"
