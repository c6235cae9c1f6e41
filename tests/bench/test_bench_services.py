"""The benchmarks' own PostgreSQL and Redis (tests.services.postgres_and_redis): a Redis that
cannot start leaves no PostgreSQL cluster running behind it."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests import services


def test_a_redis_that_fails_to_start_stops_the_cluster_started_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[services.PostgresServer] = []
    real = services.PostgresServer.__init__

    def remembered(self: services.PostgresServer) -> None:
        real(self)
        started.append(self)

    def no_redis(self: services.RedisServer) -> None:
        raise FileNotFoundError("redis-server")

    monkeypatch.setattr(services.PostgresServer, "__init__", remembered)
    monkeypatch.setattr(services.RedisServer, "start", no_redis)
    with pytest.raises(FileNotFoundError):
        services.postgres_and_redis()
    (postgres,) = started
    assert not Path(postgres.dir).exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(postgres.dsn("postgres"), connect_timeout=2).close()
