"""The LLC stack pass against a plain LRU cache, one way count at a time."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from sim import kernels
from sim.engine import prepare
from tests.sim.support import small_host, workload


def reference_lru(
    lines: np.ndarray, writes: np.ndarray, n_sets: int, ways: int
) -> tuple[np.ndarray, np.ndarray]:
    """A w-way LRU cache with write-back: per access, hit?, and the dirty line it evicted (-1)."""
    sets: list[OrderedDict[int, bool]] = [OrderedDict() for _ in range(n_sets)]
    hits = np.zeros(len(lines), dtype=bool)
    evicted = np.full(len(lines), -1, dtype=np.int64)
    for k, (line, write) in enumerate(zip(lines.tolist(), writes.tolist(), strict=True)):
        s = sets[kernels._set_of(line, n_sets - 1)]
        if line in s:
            hits[k] = True
            dirty = s.pop(line) or write
        else:
            dirty = write
            if len(s) == ways:
                victim, victim_dirty = s.popitem(last=False)
                if victim_dirty:
                    evicted[k] = victim
        s[line] = dirty
    return hits, evicted


def stack(
    lines: np.ndarray, flags: np.ndarray, n_sets: int, depth_max: int, ways: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    depth = np.empty(len(lines), dtype=np.uint8)
    wb = np.empty((len(ways), len(lines)), dtype=np.int32)
    kernels.lru_stack_pass(
        lines, flags, n_sets, depth_max, np.asarray(ways, dtype=np.int64), depth, wb
    )
    return depth, wb


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stack_pass_is_lru_at_every_way_count(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_sets, depth_max = 4, 8
    # Few distinct lines over few sets, so every stack depth and many evictions occur.
    lines = rng.integers(0, 60, size=4000).astype(np.int64)
    writes = rng.random(4000) < 0.3
    flags = np.where(writes, kernels.FLAG_WRITE, 0).astype(np.uint8)
    ways = list(range(1, depth_max + 1))
    depth, wb = stack(lines, flags, n_sets, depth_max, ways)
    for i, w in enumerate(ways):
        hits, evicted = reference_lru(lines, writes, n_sets, w)
        np.testing.assert_array_equal(depth < w, hits, err_msg=f"hits at {w} ways")
        np.testing.assert_array_equal(wb[i], evicted, err_msg=f"write-backs at {w} ways")


def test_more_ways_never_miss_more() -> None:
    # The stack property on a generated workload trace: per structure, not only in total.
    prep = prepare(workload(), small_host(), seed=3)
    curve = prep.misses_by_ways(prep.host.llc_ways)
    assert np.all(np.diff(curve) <= 0)
    assert curve[0] > curve[-1]  # the small LLC does hold part of the working set
    per_ways = np.stack([prep.misses_per_structure(w) for w in range(1, 49)])
    assert np.all(np.diff(per_ways, axis=0) <= 0)
    np.testing.assert_array_equal(per_ways.sum(axis=1), curve)


def test_write_backs_only_of_written_lines() -> None:
    prep = prepare(workload(), small_host(), seed=4, ways=[2, 12])
    tr = prep.trace
    written = set(tr.lines[(tr.flags & kernels.FLAG_WRITE) != 0].tolist())
    for w in (2, 12):
        victims = prep.wb[w][prep.wb[w] >= 0]
        assert victims.size > 0
        assert set(victims.tolist()) <= written
    # A bigger partition keeps dirty lines longer: fewer write-backs.
    assert (prep.wb[12] >= 0).sum() < (prep.wb[2] >= 0).sum()
