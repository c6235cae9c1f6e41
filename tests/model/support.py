"""Shared helpers for the model tests: rejected-field lookup, fitting, and random consistent shapes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st

from model import FittedModel, InvalidBundle, MachineShape, Problem, fit, parse_bundle
from model.resources import GIB
from tests.factories import Shape, make_bundle

# Host limits baked into tests/factories.py: 48 LLC ways, 24 GiB DRAM.
HOST_WAYS = 48
MAX_STRUCTURE_MIB = 2048


def rejection(data: Any) -> list[Problem]:
    """The problems an `InvalidBundle` reports; fails the test if the bundle is accepted."""
    with pytest.raises(InvalidBundle) as info:
        parse_bundle(data)
    return info.value.problems


def rejected_fields(data: Any) -> list[str]:
    return [p.field for p in rejection(data)]


def fitted(shape: Shape | None = None, **overrides: Any) -> FittedModel:
    return fit(parse_bundle(make_bundle(shape or Shape(), **overrides)))


# The machine of the paper's evaluation (§4.1), which the factories' host also describes.
PAPER_MACHINE = MachineShape(cpus=12, dram_bytes=24 * GIB, slow_bytes=128 * GIB, llc_ways=48)


@st.composite
def consistent_shapes(draw: st.DrawFn, *, p_slow_min: float = 1.0) -> Shape:
    """A random workload that a real LRU cache could have produced.

    Under LRU with way partitioning an access that hits with w ways also hits with more ways (the
    stack property), so every structure's miss rate is non-increasing in ways, not only the total.
    Shares are therefore derived from per-structure rates that only shrink from fastmin to fastmax;
    drawing the two share tables independently would describe a machine that cannot exist.
    """
    n = draw(st.integers(min_value=1, max_value=6))
    sizes_mib = draw(st.lists(st.integers(1, MAX_STRUCTURE_MIB), min_size=n, max_size=n))
    weights = draw(st.lists(st.floats(0.0, 1.0, allow_subnormal=False), min_size=n, max_size=n))
    if sum(weights) == 0.0:
        weights = [1.0] * n
    # The share of each structure's misses that survives at max ways. A floor keeps slowmax with
    # misses to measure: without any, the slow penalty is unidentifiable (the fit flags that).
    keep = draw(st.lists(st.floats(0.02, 1.0), min_size=n, max_size=n))
    mar_min = draw(st.floats(1e-3, 0.05))
    rates_min = [mar_min * w / sum(weights) for w in weights]
    rates_max = [r * k for r, k in zip(rates_min, keep, strict=True)]
    mar_max = sum(rates_max)

    ways = sorted(draw(st.sets(st.integers(1, HOST_WAYS), min_size=2, max_size=7)))
    # Interior points fall between the two ends, in non-increasing order.
    fractions = sorted(
        draw(st.lists(st.floats(0.0, 1.0), min_size=len(ways) - 2, max_size=len(ways) - 2)),
        reverse=True,
    )
    values = [mar_min, *(mar_max + f * (mar_min - mar_max) for f in fractions), mar_max]

    structures = {
        f"s{i}": (float(sizes_mib[i]), rates_min[i] / mar_min, rates_max[i] / mar_max)
        for i in range(n)
    }
    return Shape(
        name="random",
        structures=structures,
        cpi_cache=draw(st.floats(0.2, 3.0)),
        p_dram=draw(st.floats(5.0, 400.0)),
        p_slow=draw(st.floats(p_slow_min, 600.0)),
        curve=tuple(zip(ways, values, strict=True)),
        w_min=ways[0],
        w_max=ways[-1],
        # One sample per miss, over enough instructions that integer counters round at 1e-12:
        # properties can then be checked tightly without PEBS or counter rounding blurring them.
        sampling_interval=1,
        instructions=10**12,
        stall_counters=draw(st.booleans()),
    )
