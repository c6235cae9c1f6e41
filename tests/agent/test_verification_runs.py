"""The node agent reports succeeded opted-in pods as verification runs to the real service
(uvicorn on SQLite, the embedded default), once per pod; pods that cannot count are settled with
the reason and never posted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tmc_agent import serve, verification
from tmc_agent.discover import discover
from tmc_agent.settings import AgentSettings

from ledger import nodes as ledger_nodes
from ledger.types import NodeCapacity
from model.node_contract import (
    PLACEMENT_SEAL_ANNOTATION,
    VERIFICATION_RUN_ANNOTATION,
    PlacementSealKeys,
    is_tiered_pod,
)
from store.db import make_engine, make_session_factory, unit_of_work
from store.settings import DatabaseSettings
from tests.agent import fakehost
from tests.agent.test_serve import NODE, FakeNodeApi, FakePods, placement_pod
from tests.fixtures.ledger import hold
from tests.fixtures.service import example
from tests.services import free_port, uvicorn_server

BIN = Path(sys.executable).parent


def finished(
    uid: str,
    name: str,
    *,
    phase: str = "Succeeded",
    opted_in: bool = True,
    exit_code: int = 0,
    fallback: str | None = None,
) -> dict[str, Any]:
    pod = placement_pod(uid, name, mask=0xF, dram=4 << 30, slow=12 << 30)
    ann = pod["metadata"]["annotations"]
    if opted_in:
        ann[VERIFICATION_RUN_ANNOTATION] = "true"
    if fallback is not None:
        placement = json.loads(ann["tmc.dev/placement"])
        placement["fallback"] = fallback
        ann["tmc.dev/placement"] = json.dumps(placement)
    pod["status"] = {
        "phase": phase,
        "containerStatuses": [
            {
                "name": "main",
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "startedAt": "2026-11-23T10:00:00Z",
                        "finishedAt": "2026-11-23T10:01:30Z",
                    }
                },
            },
            {
                "name": "sidecar",
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "startedAt": "2026-11-23T09:59:59.5Z",
                        "finishedAt": "2026-11-23T10:01:00Z",
                    }
                },
            },
        ],
    }
    return pod


def test_a_succeeded_opted_in_pod_becomes_one_verification_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite:///{tmp_path / 'tmc.db'}"
    env = {**os.environ, "TMC_DATABASE_URL": db, "TMC_ENVIRONMENT": "test"}

    def tmc(*args: str) -> str:
        return subprocess.run(
            [str(BIN / "tmc"), *args], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()

    tmc("db", "upgrade")
    agent_token = tmc("token", "create", "--role", "agent", "--name", "node", "--node", NODE)
    viewer = tmc("token", "create", "--role", "viewer", "--name", "ops")
    paths = fakehost.optane_host(tmp_path / "host")
    pods = FakePods(
        finished("0000-good", "verify-graph500"),
        finished("0001-fail", "failed", phase="Failed", exit_code=1),
        finished("0002-plain", "not-opted-in", opted_in=False),
        finished("0003-fallback", "fallback", fallback="no recommendation"),
        finished("0004-crash", "crashed", exit_code=3),
    )

    with uvicorn_server({"TMC_DATABASE_URL": db, "TMC_ENVIRONMENT": "test"}) as base:
        headers = {"Authorization": f"Bearer {agent_token}", "Content-Type": "application/json"}
        httpx.post(
            f"{base}/v1/profiles", content=example("graph500"), headers=headers
        ).raise_for_status()
        scheduler = tmc("token", "create", "--role", "scheduler", "--name", "s")
        decision = httpx.post(
            f"{base}/recommend",
            json={"workload": "graph500"},
            headers={"Authorization": f"Bearer {scheduler}"},
        ).json()["id"]
        sessions = make_session_factory(make_engine(DatabaseSettings(database_url=db)))

        def placed(uid: str, name: str, mask: int) -> None:
            """The pod that ran, as the engine placed it (its placement record is the evidence
            the service checks the run against)."""
            with unit_of_work(sessions) as session:
                hold(
                    session,
                    NODE,
                    uid,
                    pod_name=name,
                    dram_bytes=4 << 30,
                    slow_bytes=12 << 30,
                    llc_mask=mask,
                    recommendation_id=decision,
                    slow_ratio=0.75,
                )

        with unit_of_work(sessions) as session:
            cap = NodeCapacity(NODE, "k", 12, 24 << 30, 128 << 30, 48, None)
            ledger_nodes.register_node(session, cap)
        placed("0000-good", "verify-graph500", 0xF)

        def agent(url: str) -> serve.Agent:
            settings = AgentSettings(
                node_name=NODE,
                paths=paths,
                plan_dir=tmp_path / "plans",
                service_url=url,
                token=agent_token,
            )
            return serve.Agent(settings, FakeNodeApi(), pods, discover(paths))

        # The service unreachable: nothing is settled, the next pass tries again.
        down = agent(f"http://127.0.0.1:{free_port()}")
        first = down.report_runs(down.sync().finished)
        assert "retried next pass" in first["default/verify-graph500"]

        a = agent(base)
        outcomes = a.report_runs(a.sync().finished)
        assert outcomes["default/verify-graph500"] == "verification run of 90.500 s reported"
        # A pod that did not opt in is not looked at; the others are settled with the reason.
        assert set(outcomes) == {
            "default/verify-graph500",
            "default/failed",
            "default/fallback",
            "default/crashed",
        }
        assert "phase 'Failed'" in outcomes["default/failed"]
        assert "fallback" in outcomes["default/fallback"]
        assert "exited with an error" in outcomes["default/crashed"]
        assert a.report_runs(a.sync().finished) == {}  # settled: never posted again

        # A run that finished before the ledger's mirror wrote its pod's placement: retried
        # while the placement log may still catch up, reported once it has.
        pods.items.append(finished("0006-early", "verify-early"))
        early = a.report_runs(a.sync().finished)
        assert "placement log has no record of it yet" in early["default/verify-early"]
        placed("0006-early", "verify-early", 0xF0)
        late = a.report_runs(a.sync().finished)
        assert late["default/verify-early"] == "verification run of 90.500 s reported"
        # Past the grace, a pod the log never held is settled as refused.
        monkeypatch.setattr(serve, "PLACEMENT_LOG_GRACE_SECONDS", 0.0)
        pods.items.append(finished("0007-stranger", "not-placed"))
        stranger = a.report_runs(a.sync().finished)
        assert stranger["default/not-placed"].startswith("verification run refused (403)")

        listed = httpx.get(
            f"{base}/v1/workloads/graph500/verification-runs",
            headers={"Authorization": f"Bearer {viewer}"},
        ).json()
        assert [(r["run_id"], r["seconds"], r["llc_ways"]) for r in listed] == [
            ("0000-good", 90.5, 4),
            ("0006-early", 90.5, 4),
        ]
        assert listed[0]["slow_ratio"] == 0.75
        rec = httpx.post(
            f"{base}/recommend",
            json={"workload": "graph500"},
            headers={"Authorization": f"Bearer {scheduler}"},
        ).json()["recommendation"]
        # The run reached the model: used, or (90.5 s is far from what the model predicts for
        # this configuration) kept aside with a flag that names it.
        v = rec["verification"]
        ignored = [r["run_id"] for r in v["ignored"]]
        assert v["runs"] + len(ignored) == 2, v


def test_the_example_job_opts_in_as_the_agent_reads_it() -> None:
    manifest = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "verify-job.yaml"
    (job,) = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    assert job["kind"] == "Job" and job["spec"]["backoffLimit"] == 0
    template = job["spec"]["template"]
    ann = template["metadata"]["annotations"]
    assert ann[VERIFICATION_RUN_ANNOTATION] == "true" and ann["tmc.dev/workload"] == "graph500"
    assert is_tiered_pod(template["metadata"]["labels"])
    spec = template["spec"]
    assert spec["schedulerName"] == "tmc-scheduler" and spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["resources"]["requests"]["tmc.dev/tiered"] == "1"
    # The pod the Job makes, once the extender placed it and it succeeded, is a run.
    pod = finished("0005-job", "verify-graph500-x")
    pod["metadata"]["annotations"] = {**ann, **pod["metadata"]["annotations"]}
    workload, run = verification.measured_run(pod, NODE)
    assert workload == "graph500" and run.run_id == "0005-job" and run.seconds == 90.5


def test_with_the_seals_keys_only_a_sealed_placement_is_a_run(tmp_path: Path) -> None:
    """With the placement seal's keys (TMC_AGENT_PLACEMENT_SEAL_KEYS, as the chart sets them),
    a pod whose placement tmc's scheduler did not seal for it is no run; without them, as
    before, it is one."""
    (tmp_path / "k1").write_text("a key of thirty-two bytes or more, for the test\n")
    keys = PlacementSealKeys.from_directory(tmp_path, "k1")
    pod = finished("0006-sealed", "sealed")
    ann = pod["metadata"]["annotations"]
    uid = pod["metadata"]["uid"]
    with pytest.raises(verification.NotARun, match="placement-seal"):
        verification.measured_run(pod, NODE, keys=keys)
    assert verification.measured_run(pod, NODE)[0]  # seals off: read as before
    ann[PLACEMENT_SEAL_ANNOTATION] = keys.seal("another-pod", ann)
    with pytest.raises(verification.NotARun, match="does not match"):
        verification.measured_run(pod, NODE, keys=keys)
    # A key this agent does not hold yet: asked again later, not settled.
    ann[PLACEMENT_SEAL_ANNOTATION] = "v1:k2:" + "A" * 43
    with pytest.raises(verification.NotVerifiedYet, match="does not hold"):
        verification.measured_run(pod, NODE, keys=keys)
    ann[PLACEMENT_SEAL_ANNOTATION] = keys.seal(uid, ann)
    workload, run = verification.measured_run(pod, NODE, keys=keys)
    assert workload == "graph500"
    assert run.run_id == "0006-sealed", run
    settings = AgentSettings.from_env(
        {"TMC_AGENT_NODE_NAME": NODE, "TMC_AGENT_PLACEMENT_SEAL_KEYS": str(tmp_path)}
    )
    assert settings.placement_seal_keys == tmp_path
    paths = fakehost.optane_host(tmp_path / "host")
    agent = serve.Agent(settings, FakeNodeApi(), FakePods(), report=discover(paths))
    assert agent.seal_keys is not None and agent.seal_keys.key_ids == ["k1"]
