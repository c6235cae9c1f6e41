"""`./dev test` is CI's gate: it must fail when any of its steps fails."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEV = ROOT / "dev"


def run_steps(*commands: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DEV), "steps", *commands], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_failing_step_fails_the_run_and_the_others_still_run() -> None:
    result = run_steps("true", "exit 3", "echo third-ran")
    assert result.returncode != 0
    assert "step 2 FAILED (exit 3)" in result.stderr
    assert "third-ran" in result.stdout
    assert "failed: step 2" in result.stderr


def test_a_failing_first_step_of_a_pair_is_not_hidden() -> None:
    # What `ruff check . && ruff format --check .` under `set -e` did: a failing left side of
    # `&&` does not stop the script, so the run passed.
    result = run_steps("false", "true")
    assert result.returncode != 0


def test_all_steps_passing_passes() -> None:
    assert run_steps("true", "true").returncode == 0


def test_every_gate_of_dev_test_runs_as_a_step() -> None:
    body = re.search(r"^cmd_test\(\) \{\n(.*?)^\}", DEV.read_text(), re.S | re.M)
    assert body is not None
    lines = [line.strip() for line in body.group(1).splitlines() if line.strip()]
    gates = [line for line in lines if "$bin/" in line]
    assert len(gates) >= 6  # ruff check, ruff format, mypy, import contracts, pytest, benchmark
    for line in gates:
        assert line.startswith("step "), line
        assert "&&" not in line and "||" not in line, line
    assert lines[-1] == "finish_steps"
