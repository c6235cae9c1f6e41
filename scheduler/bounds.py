"""The publisher's bounds: what a published recommendation may add to a pod (a placement too
large for tmc's bound on a pod's annotations is published as a fallback saying so), and how
pods are told that their namespace is at its bound of published pairs."""

from __future__ import annotations

from model.node_contract import (
    MAX_CPUS,
    MAX_LLC_WAYS,
    PlacedConfiguration,
    Placement,
    Recommendation,
)
from scheduler.status import Decided

# The reason of the Event a pod gets when its namespace's bound keeps its pair unpublished.
BOUND_REASON = "RecommendationBoundReached"
# At most this many pods are told per refusal (the rest are told at their next event).
MAX_EVENTS_PER_REFUSAL = 20


# The most a Binding may add to a pod (both placement annotations, keys and values): the Go
# engine's MaxPlacementAnnotationsBytes (scheduler/plugin/pkg/tmc/contract.go), a quarter of the
# API server's 256 KiB for all of a pod's annotations, so that the pod keeps room for its own.
MAX_PLACEMENT_ANNOTATIONS_BYTES = 64 * 1024


def placement_annotations_bytes(rec: Recommendation) -> int:
    """The most room the placement of `rec` takes on a pod: its annotations as the Binding
    writes them, for the longest node name and every field at its widest."""
    ways = rec.llc_ways
    placement = Placement(
        node="n" * 253,
        workload=rec.workload,
        objective=rec.objective or "cheapest",
        configuration=PlacedConfiguration(
            vcpus=MAX_CPUS,
            dram_bytes=rec.dram_bytes,
            slow_bytes=rec.slow_bytes,
            slow_ratio=rec.slow_ratio,
            llc_ways=ways,
        ),
        llc_mask=hex(((1 << ways) - 1) << (MAX_LLC_WAYS - ways)),
        slow_from_pool=True,
        recommendation_id=rec.recommendation_id,
        plan=rec.plan,
    )
    return sum(len(k) + len(v) for k, v in placement.to_annotations().items())


def bounded(rec: Recommendation, logged: str = "") -> Decided:
    """`rec` as published: a recommendation whose placement would not fit tmc's bound on a
    pod's annotations is published as a fallback saying so (the engine would refuse it too)."""
    if rec.fallback is not None:
        return Decided(rec, logged=logged)
    size = placement_annotations_bytes(rec)
    if size <= MAX_PLACEMENT_ANNOTATIONS_BYTES:
        return Decided(rec, logged=logged)
    why = (
        f"the placement would take {size} bytes of pod annotations ({len(rec.plan)} structures),"
        f" over tmc's bound of {MAX_PLACEMENT_ANNOTATIONS_BYTES}"
    )
    fallback = Recommendation(
        workload=rec.workload,
        objective=rec.objective,
        recommendation_id=rec.recommendation_id,
        fallback=why,
    )
    return Decided(fallback, "PlacementTooLarge", logged)
