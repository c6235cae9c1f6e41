"""CAT way runs (model/packing.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from model.packing import (
    best_fit_length,
    best_fit_run,
    fragmentation,
    free_runs,
    is_contiguous,
    longest_free_run,
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
        length = best_fit_length(used, 20, need)
        assert length is not None and length >= need
