"""Liveness, readiness and Prometheus metrics: unauthenticated, for probes and scrapers."""

from __future__ import annotations

import os

import redis
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from api.deps import StateDep
from api.problems import problem

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="The process is alive")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="The database (and Redis, when configured) answer",
    responses={503: {"description": "A dependency is unreachable (problem+json, with each check)"}},
)
def readyz(state: StateDep, request: Request) -> Response:
    checks: dict[str, str] = {}
    try:
        with state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except SQLAlchemyError as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
    if state.redis is not None:
        try:
            state.redis.ping()
            checks["redis"] = "ok"
        except redis.RedisError as exc:
            checks["redis"] = f"unreachable: {type(exc).__name__}"
    failing = [f"{name} {value}" for name, value in checks.items() if value != "ok"]
    if failing:
        detail = "; ".join(failing)
        return problem(
            503, "Service unavailable", detail, request, status_text="not ready", **checks
        )
    return JSONResponse({"status": "ready", **checks})


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(state: StateDep) -> Response:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Several uvicorn workers: add up what every process wrote, not just this one's.
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        if state.metrics.cluster is not None:  # read from the database, not added up
            registry.register(state.metrics.cluster)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
