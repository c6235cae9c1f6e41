"""The agent on a node whose runtime runs tmc-nri's plugin: it reports a verification run only for a
pod whose containers the plugin recorded as started with their configuration applied
(`<plan_dir>/applied/<uid>/<container>.json`, as node/nri writes it). That it applies no placement,
with or without the plugin: tests/agent/test_serve.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tmc_agent import verification
from tmc_agent.settings import AgentSettings, SettingsError

from tests.agent.test_serve import NODE
from tests.agent.test_verification_runs import finished


def record(plans: Path, uid: str, container: str, **over: Any) -> Path:
    """A record as tmc-nri writes it for a container it adjusted (Record in plugin.go)."""
    body = {
        "namespace": "default",
        "pod": "verify",
        "uid": uid,
        "container": container,
        "llc_mask": "0xf",
        "dram_bytes": 4 << 30,
        "slow_bytes": 12 << 30,
        "recommendation_id": "7",
        "applied": ["intelRdt tmc-pod-x L3:0=f", "cpuset.mems 0,2"],
        "skipped": [],
        "complete": True,
        "confirmed": True,
        "started": True,
        "created": "2026-11-23T09:59:59Z",
        **over,
    }
    path = plans / "applied" / uid / f"{container}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body))
    return path


def test_nri_setting_is_read_with_bounds() -> None:
    assert AgentSettings.from_env({"TMC_AGENT_NODE_NAME": "n"}).nri is False
    assert AgentSettings.from_env({"TMC_AGENT_NODE_NAME": "n", "TMC_AGENT_NRI": "true"}).nri
    with pytest.raises(SettingsError, match="TMC_AGENT_NRI"):
        AgentSettings.from_env({"TMC_AGENT_NODE_NAME": "n", "TMC_AGENT_NRI": "maybe"})


def test_only_runs_that_started_with_their_configuration_count(tmp_path: Path) -> None:
    plans = tmp_path / "plans"
    records = plans / "applied"
    pod = finished("0000-good", "verify")
    for name in ("main", "sidecar"):
        record(plans, "0000-good", name)
    workload, run = verification.measured_run(pod, NODE, records=records)
    assert (workload, run.llc_ways, run.seconds) == ("graph500", 4, 90.5)
    # The report says what was applied: the placement the node enforced, on both containers.
    assert run.applied is not None
    assert (run.applied.llc_mask, run.applied.dram_bytes, run.applied.slow_bytes) == (
        "0xf",
        4 << 30,
        12 << 30,
    )
    assert run.applied.containers == 2 and run.applied.enforced_by == "tmc-nri"
    assert run.applied.applied == ["intelRdt tmc-pod-x L3:0=f", "cpuset.mems 0,2"]
    # Without the plugin's records (tmc-nri reconcile records nothing) it says nothing of it.
    assert verification.measured_run(pod, NODE)[1].applied is None

    cases: dict[str, tuple[dict[str, Any], str]] = {
        "0001-skipped": (
            {"complete": False, "skipped": ["llc-mask: no L3 CAT through resctrl on this node"]},
            "ran without all of its configuration: llc-mask: no L3 CAT",
        ),
        "0002-not-started": ({"started": False}, "not recorded as started"),
        "0003-other": ({"llc_mask": "0xf0"}, "created with another placement"),
        "0006-unconfirmed": ({"confirmed": False}, "not created with the plugin's adjustment"),
    }
    for uid, (over, why) in cases.items():
        pod = finished(uid, "verify")
        record(plans, uid, "main", **over)
        record(plans, uid, "sidecar")
        with pytest.raises(verification.NotARun, match=why):
            verification.measured_run(pod, NODE, records=records)
    # A container the plugin never saw (created while it was down): no record, no run.
    pod = finished("0004-late", "verify")
    record(plans, "0004-late", "main")
    with pytest.raises(verification.NotARun, match="sidecar has no record"):
        verification.measured_run(pod, NODE, records=records)
    # A record that is not one.
    pod = finished("0005-junk", "verify")
    record(plans, "0005-junk", "main")
    (records / "0005-junk" / "sidecar.json").write_text("[" * 100_000)
    with pytest.raises(verification.NotARun, match="unreadable record"):
        verification.measured_run(pod, NODE, records=records)
