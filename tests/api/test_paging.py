"""List endpoints page with stable cursors on PostgreSQL: following `Link: rel="next"` visits
every row once, in order, even while rows are added; a cursor not given out is a 422."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from api.auth import Role
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
