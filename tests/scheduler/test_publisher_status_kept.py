"""The plans a TieredRecommendation's status keeps when a status write failed between two spec
writes: the replaced generation's plan is kept from the replaced spec itself, so that a pod
placed from it still finds it (its node reads it there)."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from model.node_contract import Recommendation, StructurePlan
from model.resources import GIB
from scheduler.kube import KubeRecommendations
from scheduler.status import KEPT_PLANS, Decided, Written, status_of

NOW = "2026-01-01T00:00:00Z"


def planned(fast_gib: int) -> Recommendation:
    return Recommendation(
        workload="g",
        objective="cheapest",
        dram_bytes=8 * GIB,
        llc_ways=4,
        plan=[StructurePlan(tag="edges", fast_bytes=fast_gib * GIB, slow_bytes=0)],
    )


def at(generation: int, rec: Recommendation, status: dict[str, Any]) -> dict[str, Any]:
    obj = rec.to_object()
    obj["metadata"]["generation"] = generation
    obj["status"] = status
    return obj


def test_a_generation_whose_status_write_failed_is_kept_from_its_spec() -> None:
    status: dict[str, Any] = {}
    for generation in range(1, 5):
        status = status_of(
            Decided(planned(generation)), at(generation, planned(generation), status), NOW
        )
    assert [p["generation"] for p in status["plans"]] == [4, 3, 2, 1]
    # Generation 5's spec is written; its status write fails: the status still says 4.
    fifth = at(5, planned(5), status)
    # Generation 6 replaces it.
    written = Written(at(6, planned(6), status), replaced=fifth)
    kept = status_of(Decided(planned(6)), written, NOW)["plans"]
    assert [p["generation"] for p in kept] == [6, 5, 4, 3][:KEPT_PLANS]
    assert kept[1] == {
        "generation": 5,
        "dram_bytes": 8 * GIB,
        "slow_bytes": 0,
        "plan": [{"tag": "edges", "fast_bytes": 5 * GIB, "slow_bytes": 0}],
    }
    # The same spec written again (the publish retried after the failed status write) keeps its
    # generation: kept once.
    again = Written(at(5, planned(5), status), replaced=fifth)
    kept = status_of(Decided(planned(5)), again, NOW)["plans"]
    assert [p["generation"] for p in kept] == [5, 4, 3, 2]
    # Without the replaced object (a publisher store that does not say it), as before.
    plain = status_of(Decided(planned(6)), dict(written), NOW)["plans"]
    assert [p["generation"] for p in plain] == [6, 4, 3, 2]


def test_the_replaced_spec_is_its_generations_truth_and_a_fallback_keeps_none() -> None:
    status: dict[str, Any] = {}
    for generation in range(1, 4):
        status = status_of(
            Decided(planned(generation)), at(generation, planned(generation), status), NOW
        )
    # The status says generation 3's plan as written then; the spec replaced says it too: one
    # entry, the spec's.
    third = at(3, planned(3), status)
    kept = status_of(Decided(planned(7)), Written(at(4, planned(7), status), third), NOW)["plans"]
    assert [p["generation"] for p in kept] == [4, 3, 2, 1]
    assert kept[1]["plan"][0]["fast_bytes"] == 3 * GIB
    # A replaced fallback, or a spec that is not a recommendation, has no plan to keep.
    fallback = Recommendation(workload="g", objective="cheapest", fallback="no usable profile")
    for replaced in (at(4, fallback, status), {"metadata": {"generation": 4}, "spec": {"plan": 7}}):
        kept = status_of(Decided(planned(7)), Written(at(5, planned(7), status), replaced), NOW)
        assert [p["generation"] for p in kept["plans"]] == [5, 3, 2, 1]


class _Objects:
    """The custom objects API as the upsert calls it: the object exists at generation 5."""

    def __init__(self, current: dict[str, Any]) -> None:
        self.current = current
        self.replaced_with: dict[str, Any] | None = None

    def create_cluster_custom_object(self, *_: Any, **__: Any) -> dict[str, Any]:
        raise ApiException(status=409, reason="AlreadyExists")

    def get_cluster_custom_object(self, *_: Any, **__: Any) -> dict[str, Any]:
        return self.current

    def replace_cluster_custom_object(
        self, _group: str, _version: str, _plural: str, _name: str, body: dict[str, Any], **__: Any
    ) -> dict[str, Any]:
        self.replaced_with = body
        return {
            **body,
            "metadata": {**body["metadata"], "generation": 6},
            "status": self.current["status"],
        }


def test_the_spec_write_returns_the_object_it_replaced() -> None:
    current = at(5, planned(5), {"plans": []})
    current["metadata"]["resourceVersion"] = "41"
    objects = KubeRecommendations(client.ApiClient())
    fake = _Objects(current)
    objects._api = fake  # type: ignore[assignment]
    written = objects.upsert(planned(6).to_object())
    assert isinstance(written, Written) and written.replaced is current
    assert (
        fake.replaced_with is not None and fake.replaced_with["metadata"]["resourceVersion"] == "41"
    )
    kept = status_of(Decided(planned(6)), written, NOW)["plans"]
    assert [p["generation"] for p in kept] == [6, 5]
