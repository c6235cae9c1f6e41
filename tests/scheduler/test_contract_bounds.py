"""The contract's bounds, read by model.node_contract as the Go engine reads them: the shared
cases of scheduler/conformance/contract_bounds.json (pkg/tmc/contract_test.go reads the same)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from model.node_contract import ContractError, Placement

TABLE = Path(__file__).resolve().parents[2] / "scheduler/conformance/contract_bounds.json"
CASES: list[dict[str, Any]] = json.loads(TABLE.read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_python_reads_the_bounds_as_go_does(case: dict[str, Any]) -> None:
    plan = ",".join(
        f'{{"tag":"s{i}","fast_bytes":{case["fast_bytes"]},"slow_bytes":0}}'
        for i in range(case["structures"])
    )
    text = (
        '{"schema":"tmc.placement/v2","node":"n","configuration":{"vcpus":1,'
        f'"dram_bytes":{case["dram_bytes"]},"slow_bytes":0,"slow_ratio":0.0,"llc_ways":1}},'
        f'"llc_mask":"0x1","plan":[{plan}]}}'
    )
    try:
        Placement.from_annotations({"tmc.dev/placement": text})
        readable = True
    except ContractError:
        readable = False
    assert readable == case["readable"]
