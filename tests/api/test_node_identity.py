"""Agents known by their Kubernetes service-account token (api/node_identity.py): what a
TokenReview's answer makes of a caller, how long a good answer is kept, and the service's answer
when the API server cannot be asked (on PostgreSQL, with a real listening socket that never
answers). The reviews themselves are asked of a real kube-apiserver in
tests/scheduler/test_agent_identity.py."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from api.app import create_app
from api.auth import Caller, Role
from api.node_identity import (
    NODE_NAME_EXTRA,
    NodeTokenReviewer,
    NotAnAgent,
    agent_of,
    token_expiry,
)
from api.settings import Settings
from tests.services import free_port

ACCOUNT = "system:serviceaccount:tmc-system:e2e-tmc-agent"
AUDIENCE = "tmc-api"


def jwt(exp: float | None) -> str:
    """A token shaped as a service-account JWT (its signature is the API server's business)."""

    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    claims: dict[str, Any] = {"sub": ACCOUNT}
    if exp is not None:
        claims["exp"] = exp
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def status(
    node: list[str] | None = ["node-a"],  # noqa: B006 - never mutated
    username: str = ACCOUNT,
    audiences: list[str] | None = None,
    authenticated: bool = True,
) -> dict[str, Any]:
    extra = {} if node is None else {NODE_NAME_EXTRA: node}
    return {
        "authenticated": authenticated,
        "audiences": [AUDIENCE] if audiences is None else audiences,
        "user": {"username": username, "extra": extra},
    }


def test_only_the_agents_account_with_one_node_is_an_agent() -> None:
    assert agent_of(status(), ACCOUNT, AUDIENCE) == Caller(Role.agent, "node-a")
    refusals = {
        "not authenticated": status(authenticated=False),
        "another audience": status(audiences=["https://kubernetes.default.svc"]),
        "another account": status(username="system:serviceaccount:tmc-system:e2e-tmc-publisher"),
        "a person": status(username="alice"),
        "no node": status(node=None),
        "two nodes": status(node=["node-a", "node-b"]),
        "not a node name": status(node=["Node_A/.."]),
    }
    for why, answer in refusals.items():
        with pytest.raises(NotAnAgent):
            agent_of(answer, ACCOUNT, AUDIENCE)
            pytest.fail(why)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def reviewer(answers: list[dict[str, Any]], clock: Clock, **kw: Any) -> NodeTokenReviewer:
    def review(token: str) -> dict[str, Any]:
        answers.append({"token": token})
        return status()

    return NodeTokenReviewer(review, ACCOUNT, AUDIENCE, clock=clock, wall_clock=clock, **kw)


def test_a_good_review_is_kept_briefly_and_never_past_the_tokens_expiry() -> None:
    asked: list[dict[str, Any]] = []
    clock = Clock()
    r = reviewer(asked, clock, cache_seconds=300)  # more than 60 s is cut to 60
    long_lived = jwt(clock.now + 3600)
    assert r.review(long_lived) == Caller(Role.agent, "node-a")
    clock.now += 59
    assert r.cached(long_lived) == Caller(Role.agent, "node-a")
    clock.now += 2
    assert r.cached(long_lived) is None
    # A token with 5 s to live is kept 5 s; one already expired is not kept at all.
    short = jwt(clock.now + 5)
    r.review(short)
    clock.now += 4
    assert r.cached(short) is not None
    clock.now += 2
    assert r.cached(short) is None
    expired = jwt(clock.now - 1)
    r.review(expired)
    assert r.cached(expired) is None
    assert len(asked) == 3


def test_the_kept_reviews_are_bounded() -> None:
    clock = Clock()
    r = reviewer([], clock, cache_entries=3)
    tokens = [jwt(clock.now + 600 + i) for i in range(5)]
    for token in tokens:
        r.review(token)
    assert [r.cached(t) is not None for t in tokens] == [False, False, True, True, True]


def test_text_that_is_no_jwt_is_refused_without_asking() -> None:
    asked: list[dict[str, Any]] = []
    r = reviewer(asked, Clock())
    for garbage in ("garbage", "a.b", "a.b.c.d", "é.b.c", jwt(None) + "x" * 20_000):
        with pytest.raises(NotAnAgent):
            r.review(garbage)
    assert asked == []
    assert token_expiry("a.%%%.c") is None and token_expiry(jwt(None)) is None


def test_the_agents_account_must_be_a_service_account() -> None:
    with pytest.raises(ValidationError, match="kubernetes_agent_account"):
        Settings(kubernetes_agent_account="alice")
    with pytest.raises(ValidationError, match="token_review_cache_seconds"):
        Settings(token_review_cache_seconds=600)


def kubeconfig(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": f"https://127.0.0.1:{port}",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers: an API server that hangs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


@pytest.mark.parametrize("server", ["refused", "hung"])
def test_an_api_server_out_of_reach_is_a_503_within_the_timeout(
    settings: Settings, tmp_path: Path, silent_port: int, server: str
) -> None:
    port = free_port() if server == "refused" else silent_port
    configured = settings.model_copy(
        update={
            "kubernetes_agent_account": ACCOUNT,
            "kubeconfig": str(kubeconfig(tmp_path, port)),
            "token_review_timeout_seconds": 1.0,
        }
    )
    with TestClient(create_app(configured), raise_server_exceptions=False) as client:
        started = time.monotonic()
        r = client.get(
            "/v1/workloads", headers={"Authorization": f"Bearer {jwt(time.time() + 600)}"}
        )
        took = time.monotonic() - started
        assert r.status_code == 503, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.headers["retry-after"] == "5"
        assert "Kubernetes API server" in r.json()["detail"]
        assert took < 3.0
        # Garbage is refused at once, without asking anyone.
        started = time.monotonic()
        r = client.get("/v1/workloads", headers={"Authorization": "Bearer not-a-token"})
        assert r.status_code == 401 and time.monotonic() - started < 0.5
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.headers["content-type"].startswith("application/problem+json")
