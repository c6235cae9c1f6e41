"""`tmc plan patterns`: a capacity plan read as the API answers it, and the writes it implies
(the API server's side is tested end to end: tests/scheduler/controlplane/patterns.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.patterns import PlanFile, adoptable, plan_changes
from model.node_contract import PATTERN_ANNOTATION, NodePattern
from model.planning_requests import CapacityIn, capacity_plan

runner = CliRunner()
GIB = 1 << 30

REQUEST = {
    "classes": [
        {
            "name": "web",
            "arrivals_per_hour": 40,
            "options": [
                {"vcpus": 4, "dram_bytes": 2 * GIB, "slow_bytes": 0, "llc_ways": 2,
                 "seconds": 3600, "cost": 1.0},
            ],
        },
        {
            "name": "db",
            "arrivals_per_hour": 20,
            "options": [
                {"vcpus": 1, "dram_bytes": 10 * GIB, "slow_bytes": 4 * GIB, "llc_ways": 8,
                 "seconds": 3600, "cost": 1.0},
            ],
        },
    ],
    "kinds": [{"name": "small", "cpus": 12, "dram_bytes": 24 * GIB, "local_slow_bytes": 64 * GIB,
               "llc_ways": 20}],
    "time_limit_seconds": 2,
}  # fmt: skip


@pytest.fixture(scope="module")
def plan() -> dict[str, Any]:
    return capacity_plan(CapacityIn.model_validate(REQUEST))


def node(name: str, pattern: str | None = None, dram: int = 24 * GIB) -> dict[str, Any]:
    ann = {"tmc.dev/dram-bytes": str(dram), "tmc.dev/slow-bytes": str(64 * GIB),
           "tmc.dev/llc-ways": "20"}  # fmt: skip
    if pattern is not None:
        ann[PATTERN_ANNOTATION] = pattern
    return {
        "metadata": {"name": name, "labels": {"tmc.dev/host-kind": "small"}, "annotations": ann}
    }


def test_the_plan_names_its_options_and_is_adopted_alone(plan: dict[str, Any]) -> None:
    assert plan["options"]["db"] == [
        {"vcpus": 1, "dram_bytes": 10 * GIB, "slow_bytes": 4 * GIB, "llc_ways": 8}
    ]
    kind, machines = adoptable(PlanFile.model_validate(plan), None, None)
    assert kind == "small" and len(machines) == plan["best"]["machines"] > 1
    assert sum(s.count for m in machines for s in m) == sum(
        sum(t.values()) for t in plan["best"]["machines_content"]
    )


def test_applying_twice_changes_nothing(plan: dict[str, Any]) -> None:
    _, machines = adoptable(PlanFile.model_validate(plan), "small", None)
    nodes = [node(f"n{i}") for i in range(len(machines) + 2)]
    first = plan_changes(nodes, machines)
    assert all(c.needed for c in first)
    assert [c.machine for c in first][: len(machines)] == list(range(len(machines)))
    written = [node(c.node, c.after) for c in first]
    assert not any(c.needed for c in plan_changes(written, machines))
    # An unreadable pattern is rewritten.
    broken = [node("n0", "{oops"), *written[1:]]
    assert [c.node for c in plan_changes(broken, machines) if c.needed] == ["n0"]
    pattern = NodePattern.from_annotations({PATTERN_ANNOTATION: first[0].after})
    assert pattern is not None and pattern.machine == 0
    assert not any(c.warning for c in first)
    # A node smaller than the plan's machine kind is written, with a warning.
    small = plan_changes([node("n0", dram=4 * GIB)], machines)
    assert small[0].needed and small[0].warning and "DRAM" in small[0].warning


def test_plans_that_cannot_be_adopted_say_why(plan: dict[str, Any], tmp_path: Path) -> None:
    no_options = {k: v for k, v in plan.items() if k != "options"}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(no_options))
    out = runner.invoke(app, ["plan", "patterns", "apply", str(path), "--dry-run"])
    assert out.exit_code == 2 and "--request" in out.output
    path.write_text(json.dumps(plan))
    out = runner.invoke(app, ["plan", "patterns", "apply", str(path), "--kind", "nope"])
    assert out.exit_code == 2 and "no such machine kind" in out.output
    path.write_text(json.dumps({**plan, "best": {**plan["best"], "machines": -1}}))
    out = runner.invoke(app, ["plan", "patterns", "apply", str(path)])
    assert out.exit_code == 2 and "no machines" in out.output
    # The request the plan answered supplies the options instead.
    request = CapacityIn.model_validate(REQUEST)
    kind, machines = adoptable(PlanFile.model_validate(no_options), None, request)
    assert kind == "small" and machines
