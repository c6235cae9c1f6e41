"""POST /v1/tiering/recommend on the real service (PostgreSQL, Redis): auth, inline and stored
profiles, problem+json errors."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.auth import Role
from model.tiering import TieringProfile
from tests.fixtures.service import auth
from tests.tiering.conftest import profile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
URL = "/v1/tiering/recommend"


def inline() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(profile("strided").model_dump_json())
    return data


def test_inline_profile_gets_advice(client: TestClient) -> None:
    r = client.post(
        URL, json={"profile": inline(), "loss_target": 0.05}, headers=auth(Role.scheduler)
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["schema_version"] == "tmc.tiering-advice/v1"
    assert 0.0 <= body["sizing"]["saved_share"] < 1.0
    assert 1 <= len(body["period"]["trials"]) <= 3
    assert body["knobs"]["next_trial"]["sampling_period"] == 5000
    assert body["explanation"]


def test_trials_move_the_knob_advice_on(client: TestClient) -> None:
    first = client.post(URL, json={"profile": inline()}, headers=auth(Role.operator)).json()
    trial = {"knobs": first["knobs"]["next_trial"], "wall_seconds": 20.0}
    second = client.post(
        URL, json={"profile": inline(), "trials": [trial]}, headers=auth(Role.operator)
    )
    assert second.status_code == 200, second.text
    k = second.json()["knobs"]
    assert k["trials_done"] == 1 and k["is_default"] and k["next_trial"] != trial["knobs"]


def test_auth_is_required(client: TestClient) -> None:
    assert client.post(URL, json={"profile": inline()}).status_code == 401
    r = client.post(URL, json={"profile": inline()}, headers=auth(Role.viewer))
    assert r.status_code == 403
    assert r.headers["content-type"] == "application/problem+json"


def test_bad_requests_are_problem_json(client: TestClient) -> None:
    h = auth(Role.scheduler)
    neither = client.post(URL, json={}, headers=h)
    assert neither.status_code == 422 and "exactly one" in neither.json()["detail"]
    bad = inline()
    bad["hotness"]["window_miss_share"][3] = 0.0
    r = client.post(URL, json={"profile": bad}, headers=h)
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"
    assert any("hotness" in e["field"] for e in r.json()["errors"])
    huge = client.post(URL, json={"profile": inline(), "loss_target": 7}, headers=h)
    assert huge.status_code == 422
    wrong = client.post(
        URL,
        json={
            "profile": inline(),
            "trials": [{"knobs": {"sampling_period": 1}, "wall_seconds": 1}],
        },
        headers=h,
    )
    assert wrong.status_code == 422 and "missing" in wrong.json()["detail"]


def test_stored_profile_by_workload_name(client: TestClient) -> None:
    h = auth(Role.scheduler)
    assert client.post(URL, json={"workload": "nobody"}, headers=h).status_code == 404
    plain = json.loads((EXAMPLES / "graph500.json").read_text())
    assert client.post("/v1/profiles", json=plain, headers=auth(Role.agent)).status_code in (
        200,
        201,
    )
    r = client.post(URL, json={"workload": plain["workload"]["name"]}, headers=h)
    assert r.status_code == 409 and "no tiering section" in r.json()["detail"]
    plain["tiering"] = inline()
    plain["workload"]["version"] = "with-tiering"
    up = client.post("/v1/profiles", json=plain, headers=auth(Role.agent))
    assert up.status_code in (200, 201), up.text
    r = client.post(URL, json={"workload": plain["workload"]["name"]}, headers=h)
    assert r.status_code == 200, r.text
    assert (
        r.json()["sizing"]["fast_bytes"] % TieringProfile.model_validate(inline()).page_bytes == 0
    )


def test_inputs_at_the_bounds_are_422_never_500(client: TestClient) -> None:
    h = auth(Role.scheduler)
    for path in (("llc_misses",), ("structures", 0, "reuse", 0, "reuse_misses")):
        bad = inline()
        node: Any = bad
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = 5e-324
        r = client.post(URL, json={"profile": bad}, headers=h)
        assert r.status_code == 422, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert any(path[-1] in e["field"] for e in r.json()["errors"])
    # In a bundle, the same value is refused at upload, so no stored profile can carry it.
    bundle = json.loads((EXAMPLES / "graph500.json").read_text())
    bundle["workload"]["name"] = "subnormal-misses"
    bundle["tiering"] = inline()
    bundle["tiering"]["llc_misses"] = 5e-324
    up = client.post("/v1/profiles", json=bundle, headers=auth(Role.agent))
    assert up.status_code == 422, up.text


def test_a_real_programs_agent_bundle_gets_advice_by_name(client: TestClient) -> None:
    """examples/tiering/bfs.json is `tmc-agent profile --backend trace --tiering` of a real C
    program: uploaded as the agent does, advised by the workload's name."""
    bundle = json.loads((EXAMPLES / "tiering" / "bfs.json").read_text())
    up = client.post("/v1/profiles", json=bundle, headers=auth(Role.agent))
    assert up.status_code in (200, 201), up.text
    r = client.post(
        URL,
        json={"workload": bundle["workload"]["name"], "time_budget_seconds": 1.0},
        headers=auth(Role.scheduler),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["sizing"]["fast_bytes"] % bundle["tiering"]["page_bytes"] == 0
    assert body["period"]["trials"][0]["in_use"]
    assert body["budget"]["cpu_seconds_allowed"] == 1.0


def _answered_plans(base: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "tmc_plans_total" and s.labels.get("outcome") == "answered"
    )


def test_a_burst_of_advice_runs_beside_the_request_path(served: str) -> None:
    # Each advice runs as a plan does, in a child process at a lower priority: /healthz keeps
    # answering meanwhile (its latency under 40 at their bounds is bench.planner_load's figure).
    headers = auth(Role.scheduler)
    before = _answered_plans(served)
    body = {"profile": inline(), "knob_budget": 1000, "time_budget_seconds": 1.0}
    answers: list[int] = []

    def ask() -> None:
        with httpx.Client(timeout=120) as c:
            answers.append(c.post(f"{served}{URL}", json=body, headers=headers).status_code)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    waits: list[float] = []
    with httpx.Client(timeout=30) as c:
        while any(t.is_alive() for t in threads):
            started = time.perf_counter()
            assert c.get(f"{served}/healthz").status_code == 200
            waits.append(time.perf_counter() - started)
            time.sleep(0.01)
    for t in threads:
        t.join()
    assert answers == [200] * 8, answers
    assert _answered_plans(served) - before == 8  # each one went through the plan runner
    assert max(waits) < 2.0, f"/healthz waited {max(waits):.1f} s"
