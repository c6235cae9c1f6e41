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
    llc_mask: int  # the CAT run tmc chose; 0 when it chose none
    workload: str | None = None  # the placement's workload: what a node's pattern counts
    # LLC ways held as a count, whose run the node picks (a DRA claim's allocation): such a
    # reservation has no mask (0), so that nothing reading masks takes a count for a run.
    counted_ways: int = 0

    @property
    def llc_ways(self) -> int:
        """The LLC ways held: the mask's, or the count of a reservation without one."""
        return self.llc_mask.bit_count() if self.llc_mask else self.counted_ways
