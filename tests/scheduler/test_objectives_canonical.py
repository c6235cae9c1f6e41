"""One (workload, objective) pair per objective, however it is spelled: the shared cases of
scheduler/conformance/objectives.json, which the Go engine's CanonicalObjective reads too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.pods import canonical_objective, read_pod

TABLE = Path(__file__).resolve().parents[2] / "scheduler/conformance/objectives.json"
CASES: list[dict[str, Any]] = json.loads(TABLE.read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["given"] for c in CASES])
def test_objectives_are_canonical(case: dict[str, Any]) -> None:
    want = case["canonical"] if case["canonical"] is not None else case["given"]
    assert canonical_objective(case["given"]) == want


def test_a_pods_objective_is_read_canonical() -> None:
    asks = {
        read_pod(
            {
                "metadata": {
                    "name": f"p{i}",
                    "annotations": {"tmc.dev/workload": "w", "tmc.dev/objective": text},
                },
                "spec": {"containers": [{"name": "c"}]},
            }
        ).objective
        for i, text in enumerate(["slo:5%", "slo:5.000%", "slo:05%", "slo:5.0%"])
    }
    assert asks == {"slo:5%"}
