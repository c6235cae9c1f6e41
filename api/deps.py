"""What endpoints depend on: the application state, and bearer-token authorization."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated

import redis
from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry, Counter, Histogram
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from api import repositories as repo
from api import services
from api.auth import GRANTS, Permission, Role, token_hash
from api.db import unit_of_work
from api.settings import Settings
from api.utilization import UtilizationReader


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.requests = Counter(
            "tmc_http_requests_total",
            "HTTP requests",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tmc_http_request_duration_seconds",
            "HTTP request latency",
            ["route"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=self.registry,
        )
        self.recommendations = Counter(
            "tmc_recommendations_total",
            "Recommendations made",
            ["objective", "utilization_source"],
            registry=self.registry,
        )
        self.uploads = Counter(
            "tmc_profile_uploads_total", "Profile uploads", ["result"], registry=self.registry
        )


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    redis: redis.Redis | None
    utilization: UtilizationReader
    models: services.ModelCache
    metrics: Metrics
    enqueue_fit: Callable[[str], None]


def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.tmc
    return state


StateDep = Annotated[AppState, Depends(get_state)]


# Declares the scheme in OpenAPI; the checks (and their problem+json errors) stay ours.
BEARER = HTTPBearer(auto_error=False, description="An API token: `Authorization: Bearer tmc_...`")


def bearer_role(
    request: Request,
    state: StateDep,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> Role:
    header = request.headers.get("authorization", "")
    scheme, _sep, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(401, "a bearer token is required", {"WWW-Authenticate": "Bearer"})
    # Looked up on every request (one indexed read, no cache): a revoked token is refused from
    # the next request on, by every API process.
    with unit_of_work(state.sessions) as session:
        row = repo.find_token(session, token_hash(token.strip()))
        role = Role(row.role) if row is not None else None
    if role is None:
        raise HTTPException(401, "unknown or revoked token", {"WWW-Authenticate": "Bearer"})
    return role


def require(permission: Permission) -> Callable[..., Role]:
    def check(role: Annotated[Role, Depends(bearer_role)]) -> Role:
        if permission not in GRANTS[role]:
            raise HTTPException(403, f"the {role} role may not {permission}")
        return role

    return check
