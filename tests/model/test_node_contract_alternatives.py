"""A recommendation's alternatives (Algorithm 1's other configurations within T): read and
written by model.node_contract as the Go types hold them, and absent from objects written
before them."""

from __future__ import annotations

from typing import Any

import pytest

from model.node_contract import (
    MAX_BYTES,
    MAX_LLC_WAYS,
    Alternative,
    ContractError,
    Recommendation,
)
from model.resources import GIB


def _spec(**more: Any) -> dict[str, Any]:
    return {
        "schema": "tmc.recommendation/v1",
        "workload": "graph500",
        "objective": "slo:5%",
        "recommendation_id": "rec-1",
        "dram_bytes": 6 * GIB,
        "slow_bytes": 2 * GIB,
        "llc_ways": 12,
        "slow_ratio": 0.25,
        "plan": [],
        **more,
    }


def test_an_object_written_before_alternatives_reads_with_none_and_writes_as_before() -> None:
    rec = Recommendation.from_object({"spec": _spec()})
    assert rec.alternatives == []
    assert "alternatives" not in rec.to_object()["spec"]
    fallback = Recommendation(workload="w", objective="cheapest", fallback="no profile")
    assert "alternatives" not in fallback.to_object()["spec"]


def test_alternatives_are_written_in_order_and_read_back() -> None:
    offered = [
        {"llc_ways": 20, "slow_ratio": 0.25, "dram_bytes": 6 * GIB, "slow_bytes": 2 * GIB},
        {"llc_ways": 4, "slow_ratio": 0.0, "dram_bytes": 8 * GIB, "slow_bytes": 0},
    ]
    rec = Recommendation.from_object({"spec": _spec(alternatives=offered)})
    assert [a.llc_ways for a in rec.alternatives] == [20, 4]
    spec = rec.to_object()["spec"]
    assert spec["alternatives"] == offered
    assert Recommendation.from_object({"spec": spec}) == rec


@pytest.mark.parametrize(
    ("alternatives", "where"),
    [
        (
            [{"llc_ways": 4, "slow_ratio": 0.0, "dram_bytes": GIB, "slow_bytes": 0}] * 4,
            "alternatives",
        ),
        ([{"llc_ways": 0, "slow_ratio": 0.0, "dram_bytes": GIB, "slow_bytes": 0}], "llc_ways"),
        (
            [{"llc_ways": MAX_LLC_WAYS + 1, "slow_ratio": 0.0, "dram_bytes": GIB, "slow_bytes": 0}],
            "llc_ways",
        ),
        ([{"llc_ways": 4, "slow_ratio": 1.5, "dram_bytes": GIB, "slow_bytes": 0}], "slow_ratio"),
        ([{"llc_ways": 4, "slow_ratio": 0.0, "dram_bytes": MAX_BYTES, "slow_bytes": 0}], "dram"),
        ([{"llc_ways": 4, "slow_ratio": 0.0, "dram_bytes": GIB}], "slow_bytes"),
        (
            [{"llc_ways": 4, "slow_ratio": 0.0, "dram_bytes": GIB, "slow_bytes": 0, "plan": []}],
            "plan",
        ),
    ],
    ids=["four", "no ways", "65 ways", "ratio", "bytes", "missing", "a plan"],
)
def test_alternatives_out_of_the_contracts_bounds_are_refused(
    alternatives: list[dict[str, Any]], where: str
) -> None:
    with pytest.raises(ContractError, match=where):
        Recommendation.from_object({"spec": _spec(alternatives=alternatives)})


def test_three_alternatives_at_the_bounds_are_kept() -> None:
    widest = Alternative(
        llc_ways=MAX_LLC_WAYS, slow_ratio=1.0, dram_bytes=MAX_BYTES - 1, slow_bytes=MAX_BYTES - 1
    )
    rec = Recommendation.model_validate(_spec(alternatives=[widest] * 3))
    assert Recommendation.from_object(rec.to_object()) == rec
