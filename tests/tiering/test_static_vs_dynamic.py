"""The static plan beside the dynamic-tiering advice: one program, one host, the same facts, and
an answer that never says "nothing can be saved" without saying why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.auth import Role
from model.bundle import ProfileBundle
from model.fit import fit
from model.grid import PAPER_SLOW_RATIOS
from model.predict import Predictor
from model.static_vs_dynamic import compare_with_static_plan, with_static_plan
from model.tiering import advise
from tests.fixtures.service import auth

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tiering"


def bundle(name: str) -> ProfileBundle:
    return ProfileBundle.model_validate_json((EXAMPLES / f"{name}.json").read_text())


def test_nothing_saved_says_which_loss_stops_it() -> None:
    b = bundle("hashjoin")
    assert b.tiering is not None
    advice = advise(b.tiering)
    assert advice.sizing.saved_share == 0 and advice.sizing.why_no_saving
    # The numbers it names are the advice's own.
    assert f"{advice.sizing.loss_target:.1%}" in advice.sizing.why_no_saving
    assert any(advice.sizing.why_no_saving in line for line in advice.explanation)


@pytest.mark.parametrize("name", ["hashjoin", "bfs"])
def test_the_static_plan_is_the_recommendations_own_answer(name: str) -> None:
    b = bundle(name)
    assert b.tiering is not None
    predictor = Predictor(fit(b))
    advice = advise(b.tiering)
    out = compare_with_static_plan(advice, predictor).static_plan
    assert out is not None
    target = advice.sizing.loss_target
    # The largest slow ratio of the grid within the target with every way, and the plan's bytes
    # there: the same numbers `tmc recommend` would place.
    assert out.predicted_slowdown <= target
    larger = [r for r in PAPER_SLOW_RATIOS if r > out.slow_ratio]
    assert all(predictor.predict_one(r, out.llc_ways)[1] > target for r in larger)
    placed = predictor.placement(out.slow_ratio, out.llc_ways)
    assert out.slow_bytes == sum(p.slow_bytes for p in placed)
    assert out.agrees == (advice.sizing.saved_bytes >= out.slow_bytes)


def test_a_disagreement_is_stated_with_its_reason() -> None:
    b = bundle("hashjoin")
    assert b.tiering is not None
    advice = with_static_plan(advise(b.tiering), b)
    s = advice.static_plan
    assert s is not None and not s.agrees and s.slow_bytes > 0
    # Said in the explanation, naming the different question and what stops the dynamic one.
    assert s.reason in advice.explanation
    assert "different questions" in s.reason and "never moves a page" in s.reason
    assert advice.sizing.why_no_saving is not None and advice.sizing.why_no_saving in s.reason


def test_a_bare_tiering_profile_gets_no_comparison() -> None:
    b = bundle("bfs")
    assert b.tiering is not None
    assert with_static_plan(advise(b.tiering), None).static_plan is None


def test_the_api_compares_a_stored_bundle(client: TestClient) -> None:
    data = json.loads((EXAMPLES / "hashjoin.json").read_text())
    up = client.post("/v1/profiles", json=data, headers=auth(Role.agent))
    assert up.status_code in (200, 201), up.text
    r = client.post(
        "/v1/tiering/recommend",
        json={"workload": data["workload"]["name"]},
        headers=auth(Role.scheduler),
    )
    assert r.status_code == 200, r.text
    static = r.json()["static_plan"]
    assert static is not None and static["slow_bytes"] > 0 and static["reason"]
    assert static["reason"] in r.json()["explanation"]
