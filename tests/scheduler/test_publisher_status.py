"""The status the publisher writes on a TieredRecommendation (the API server holds it to the
generated CRD's schema in the plugin's end-to-end tests; here, what it says)."""

from __future__ import annotations

from kubernetes.utils.quantity import parse_quantity

from model.node_contract import Recommendation, StructurePlan
from model.resources import GIB, quantity_text
from scheduler.status import KEPT_PLANS, Decided, status_of

RECOMMENDED = Decided(
    Recommendation(
        workload="graph500", objective="slo:5%", dram_bytes=6 * GIB, slow_bytes=GIB // 2, llc_ways=4
    )
)
FALLBACK = Decided(
    Recommendation(workload="w", objective="cheapest", fallback="no usable profile"),
    "NoFeasibleConfiguration",
)


def conditions(status: dict[str, object]) -> dict[str, dict[str, object]]:
    listed = status["conditions"]
    assert isinstance(listed, list)
    return {str(c["type"]): c for c in listed}


def test_a_recommendation_is_published_and_no_fallback() -> None:
    status = status_of(RECOMMENDED, {"metadata": {"generation": 3}}, now="2026-01-01T00:00:00Z")
    assert status["observedGeneration"] == 3
    assert (status["dram"], status["slow"]) == ("6Gi", "512Mi")
    found = conditions(status)
    assert found["Fallback"]["message"] == "6Gi DRAM, 512Mi slow memory, 4 LLC ways"
    assert found["Published"]["status"] == "True"
    assert found["Published"]["observedGeneration"] == 3
    assert (found["Fallback"]["status"], found["Fallback"]["reason"]) == ("False", "Recommended")


def test_a_fallback_says_its_cause_and_reason() -> None:
    status = status_of(FALLBACK, {"metadata": {"generation": 1}}, now="2026-01-01T00:00:00Z")
    assert (status["dram"], status["slow"]) == ("-", "-")
    fallback = conditions(status)["Fallback"]
    assert fallback["status"] == "True"
    assert fallback["reason"] == "NoFeasibleConfiguration"
    assert fallback["message"] == "no usable profile"


def test_a_conditions_transition_time_moves_only_when_its_status_does() -> None:
    first = status_of(FALLBACK, {"metadata": {"generation": 1}}, now="2026-01-01T00:00:00Z")
    written = {"metadata": {"generation": 2}, "status": first}
    again = conditions(status_of(FALLBACK, written, now="2026-01-01T00:05:00Z"))
    assert again["Fallback"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert again["Fallback"]["observedGeneration"] == 2
    changed = conditions(status_of(RECOMMENDED, written, now="2026-01-01T00:05:00Z"))
    assert changed["Fallback"]["lastTransitionTime"] == "2026-01-01T00:05:00Z"
    assert changed["Published"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_sizes_read_as_kubernetes_quantities_at_every_size() -> None:
    """What `kubectl get` shows: the largest binary suffix keeping the number at least 1, at
    most three significant digits, and text Kubernetes parses back as a quantity."""
    cases = {
        0: "0",
        512: "512",
        32 << 20: "32Mi",
        3584 << 20: "3.5Gi",
        4 * GIB // 3: "1.33Gi",
        1000 * GIB: "1000Gi",
        1023 * GIB + GIB // 2: "1024Gi",
        5 << 50: "5Pi",
    }
    for n, text in cases.items():
        assert quantity_text(n) == text, n
        assert abs(float(parse_quantity(text)) - n) <= 0.005 * n, text  # type: ignore[no-untyped-call]


def test_the_status_keeps_the_latest_generations_plans() -> None:
    """A pod placed from a generation the spec has since moved past names it; its node reads
    that generation's plan from the status: the newest first, the current one included, at most
    KEPT_PLANS, a fallback's none."""

    def planned(fast: int) -> Decided:
        plan = [StructurePlan(tag="edges", fast_bytes=fast, slow_bytes=0)]
        return Decided(
            Recommendation(
                workload="g", objective="cheapest", dram_bytes=8 * GIB, llc_ways=4, plan=plan
            )
        )

    status: dict[str, object] = {}
    for generation in range(1, 7):
        written = {"metadata": {"generation": generation}, "status": status}
        status = status_of(planned(generation * GIB), written, now="2026-01-01T00:00:00Z")
        kept = status["plans"]
        assert isinstance(kept, list)
        assert [p["generation"] for p in kept] == list(range(generation, 0, -1))[:KEPT_PLANS]
        assert kept[0] == {
            "generation": generation,
            "dram_bytes": 8 * GIB,
            "slow_bytes": 0,
            "plan": [{"tag": "edges", "fast_bytes": generation * GIB, "slow_bytes": 0}],
        }
    # Writing a generation again (a failed status write retried) keeps one entry for it.
    again = status_of(planned(GIB), {"metadata": {"generation": 6}, "status": status})
    assert [p["generation"] for p in again["plans"]] == [6, 5, 4, 3]
    assert again["plans"][0]["plan"][0]["fast_bytes"] == GIB
    # A fallback has no plan of its own; the earlier ones stay for the pods placed from them.
    after = status_of(FALLBACK, {"metadata": {"generation": 7}, "status": again})
    assert [p["generation"] for p in after["plans"]] == [6, 5, 4, 3]
