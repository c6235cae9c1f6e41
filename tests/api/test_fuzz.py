"""The OpenAPI schema fuzzed with schemathesis, over HTTP against a real uvicorn process on
PostgreSQL and Redis: whatever a client sends, no 5xx."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from api.auth import Role
from api.settings import Settings
from tests.api.conftest import TOKENS, auth, example
from tests.services import ROOT, free_port, wait_until


@pytest.fixture
def server(settings: Settings, client: TestClient) -> Iterator[str]:
    # `client` seeded the tokens; the workload gives /recommend something real to find.
    client.post(
        "/v1/profiles",
        content=example("graph500"),
        headers={**auth(Role.agent), "Content-Type": "application/json"},
    ).raise_for_status()
    port = free_port()
    assert settings.redis_url is not None
    env = {
        **os.environ,
        "TMC_ENVIRONMENT": "test",
        "TMC_DATABASE_URL": settings.database_url,
        "TMC_REDIS_URL": settings.redis_url,
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "api.app:create_app",
            "--factory",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: httpx.get(f"{base}/healthz").status_code == 200, 30, "uvicorn")
    yield base
    proc.terminate()
    proc.wait(10)


@pytest.mark.slow
def test_no_server_errors(server: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("schemathesis")),
            "run",
            f"{server}/openapi.json",
            "--checks",
            "not_a_server_error",
            "--max-examples",
            "40",
            "--seed",
            "1",
            "-H",
            f"Authorization: Bearer {TOKENS[Role.operator]}",
            "--no-color",
            "--report-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,  # schemathesis keeps its example database in the working directory
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    # The run must really have exercised the API, not loaded the schema and stopped.
    passed = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    assert passed is not None and int(passed.group(2)) >= 500, result.stdout[-3000:]
