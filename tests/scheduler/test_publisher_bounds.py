"""A recommendation is published only if its placement fits on a pod with room to spare: the
publisher and the Go engine hold it to one bound (scheduler/plugin/pkg/tmc's ask_test.go holds
the engine to the same cases)."""

from __future__ import annotations

import json
from pathlib import Path

from model.node_contract import Recommendation, StructurePlan
from scheduler.bounds import MAX_PLACEMENT_ANNOTATIONS_BYTES, bounded, placement_annotations_bytes
from scheduler.status import status_of

BOUNDS = Path(__file__).resolve().parents[2] / "scheduler/conformance/contract_bounds.json"


def planned(structures: int, tag_length: int) -> Recommendation:
    plan = [
        StructurePlan(tag=f"s{i:0{tag_length - 1}d}", fast_bytes=1, slow_bytes=0)
        for i in range(structures)
    ]
    return Recommendation(
        workload="w", objective="slo:5%", dram_bytes=structures, llc_ways=2, plan=plan
    )


def test_the_bound_is_the_shared_one() -> None:
    """The number the engine's tests hold MaxPlacementAnnotationsBytes to, read from the shared
    table (scheduler/conformance/contract_bounds.json), not from Go source."""
    table = json.loads(BOUNDS.read_text())
    assert table["max_placement_annotations_bytes"] == MAX_PLACEMENT_ANNOTATIONS_BYTES


def test_a_plan_of_4096_tags_is_published_as_a_fallback_with_the_reason() -> None:
    """4,096 tags: ~300 KB of placement, past the API server's 256 KiB for all of a pod's
    annotations (the Binding wrote it, and every later update of the pod failed)."""
    rec = planned(4096, 40)
    assert placement_annotations_bytes(rec) > 256 * 1024
    decided = bounded(rec)
    assert decided.fallback_cause == "PlacementTooLarge"
    out = decided.recommendation
    assert (
        out.fallback is not None and f"bound of {MAX_PLACEMENT_ANNOTATIONS_BYTES}" in out.fallback
    )
    assert "4096 structures" in out.fallback and out.plan == []
    # The published object is small again.
    assert len(json.dumps(out.to_object())) < 2048
    status = status_of(decided, {"metadata": {"generation": 1}}, now="2026-01-01T00:00:00Z")
    fallback = next(c for c in status["conditions"] if c["type"] == "Fallback")
    assert (fallback["status"], fallback["reason"]) == ("True", "PlacementTooLarge")


def test_a_plan_that_fits_is_published_as_it_is() -> None:
    rec = planned(64, 40)
    assert placement_annotations_bytes(rec) <= MAX_PLACEMENT_ANNOTATIONS_BYTES
    decided = bounded(rec)
    assert decided.recommendation == rec and decided.fallback_cause == ""
