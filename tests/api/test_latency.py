"""The server's latency settings: collection tuned while the app runs (and undone after), its
pauses in /metrics, and a recommendation encoded once per request."""

from __future__ import annotations

import gc
import json
import os
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from api.app import create_app
from api.auth import Role
from api.services import recommendations as decisions
from api.services.recommendations import RecommendationRecord
from api.settings import Settings
from tests.fixtures.service import auth, example


def samples(client: TestClient, name: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name:
                found[sample.labels.get("generation", "")] = sample.value
    return found


def test_collection_is_tuned_while_the_app_runs_and_restored_after(settings: Settings) -> None:
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    tuned = settings.model_copy(update={"gc_gen0_threshold": 12_345})
    with TestClient(create_app(tuned)) as client:
        assert gc.get_threshold() == (12_345, before[1], before[2])
        assert gc.get_freeze_count() > frozen_before  # start-up's objects are out of collections
        gc.collect()
        pauses = samples(client, "tmc_gc_pause_seconds_count")
        assert pauses.get("2", 0) >= 1
        assert samples(client, "tmc_worker_pid") == {"": os.getpid()}
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen_before


def test_zero_keeps_the_interpreters_thresholds(settings: Settings) -> None:
    before = gc.get_threshold()
    with TestClient(create_app(settings.model_copy(update={"gc_gen0_threshold": 0}))):
        assert gc.get_threshold() == before


@pytest.mark.parametrize("value", ["-1", "1000001", "lots"])
def test_the_threshold_is_bounded(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMC_GC_GEN0_THRESHOLD", value)
    with pytest.raises(ValidationError, match="gc_gen0_threshold"):
        Settings()


def test_a_recommendation_is_encoded_once(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The explanation (~15 KB) is encoded once per request: the decision log stores the same
    bytes the response sends, and the standard library's encoder never sees it."""
    client.post(
        "/v1/profiles",
        content=example("graph500"),
        headers={**auth(Role.agent), "Content-Type": "application/json"},
    ).raise_for_status()
    made: list[RecommendationRecord] = []
    encodings: list[object] = []
    decide = decisions.decide
    dumps, std_dumps = orjson.dumps, json.dumps

    def spy(*args: Any, **kwargs: Any) -> RecommendationRecord:
        done = decide(*args, **kwargs)
        made.append(done)
        return done

    def counted(value: object, *args: Any, **kwargs: Any) -> bytes:
        encodings.append(value)
        return dumps(value, *args, **kwargs)

    def std_counted(value: object, *args: Any, **kwargs: Any) -> str:
        encodings.append(value)
        return std_dumps(value, *args, **kwargs)

    monkeypatch.setattr(decisions, "decide", spy)
    monkeypatch.setattr(orjson, "dumps", counted)
    monkeypatch.setattr(json, "dumps", std_counted)
    response = client.post(
        "/recommend", json={"workload": "graph500"}, headers=auth(Role.scheduler)
    )
    assert response.status_code == 200, response.text
    assert len(made) == 1
    # The recommendation is encoded once (as the decision log stores it), and the response
    # embeds those bytes: no encoder ever sees a dict that holds the recommendation.
    stored = made[0].recommendation_json
    assert stored in response.content
    assert len([e for e in encodings if isinstance(e, dict) and "chosen" in e]) == 1
    assert not [e for e in encodings if isinstance(e, dict) and "recommendation" in e]
    logged = client.get(f"/v1/recommendations/{made[0].id}", headers=auth(Role.viewer))
    assert logged.status_code == 200, logged.text
    # The log has every input, and what it says is what the response said.
    assert logged.json()["recommendation"] == orjson.loads(bytes(stored))
    assert response.json()["recommendation"] == orjson.loads(bytes(stored))
    assert response.json()["id"] == made[0].id
