"""The allocator shim: its C tests (preloaded, under threads, ASan, valgrind), real programs
under it, the placement plan, the region log, and its overhead against glibc."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tmc_agent import shim
from tmc_agent.hostpaths import parse_list

CHUNK = 2 << 20


def run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> str:
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_api_preloaded_writes_a_region_log(shim_build: shim.ShimBuild, tmp_path: Path) -> None:
    env = shim.shim_env(shim_build, tmp_path / "regions.%p.log")
    assert "test_api ok" in run([str(shim_build.tool("test_api"))], env)
    (log_path,) = tmp_path.glob("regions.*.log")
    log = shim.parse_region_log(log_path.read_text())
    assert log.pid == int(log_path.name.split(".")[1])
    assert {"alpha", "beta", "big", "gamma", "aligned", "scoped"} <= set(log.tags.values())
    for r in log.regions:
        assert r.start % CHUNK == 0 and r.end % CHUNK == 0 and r.end > r.start
    # Regions never overlap while mapped: an address belongs to one tag.
    spans = sorted((r.start, r.end) for r in log.regions if not r.freed)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    sizes = log.sizes()
    assert sizes["big"] >= 9 << 20 and 0 < sizes["beta"] <= 4096
    rmap = shim.RegionMap(log)
    alpha = next(r for r in log.regions if r.tag == "alpha")
    tags = rmap.lookup(np.asarray([alpha.start + 100, 8], dtype=np.uint64))
    assert [rmap.tags[i] for i in tags] == ["alpha", shim.UNTAGGED]


def test_the_explicit_api_needs_no_shim_to_build(shim_build: shim.ShimBuild) -> None:
    # Without the shim, the TMC_* macros fall back to malloc; test_api refuses to test that.
    done = subprocess.run([str(shim_build.tool("test_api"))], capture_output=True, check=False)
    assert done.returncode == 2


def test_auto_tagging_by_call_site(shim_build: shim.ShimBuild, tmp_path: Path) -> None:
    env = shim.shim_env(shim_build, tmp_path / "r.log", auto_tag=True)
    run([str(shim_build.tool("test_api"))], env)
    log = shim.parse_region_log((tmp_path / "r.log").read_text())
    sites = [t for t in log.tags.values() if t.startswith("site:")]
    assert sites and all(re.fullmatch(r"site:[\w.-]+:0x[0-9a-f]+", s) for s in sites)
    # The same call sites get the same names in another run (ASLR does not leak into tags).
    env2 = shim.shim_env(shim_build, tmp_path / "r2.log", auto_tag=True)
    run([str(shim_build.tool("test_api"))], env2)
    log2 = shim.parse_region_log((tmp_path / "r2.log").read_text())
    assert set(sites) == {t for t in log2.tags.values() if t.startswith("site:")}


def test_threads_preloaded(shim_build: shim.ShimBuild, tmp_path: Path) -> None:
    env = shim.shim_env(shim_build, tmp_path / "r.log", auto_tag=True)
    assert "test_threads ok" in run([str(shim_build.tool("test_threads"))], env)


def test_clean_under_asan_and_ubsan(shim_build: shim.ShimBuild, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TMC_REGION_LOG": str(tmp_path / "r.log"),
        "ASAN_OPTIONS": "detect_leaks=1",
    }
    run([str(shim_build.tool("test_api_asan"))], env)
    run([str(shim_build.tool("test_threads_asan"))], env)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_clean_under_valgrind_memcheck(shim_build: shim.ShimBuild, tmp_path: Path) -> None:
    env = {**os.environ, "TMC_REGION_LOG": str(tmp_path / "r.log")}
    memcheck = ["valgrind", "-q", "--error-exitcode=9", "--leak-check=full"]
    run([*memcheck, str(shim_build.tool("test_api_linked"))], env)
    run([*memcheck, str(shim_build.tool("test_threads_linked"))], env)


@pytest.mark.parametrize(
    "argv",
    [
        ["sort", "/etc/services"],
        ["ls", "-la", "/usr/lib"],
        ["python3", "-c", "import json; print(len(json.dumps(list(range(200000)))))"],
        ["gcc", "--version"],
    ],
)
def test_real_programs_run_unchanged(
    shim_build: shim.ShimBuild, tmp_path: Path, argv: list[str]
) -> None:
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} missing")
    plain = run(argv)
    env = shim.shim_env(shim_build, tmp_path / "r.log", auto_tag=True)
    assert run(argv, env) == plain
    log = shim.parse_region_log((tmp_path / "r.log").read_text())
    assert log.regions  # the program's mallocs went through the shim


def test_plan_binds_within_the_fast_limit_then_spills(
    shim_build: shim.ShimBuild, tmp_path: Path
) -> None:
    # Fast and slow node are both node 0 here (one-node machine): the mbind path runs for real
    # and the region log records which side of the limit each chunk fell on.
    plan = shim.write_plan(tmp_path / "plan", 0, 0, {"alpha": 4 << 20})
    env = shim.shim_env(shim_build, tmp_path / "r.log", plan=plan)
    run([str(shim_build.tool("test_api"))], env)
    log = shim.parse_region_log((tmp_path / "r.log").read_text())
    assert any("binding" in n for n in log.notes)
    alpha = [r for r in log.regions if r.tag == "alpha"]
    assert len(alpha) > 2 and all(r.node == 0 for r in alpha)


def test_plan_falls_back_when_the_slow_node_is_absent(
    shim_build: shim.ShimBuild, tmp_path: Path
) -> None:
    online = shim_online_nodes()
    absent = max(online) + 7
    plan = shim.write_plan(tmp_path / "plan", min(online), absent, {"alpha": 0})
    env = shim.shim_env(shim_build, tmp_path / "r.log", plan=plan)
    run([str(shim_build.tool("test_api"))], env)
    log = shim.parse_region_log((tmp_path / "r.log").read_text())
    assert any("fallback" in n for n in log.notes)


def shim_online_nodes() -> list[int]:
    return parse_list(Path("/sys/devices/system/node/online").read_text())


def test_overhead_against_glibc_is_measured(shim_build: shim.ShimBuild) -> None:
    result = shim.benchmark(shim_build, ops=300_000, repeats=1)
    assert result.glibc_ns > 0 and result.shim_ns > 0
    # Generous: the figure is reported, not gated, but a 5x regression is a bug.
    assert result.ratio < 5.0
