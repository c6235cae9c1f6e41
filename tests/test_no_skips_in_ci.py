"""A test skipped under CI=true fails the run (tests/fixtures/no_skips_in_ci.py); outside CI it
stays a skip, and an expected failure stays one under both."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = """
import shutil
import pytest

@pytest.mark.skipif(shutil.which("no-such-tool-here") is None, reason="needs no-such-tool-here")
def test_needs_a_tool() -> None:
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_known_failure() -> None:
    assert False

def test_skips_itself() -> None:
    pytest.skip("the server would not start")

def test_plain() -> None:
    pass
"""


def run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_cases.py").write_text(CASES)
    # Nothing of this run's own pytest set-up reaches the inner one.
    env = {
        k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")
    }
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"),
            *("-p", "tests.fixtures.no_skips_in_ci", str(tmp_path / "test_cases.py")),
        ],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def outcomes(stdout: str) -> dict[str, int]:
    """The counts of pytest's last line ("1 failed, 1 passed, ... in 0.04s"), by outcome."""
    last = stdout.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last.split(" in ")[0])}


def test_a_skip_fails_under_ci(tmp_path: Path) -> None:
    done = run(tmp_path, "true")
    assert done.returncode == 1, done.stdout
    # A skip at setup (skipif) is reported as an error, one in the test body as a failure.
    counts = outcomes(done.stdout)
    assert (counts["failed"], counts["passed"], counts["xfailed"], counts["error"]) == (1, 1, 1, 1)
    assert "skipped under CI=true" in done.stdout
    assert "needs no-such-tool-here" in done.stdout
    assert "the server would not start" in done.stdout


def test_a_skip_stays_a_skip_outside_ci(tmp_path: Path) -> None:
    done = run(tmp_path, None)
    assert done.returncode == 0, done.stdout
    counts = outcomes(done.stdout)
    assert (counts["passed"], counts["skipped"], counts["xfailed"]) == (1, 2, 1)
    assert "failed" not in counts and "error" not in counts
