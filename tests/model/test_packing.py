"""CAT way runs and the extender's packing score (model/packing.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from model.packing import (
    Ask,
    NodeLoad,
    best_fit_run,
    best_fit_table,
    fragmentation,
    free_runs,
    is_contiguous,
    longest_free_run,
    packing_score,
    packing_scores,
)


def test_free_runs_and_fragmentation() -> None:
    used = 0b0011_0000_1111  # ways 0-3 and 8-9 taken on a 12-way LLC
    assert free_runs(used, 12) == [(4, 4), (10, 2)]
    assert longest_free_run(used, 12) == 4
    assert fragmentation(used, 12) == 1 - 4 / 6
    assert fragmentation(0, 12) == 0.0
    assert fragmentation((1 << 12) - 1, 12) == 0.0


def test_best_fit_takes_the_shortest_run_that_holds_the_ask() -> None:
    used = 0b0011_0000_1111
    assert best_fit_run(used, 12, 2) == 0b1100_0000_0000  # the 2-run, not the 4-run
    assert best_fit_run(used, 12, 3) == 0b0000_0111_0000  # low end of the 4-run
    assert best_fit_run(used, 12, 5) is None


def test_contiguity() -> None:
    assert is_contiguous(0b0111_0000)
    assert not is_contiguous(0b0101)
    assert not is_contiguous(0)


@given(st.integers(0, (1 << 20) - 1), st.integers(1, 20))
def test_best_fit_is_free_contiguous_and_exact(used: int, need: int) -> None:
    mask = best_fit_run(used, 20, need)
    if mask is None:
        assert longest_free_run(used, 20) < need
    else:
        assert is_contiguous(mask) and mask.bit_count() == need and mask & used == 0
        assert best_fit_table(used, 20)[need] >= need


def test_score_prefers_the_fuller_balanced_node() -> None:
    ask = Ask(vcpus=2, dram_bytes=4, slow_bytes=8, llc_ways=4)
    empty = NodeLoad(12, 24, 128, 48, 0, 0, 0, 0)
    half = NodeLoad(12, 24, 128, 48, 6, 12, 64, (1 << 24) - 1)
    lopsided = NodeLoad(12, 24, 128, 48, 10, 1, 0, (1 << 2) - 1)
    assert packing_score(half, ask) > packing_score(empty, ask)
    assert packing_score(half, ask) > packing_score(lopsided, ask)
    assert packing_score(NodeLoad(12, 24, 128, 48, 11, 0, 0, 0), ask) == 0  # does not fit


def test_score_prefers_an_exact_run_of_ways() -> None:
    """Same free ways (8 of 48), same fill: two runs of 4 beat one run of 8 for a 4-way ask,
    because best fit there leaves no cut-off ways."""
    full = (1 << 48) - 1
    two_runs = NodeLoad(12, 24, 0, 48, 0, 0, 0, full & ~0xF & ~(0xF << 10))
    one_run = NodeLoad(12, 24, 0, 48, 0, 0, 0, full & ~0xFF)
    ask = Ask(vcpus=1, dram_bytes=1, slow_bytes=0, llc_ways=4)
    assert packing_score(two_runs, ask) >= packing_score(one_run, ask)
    assert best_fit_table(two_runs.llc_used_mask, 48)[4] == 4
    assert best_fit_table(one_run.llc_used_mask, 48)[4] == 8


loads = st.builds(
    NodeLoad,
    cpus=st.integers(1, 64),
    dram_bytes=st.integers(1, 1 << 40),
    slow_bytes=st.sampled_from([0, 1 << 30, 1 << 37]),
    llc_ways=st.just(20),
    used_cpus=st.integers(0, 64),
    used_dram_bytes=st.integers(0, 1 << 40),
    used_slow_bytes=st.integers(0, 1 << 30),
    llc_used_mask=st.integers(0, (1 << 20) - 1),
)


@given(st.lists(loads, min_size=1, max_size=20), st.integers(1, 20), st.integers(0, 1 << 30))
def test_vectorised_score_equals_the_scalar_definition(
    nodes: list[NodeLoad], ways: int, slow: int
) -> None:
    ask = Ask(vcpus=2, dram_bytes=1 << 30, slow_bytes=slow, llc_ways=ways)
    got = packing_scores(
        np.array([n.cpus for n in nodes], dtype=float),
        np.array([n.dram_bytes for n in nodes], dtype=float),
        np.array([n.slow_bytes for n in nodes], dtype=float),
        np.array([n.llc_ways for n in nodes]),
        np.array([n.used_cpus for n in nodes], dtype=float),
        np.array([n.used_dram_bytes for n in nodes], dtype=float),
        np.array([n.used_slow_bytes for n in nodes], dtype=float),
        np.array([n.llc_used_mask.bit_count() for n in nodes]),
        np.array([best_fit_table(n.llc_used_mask, n.llc_ways)[ways] for n in nodes]),
        ask,
    )
    assert list(got) == [packing_score(n, ask) for n in nodes]
