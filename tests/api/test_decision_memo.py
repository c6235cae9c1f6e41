"""Algorithm 1's answers kept by their complete inputs (api.services.models.ModelCache.results), on real
PostgreSQL: the same question is answered once; any input that changes, the machine included,
is a new question; with no entries kept, every question is computed."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from api.app import create_app
from api.auth import Role
from api.demo import example_host_kind
from api.settings import Settings
from model.resources import GIB
from tests.fixtures.service import auth, example

AGENT = auth(Role.agent)
SCHEDULER = auth(Role.scheduler)
OPERATOR = auth(Role.operator)


def ask(client: TestClient, **extra: Any) -> dict[str, Any]:
    got = client.post("/recommend", headers=SCHEDULER, json={"workload": "graph500", **extra})
    assert got.status_code == 200, got.text
    answer: dict[str, Any] = got.json()["recommendation"]
    return answer


def kind(client: TestClient, dram_gib: int) -> None:
    client.put(
        "/v1/cluster/host-kinds",
        headers=OPERATOR,
        json={
            "name": example_host_kind(),
            "machine": {
                "cpus": 12,
                "dram_bytes": dram_gib * GIB,
                "slow_bytes": 128 * GIB,
                "llc_ways": 48,
            },
        },
    ).raise_for_status()


def kept(client: TestClient) -> int:
    return len(client.app.state.tmc.models.results)  # type: ignore[attr-defined]


def test_the_same_question_is_answered_once(client: TestClient) -> None:
    client.post("/v1/profiles", content=example("graph500"), headers=AGENT).raise_for_status()
    first = ask(client, utilization={"dram": 0.5})
    assert [ask(client, utilization={"dram": 0.5}) for _ in range(3)] == [first] * 3
    assert kept(client) == 1
    # Another utilization, objective or threshold is another question.
    ask(client, utilization={"dram": 0.6})
    ask(client, utilization={"dram": 0.5}, objective="slo:5%")
    ask(client, utilization={"dram": 0.5}, threshold=0.02)
    assert kept(client) == 4


def test_a_changed_machine_is_a_new_question(client: TestClient) -> None:
    kind(client, 24)
    client.post("/v1/profiles", content=example("graph500"), headers=AGENT).raise_for_status()
    before = ask(client)
    assert before["machine"]["dram_bytes"] == 24 * GIB
    kind(client, 48)  # the operator resizes the host kind the profile names
    after = ask(client)
    assert after["machine"]["dram_bytes"] == 48 * GIB
    assert kept(client) == 2


def test_no_answers_kept_when_the_memo_is_off(settings: Settings, client: TestClient) -> None:
    # `client` created the test tokens; a second app on the same database keeps nothing.
    with TestClient(create_app(settings.model_copy(update={"decision_memo_entries": 0}))) as c:
        c.post("/v1/profiles", content=example("graph500"), headers=AGENT).raise_for_status()
        assert ask(c) == ask(c)
        assert kept(c) == 0
