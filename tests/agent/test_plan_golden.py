"""The shim's plan file has one grammar and two renderers: model/node_contract.py's (the agent's
path) and node/nri's (the runtime plugin's, checked by its Go test against the same files). Every
reader is held to tests/fixtures/plans: the Python renderer and parser here, the Go renderer in
node/nri, and the C shim's own parser (it enforces the golden plan on a real program)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tmc_agent import shim

from model.node_contract import Placement, parse_plan_file, render_plan_file

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "plans"
CASES = sorted(GOLDEN.glob("*.json"))


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_python_renders_every_golden_plan(case: Path) -> None:
    spec = json.loads(case.read_text())
    placement = Placement.model_validate(spec["placement"])
    want = case.with_suffix(".plan").read_text()
    assert render_plan_file(placement, spec["fast_node"], spec["slow_node"], spec["who"]) == want
    parsed = parse_plan_file(want)
    assert (parsed.fast_node, parsed.slow_node) == (spec["fast_node"], spec["slow_node"])
    assert parsed.fast_bytes == {s.tag: s.fast_bytes for s in placement.plan}


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
