"""`python -m scheduler.publisher` as an operator first meets it: --help without a cluster, and
one-line errors for a missing Kubernetes API or a bad setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.publisher", *args],
        cwd=ROOT,
        env={**os.environ, "TMC_ENVIRONMENT": "test", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_help_needs_no_cluster() -> None:
    shown = run("--help", TMC_KUBECONFIG="/nonexistent")
    assert shown.returncode == 0, shown.stderr
    assert "TieredRecommendation" in shown.stdout


def test_no_kubernetes_api_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    done = run(
        TMC_KUBECONFIG=str(tmp_path / "missing"),
        TMC_DATABASE_URL=f"sqlite:///{tmp_path / 'tmc.db'}",
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr, done.stderr
    assert last.startswith("tmc publisher: no Kubernetes API") and "TMC_KUBECONFIG" in last


def test_a_bad_setting_is_one_line() -> None:
    done = run(TMC_PUBLISHER_GC_GRACE_SECONDS="soon")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "tmc publisher: bad setting: TMC_PUBLISHER_GC_GRACE_SECONDS: Input should be a valid "
        "number, unable to parse string as a number"
    )
