"""End to end on this machine: the example C programs, tagged with the shim, traced with lackey,
profiled by the trace backend, uploaded by the real CLI to the real service (uvicorn on SQLite),
and recommended."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from tmc_agent import examples, shim
from tmc_agent.backends import simulated

from model.bundle import parse_bundle
from tests.services import uvicorn_server

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None,
    reason="the trace backend needs valgrind and gcc",
)


def tmc(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(BIN / "tmc"), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_examples_profiled_uploaded_and_recommended(
    shim_build: shim.ShimBuild, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'tmc.db'}"
    env = {**os.environ, "TMC_DATABASE_URL": db, "TMC_ENVIRONMENT": "test"}
    tmc("db", "upgrade", env=env)
    agent = tmc("token", "create", "--role", "agent", "--name", "node-1", env=env)
    operator = tmc("token", "create", "--role", "operator", "--name", "ops", env=env)
    spool = tmp_path / "spool"
    agent_env = {**env, "XDG_CACHE_HOME": str(shim_build.out.parent / "cache")}
    with uvicorn_server({"TMC_DATABASE_URL": db, "TMC_ENVIRONMENT": "test"}) as base:
        for name in ("bfs", "hashjoin"):
            exe = examples.build_example(name, tmp_path / "bin")
            bundle_path = tmp_path / f"{name}.json"
            done = subprocess.run(
                [
                    str(BIN / "tmc-agent"),
                    "profile",
                    "--backend",
                    "trace",
                    "--name",
                    name,
                    "--out",
                    str(bundle_path),
                    "--upload",
                    base,
                    "--token",
                    agent,
                    "--spool",
                    str(spool),
                    "--",
                    str(exe),
                    *examples.DEFAULT_ARGS[name],
                ],
                env=agent_env,
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert "uploaded: HTTP 201" in done.stderr
            bundle = parse_bundle(bundle_path.read_text())
            assert "valgrind trace (tmctrace)" in bundle.host.cpu_model
            tags = {s.tag for s in bundle.structures}
            want = {
                "bfs": {"bfs_parent", "csr_adjacency", "edge_list"},
                "hashjoin": {"hash_buckets", "hash_chains", "probe_relation"},
            }
            assert want[name] <= tags
            curve = [p.misses_per_instruction for p in bundle.miss_curve]
            assert curve[0] > curve[-1] > 0  # the traced program's own miss curve
            fastmin = bundle.run("fastmin")
            assert sum(fastmin.samples[t] for t in want[name]) > 0
            # The host model's stall attribution rides along: per-structure penalties.
            m = bundle.structure_measurements
            assert m is not None and m.source == "trace" and m.stall_sample_period_cycles == 1
            for run in bundle.runs:
                assert sum(m.run(run.name).stall_samples.values()) <= run.cycles
            # With one way the program's own structures miss, and stall the window.
            stalled = m.run("fastmin").stall_samples
            assert sum(stalled[t] for t in want[name]) > 0
            rec = httpx.post(
                f"{base}/recommend",
                headers={"Authorization": f"Bearer {operator}"},
                json={"workload": name},
                timeout=60,
            )
            assert rec.status_code == 200, rec.text
            body = rec.json()["recommendation"]
            assert want[name] <= {p["tag"] for p in body["placement"]}
            (tmp_path / f"{name}.recommendation.json").write_text(json.dumps(body, indent=2))
    assert not list(spool.glob("*.json"))  # everything acknowledged


def test_sim_backend_profiles_a_synthetic_workload() -> None:
    bundle = simulated.profile("memcached", "cxl_local")
    assert bundle.host.slow_tier.kind == "cxl_local" and bundle.workload.name == "memcached"
    m = bundle.structure_measurements
    assert m is not None and m.source == "simulator"
    assert {r.run for r in m.runs} == {"fastmax", "fastmin", "slowmax"}
