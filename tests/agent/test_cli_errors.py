"""The agent's command line as a person meets it: one-line errors that name the fix (exit 2 for
a user's error, never a traceback), programs that end non-zero by design still profiled with
their status recorded, and `--version`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent import fakehost

AGENT = str(Path(sys.executable).parent / "tmc-agent")
needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None,
    reason="the trace backend needs valgrind and gcc",
)


def agent(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    done = subprocess.run(
        [AGENT, *args],
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def one_line_error(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1, stderr
    assert " fix: " in errors[0], errors[0]
    return errors[0]


def test_version() -> None:
    code, out, _ = agent("--version")
    assert code == 0 and out.startswith("tmc-agent ") and out.split()[1][0].isdigit()


def test_a_program_that_does_not_exist(tmp_path: Path) -> None:
    code, out, err = agent("profile", "--backend", "trace", "--", "./does-not-exist", cwd=tmp_path)
    assert code == 2 and out == ""
    assert "no such program" in one_line_error(err)


def test_an_unknown_backend() -> None:
    code, _, err = agent("profile", "--backend", "gpu", "--", "true")
    assert code == 2 and "--backend auto, hardware, trace or sim" in one_line_error(err)


def test_the_hardware_backend_on_a_machine_without_pmu_or_resctrl(tmp_path: Path) -> None:
    paths = fakehost.this_machine(tmp_path / "host")
    env = {"TMC_AGENT_SYS": str(paths.sys), "TMC_AGENT_PROC": str(paths.proc)}
    code, _, err = agent("profile", "--backend", "hardware", "--", "sort", "/dev/null", env=env)
    line = one_line_error(err)
    assert code == 2 and "resctrl" in line and "--backend trace" in line


def test_upload_without_a_service_or_token(tmp_path: Path) -> None:
    env = {"TMC_AGENT_SERVICE_URL": "", "TMC_TOKEN": "", "TMC_AGENT_TOKEN": ""}
    code, _, err = agent("upload", "--spool", str(tmp_path), env=env)
    assert code == 2 and "TMC_AGENT_SERVICE_URL" in one_line_error(err)
    env["TMC_AGENT_TOKEN_FILE"] = str(tmp_path / "missing-token")
    code, _, err = agent("upload", "--url", "http://127.0.0.1:9", env=env)
    assert code == 2 and "TMC_AGENT_TOKEN_FILE" in one_line_error(err)


@needs_valgrind
def test_a_program_that_exits_non_zero_by_design_is_profiled(tmp_path: Path) -> None:
    text = tmp_path / "words.txt"
    text.write_text("".join(f"line {i} of a file without the word\n" for i in range(20_000)))
    bundle = tmp_path / "grep.json"
    code, _, err = agent(
        "profile",
        "--backend",
        "trace",
        "--out",
        str(bundle),
        "--",
        "grep",
        "-c",
        "zebra",
        str(text),
        env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert code == 0, err
    assert "exited with status 1" in err and "Traceback" not in err
    run = json.loads((tmp_path / "grep.run.json").read_text())
    assert run["exit_status"] == 1 and run["command"][:3] == ["grep", "-c", "zebra"]
    assert run["target_exe"] == str(Path(shutil.which("grep") or "grep").resolve())
    assert json.loads(bundle.read_text())["workload"]["name"] == "grep"


def test_bad_options_are_refused_before_anything_runs() -> None:
    code, _, err = agent("profile", "--backend", "trace", "--host", "mars", "--", "true")
    assert code == 2 and "--host optane, cxl_local or cxl_pool" in one_line_error(err)
    code, _, err = agent("profile", "--dependent-fraction", "1.5", "--", "true")
    assert code == 2 and "between 0 and 1" in one_line_error(err)
