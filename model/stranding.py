"""Stranding: a node with one resource (nearly) full while another sits mostly idle. What is
idle there cannot be used by anything that also needs the full resource, so it is capacity the
cluster pays for and cannot sell (the imbalance the paper's packing penalty works against).

One rule for the dashboard, the API and the metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.resources import RESOURCES, Utilization

# A resource at or above FULL_AT is full; at or below IDLE_AT it is idle.
FULL_AT = 0.85
IDLE_AT = 0.35


@dataclass(frozen=True)
class Stranding:
    full: tuple[str, ...]
    idle: tuple[str, ...]


def stranding(u: Utilization) -> Stranding | None:
    """Which resources are full and which idle, when the node strands anything at all."""
    values = dict(zip(RESOURCES, u.as_tuple(), strict=True))
    full = tuple(r for r in RESOURCES if values[r] >= FULL_AT)
    idle = tuple(r for r in RESOURCES if values[r] <= IDLE_AT)
    return Stranding(full, idle) if full and idle else None


def share(used: float, capacity: float) -> float:
    """Used over capacity, within [0, 1]: nothing to hold counts as nothing held, and an
    over-reserved resource (a bad row) as full."""
    if capacity <= 0:
        return 0.0
    return min(1.0, max(0.0, used / capacity))


def node_utilization(
    *,
    cpus: int,
    dram_bytes: int,
    slow_bytes: float,
    llc_ways: int,
    reserved_cpus: int,
    reserved_dram_bytes: int,
    reserved_slow_bytes: int,
    reserved_llc_ways: int,
) -> Utilization:
    """One node's utilization per resource. `slow_bytes` is what the node may hold: its local
    slow memory, or its share of its rack pool (the pool over its member nodes)."""
    return Utilization(
        cpu=share(reserved_cpus, cpus),
        dram=share(reserved_dram_bytes, dram_bytes),
        slow=share(reserved_slow_bytes, slow_bytes),
        llc=share(reserved_llc_ways, llc_ways),
    )
