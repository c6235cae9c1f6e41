"""Verification runs over the real service (PostgreSQL, Redis): stored per profile, idempotent,
bounded, and used by the workload's next recommendation."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.auth import Role, token_hash
from api.services import verification
from api.settings import Settings
from ledger import nodes as ledger_nodes
from ledger.types import NodeCapacity
from model.bundle import ProfileBundle
from model.fit import fit
from model.predict import Predictor
from model.resources import GIB
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import ApiToken
from tests.fixtures.ledger import hold
from tests.fixtures.service import auth, example

AGENT = {**auth(Role.agent), "Content-Type": "application/json"}
OPERATOR = auth(Role.operator)
URL = "/v1/workloads/graph500/verification-runs"


def _recommend(client: TestClient, workload: str = "graph500") -> dict[str, Any]:
    r = client.post("/recommend", headers=auth(Role.scheduler), json={"workload": workload})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()["recommendation"]
    out["decision_id"] = r.json()["id"]
    return out


def place(
    settings: Settings,
    uid: str,
    decision_id: str | None,
    slow_ratio: float,
    ways: int,
    node: str = "n1",
    namespace: str = "default",
) -> None:
    """A bound pod as the mirror records it: its reservation and its placement record."""
    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        for name in ("n1", "n2"):
            cap = NodeCapacity(name, "k", 64, 1024 * GIB, 1024 * GIB, 64, None)
            ledger_nodes.register_node(session, cap)
        hold(
            session,
            node,
            uid,
            dram_bytes=GIB,
            llc_mask=(1 << ways) - 1,
            namespace=namespace,
            recommendation_id=decision_id,
            slow_ratio=slow_ratio,
        )


def node_token(settings: Settings, node: str) -> dict[str, str]:
    """The headers of the agent of `node` (its token is made on first use)."""
    token = f"tmc_test_agent_{node}"
    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        known = select(ApiToken).where(ApiToken.token_hash == token_hash(token))
        if session.scalars(known).first() is None:
            session.add(ApiToken(name=node, role="agent", token_hash=token_hash(token), node=node))
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def _run(rec: dict[str, Any], run_id: str, factor: float) -> dict[str, Any]:
    """The run the recommendation asks for, measured `factor` times the model's prediction of
    that configuration (the service fits the same example bundle)."""
    v = rec["verification"]
    predicted, _ = _PREDICTOR.predict_one(v["next_slow_ratio"], v["next_llc_ways"])
    return {
        "run_id": run_id,
        "slow_ratio": v["next_slow_ratio"],
        "llc_ways": v["next_llc_ways"],
        "seconds": factor * predicted,
    }


_PREDICTOR = Predictor(fit(ProfileBundle.model_validate_json(example("graph500"))))


def test_a_measured_run_corrects_the_next_recommendation(
    client: TestClient, settings: Settings
) -> None:
    assert client.post("/v1/profiles", content=example("graph500"), headers=AGENT).is_success
    first = _recommend(client)
    v = first["verification"]
    # The next run goes to the configuration the choice depends on, never to one a reference
    # run already measured (graph500's choice is fastmin's: all DRAM, the fewest ways).
    chosen = first["best"]["configuration"]
    assert v["runs"] == 0 and v["next_slow_ratio"] is not None
    if v["chosen_measured"]:
        assert (v["next_slow_ratio"], v["next_llc_ways"]) != (
            chosen["slow_ratio"],
            chosen["llc_ways"],
        )
    run = _run(first, "pod-uid-1", 1.25)
    place(settings, "pod-uid-1", first["decision_id"], run["slow_ratio"], run["llc_ways"])
    created = client.post(URL, json=run, headers=node_token(settings, "n1"))
    assert created.status_code == 201, created.text
    assert created.json()["run_id"] == "pod-uid-1" and created.json()["workload"] == "graph500"
    again = client.post(URL, json=run, headers=node_token(settings, "n1"))
    assert again.status_code == 200 and again.json()["id"] == created.json()["id"]
    changed = client.post(
        URL, json={**run, "seconds": run["seconds"] * 2}, headers=node_token(settings, "n1")
    )
    assert changed.status_code == 409
    assert changed.headers["content-type"].startswith("application/problem+json")
    listed = client.get(URL, headers=auth(Role.viewer)).json()
    assert [x["run_id"] for x in listed] == ["pod-uid-1"]

    second = _recommend(client)
    v2 = second["verification"]
    assert v2["runs"] == 1 and v2["largest_error"] == pytest.approx(0.25, rel=2e-2)
    assert v2["verified"][0]["slow_ratio"] == run["slow_ratio"]
    # One run of 1 % noise, weighed against the prior: close to, not exactly, what it measured.
    assert v2["verified"][0]["measured_over_predicted"] == pytest.approx(1.25, rel=2e-2)
    # The measured configuration now takes 25 % longer than the model said, wherever it is
    # listed, and the next run goes elsewhere.
    for c in second["within_threshold"] + [second["best"]]:
        conf = c["configuration"]
        if (conf["slow_ratio"], conf["llc_ways"]) == (run["slow_ratio"], run["llc_ways"]):
            assert c["predicted_seconds"] == pytest.approx(run["seconds"], rel=2e-2)
    assert (v2["next_slow_ratio"], v2["next_llc_ways"]) != (run["slow_ratio"], run["llc_ways"])


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


def test_concurrent_posts_of_one_run_store_it_once(client: TestClient, settings: Settings) -> None:
    assert client.post("/v1/profiles", content=example("graph500"), headers=AGENT).is_success
    place(settings, "same", _recommend(client)["decision_id"], 0.3, 4)
    run = {"run_id": "same", "slow_ratio": 0.3, "llc_ways": 4, "seconds": 12.5}
    n1 = node_token(settings, "n1")
    with ThreadPoolExecutor(8) as pool:
        codes = sorted(
            pool.map(lambda _: client.post(URL, json=run, headers=n1).status_code, range(8))
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
        assert client.post(URL, json=run, headers=OPERATOR).status_code == 201
    # At the bound the oldest run goes: a full table never refuses the run that corrects it.
    over = {"run_id": "r9", "slow_ratio": 0.5, "llc_ways": 4, "seconds": 10.0}
    assert client.post(URL, json=over, headers=OPERATOR).status_code == 201
    listed = client.get(URL, headers=auth(Role.viewer)).json()
    assert [x["run_id"] for x in listed] == ["r1", "r2", "r9"]


# -- who may speak for a run ------------------------------------------------------------------


def test_an_agent_cannot_report_a_run_of_no_placed_pod(
    client: TestClient, settings: Settings
) -> None:
    for name in ("graph500", "xsbench"):
        assert client.post("/v1/profiles", content=example(name), headers=AGENT).is_success
    # What once made every graph500 decision a 422, and what once steered xsbench to ratio 0.9.
    poison = {"run_id": "x", "slow_ratio": 0.5, "llc_ways": 4, "seconds": 5e-324}
    steer = {"run_id": "y", "slow_ratio": 0.9, "llc_ways": 1, "seconds": 0.05}
    for url, run in ((URL, poison), ("/v1/workloads/xsbench/verification-runs", steer)):
        r = client.post(url, json=run, headers=node_token(settings, "n1"))
        assert r.status_code == 403, r.text
        assert "no pod tmc placed" in r.json()["detail"]
        # A token that names no node reports no run at all, placed or not.
        r = client.post(url, json=run, headers=AGENT)
        assert r.status_code == 403 and "names no node" in r.json()["detail"]
    assert client.get(URL, headers=auth(Role.viewer)).json() == []
    assert _recommend(client)["verification"]["runs"] == 0


def test_a_node_token_speaks_for_its_own_nodes_pods_only(
    client: TestClient, settings: Settings
) -> None:
    assert client.post("/v1/profiles", content=example("graph500"), headers=AGENT).is_success
    decision = _recommend(client)["decision_id"]
    place(settings, "pod-on-n1", decision, 0.3, 4, node="n1")
    run = {"run_id": "pod-on-n1", "slow_ratio": 0.3, "llc_ways": 4, "seconds": 12.0}
    other = client.post(URL, json=run, headers=node_token(settings, "n2"))
    assert other.status_code == 403 and "speaks for node n2" in other.json()["detail"]
    own = client.post(URL, json=run, headers=node_token(settings, "n1"))
    assert own.status_code == 201, own.text


def test_a_run_must_be_its_placements_workload_and_configuration(
    client: TestClient, settings: Settings
) -> None:
    for name in ("graph500", "xsbench"):
        assert client.post("/v1/profiles", content=example(name), headers=AGENT).is_success
    place(settings, "pod-a", _recommend(client)["decision_id"], 0.3, 4)
    elsewhere = {"run_id": "pod-a", "slow_ratio": 0.9, "llc_ways": 1, "seconds": 12.0}
    r = client.post(URL, json=elsewhere, headers=node_token(settings, "n1"))
    assert r.status_code == 422 and "placed at slow ratio 0.3 with 4" in r.json()["detail"]
    right = {**elsewhere, "slow_ratio": 0.3, "llc_ways": 4}
    r = client.post(
        "/v1/workloads/xsbench/verification-runs", json=right, headers=node_token(settings, "n1")
    )
    assert r.status_code == 422 and "not placed for this workload" in r.json()["detail"]
    place(settings, "pod-fallback", None, 0.0, 4)
    fallback = {**right, "run_id": "pod-fallback", "slow_ratio": 0.0}
    assert client.post(URL, json=fallback, headers=node_token(settings, "n1")).status_code == 422


def test_an_operator_records_any_run_and_deletes_one(client: TestClient) -> None:
    assert client.post("/v1/profiles", content=example("graph500"), headers=AGENT).is_success
    run = {"run_id": "bench-1", "slow_ratio": 0.2, "llc_ways": 12, "seconds": 30.0}
    assert client.post(URL, json=run, headers=OPERATOR).status_code == 201
    assert client.delete(f"{URL}/bench-1", headers=auth(Role.agent)).status_code == 403
    assert client.delete(f"{URL}/bench-1", headers=OPERATOR).status_code == 204
    assert client.get(URL, headers=auth(Role.viewer)).json() == []
    missing = client.delete(f"{URL}/bench-1", headers=OPERATOR)
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")


def test_runs_that_put_an_slo_out_of_reach_give_a_result_naming_them(
    client: TestClient, settings: Settings
) -> None:
    assert client.post("/v1/profiles", content=example("graph500"), headers=AGENT).is_success
    body = {"workload": "graph500", "objective": "slo:5%"}
    first = client.post("/recommend", headers=auth(Role.scheduler), json=body)
    assert first.status_code == 200, first.text
    rec = first.json()["recommendation"]
    assert rec["objective_met"] is True and rec["unmet"] is None
    ways = max(p["llc_ways"] for p in rec["pareto_frontier"])
    # All of it in DRAM with every way ran 30 % longer than fastmax: nothing can keep 5 %.
    place(settings, "pod-uid-9", first.json()["id"], 0.0, ways)
    run = {
        "run_id": "pod-uid-9",
        "slow_ratio": 0.0,
        "llc_ways": ways,
        "seconds": 1.3 * rec["fastmax_seconds"],
    }
    assert client.post(URL, json=run, headers=node_token(settings, "n1")).status_code == 201
    after = client.post("/recommend", headers=auth(Role.scheduler), json=body)
    assert after.status_code == 200, after.text
    out = after.json()["recommendation"]
    assert out["objective_met"] is False
    unmet = out["unmet"]
    assert [r["run_id"] for r in unmet["runs"]] == ["pod-uid-9"]
    assert unmet["runs"][0]["measured_over_predicted"] > 1.2
    assert "pod-uid-9" in unmet["reason"] and "fix the values" not in unmet["reason"]
    assert out["chosen"]["slowdown_upper"] == pytest.approx(unmet["closest_slowdown_upper"])


def test_a_run_says_what_the_node_applied(client: TestClient, settings: Settings) -> None:
    assert client.post("/v1/profiles", content=example("graph500"), headers=AGENT).is_success
    first = _recommend(client)
    run = _run(first, "pod-uid-5", 1.0)
    place(settings, "pod-uid-5", first["decision_id"], run["slow_ratio"], run["llc_ways"])
    applied = {
        "enforced_by": "tmc-nri",
        "llc_mask": "0xff",
        "dram_bytes": 4 << 30,
        "slow_bytes": 8 << 30,
        "containers": 2,
        "applied": ["intelRdt tmc-pod-5 L3:0=ff", "cpuset.mems 0,2"],
    }
    created = client.post(URL, json={**run, "applied": applied}, headers=node_token(settings, "n1"))
    assert created.status_code == 201, created.text
    assert created.json()["applied"] == applied
    listed = client.get(URL, headers=auth(Role.viewer)).json()
    assert listed[0]["applied"] == applied
    # The same run with another account of what was applied is another run: refused.
    other = {**applied, "applied": ["cpuset.mems 0"]}
    assert (
        client.post(
            URL, json={**run, "applied": other}, headers=node_token(settings, "n1")
        ).status_code
        == 409
    )
    # Bounded like every other field.
    for bad in ({"llc_mask": "ff"}, {"containers": 0}, {"applied": ["x" * 201]}, {"what": 1}):
        got = client.post(
            URL, json={**run, "applied": {**applied, **bad}}, headers=node_token(settings, "n1")
        )
        assert got.status_code == 422, (bad, got.text)
