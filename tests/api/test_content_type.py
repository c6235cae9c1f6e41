"""A JSON body sent without Content-Type: application/json (curl's -d sends a form's) is answered
with what is wrong and how to fix it, not with a field error about the body's shape."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from api.auth import Role
from tests.fixtures.service import auth, example

BODY = json.dumps({"workload": "graph500", "objective": "slo:5%"}).encode()


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
def test_recommend_without_a_json_content_type_says_so(
    client: TestClient, content_type: str | None
) -> None:
    headers = auth(Role.scheduler)
    if content_type is not None:
        headers["Content-Type"] = content_type
    answer = client.post("/recommend", content=BODY, headers=headers)
    assert answer.status_code == 415
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert "Content-Type: application/json" in problem["detail"]
    assert (content_type or "none") in problem["detail"]
    assert "valid dictionary" not in problem["detail"]


def test_a_json_body_with_a_bad_field_still_names_the_field(client: TestClient) -> None:
    client.post(
        "/v1/profiles",
        content=example("graph500"),
        headers={**auth(Role.agent), "Content-Type": "application/json"},
    ).raise_for_status()
    answer = client.post(
        "/recommend",
        json={"workload": "graph500", "threshold": "much"},
        headers=auth(Role.scheduler),
    )
    assert answer.status_code == 422 and "threshold" in answer.json()["detail"]
    ok = client.post(
        "/recommend",
        content=BODY,
        headers={**auth(Role.scheduler), "Content-Type": "application/json; charset=utf-8"},
    )
    assert ok.status_code == 200, ok.text
