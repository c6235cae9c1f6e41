"""Faults against real processes: a Celery worker that fits and one killed mid-task, Redis
stopped mid-run, PostgreSQL restarted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
import redis
from fastapi.testclient import TestClient

from api.auth import Role
from api.db import make_engine, make_session_factory, unit_of_work
from api.settings import Settings
from api.utilization import SNAPSHOT_KEY, take_snapshot
from tests.api.conftest import auth, example
from tests.services import CeleryWorker, PostgresServer, RedisServer, wait_until

AGENT = auth(Role.agent)
VIEWER = auth(Role.viewer)
SCHEDULER = auth(Role.scheduler)


def upload(client: TestClient, name: str) -> str:
    response = client.post(
        "/v1/profiles", content=example(name), headers={**AGENT, "Content-Type": "application/json"}
    )
    response.raise_for_status()
    profile_id: str = response.json()["id"]
    return profile_id


def status(client: TestClient, profile_id: str) -> str:
    value: str = client.get(f"/v1/profiles/{profile_id}", headers=VIEWER).json()["status"]
    return value


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    assert settings.redis_url is not None
    return {
        "TMC_ENVIRONMENT": "test",
        "TMC_DATABASE_URL": settings.database_url,
        "TMC_REDIS_URL": settings.redis_url,
        "TMC_TASK_VISIBILITY_TIMEOUT_SECONDS": "3",
        **extra,
    }


def fitted_rows(postgres: PostgresServer, profile_id: str) -> int:
    with psycopg.connect(postgres.dsn()) as conn:
        row = conn.execute(
            "SELECT count(*) FROM fitted_models WHERE profile_id = %s", (profile_id,)
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def workers() -> Iterator[list[CeleryWorker]]:
    started: list[CeleryWorker] = []
    yield started
    for w in started:
        w.stop()


def test_worker_fits_an_upload(
    client: TestClient, settings: Settings, postgres: PostgresServer, workers: list[CeleryWorker]
) -> None:
    worker = CeleryWorker(worker_env(settings))
    workers.append(worker)
    worker.start()
    profile_id = upload(client, "graph500")
    wait_until(lambda: status(client, profile_id) == "fitted", 30, "the fit task")
    assert fitted_rows(postgres, profile_id) == 1
    assert "tmc.fit_profile" in worker.output()


def test_worker_killed_mid_task_is_redone_once(
    client: TestClient, settings: Settings, postgres: PostgresServer, workers: list[CeleryWorker]
) -> None:
    slow = CeleryWorker(worker_env(settings, TMC_FIT_TASK_DELAY_SECONDS="30"), name="doomed")
    workers.append(slow)
    slow.start()
    profile_id = upload(client, "memcached")
    wait_until(
        lambda: f"{profile_id}" in slow.output() or "received" in slow.output(), 30, "delivery"
    )
    slow.kill()
    assert status(client, profile_id) == "pending"
    assert fitted_rows(postgres, profile_id) == 0
    # The unacknowledged message returns to the queue after the visibility timeout.
    rescuer = CeleryWorker(worker_env(settings), name="rescuer")
    workers.append(rescuer)
    rescuer.start()
    wait_until(lambda: status(client, profile_id) == "fitted", 60, "the redelivered fit")
    assert fitted_rows(postgres, profile_id) == 1


def test_recommend_survives_redis_stopping(
    client: TestClient, settings: Settings, redis_server: RedisServer
) -> None:
    assert settings.redis_url is not None
    upload(client, "xsbench")
    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        take_snapshot(session, redis.Redis.from_url(settings.redis_url), ttl_seconds=60)
    assert redis.Redis.from_url(settings.redis_url).exists(SNAPSHOT_KEY)
    first = client.post("/recommend", headers=SCHEDULER, json={"workload": "xsbench"})
    assert first.status_code == 200, first.text
    assert first.json()["utilization_source"] == "redis"

    redis_server.stop()
    started = time.monotonic()
    second = client.post("/recommend", headers=SCHEDULER, json={"workload": "xsbench"})
    assert second.status_code == 200, second.text
    assert second.json()["utilization_source"] == "database"
    third = client.post("/recommend", headers=SCHEDULER, json={"workload": "xsbench"})
    assert third.status_code == 200
    assert time.monotonic() - started < 5
    assert client.get("/readyz").status_code == 503


def test_postgres_restart_fails_cleanly_then_recovers(
    client: TestClient, postgres: PostgresServer
) -> None:
    upload(client, "canneal")
    assert client.get("/v1/workloads", headers=VIEWER).status_code == 200
    postgres.stop()
    try:
        down = client.get("/v1/workloads/canneal", headers=VIEWER)
        assert down.status_code in (503, 401), down.text  # auth may be the first to reach the db
        assert down.headers["content-type"] == "application/problem+json"
        rec = client.post("/recommend", headers=SCHEDULER, json={"workload": "canneal"})
        assert rec.status_code == 503
        assert rec.headers["Retry-After"] == "5"
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["database"].startswith("unreachable")
    finally:
        postgres.start()
    wait_until(lambda: client.get("/readyz").status_code == 200, 30, "recovery")
    again = client.post("/recommend", headers=SCHEDULER, json={"workload": "canneal"})
    assert again.status_code == 200, again.text
