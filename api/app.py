"""The FastAPI application factory. Nothing heavy happens at import: engines, Redis clients and
caches are created in the lifespan, from the Settings given (or read from the environment)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Gauge, ProcessCollector
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import dashboard, openapi, tasks
from api.cluster_metrics import ClusterCollector
from api.collection import tune_collection
from api.deps import AppState, Metrics
from api.errors import PROBLEM
from api.node_identity import NodeTokenReviewer, kubernetes_review
from api.planning import PlanRunner
from api.problems import ContainUnexpected, install_handlers, send_problem
from api.routes import (
    cluster,
    ops,
    placements,
    planner,
    prices,
    profiles,
    recommendations,
    reports,
    tiering,
)
from api.services import prices as price_service
from api.services import profiles as profile_service
from api.services.models import ModelCache
from api.settings import Settings, get_settings
from api.utilization import UtilizationReader, connect_redis, take_snapshot
from store.db import make_engine, make_session_factory, unit_of_work

log = logging.getLogger("tmc.api")


def in_process_fit(sessions: sessionmaker[Session]) -> Callable[[str], None]:
    """The embedded default: the fit task runs right after the upload's commit, in-process."""

    def run(profile_id: str) -> None:
        try:
            with unit_of_work(sessions) as session:
                profile_service.fit_profile(session, profile_id)
        except Exception:  # the upload has succeeded; a later /recommend fits again
            log.exception("in-process fit of %s failed", profile_id)

    return run


def celery_fit(profile_id: str) -> None:
    tasks.enqueue_fit(profile_id)  # never raises: a lost enqueue is swept up later


def build_state(settings: Settings) -> AppState:
    engine = make_engine(settings)
    sessions = make_session_factory(engine)
    client = connect_redis(settings.redis_url) if settings.redis_url else None
    use_celery = settings.effective_broker_url is not None
    if use_celery:
        tasks.configure(tasks.celery_app, settings)
    metrics = Metrics()
    metrics.cluster = ClusterCollector(sessions)
    metrics.registry.register(metrics.cluster)
    return AppState(
        settings=settings,
        engine=engine,
        sessions=sessions,
        redis=client,
        utilization=UtilizationReader(client, settings.utilization_max_age_seconds),
        models=ModelCache(
            answers=settings.decision_memo_entries,
            shortlists=settings.decision_shortlist_entries,
        ),
        planner=PlanRunner(
            settings.planner_processes,
            settings.planner_queue,
            settings.planner_memory_mib << 20,
            lambda outcome: metrics.plans.labels(outcome).inc(),
        ),
        metrics=metrics,
        enqueue_fit=celery_fit if use_celery else in_process_fit(sessions),
        node_tokens=node_token_reviewer(settings),
    )


def node_token_reviewer(settings: Settings) -> NodeTokenReviewer | None:
    """What reviews agents' service-account tokens, when the service is configured for them."""
    if settings.kubernetes_agent_account is None:
        return None
    review = kubernetes_review(
        settings.kubeconfig,
        settings.kubernetes_token_audience,
        settings.token_review_timeout_seconds,
    )
    return NodeTokenReviewer(
        review,
        settings.kubernetes_agent_account,
        settings.kubernetes_token_audience,
        cache_seconds=settings.token_review_cache_seconds,
        cache_entries=settings.token_review_cache_entries,
    )


# Connections a worker counts requests for; a client that went away is forgotten past this.
MAX_TRACKED_CONNECTIONS = 10_000


