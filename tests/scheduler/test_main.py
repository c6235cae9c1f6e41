"""`python -m scheduler.publisher` as an operator first meets it: --help without a cluster, and
one-line errors for a missing Kubernetes API or a bad setting."""

from __future__ import annotations

import os
import socket
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


def test_bad_bound_and_metrics_port_are_one_line() -> None:
    for name, value, says in (
        ("TMC_PUBLISHER_MAX_PAIRS_PER_NAMESPACE", "0", "greater than or equal to 1"),
        ("TMC_PUBLISHER_MAX_PAIRS_PER_NAMESPACE", "1e9", "valid integer"),
        ("TMC_PUBLISHER_METRICS_PORT", "70000", "less than or equal to 65535"),
    ):
        done = run(**{name: value})
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        line = done.stderr.strip()
        assert line.startswith(f"tmc publisher: bad setting: {name}: ") and says in line, line


def test_a_metrics_port_in_use_is_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run(
            TMC_KUBECONFIG=str(kubeconfig),
            TMC_DATABASE_URL=f"sqlite:///{tmp_path / 'tmc.db'}",
            TMC_PUBLISHER_METRICS_PORT=str(port),
            TMC_PUBLISHER_METRICS_ADDRESS="127.0.0.1",
        )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"tmc publisher: cannot serve metrics on 127.0.0.1:{port}"), last
