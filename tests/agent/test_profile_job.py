"""deploy/examples/profile-job.yaml, run as a kubelet would run it, on this machine: its volumes
become directories, the init container copies the program out of the "workload image" (the
example hash join, built here), and the profile container's own command and environment run the
real agent on a fake host (no PMU: `--backend=auto` takes the trace) against the real service."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tmc_agent import examples

from model.bundle import parse_bundle
from tests.agent import fakehost
from tests.agent.podspec import Pod
from tests.services import uvicorn_server

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "examples" / "profile-job.yaml"
BIN = Path(sys.executable).parent


def job() -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    assert doc["apiVersion"] == "batch/v1" and doc["kind"] == "Job"
    return dict(doc)


def test_the_manifest_is_complete() -> None:
    doc = job()
    spec = doc["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never" and doc["spec"]["activeDeadlineSeconds"] > 0
    assert spec["nodeSelector"] == {"tmc.dev/host-kind": "optane"}
    (profile,) = spec["containers"]
    assert profile["command"][:2] == ["tmc-agent", "profile"]
    env = {e["name"]: e.get("value") for e in profile["env"]}
    # The agent's contract: its service URL and its token file, from the chart's Secret.
    assert env["TMC_AGENT_SERVICE_URL"].startswith("http")
    token_mount = next(m for m in profile["volumeMounts"] if m["name"] == "token")
    assert env["TMC_AGENT_TOKEN_FILE"].startswith(token_mount["mountPath"] + "/")
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["token"]["secret"]["secretName"] == "tmc-agent-token"
    for c in [*spec["initContainers"], profile]:
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes
    # The spool is the host directory the DaemonSet uploads from; the bundle is kept apart
    # (the spool holds only bundles waiting for the service).
    out = next(a for a in profile["command"] if a.startswith("--out="))
    spool = next(a for a in profile["command"] if a.startswith("--spool="))
    assert Path(out.split("=", 1)[1]).parent != Path(spool.split("=", 1)[1])


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None,
    reason="the trace backend needs valgrind and gcc",
)
def test_the_job_profiles_and_uploads_its_workload(tmp_path: Path) -> None:
    doc = job()
    spec = doc["spec"]["template"]["spec"]
    pod = Pod(spec, tmp_path / "pod")
    (init,) = spec["initContainers"]
    (profile,) = spec["containers"]
    argv = profile["command"]
    program = argv[argv.index("--") + 1]
    # The workload's image: the example hash join, where the init container copies it from.
    image = tmp_path / "image"
    source = init["command"][2].removesuffix("/.")
    built = examples.build_example("hashjoin", tmp_path / "build")
    (image / source.lstrip("/")).mkdir(parents=True)
    shutil.copy(built, image / source.lstrip("/") / Path(program).name)
    copy = [
        init["command"][0],
        init["command"][1],
        str(image / source.lstrip("/")) + "/.",
        pod.host_path(init, init["command"][3]),
    ]
    subprocess.run(copy, check=True)

    db = f"sqlite:///{tmp_path / 'tmc.db'}"
    service_env = {**os.environ, "TMC_DATABASE_URL": db, "TMC_ENVIRONMENT": "test"}

    def tmc(*args: str) -> str:
        return subprocess.run(
            [str(BIN / "tmc"), *args], env=service_env, capture_output=True, text=True, check=True
        ).stdout.strip()

    tmc("db", "upgrade")
    token_path = Path(pod.host_path(profile, "/var/run/secrets/tmc/token"))
    token_path.parent.mkdir(parents=True, exist_ok=True)
    token_path.write_text(tmc("token", "create", "--role", "agent", "--name", "job") + "\n")
    operator = tmc("token", "create", "--role", "operator", "--name", "ops")
    host = fakehost.this_machine(tmp_path / "host")  # no PMU, no resctrl: auto -> trace

    with uvicorn_server({"TMC_DATABASE_URL": db, "TMC_ENVIRONMENT": "test"}) as base:
        env = {e["name"]: e["value"] for e in profile["env"]}
        env["TMC_AGENT_SERVICE_URL"] = base  # the cluster's Service name, here a local port
        env = {k: pod.host_path(profile, v) for k, v in env.items()}
        env["TMC_AGENT_SYS"], env["TMC_AGENT_PROC"] = str(host.sys), str(host.proc)
        env["TMC_AGENT_RESCTRL"] = str(host.resctrl)
        env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
        done = subprocess.run(
            [str(BIN / argv[0]), *pod.argv(profile, env)[1:]],
            env={**os.environ, **env, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "backend auto: trace" in done.stderr and "uploaded: HTTP 201" in done.stderr
        out = Path(pod.host_path(profile, "/var/lib/tmc/profiles/hashjoin.json"))
        bundle = parse_bundle(out.read_text())
        name = next(a for a in argv if a.startswith("--name=")).split("=", 1)[1]
        label = next(a for a in argv if a.startswith("--input-label=")).split("=", 1)[1]
        assert (bundle.workload.name, bundle.workload.input_label) == (name, label)
        assert {"hash_buckets", "hash_chains", "probe_relation"} <= {
            s.tag for s in bundle.structures
        }
        run = json.loads(out.with_name("hashjoin.run.json").read_text())
        assert run["exit_status"] == 0 and Path(run["target_exe"]).name == "hashjoin"
        spool = Path(pod.host_path(profile, "/var/lib/tmc/spool"))
        assert not list(spool.glob("*.json"))  # acknowledged: nothing left for the DaemonSet
        answer = httpx.post(
            f"{base}/recommend",
            headers={"Authorization": f"Bearer {operator}"},
            json={"workload": name},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        placed = {p["tag"] for p in answer.json()["recommendation"]["placement"]}
        assert {"hash_buckets", "probe_relation"} <= placed