class BodyLimit:
    """413 before a too-large body is read: by Content-Length, or by counting a chunked body."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self._reject(send, scope.get("path", ""))
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._reject(send, scope.get("path", ""))

    async def _reject(self, send: Send, instance: str) -> None:
        detail = f"the body exceeds {self.max_bytes} bytes"
        await send_problem(send, 413, "Payload too large", detail, instance)


class ConnectionRequestLimit:
    """Close a keep-alive connection after `max_requests` responses, as nginx's
    `keepalive_requests` does: the client connects again, and the kernel hands the new
    connection to a worker afresh. Without it, a few long-lived connections (a scheduler's, a
    load balancer's) stay where SO_REUSEPORT's hash first put them, and one worker may serve
    nine of ten of them for as long as they live."""

    def __init__(self, app: ASGIApp, max_requests: int) -> None:
        self.app = app
        self.max_requests = max_requests
        self._served: OrderedDict[tuple[Any, Any], int] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client, server = scope.get("client"), scope.get("server")
        if scope["type"] != "http" or self.max_requests <= 0 or client is None:
            await self.app(scope, receive, send)
            return
        key = (tuple(client), tuple(server or ()))
        served = self._served.pop(key, 0) + 1
        if served < self.max_requests:
            self._served[key] = served
            while len(self._served) > MAX_TRACKED_CONNECTIONS:  # closed ones are never told
                self._served.popitem(last=False)
            await self.app(scope, receive, send)
            return

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


class Observe:
    """Request counts and latency by route template (pure ASGI: no per-request task overhead)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            state: AppState | None = getattr(scope["app"].state, "tmc", None)
            if state is not None:
                route = getattr(scope.get("route"), "path", "unmatched")
                state.metrics.requests.labels(scope["method"], route, status).inc()
                state.metrics.latency.labels(route).observe(time.perf_counter() - start)


class _TooLarge(Exception):
    pass


def tune_worker(registry: CollectorRegistry, gen0_threshold: int) -> Callable[[], None]:
    """The worker's collection tuned (api.collection), and the worker named (pid, CPU) so that
    a load test can tell workers apart. Returns what undoes the tuning (tests)."""
    Gauge("tmc_worker_pid", "This API worker's process id", registry=registry).set(os.getpid())
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, resident memory
    return tune_collection(registry, gen0_threshold)


def tasks_run_elsewhere(settings: Settings) -> bool:
    return settings.effective_broker_url is not None


async def snapshot_loop(state: AppState) -> None:
    def snapshot() -> None:
        with unit_of_work(state.sessions) as session:
            take_snapshot(
                session,
                None,
                state.settings.utilization_max_age_seconds,
                timedelta(days=state.settings.decision_retention_days),
            )
            # No beat either: fits a crash interrupted are redone here.
            stale = profile_service.stale_pending_profiles(
                session, state.settings.fit_requeue_after_seconds
            )
        for profile_id in stale:
            state.enqueue_fit(profile_id)

    while True:
        try:
            await run_in_threadpool(snapshot)
        except Exception:  # a failed snapshot must not end the loop; the next one may work
            log.exception("utilization snapshot failed")
        await asyncio.sleep(state.settings.utilization_snapshot_seconds)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = build_state(settings)
        app.state.tmc = state
        with unit_of_work(state.sessions) as session:
            price_service.ensure_default_price_profile(session)
        # Without a broker there is no Celery beat: the API takes the utilization snapshots.
        snapshots = (
            None if tasks_run_elsewhere(settings) else asyncio.create_task(snapshot_loop(state))
        )
        # Last: everything start-up allocated is in place to be frozen.
        untune = tune_worker(state.metrics.registry, settings.gc_gen0_threshold)
        try:
            yield
        finally:
            untune()
            if snapshots is not None:
                snapshots.cancel()
            state.engine.dispose()
            if state.redis is not None:
                state.redis.close()

    app = FastAPI(
        title="tmc",
        version="0.1.0",
        summary="Tiered-memory configurator: slow-memory ratio and LLC ways by performance per TCO",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc: served by openapi.install_docs, without a CDN
        redoc_url=None,
        responses={
            401: {"description": "No or unknown bearer token", "content": {PROBLEM: {}}},
            403: {"description": "The token's role may not do this", "content": {PROBLEM: {}}},
            422: {"description": "Invalid input, with the field path", "content": {PROBLEM: {}}},
            503: {"description": "A dependency is unreachable; retry", "content": {PROBLEM: {}}},
        },
    )
    install_handlers(app)
    openapi.install(app)
    openapi.install_docs(app)

    app.add_middleware(Observe)
    app.add_middleware(BodyLimit, max_bytes=settings.max_bundle_bytes)
    app.add_middleware(ContainUnexpected)  # a 500 keeps the connection open
    app.add_middleware(ConnectionRequestLimit, max_requests=settings.requests_per_connection)

    for module in (
        ops,
        profiles,
        recommendations,
        cluster,
        placements,
        prices,
        reports,
        tiering,
        planner,
    ):
        app.include_router(module.router)
    dashboard.mount(app)
    return app
