"""The cluster's utilization vector U (Algorithm 1 prices packing against it): one rule, used by
the extender's cache, the API and the periodic snapshot alike.

Capacity is what ready nodes have (CPUs, DRAM, node-local slow memory, LLC ways) plus every rack
pool (a pool is shared, so it counts once whatever its nodes' state). Use is what reservations on
ready nodes hold, plus everything drawn from pools. Each share is clamped to [0, 1]: a ledger
that somehow holds a negative or an over-committed row yields a usable vector, never an error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from model import Utilization

log = logging.getLogger("tmc.ledger")


@dataclass(frozen=True)
class Totals:
    cpus: int
    dram_bytes: int
    slow_bytes: int  # node-local plus pools
    llc_ways: int
    reserved_cpus: int
    reserved_dram_bytes: int
    reserved_slow_bytes: int
    reserved_llc_ways: int
    nodes: int


def share(used: float, capacity: float) -> float:
    """used / capacity within [0, 1]. The ledger should never hold a negative reservation or more
    than the capacity; a bad row must not take every recommendation down, so it is clamped, and
    said in the log."""
    if capacity <= 0:
        return 0.0
    value = used / capacity
    if not 0.0 <= value <= 1.0:
        log.warning("utilization %s out of [0, 1] (used %s of %s): clamped", value, used, capacity)
    return min(1.0, max(0.0, value))


def utilization_of(t: Totals) -> Utilization:
    return Utilization(
        cpu=share(t.reserved_cpus, t.cpus),
        dram=share(t.reserved_dram_bytes, t.dram_bytes),
        slow=share(t.reserved_slow_bytes, t.slow_bytes),
        llc=share(t.reserved_llc_ways, t.llc_ways),
    )
