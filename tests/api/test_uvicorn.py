"""Against real uvicorn processes on PostgreSQL and Redis: the OpenAPI schema fuzzed with
schemathesis (whatever a client sends, no 5xx and no hang), and metrics across several workers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from api.auth import Role
from api.settings import Settings
from tests.fixtures.service import TOKENS
from tests.services import uvicorn_server


@pytest.fixture
def server(served: str) -> str:
    return served


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
            # A hang is a failure too: no request may wait past this.
            "--request-timeout",
            "15",
            "--max-response-time",
            "10",
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


def test_metrics_add_up_across_uvicorn_workers(settings: Settings, tmp_path: Path) -> None:
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {"TMC_DATABASE_URL": settings.database_url, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    with uvicorn_server(env, workers=2) as base:
        # New connections each time, so that both workers answer some of them.
        for _ in range(40):
            httpx.get(f"{base}/healthz").raise_for_status()
        text = httpx.get(f"{base}/metrics").text
    counts = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("tmc_http_requests_total{") and 'route="/healthz"' in line
    ]
    assert sum(counts) >= 40, text[:2000]
