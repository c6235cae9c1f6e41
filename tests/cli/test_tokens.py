"""`tmc token create|list|revoke` on real PostgreSQL, and the API refusing a revoked token from
the very next request; a database that is missing, empty or unreachable is one line naming the
fix, and is never created by accident."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import psycopg
import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.deps import TOKEN_CACHE_SECONDS
from api.settings import Settings
from cli.main import app
from tests.services import PostgresServer, free_port

runner = CliRunner()


def tmc(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def one_line_error(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture(autouse=True)
def _no_database_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TMC_DATABASE_URL", raising=False)


def test_a_revoked_token_is_refused_within_the_cache_time(
    client: TestClient, settings: Settings
) -> None:
    db = settings.database_url
    token = tmc("token", "create", "--role", "viewer", "--name", "ci-reader", "--database", db)
    token = token.strip()
    headers = {"Authorization": f"Bearer {token}"}
    assert client.get("/v1/cluster/nodes", headers=headers).status_code == 200

    listed = json.loads(tmc("token", "list", "--database", db, "-o", "json"))
    mine = [t for t in listed if t["name"] == "ci-reader"]
    assert len(mine) == 1 and mine[0]["role"] == "viewer" and mine[0]["revoked_at"] is None
    assert token not in json.dumps(listed)  # only hashes are stored; a list never shows one

    assert "revoked token 'ci-reader'" in tmc("token", "revoke", "ci-reader", "--database", db)
    revoked_at = time.monotonic()
    # Each API process keeps a token's role for TOKEN_CACHE_SECONDS (it spares a database read
    # per request); after that, every request is refused.
    while (refused := client.get("/v1/cluster/nodes", headers=headers)).status_code == 200:
        assert time.monotonic() - revoked_at < TOKEN_CACHE_SECONDS + 1.0, "still accepted"
        time.sleep(0.1)
    assert refused.status_code == 401
    assert refused.json()["detail"] == "unknown or revoked token"

    assert "ci-reader" not in tmc("token", "list", "--database", db)
    everything = yaml.safe_load(tmc("token", "list", "--all", "--database", db, "-o", "yaml"))
    revoked = [t for t in everything if t["name"] == "ci-reader"]
    assert revoked[0]["revoked_at"] is not None


def test_revoke_by_id_and_the_errors_it_names(settings: Settings) -> None:
    db = settings.database_url
    for _ in range(2):
        tmc("token", "create", "--role", "agent", "--name", "node-agent", "--database", db)
    line = one_line_error("token", "revoke", "node-agent", "--database", db)
    assert "several live tokens" in line and "by its id" in line
    ids = [t["id"] for t in json.loads(tmc("token", "list", "--database", db, "-o", "json"))]
    tmc("token", "revoke", ids[0], "--database", db)
    line = one_line_error("token", "revoke", ids[0], "--database", db)
    assert "unknown or revoked token" in line and "tmc token list" in line
    assert "unknown or revoked token" in one_line_error(
        "token", "revoke", "nobody", "--database", db
    )


def test_a_missing_sqlite_database_is_refused_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for command in (["token", "create", "--role", "viewer"], ["token", "list"]):
        line = one_line_error(*command)
        assert f"no database at {tmp_path / 'tmc-dev.db'}" in line
        assert "TMC_DATABASE_URL" in line and "tmc db upgrade" in line
    assert list(tmp_path.iterdir()) == []

    url = f"sqlite:///{tmp_path / 'service.db'}"
    assert f"created a new database at {tmp_path / 'service.db'}" in tmc(
        "db", "upgrade", "--database", url
    )
    monkeypatch.setenv("TMC_DATABASE_URL", url)
    assert tmc("token", "create", "--role", "viewer").startswith("tmc_")
    assert "database" in tmc("db", "upgrade")  # a second upgrade is a no-op


def test_an_empty_postgres_database_names_the_upgrade(postgres: PostgresServer) -> None:
    with psycopg.connect(postgres.dsn("postgres"), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS empty_tmc")
        conn.execute("CREATE DATABASE empty_tmc")
    url = postgres.url.replace("/tmc", "/empty_tmc")
    line = one_line_error("token", "create", "--role", "viewer", "--database", url)
    assert "has no tmc schema" in line and "tmc db upgrade" in line
    assert "***" in line or "postgres@" in line


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("not a url", "is not a database URL"),
        ("postgresql+psycopg://tmc:secret@127.0.0.1:{port}/tmc", "cannot be used"),
    ],
)
def test_an_unusable_database_is_one_line(url: str, says: str) -> None:
    url = url.format(port=free_port())
    line = one_line_error("token", "list", "--database", url)
    assert says in line
    assert "secret" not in line  # a password is never printed


def test_a_taken_port_is_refused_before_anything_is_printed(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(
            app,
            [
                "serve",
                "--demo",
                "--create",
                "--port",
                str(port),
                "--database",
                f"sqlite:///{tmp_path / 'x.db'}",
            ],
        )
    assert result.exit_code == 2, result.output
    assert result.stdout == ""  # no token, no banner
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "--port N" in result.stderr
    assert not (tmp_path / "x.db").exists()
