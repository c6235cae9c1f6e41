"""Fixtures for the service tests: real PostgreSQL and Redis, migrations applied, clean tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from fastapi.testclient import TestClient

from api.app import create_app
from api.auth import Role, token_hash
from api.db import make_engine, make_session_factory, unit_of_work
from api.migrate import upgrade_to_head
from api.orm import ApiToken
from api.settings import Settings
from tests.services import PostgresServer, RedisServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TABLES = (
    "reservations, recommendations, fitted_models, profiles, workloads, price_profiles, "
    "nodes, rack_pools, host_kinds, api_tokens, utilization_samples, verification_runs"
)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    upgrade_to_head(server.url)
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.close()


@pytest.fixture
def settings(postgres: PostgresServer, redis_server: RedisServer) -> Iterator[Settings]:
    # Each test starts from empty tables and an empty Redis; the servers may have been stopped
    # by a fault test, so start them again if needed.
    if redis_server.proc is None:
        redis_server.start()
    with psycopg.connect(postgres.dsn(), autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLES} CASCADE")
    redis.Redis.from_url(redis_server.url).flushall()
    yield Settings(
        environment="test",
        database_url=postgres.url,
        redis_url=redis_server.url,
        task_visibility_timeout_seconds=5,
    )


TOKENS = {role: f"tmc_test_{role.value}" for role in Role}


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        for role, token in TOKENS.items():
            session.add(
                ApiToken(name=f"test-{role}", role=role.value, token_hash=token_hash(token))
            )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def auth(role: Role) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}


def example(name: str) -> bytes:
    return (EXAMPLES / f"{name}.json").read_bytes()
