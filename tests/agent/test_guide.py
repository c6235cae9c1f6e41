"""docs/agent.md's "Profile your own program", followed through the command line alone: a C
program with a hot table and a cold buffer, compiled with the guide's line, profiled by the trace
backend with explicit tags and with --auto-tag, uploaded with `tmc-agent upload FILE`, and
recommended by the running service through `tmc recommend --workload`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tmc_agent import shim

from model.bundle import parse_bundle
from tests.services import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GUIDE = ROOT / "docs" / "agent.md"
pytestmark = pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None,
    reason="the trace backend needs valgrind and gcc",
)

# A table read at random (hot) and a buffer written once (cold), each bigger than the LLC.
# ALLOC is the guide's TMC_MALLOC in hot.c and plain malloc in plain.c.
PROGRAM = """\
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tmc_alloc.h"

__attribute__((noinline)) static unsigned long *make_table(size_t n) {
    unsigned long *table = ALLOC_TABLE;
    for (size_t i = 0; i < n; i++) table[i] = i * 2654435761u;
    return table;
}

__attribute__((noinline)) static char *make_log(size_t bytes) {
    char *log_buffer = ALLOC_LOG;
    memset(log_buffer, 1, bytes);
    return log_buffer;
}

int main(void) {
    size_t n = (size_t)4 << 20;
    unsigned long *table = make_table(n);
    char *log_buffer = make_log((size_t)48 << 20);
    unsigned long x = 1, sum = 0;
    for (int r = 0; r < 1500000; r++) {
        x = x * 6364136223846793005ul + 1442695040888963407ul;
        sum += table[(x >> 33) % n];
    }
    printf("%lu %d\\n", sum, log_buffer[4096]);
    return 0;
}
"""
TAGGED = {
    "ALLOC_TABLE": 'TMC_MALLOC(n * sizeof *table, "hot_table")',
    "ALLOC_LOG": 'TMC_MALLOC(bytes, "cold_log")',
}
PLAIN = {"ALLOC_TABLE": "malloc(n * sizeof *table)", "ALLOC_LOG": "malloc(bytes)"}


def source(allocs: dict[str, str]) -> str:
    text = PROGRAM
    for name, call in allocs.items():
        text = text.replace(name, call)
    return text


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def run(*args: str, env: dict[str, str], timeout: float = 300, said: bool = False) -> str:
    """A command's output (with `said`, what it told the operator on stderr too)."""
    done = subprocess.run(
        list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return (done.stdout + done.stderr if said else done.stdout).strip()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """`tmc serve` on a new SQLite database, and the guide's environment for it."""
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TMC_")},
        "TMC_DATABASE_URL": f"sqlite:///{tmp_path / 'tmc.db'}",
        "TMC_SERVER": f"http://127.0.0.1:{port}",
    }
    server = subprocess.Popen(
        [str(BIN / "tmc"), "serve", "--create", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{env['TMC_SERVER']}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "tmc serve did not start"
            time.sleep(0.3)
        yield env["TMC_SERVER"], env
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_guide_from_a_c_file_to_a_recommendation(
    service: tuple[str, dict[str, str]], shim_build: shim.ShimBuild, tmp_path: Path
) -> None:
    base, env = service
    guide = GUIDE.read_text()
    # The commands below are the guide's; they must still be written there.
    for written in (
        "gcc -O2 -g -I profiler-agent/alloc -o hot hot.c",
        "tmc token create --role agent",
        "tmc-agent profile --backend trace --name hot --out hot.json -- ./hot",
        "--auto-tag --name plain --out plain.json -- ./plain",
        "tmc-agent upload hot.json plain.json --url $TMC_SERVER --token $TMC_AGENT_TOKEN",
        "tmc recommend --workload hot",
    ):
        assert written in guide, written

    # 1. Tokens.
    agent = run(str(BIN / "tmc"), "token", "create", "--role", "agent", "--name", "laptop", env=env)
    operator = run(str(BIN / "tmc"), "token", "create", "--role", "operator", env=env)
    env = {**env, "TMC_AGENT_TOKEN": agent, "TMC_TOKEN": operator}
    env["XDG_CACHE_HOME"] = str(shim_build.out.parent / "cache")

    # 2a. Tagged, compiled with the guide's line; 2b. untagged.
    work = tmp_path / "work"
    work.mkdir()
    tagged, plain = source(TAGGED), source(PLAIN)
    (work / "hot.c").write_text(tagged)
    (work / "plain.c").write_text(plain)
    include = ["-I", "profiler-agent/alloc"]
    run("gcc", "-O2", "-g", *include, "-o", str(work / "hot"), str(work / "hot.c"), env=env)
    run("gcc", "-O2", "-g", *include, "-o", str(work / "plain"), str(work / "plain.c"), env=env)

    # 3. Profile, both ways.
    agent_cmd = [str(BIN / "tmc-agent"), "profile", "--backend", "trace"]
    run(
        *agent_cmd,
        "--name",
        "hot",
        "--out",
        str(work / "hot.json"),
        "--",
        str(work / "hot"),
        env=env,
    )
    run(
        *agent_cmd,
        "--auto-tag",
        "--name",
        "plain",
        "--out",
        str(work / "plain.json"),
        "--",
        str(work / "plain"),
        env=env,
    )
    hot = parse_bundle((work / "hot.json").read_text())
    assert {"hot_table", "cold_log"} <= {s.tag for s in hot.structures}
    auto = {s.tag for s in parse_bundle((work / "plain.json").read_text()).structures}
    # Call sites by function and file:line, not by offset.
    table_line = line_of(plain, "malloc(n * sizeof *table)")
    log_line = line_of(plain, "malloc(bytes)")
    assert f"site:make_table(plain.c:{table_line})" in auto, auto
    assert f"site:make_log(plain.c:{log_line})" in auto, auto
    assert not any(re.fullmatch(r"site:plain:0x[0-9a-f]+", t) for t in auto), auto

    # 4. Upload the files.
    spool = tmp_path / "spool"
    uploaded = run(
        str(BIN / "tmc-agent"),
        "upload",
        str(work / "hot.json"),
        str(work / "plain.json"),
        "--url",
        base,
        "--token",
        agent,
        "--spool",
        str(spool),
        env=env,
        said=True,
    )
    assert uploaded.count("HTTP 201") == 2, uploaded
    assert not list(spool.glob("*.json"))  # both acknowledged

    # 5. The recommendation, from the service, through the CLI.
    listed = run(str(BIN / "tmc"), "get", "workloads", env=env)
    assert "hot" in listed and "plain" in listed
    shown = run(
        str(BIN / "tmc"), "recommend", "--workload", "hot", "--objective", "slo:5%", env=env
    )
    assert "Recommended configuration" in shown and "hot_table" in shown and "decision " in shown
    answer = json.loads(run(str(BIN / "tmc"), "recommend", "--workload", "hot", "--json", env=env))
    plan = {p["tag"]: p for p in answer["recommendation"]["placement"]}
    assert {"hot_table", "cold_log"} <= set(plan)

    def slow_share(tag: str) -> float:
        fast, slow = int(plan[tag]["fast_bytes"]), int(plan[tag]["slow_bytes"])
        return slow / max(1, fast + slow)

    # The coldest structures go slow first: the buffer before the table.
    assert slow_share("cold_log") >= slow_share("hot_table")
    decisions = run(str(BIN / "tmc"), "get", "decisions", "--workload", "hot", env=env)
    assert answer["id"] in decisions
