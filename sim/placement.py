"""Which bytes of each structure live in the slow tier.

A plan gives each tag its fast and slow bytes, as tmc's placement plan does (paper §3.4; any
object with `tag`, `fast_bytes` and `slow_bytes` attributes will do, e.g. the model's
`StructurePlacement`). How the allocator lays a split structure out is the `layout`:

- ``interleave`` (default): the structure's 4 KiB pages are spread over the tiers in the plan's
  proportion, evenly, as Linux's weighted interleave does. Accesses then reach the slow tier in
  proportion to the slow bytes whatever part of the structure they favour.
- ``tail``: the first `fast_bytes` are DRAM and the rest slow, as an arena that spills once its
  DRAM limit is reached. The slow share of accesses then depends on where in the structure they
  fall, and a short trace must visit the whole structure for it to be right.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

from model.resources import split_memory
from sim.workload import LINE_BYTES, Workload

Layout = Literal["interleave", "tail"]


class PlacementLike(Protocol):
    @property
    def tag(self) -> str: ...
    @property
    def fast_bytes(self) -> int: ...
    @property
    def slow_bytes(self) -> int: ...


class StructurePlan(BaseModel):
    model_config = ConfigDict(frozen=True)
    tag: str
    size_bytes: int
    fast_bytes: int
    slow_bytes: int


def oracle_plan(
    workload: Workload, misses: NDArray[np.float64], slow_ratio: float
) -> list[StructurePlan]:
    """Fill the slow share with the structures of fewest true LLC misses per byte.

    `misses` are the simulated misses of each structure at the configuration's way count, so the
    oracle knows what the model can only estimate from samples. The boundary structure is split
    by bytes; ties keep the workload's order.
    """
    sizes = np.asarray([s.size_bytes for s in workload.structures], dtype=np.int64)
    _, slow_total = split_memory(workload.footprint_bytes, slow_ratio)
    density = misses / sizes
    order = np.lexsort((np.arange(len(sizes)), density))
    slow = np.zeros(len(sizes), dtype=np.int64)
    left = slow_total
    for i in order:
        take = min(int(sizes[i]), left)
        slow[i] = take
        left -= take
        if left == 0:
            break
    return [
        StructurePlan(
            tag=s.tag, size_bytes=s.size_bytes, fast_bytes=int(sz - sl), slow_bytes=int(sl)
        )
        for s, sz, sl in zip(workload.structures, sizes, slow, strict=True)
    ]


def plan_from(workload: Workload, placement: Sequence[PlacementLike]) -> list[StructurePlan]:
    """Check a caller's plan against the workload; tags left out are all DRAM."""
    by_tag = {p.tag: p for p in placement}
    unknown = set(by_tag) - {s.tag for s in workload.structures}
    if unknown:
        raise ValueError(f"placement names tags the workload does not have: {sorted(unknown)}")
    plans = []
    for s in workload.structures:
        p = by_tag.get(s.tag)
        slow = 0 if p is None else int(p.slow_bytes)
        if p is not None and (slow < 0 or p.fast_bytes < 0):
            raise ValueError(f"{s.tag}: negative bytes in the placement")
        if p is not None and abs(p.fast_bytes + slow - s.size_bytes) > LINE_BYTES:
            raise ValueError(
                f"{s.tag}: fast + slow bytes {p.fast_bytes + slow} differ from its size {s.size_bytes}"
            )
        slow = min(slow, s.size_bytes)
        plans.append(
            StructurePlan(
                tag=s.tag, size_bytes=s.size_bytes, fast_bytes=s.size_bytes - slow, slow_bytes=slow
            )
        )
    return plans


def all_in(workload: Workload, tier: Literal["fast", "slow"]) -> list[StructurePlan]:
    return [
        StructurePlan(
            tag=s.tag,
            size_bytes=s.size_bytes,
            fast_bytes=s.size_bytes if tier == "fast" else 0,
            slow_bytes=0 if tier == "fast" else s.size_bytes,
        )
        for s in workload.structures
    ]


def slow_fractions(plans: Sequence[StructurePlan]) -> NDArray[np.float64]:
    return np.asarray([p.slow_bytes / p.size_bytes for p in plans], dtype=np.float64)


def fast_lines(plans: Sequence[StructurePlan]) -> NDArray[np.int64]:
    return np.asarray([p.fast_bytes // LINE_BYTES for p in plans], dtype=np.int64)
