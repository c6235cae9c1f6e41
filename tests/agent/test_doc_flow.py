"""docs/agent.md's verification run of a traced program, run as written: the block is read from
the document, so the document cannot drift from what works. The program is built and traced
(valgrind), recommended from its bundle and replayed at the recommendation."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model import Recommendation

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "agent.md"
SECTION = "**Verification runs of a traced program, on the right clock.**"

pytestmark = pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None,
    reason="the trace backend needs valgrind and gcc",
)


def documented_block() -> str:
    """The first sh block after the section's title."""
    text = DOC.read_text()
    after = text[text.index(SECTION) :]
    found = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert found is not None, "the section has no sh block"
    return found.group(1)


def test_the_verification_flow_runs_as_documented(tmp_path: Path) -> None:
    block = documented_block()
    assert "tmc recommend" in block and "tmc-agent replay" in block
    # The block runs from the repository's root: the same relative paths here, the test's own
    # virtualenv as .venv.
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (tmp_path / "profiler-agent").symlink_to(ROOT / "profiler-agent")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rec = Recommendation.model_validate_json((tmp_path / "rec.json").read_text())
    assert rec.workload.name == "twotier" and rec.sized_from == "profile"
    seconds = float(done.stdout.strip().splitlines()[-1])
    assert seconds > 0
    # The replay's report names the recommendation's configuration and plan.
    c = rec.chosen.configuration
    assert f"slow ratio {c.slow_ratio:g}, {c.llc_ways} ways, the recommendation's plan" in (
        " ".join(done.stderr.split())
    )
