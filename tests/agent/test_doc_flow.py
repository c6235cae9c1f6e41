"""docs/agent.md's verification run of a traced program, run as written: the blocks are read
from the document, so the document cannot drift from what works. The program is built and traced
(valgrind), recommended from its bundle and replayed at the recommendation; then the bundle is
uploaded and the replay recorded as a verification run, to the real service (uvicorn on SQLite)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model import Recommendation
from tests.services import uvicorn_server

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "agent.md"
SECTION = "**Verification runs of a traced program, on the right clock.**"

pytestmark = pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None,
    reason="the trace backend needs valgrind and gcc",
)


def documented_blocks() -> list[str]:
    """The sh blocks of the section, up to the next section's title."""
    text = DOC.read_text()
    after = text[text.index(SECTION) :]
    section = after[: after.index("\n**", len(SECTION))]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 2, "the section's two sh blocks"
    return blocks


def test_the_verification_flow_runs_as_documented(tmp_path: Path) -> None:
    replay, report = documented_blocks()
    assert "tmc recommend" in replay and "tmc-agent replay" in replay
    assert "tmc-agent upload" in report and "tmc verify record" in report
    # The blocks run from the repository's root: the same relative paths here, the test's own
    # virtualenv as .venv.
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (tmp_path / "profiler-agent").symlink_to(ROOT / "profiler-agent")
    db = f"sqlite:///{tmp_path / 'tmc.db'}"
    env = {**os.environ, "TMC_DATABASE_URL": db, "TMC_ENVIRONMENT": "test"}

    def tmc(*args: str) -> str:
        return subprocess.run(
            [str(Path(sys.executable).parent / "tmc"), *args],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.strip()

    tmc("db", "upgrade")
    agent = tmc("token", "create", "--role", "agent", "--name", "my-laptop")
    operator = tmc("token", "create", "--role", "operator", "--name", "me")
    with uvicorn_server({"TMC_DATABASE_URL": db, "TMC_ENVIRONMENT": "test"}) as base:
        # Step 1's variables, as the guide exports them.
        shell = {**env, "TMC_SERVER": base, "TMC_AGENT_TOKEN": agent, "TMC_TOKEN": operator}
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", replay + report],
            cwd=tmp_path,
            env=shell,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        env.update(TMC_SERVER=base, TMC_TOKEN=operator)
        runs = json.loads(tmc("verify", "list", "twotier", "-o", "json"))
    rec = Recommendation.model_validate_json((tmp_path / "rec.json").read_text())
    assert rec.workload.name == "twotier" and rec.sized_from == "profile"
    seconds = float(re.findall(r"^[0-9.e-]+$", done.stdout, re.M)[0])
    assert seconds > 0
    # The replay's report names the recommendation's configuration and plan.
    c = rec.chosen.configuration
    assert f"slow ratio {c.slow_ratio:g}, {c.llc_ways} ways, the recommendation's plan" in (
        " ".join(done.stderr.split())
    )
    # The service holds the run, at the recommendation's configuration, with the replay's time.
    (run,) = [r for r in runs if r["run_id"] == "replay-1"]
    assert run["slow_ratio"] == pytest.approx(c.slow_ratio) and run["llc_ways"] == c.llc_ways
    assert run["seconds"] == pytest.approx(seconds)
