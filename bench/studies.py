"""What the regime map and the planners' benchmark share: a regime (prices, shapes, lifetimes),
a workload's study over the 77 configurations, its hourly price, and the process pool."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from model.capacity import Option
from model.confidence import ErrorTerms, paired_bounds
from model.pricing import PriceProfile
from model.resources import GIB
from model.select import Selection, confident_algorithm1

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class Regime:
    source: str
    llc_share: float
    slow_to_dram: float
    shape: str
    lifetime: str

    @property
    def key(self) -> str:
        return (
            f"{self.source}/llc{self.llc_share:g}/slow{self.slow_to_dram:g}/"
            f"{self.shape}/{self.lifetime}"
        )


@dataclass
class Study:
    """One workload in one shape: times over the 77 configurations, independent of prices."""

    name: str
    vcpus: int
    footprint_bytes: int
    truth_seconds: FloatArray  # oracle placement
    tmc_seconds: FloatArray  # tmc's own placement plan, simulated
    predicted_seconds: FloatArray
    sigma: FloatArray  # relative standard deviation of the predicted time
    dram_bytes: IntArray
    slow_bytes: IntArray
    ways: IntArray
    # sigma's terms, for the uncertainty of differences between points (None: each point's own
    # sigma bounds it, as before differences were modelled)
    terms: ErrorTerms | None = None


def hourly(s: Study, prices: PriceProfile) -> FloatArray:
    out: FloatArray = (
        s.vcpus * prices.vcpu_hour
        + s.dram_bytes / GIB * prices.dram_gib_hour
        + s.slow_bytes / GIB * prices.slow_gib_hour
        + s.ways * prices.llc_way_hour
    )
    return out


def study_options(
    s: Study, indices: NDArray[np.int64], seconds: FloatArray, cost: FloatArray
) -> tuple[Option, ...]:
    """The study's configurations at `indices` as a class's options for the planners: each with
    the run time and cost the caller takes for it (what the product knows, not the truth)."""
    return tuple(
        Option(
            vcpus=s.vcpus,
            dram_bytes=int(s.dram_bytes[k]),
            slow_bytes=int(s.slow_bytes[k]),
            llc_ways=int(s.ways[k]),
            seconds=float(seconds[k]),
            cost=float(cost[k]),
        )
        for k in indices
    )


def confident_candidates(
    s: Study,
    cost: FloatArray,
    sigma: FloatArray,
    seconds: FloatArray,
    z: float,
    threshold: float,
    demand: FloatArray | None = None,
) -> Selection:
    """The confident Algorithm 1's first round on one study (every configuration acceptable, an
    idle cluster unless `demand` is given): `within` is what any utilization chooses from."""
    n = len(cost)
    sel = confident_algorithm1(
        cost,
        cost * (1.0 + z * sigma),
        seconds,
        np.ones(n, dtype=bool),
        np.zeros((n, 4)) if demand is None else demand,
        np.zeros(4),
        threshold,
        paired_upper=paired_bounds(s.terms, cost, sigma, z),
    )
    assert sel is not None  # every configuration is acceptable
    return sel
