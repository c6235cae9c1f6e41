"""Placement: the oracle's coldest-first fill and callers' plans."""

from __future__ import annotations

import numpy as np
import pytest

from model.resources import split_memory
from sim.engine import prepare
from sim.host import simulate
from sim.placement import Layout, StructurePlan, oracle_plan, plan_from
from tests.sim.support import one_structure, small_host, workload


def test_oracle_fills_the_coldest_first() -> None:
    w = workload()
    misses = np.asarray([1000.0, 10.0, 5000.0])  # per byte: hot 1000/0.25 MiB, cold 5000/64 MiB
    plans = oracle_plan(w, misses, 0.5)
    by_tag = {p.tag: p for p in plans}
    _, slow = split_memory(w.footprint_bytes, 0.5)
    assert sum(p.slow_bytes for p in plans) == slow
    assert by_tag["warm"].slow_bytes == by_tag["warm"].size_bytes  # fewest misses per byte
    assert 0 < by_tag["cold"].slow_bytes < by_tag["cold"].size_bytes  # the boundary, split
    assert by_tag["hot"].slow_bytes == 0
    for p in plans:
        assert p.fast_bytes + p.slow_bytes == p.size_bytes


@pytest.mark.parametrize("ratio", [0.0, 1.0])
def test_oracle_ends(ratio: float) -> None:
    w = workload()
    plans = oracle_plan(w, np.ones(3), ratio)
    assert all(p.slow_bytes == (p.size_bytes if ratio else 0) for p in plans)


def test_plans_are_checked() -> None:
    w = workload()
    size = w.structures[0].size_bytes
    with pytest.raises(ValueError, match="tags"):
        plan_from(w, [StructurePlan(tag="nope", size_bytes=1, fast_bytes=1, slow_bytes=0)])
    with pytest.raises(ValueError, match="differ"):
        plan_from(w, [StructurePlan(tag="hot", size_bytes=size, fast_bytes=0, slow_bytes=1)])
    missing_is_fast = plan_from(w, [])
    assert all(p.slow_bytes == 0 for p in missing_is_fast)


@pytest.mark.parametrize("layout", ["interleave", "tail"])
def test_a_split_structure_sends_its_share_of_misses_slow(layout: Layout) -> None:
    w = workload(one_structure({"kind": "uniform"}), accesses=40_000)
    prep = prepare(w, small_host(), seed=11)
    size = w.structures[0].size_bytes
    quarter = size // 4 // 4096 * 4096
    plan = [
        StructurePlan(tag="data", size_bytes=size, fast_bytes=size - quarter, slow_bytes=quarter)
    ]
    r = simulate(w, prep.host, 0.25, 4, seed=11, placement=plan, layout=layout)
    assert r.slow_misses / r.llc_misses == pytest.approx(0.25, abs=0.02)
