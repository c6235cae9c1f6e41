"""The shim's plan file has one grammar and two renderers: model/node_contract.py's (the agent's
path) and node/nri's (the runtime plugin's, checked by its Go test against the same files). Every
reader is held to tests/fixtures/plans: the Python renderer and parser here, the Go renderer in
node/nri, and the C shim's own parser, on every golden file (profiler-agent/alloc/tests/test_plan.c
prints what the shim's code parsed) and on a real program (it enforces the golden plan). The
files in tests/fixtures/plans/refused are refused by both readers."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from tmc_agent import shim

from model.node_contract import ContractError, Placement, parse_plan_file, render_plan_file

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "plans"
CASES = sorted(GOLDEN.glob("*.json"))
PLANS = sorted(GOLDEN.glob("*.plan"))
REFUSED = sorted((GOLDEN / "refused").glob("*.plan"))
ALLOC = Path(__file__).resolve().parents[2] / "profiler-agent" / "alloc"


@dataclass(frozen=True)
class ShimPlan:
    """What the shim's parser read: None for a node it was not given."""

    active: bool
    fast_node: int | None
    slow_node: int | None
    default_fast_bytes: int | None
    fast_bytes: dict[str, int]


@pytest.fixture(scope="module")
def plan_reader(shim_build: shim.ShimBuild) -> Path:
    """profiler-agent/alloc/tests/test_plan.c, built by the shim's Makefile."""
    return shim_build.tool("test_plan")


def shim_reads(reader: Path, plan: Path, tmp_path: Path) -> ShimPlan:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMC_")}
    env.update(TMC_PLAN=str(plan), TMC_REGION_LOG=str(tmp_path / "r.log"))
    done = subprocess.run([str(reader)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    facts: dict[str, str] = {}
    tags: dict[str, int] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "tag":
            name, _, limit = value.rpartition(" ")
            tags[name] = int(limit)
        else:
            facts[key] = value

    def node(key: str) -> int | None:
        n = int(facts[key])
        return None if n < 0 else n

    default = facts["default_fast_bytes"]
    return ShimPlan(
        active=facts["active"] == "1",
        fast_node=node("fast_node"),
        slow_node=node("slow_node"),
        default_fast_bytes=None if default == "none" else int(default),
        fast_bytes=tags,
    )


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_python_renders_every_golden_plan(case: Path) -> None:
    spec = json.loads(case.read_text())
    placement = Placement.model_validate(spec["placement"])
    want = case.with_suffix(".plan").read_text()
    assert render_plan_file(placement, spec["fast_node"], spec["slow_node"], spec["who"]) == want
    parsed = parse_plan_file(want)
    assert (parsed.fast_node, parsed.slow_node) == (spec["fast_node"], spec["slow_node"])
    assert parsed.fast_bytes == {s.tag: s.fast_bytes for s in placement.plan}


def test_every_golden_file_has_its_placement() -> None:
    assert PLANS and [p.stem for p in PLANS] == [c.stem for c in CASES]


@pytest.mark.parametrize("plan", PLANS, ids=[p.stem for p in PLANS])
def test_the_shims_parser_reads_every_golden_plan(
    plan_reader: Path, plan: Path, tmp_path: Path
) -> None:
    """The shim's own parser reads each golden file as the golden placement says and as
    model.node_contract's parser reads it: the nodes, the default and every tag's fast bytes."""
    spec = json.loads(plan.with_suffix(".json").read_text())
    placement = Placement.model_validate(spec["placement"])
    python = parse_plan_file(plan.read_text())
    shim_plan = shim_reads(plan_reader, plan, tmp_path)
    assert shim_plan.active
    assert (shim_plan.fast_node, shim_plan.slow_node) == (spec["fast_node"], spec["slow_node"])
    assert shim_plan.fast_bytes == {s.tag: s.fast_bytes for s in placement.plan}
    assert shim_plan == ShimPlan(
        True, python.fast_node, python.slow_node, python.default_fast_bytes, python.fast_bytes
    )


@pytest.mark.parametrize("plan", REFUSED, ids=[p.stem for p in REFUSED])
def test_a_refused_plan_is_refused_by_both_readers(
    plan_reader: Path, plan: Path, tmp_path: Path
) -> None:
    """Python refuses it with ContractError; the shim applies no plan (no node to bind to)."""
    shim_plan = shim_reads(plan_reader, plan, tmp_path)
    shim_refuses = not shim_plan.active or shim_plan.slow_node is None
    try:
        parse_plan_file(plan.read_text())
        python_refuses = False
    except ContractError:
        python_refuses = True
    assert (python_refuses, shim_refuses) == (True, True), shim_plan


def test_the_shim_enforces_a_golden_plan(shim_build: shim.ShimBuild, tmp_path: Path) -> None:
    # Nodes 0 and 0 (this machine has one): the shim's parser reads the tag's 4 MiB limit and its
    # region log shows alpha's chunks bound within it, the rest spilled to the "slow" node.
    plan = GOLDEN / "shim-alpha.plan"
    env = shim.shim_env(shim_build, tmp_path / "r.log", plan=plan)
    done = subprocess.run(
        [str(shim_build.tool("test_api"))], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    log = shim.parse_region_log((tmp_path / "r.log").read_text())
    assert any("binding" in n for n in log.notes)
    alpha = [r for r in log.regions if r.tag == "alpha"]
    assert len(alpha) > 2 and all(r.node == 0 for r in alpha)
