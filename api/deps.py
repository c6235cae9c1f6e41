"""What endpoints depend on: the application state, and bearer-token authorization."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, TypeVar

import redis
from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.registry import Collector
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from api import repositories as repo
from api.auth import GRANTS, TOKEN_PREFIX, Caller, Permission, Role, token_hash
from api.node_identity import NodeTokenReviewer, NotAnAgent
from api.planning import PlanRunner
from api.services.models import ModelCache
from api.services.recommendations import NeedsTransaction, single_statements
from api.settings import Settings
from api.utilization import UtilizationReader
from store.db import abandon, commit, unit_of_work

# A revoked token keeps working for at most this long on each API process; the cache spares a
# database read per request.
TOKEN_CACHE_SECONDS = 2.0
TOKEN_CACHE_ENTRIES = 10_000


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    # The cluster's gauges, read from the ledger when scraped (api.cluster_metrics).
    cluster: Collector | None = None

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
        self.decisions_logged = Counter(
            "tmc_decisions_logged_total",
            "Decisions by what the decision log did with them: stored (a new row) or repeat"
            " (counted on the pair's identical newest decision)",
            ["stored"],
            registry=self.registry,
        )
        self.plans = Counter(
            "tmc_plans_total",
            "Planner requests by outcome (answered, refused_by_planner, refused: the queue was"
            " full, client_left, overran, crashed)",
            ["outcome"],
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
    models: ModelCache
    planner: PlanRunner
    metrics: Metrics
    enqueue_fit: Callable[[str], None]
    tokens: dict[str, tuple[Caller | None, float]] = field(default_factory=dict)
    # Set when agents may present their Kubernetes service-account token (api.node_identity).
    node_tokens: NodeTokenReviewer | None = None


# Dependencies that do no blocking work are `async def`: FastAPI runs a plain `def` dependency in
# the thread pool, and three such hops per request cost more than the lookups themselves.
async def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.tmc
    return state


StateDep = Annotated[AppState, Depends(get_state)]

# Methods that never change state: their transaction is rolled back, whatever the route did.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def transaction(request: Request, state: StateDep) -> AsyncIterator[Session]:
    """The request's one transaction: committed when the route returns (before the response is
    sent, so that a failed commit is the response), rolled back when it raises. A GET's is
    always rolled back: reading never writes. Opening a session does no I/O; the commit or
    rollback, which may block on the database, runs in the thread pool in one hop."""
    session = state.sessions()
    try:
        yield session
    except BaseException:
        await run_in_threadpool(abandon, session)
        raise
    if request.method in SAFE_METHODS:
        await run_in_threadpool(abandon, session)
    else:
        await run_in_threadpool(commit, session)


# scope="function": the transaction ends when the route returns, not after the response is sent.
SessionDep = Annotated[Session, Depends(transaction, scope="function")]

T = TypeVar("T")


def committed(state: AppState, work: Callable[[Session], T], statements_alone: bool = False) -> T:
    """`work`'s transaction, committed before it returns (rolled back if it raises): for a hot
    route that runs its blocking work and the commit in one thread-pool hop, where SessionDep's
    commit would be a second. With `statements_alone`, each statement commits on its own (no
    BEGIN or COMMIT round trips); work that raises NeedsTransaction (it wrote nothing) runs
    again in a transaction."""
    if statements_alone:
        session = state.sessions()
        try:
            single_statements(session)
            result = work(session)
        except NeedsTransaction:
            abandon(session)
        except BaseException:
            abandon(session)
            raise
        else:
            commit(session)
            return result
    session = state.sessions()
    try:
        result = work(session)
    except BaseException:
        abandon(session)
        raise
    commit(session)
    return result


# Declares the scheme in OpenAPI; the checks (and their problem+json errors) stay ours.
BEARER = HTTPBearer(
    auto_error=False,
    description="An API token (`Authorization: Bearer tmc_...`), or a node agent's projected"
    " Kubernetes service-account token when the service is configured for them",
)


async def bearer_caller(
    request: Request,
    state: StateDep,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> Caller:
    header = request.headers.get("authorization", "")
    scheme, _sep, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(401, "a bearer token is required", {"WWW-Authenticate": "Bearer"})
    token = token.strip()
    if state.node_tokens is not None and not token.startswith(TOKEN_PREFIX):
        return await _node_agent(state.node_tokens, token)
    digest = token_hash(token)
    now = time.monotonic()
    cached = state.tokens.get(digest)
    if cached is not None and cached[1] > now:
        caller = cached[0]
    else:
        # The database read blocks: it runs in the thread pool, as a sync route would.
        caller = await run_in_threadpool(_caller_of, state, digest)
        if len(state.tokens) >= TOKEN_CACHE_ENTRIES:  # random tokens must not grow it unbounded
            state.tokens.clear()
        state.tokens[digest] = (caller, now + TOKEN_CACHE_SECONDS)
    if caller is None:
        raise HTTPException(401, "unknown or revoked token", {"WWW-Authenticate": "Bearer"})
    return caller


async def _node_agent(reviewer: NodeTokenReviewer, token: str) -> Caller:
    """The node agent a Kubernetes service-account token is (a recent review's answer, else
    the API server's, asked in the thread pool: the call blocks)."""
    caller = reviewer.cached(token)
    if caller is not None:
        return caller
    try:
        return await run_in_threadpool(reviewer.review, token)
    except NotAnAgent as exc:
        raise HTTPException(401, exc.detail, {"WWW-Authenticate": "Bearer"}) from None


async def bearer_role(caller: Annotated[Caller, Depends(bearer_caller)]) -> Role:
    return caller.role


def _caller_of(state: AppState, digest: str) -> Caller | None:
    with unit_of_work(state.sessions) as session:
        row = repo.find_token(session, digest)
        return Caller(Role(row.role), row.node) if row is not None else None


def require(permission: Permission) -> Callable[..., Awaitable[Role]]:
    async def check(role: Annotated[Role, Depends(bearer_role)]) -> Role:
        if permission not in GRANTS[role]:
            raise HTTPException(403, f"the {role} role may not {permission}")
        return role

    return check


def require_caller(permission: Permission) -> Callable[..., Awaitable[Caller]]:
    """As `require`, for routes that need the token's node too."""

    async def check(caller: Annotated[Caller, Depends(bearer_caller)]) -> Caller:
        if permission not in GRANTS[caller.role]:
            raise HTTPException(403, f"the {caller.role} role may not {permission}")
        return caller

    return check
