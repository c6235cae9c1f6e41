"""Faults against real processes: a Celery worker that fits and one killed mid-task, Redis
stopped mid-run or at upload or restarted with tasks queued, PostgreSQL restarted or hung."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from fastapi.testclient import TestClient

from api.app import create_app
from api.auth import Role
from api.settings import Settings
from api.utilization import READ_CACHE_SECONDS, SNAPSHOT_KEY, take_snapshot
from store.db import make_engine, make_session_factory, unit_of_work
from tests.fixtures.service import auth, example
from tests.services import ROOT, CeleryWorker, PostgresServer, RedisServer, wait_until

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
    # Within READ_CACHE_SECONDS the snapshot just read still serves; past it Redis is asked.
    cached = client.post("/recommend", headers=SCHEDULER, json={"workload": "xsbench"})
    assert cached.status_code == 200, cached.text
    assert cached.json()["utilization_source"] == "redis"
    time.sleep(READ_CACHE_SECONDS)
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


# -- fit tasks that cannot be lost --------------------------------------------------------------


class Beat:
    """`celery -A api.tasks beat` as a real process: the periodic pending-fit sweep."""

    def __init__(self, env: dict[str, str], folder: Path) -> None:
        self.log = folder / "beat.log"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "api.tasks",
                "beat",
                "--loglevel=INFO",
                "-s",
                str(folder / "beat-schedule"),
            ],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


def sweeping_env(settings: Settings) -> dict[str, str]:
    # Sweep every second for profiles pending longer than a second.
    return worker_env(settings, TMC_FIT_SWEEP_SECONDS="1", TMC_FIT_REQUEUE_AFTER_SECONDS="1")


@pytest.fixture
def beat(settings: Settings, tmp_path: Path) -> Iterator[Callable[[], Beat]]:
    started: list[Beat] = []

    def start() -> Beat:
        started.append(Beat(sweeping_env(settings), tmp_path))
        return started[-1]

    yield start
    for b in started:
        b.stop()


def test_upload_while_redis_is_down_succeeds_and_is_fitted_later(
    client: TestClient,
    settings: Settings,
    redis_server: RedisServer,
    workers: list[CeleryWorker],
    beat: Callable[[], Beat],
) -> None:
    redis_server.stop()
    started = time.monotonic()
    response = client.post(
        "/v1/profiles",
        content=example("graph500"),
        headers={**AGENT, "Content-Type": "application/json"},
    )
    # The row is committed: the upload succeeded, only its fit is waiting.
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "pending"
    assert time.monotonic() - started < 10
    profile_id = response.json()["id"]

    redis_server.start()
    worker = CeleryWorker(sweeping_env(settings), name="after-outage")
    workers.append(worker)
    worker.start()
    beat()
    wait_until(lambda: status(client, profile_id) == "fitted", 60, "the swept-up fit")


def test_fit_tasks_lost_with_a_redis_restart_are_swept_up(
    client: TestClient,
    settings: Settings,
    postgres: PostgresServer,
    redis_server: RedisServer,
    workers: list[CeleryWorker],
    beat: Callable[[], Beat],
) -> None:
    assert settings.redis_url is not None
    ids = [upload(client, name) for name in ("graph500", "memcached", "xsbench", "canneal")]
    assert redis.Redis.from_url(settings.redis_url).llen("celery") == len(ids)
    redis_server.stop()
    redis_server.start()  # no persistence: the queued fit tasks are gone
    assert redis.Redis.from_url(settings.redis_url).llen("celery") == 0

    worker = CeleryWorker(sweeping_env(settings), name="after-restart")
    workers.append(worker)
    worker.start()
    beat()
    for profile_id in ids:
        wait_until(lambda p=profile_id: status(client, p) == "fitted", 60, "the swept-up fits")
        assert fitted_rows(postgres, profile_id) == 1


# -- a hung database ----------------------------------------------------------------------------


def postgres_processes(postgres: PostgresServer) -> list[int]:
    """The postmaster and every backend it forked."""
    postmaster = int((postgres.data / "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            # The fields after the command's closing parenthesis: state, ppid, ...
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(stat.parent.name))
    return [postmaster, *children]


@contextlib.contextmanager
def hung(postgres: PostgresServer) -> Iterator[None]:
    """PostgreSQL stops answering but keeps its sockets open: SIGSTOP, then SIGCONT."""
    stopped = postgres_processes(postgres)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def test_a_hung_database_answers_503_in_bounded_time(
    client: TestClient, settings: Settings, postgres: PostgresServer
) -> None:
    tight = settings.model_copy(
        update={"db_connect_timeout_seconds": 1, "db_statement_timeout_ms": 1000}
    )
    with TestClient(create_app(tight), raise_server_exceptions=False) as hurried:
        upload(hurried, "graph500")
        warm = hurried.post("/recommend", headers=SCHEDULER, json={"workload": "graph500"})
        assert warm.status_code == 200, warm.text
        calls: dict[str, Callable[[], Any]] = {
            "readyz": lambda: hurried.get("/readyz"),
            "workload": lambda: hurried.get("/v1/workloads/graph500", headers=VIEWER),
            "recommend": lambda: hurried.post(
                "/recommend", headers=SCHEDULER, json={"workload": "graph500"}
            ),
        }
        with ThreadPoolExecutor(len(calls)) as pool, hung(postgres):
            started = time.monotonic()
            futures = {name: pool.submit(call) for name, call in calls.items()}
            # Before the bound, these waited for as long as the database was stopped.
            answers = {name: f.result(timeout=30) for name, f in futures.items()}
            elapsed = time.monotonic() - started
        for name, answer in answers.items():
            assert answer.status_code == 503, (name, answer.text)
            assert answer.headers["content-type"] == "application/problem+json", name
            assert answer.json()["status"] == 503
        assert answers["readyz"].json()["database"].startswith("unreachable")
        print(f"hung database: three requests answered 503 within {elapsed:.1f} s")
        assert elapsed < 20
        wait_until(lambda: hurried.get("/readyz").status_code == 200, 30, "recovery")
        again = hurried.post("/recommend", headers=SCHEDULER, json={"workload": "graph500"})
        assert again.status_code == 200, again.text


def test_a_hung_redis_costs_bounded_time(
    client: TestClient, settings: Settings, redis_server: RedisServer
) -> None:
    upload(client, "graph500")
    assert redis_server.proc is not None
    pid = redis_server.proc.pid
    os.kill(pid, signal.SIGSTOP)  # Redis keeps its sockets open and answers nothing
    try:
        started = time.monotonic()
        uploaded = client.post(
            "/v1/profiles",
            content=example("memcached"),
            headers={**AGENT, "Content-Type": "application/json"},
        )
        upload_seconds = time.monotonic() - started
        assert uploaded.status_code == 201, uploaded.text
        assert uploaded.json()["status"] == "pending"
        started = time.monotonic()
        rec = client.post("/recommend", headers=SCHEDULER, json={"workload": "graph500"})
        assert rec.status_code == 200, rec.text
        assert rec.json()["utilization_source"] == "database"
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["redis"].startswith("unreachable")
        other_seconds = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    print(f"hung redis: upload {upload_seconds:.1f} s, recommend and readyz {other_seconds:.1f} s")
    assert upload_seconds < 15
    assert other_seconds < 5
