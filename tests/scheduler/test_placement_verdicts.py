"""The placement verdicts (scheduler/conformance/placement-verdicts.json), which the engine's and
the node's Go tests read too: model.node_contract concludes of each placement annotation what
they conclude (no placement, placed on this node with this mask, or malformed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from model.node_contract import PLACEMENT_ANNOTATION, ContractError, Placement

ROOT = Path(__file__).resolve().parents[2]
TABLE = json.loads((ROOT / "scheduler/conformance/placement-verdicts.json").read_text())


@pytest.mark.parametrize("case", TABLE["cases"], ids=[c["name"] for c in TABLE["cases"]])
def test_model_reads_placements_as_the_table_says(case: dict[str, Any]) -> None:
    ann = dict(case["annotations"])
    pad = case.get("pad_to", 0)
    if pad > len(ann.get(PLACEMENT_ANNOTATION, "")):
        ann[PLACEMENT_ANNOTATION] = ann[PLACEMENT_ANNOTATION].ljust(pad)
    try:
        placement = Placement.from_annotations(ann)
        got = "none" if placement is None else "placed"
    except ContractError:
        placement, got = None, "malformed"
    assert got == case["verdict"]
    if placement is not None:
        assert (placement.node, placement.llc_mask) == (case["node"], case["llc_mask"])
        if "objective" in case:
            assert placement.objective == case["objective"]
