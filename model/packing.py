"""CAT way runs: where a configuration's LLC ways go on a node.

Pure functions, shared by the rebalancer and the planning benchmark. The placement rule itself (the fit of a pod on a node, the packing score, the
machine-pattern preference) is the Go engine's alone (scheduler/plugin/pkg/tmc); the Go tests
hold its way runs to the same answers through the table `python -m model.packing_runs` writes from
this module (scheduler/plugin/pkg/tmc/testdata/packing_runs.json, read by ways_test.go).

**LLC ways.** Intel CAT gives a class of service a *contiguous* capacity bitmask (bit i = way i).
A node's ways are therefore not a count but a bitmask of the ways already handed out; a request
for w ways needs a free *run* of w adjacent bits. Runs are chosen best-fit: the shortest free run
that holds w, at its low end, which keeps long runs whole for the wide requests that need them.
`fragmentation` is 1 - (longest free run / free ways): 0 when every free way is in one run.
"""

from __future__ import annotations

# -- CAT capacity bitmasks --------------------------------------------------------------------


def full_mask(ways: int) -> int:
    return (1 << ways) - 1


def run_mask(start: int, length: int) -> int:
    return ((1 << length) - 1) << start


def is_contiguous(mask: int) -> bool:
    """CAT rejects a mask with holes; 0 is not a valid mask either."""
    if mask <= 0:
        return False
    low = mask & -mask
    return ((mask + low) & mask) == 0


def free_runs(used: int, ways: int) -> list[tuple[int, int]]:
    """The free runs of a node's ways as (first way, length), lowest first."""
    runs: list[tuple[int, int]] = []
    start = -1
    for way in range(ways + 1):
        free = way < ways and not (used >> way) & 1
        if free and start < 0:
            start = way
        elif not free and start >= 0:
            runs.append((start, way - start))
            start = -1
    return runs


def longest_free_run(used: int, ways: int) -> int:
    return max((length for _, length in free_runs(used, ways)), default=0)


def fragmentation(used: int, ways: int) -> float:
    runs = free_runs(used, ways)
    free = sum(length for _, length in runs)
    return 0.0 if free == 0 else 1.0 - max(length for _, length in runs) / free


def best_fit_length(used: int, ways: int, need: int) -> int | None:
    """Length of the run best_fit_run would cut `need` ways from, or None if none holds them."""
    lengths = [length for _, length in free_runs(used, ways) if length >= need]
    return min(lengths) if lengths else None


def best_fit_run(used: int, ways: int, need: int) -> int | None:
    """The mask of `need` contiguous free ways, cut from the low end of the shortest free run that
    holds them (lowest such run on a tie); None when no run is long enough."""
    if need < 1:
        raise ValueError("a CAT mask needs at least one way")
    fitting = [(length, start) for start, length in free_runs(used, ways) if length >= need]
    if not fitting:
        return None
    _, start = min(fitting)
    return run_mask(start, need)
