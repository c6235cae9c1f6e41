"""The ledger's records as plain values (a node's capacity and one reservation), and why a
reservation is refused."""

from __future__ import annotations

from dataclasses import dataclass

from model.node_contract import NodePattern


@dataclass(frozen=True)
class NodeCapacity:
    name: str
    host_kind: str
    cpus: int
    dram_bytes: int
    slow_bytes: int  # node-local slow memory
    llc_ways: int
    pool: str | None
    ready: bool = True
    # The capacity plan's machine this node stands for (`tmc.dev/pattern`), if the operator
    # adopted one: placement prefers it for the pods its pattern holds (model/patterns.py).
    pattern: NodePattern | None = None


@dataclass(frozen=True)
class Held:
    """One reservation as the cache keeps it (a row of the ledger)."""

    pod_uid: str
    namespace: str
    pod_name: str
    node: str
    vcpus: int
    dram_bytes: int
    slow_bytes: int
    slow_from_pool: bool
    llc_mask: int
    workload: str | None = None  # the placement's workload: what a node's pattern counts
