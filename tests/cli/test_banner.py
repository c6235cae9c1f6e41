"""The commands `tmc serve --demo` prints under "Try:" run as printed, from the folder the service
was started in, in a shell whose virtualenv is not activated (as after `./dev start`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import free_port

ROOT = Path(__file__).resolve().parents[2]
TMC = Path(sys.executable).parent / "tmc"


def read_try_block(server: subprocess.Popen[str]) -> list[str]:
    """The lines under "Try:", up to the blank line that ends them."""
    assert server.stdout is not None
    deadline = time.monotonic() + 240
    lines: list[str] = []
    seen_try = False
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if not line:
            pytest.fail(f"tmc serve ended before its banner: {server.wait()}")
        if seen_try and not line.strip():
            return lines
        if seen_try:
            lines.append(line.rstrip("\n"))
        seen_try = seen_try or line.strip() == "Try:"
    pytest.fail("no banner within 240 s")


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[list[str]]:
    port = free_port()
    # A PATH without the virtualenv, as in a fresh shell after `./dev start`.
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != TMC.parent
    )
    env = {
        **os.environ,
        "PATH": path,
        "PYTHONUNBUFFERED": "1",
        "TMC_DATABASE_URL": f"sqlite:///{tmp_path / 'demo.db'}",
    }
    env.pop("TMC_REDIS_URL", None)
    env.pop("TMC_BROKER_URL", None)
    server = subprocess.Popen(
        [str(TMC), "serve", "--demo", "--create", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield read_try_block(server)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_every_printed_command_runs_as_printed_from_the_clone(demo: list[str]) -> None:
    script = "\n".join(demo)
    assert "get nodes" in script and "verify list graph500" in script
    # Not `tmc` on its own: the virtualenv is not on this shell's PATH.
    tmc_lines = [line.split()[0] for line in demo if " get " in line or " verify " in line]
    assert tmc_lines and all(cmd == ".venv/bin/tmc" or "/" in cmd for cmd in tmc_lines), tmc_lines
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != TMC.parent
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMC_")}
    done = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=ROOT,
        env={**env, "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "command not found" not in done.stderr and "error:" not in done.stderr
    assert "NAME" in done.stdout and "graph500" in done.stdout
    # Both curls answered JSON with what they asked for.
    assert '"name": "graph500"' in done.stdout and '"recommendation"' in done.stdout


def test_hints_name_the_tmc_that_runs_here(tmp_path: Path) -> None:
    """An error's fix names a command that runs from where it was printed, as the banner does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMC_")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if Path(p) != TMC.parent
    )
    done = subprocess.run(
        [str(TMC), "token", "list", "--database", f"sqlite:///{tmp_path / 'none.db'}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    hint = done.stderr.split("`")[1]
    assert hint.startswith(".venv/bin/tmc db upgrade") or hint.startswith(str(TMC)), hint
    rerun = subprocess.run(
        ["bash", "-c", hint.split(" --database")[0] + " --help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr
