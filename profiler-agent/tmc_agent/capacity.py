"""What the node publishes: its tiered capacity, in the label and annotations the scheduler's
feeder reads (`model.node_contract.NodeCapacity`, `scheduler/feeder.py::node_capacity`), from
the same discovery as `tmc-agent discover`, with what the node cannot do and why."""

from __future__ import annotations

import json
from dataclasses import dataclass

from model import node_contract as contract
from tmc_agent.discover import NodeReport
from tmc_agent.settings import AgentSettings

AGENT_STATUS = contract.AGENT_STATUS_ANNOTATION


@dataclass(frozen=True)
class CapacityPatch:
    labels: dict[str, str]
    annotations: dict[str, str]
    skipped: dict[str, str]  # what the node cannot publish or enforce, and why


def _host_kind(report: NodeReport, config: AgentSettings) -> str:
    if config.host_kind:
        return config.host_kind
    if config.slow_pool:
        return "cxl_pool"
    kinds = {n.kind for n in report.numa if n.kind != "dram"}
    # The model's tier kinds (model.bundle.TierKind); a mixed or unidentified slow tier gets a
    # name of its own, and the feeder registers an unknown kind from the node's shape.
    if kinds == {"optane"}:
        return "optane"
    if kinds == {"cxl"}:
        return "cxl_local"
    if not kinds:
        return "dram"
    return "-".join(sorted(kinds)).replace("unknown-slow", "unknown")


def capacity_patch(report: NodeReport, config: AgentSettings) -> CapacityPatch:
    """The label and annotations the extender reads (model.node_contract.NodeCapacity)."""
    skipped: dict[str, str] = {}
    dram = sum(n.memory_bytes for n in report.numa if n.kind == "dram")
    slow = sum(n.memory_bytes for n in report.numa if n.kind != "dram")
    ways = report.llc_ways if report.llc_ways is not None and 1 <= report.llc_ways <= 64 else None
    if ways is None:
        skipped["llc-ways"] = (
            "the LLC's ways are unknown (no resctrl cbm_mask, no cache sysfs): without "
            f"{contract.LLC_WAYS_ANNOTATION} the scheduler does not treat this node as a tmc node"
        )
    if report.resctrl.ways is None:
        skipped["resctrl"] = "no L3 CAT through resctrl: LLC masks are accounted, not enforced"
    if not report.slow_nodes and not config.slow_pool:
        skipped["slow-tier"] = "no slow NUMA node: slow memory cannot be placed here"
    labels = {contract.HOST_KIND_LABEL: _host_kind(report, config)}
    ann: dict[str, str] = {}
    if ways is not None:
        capacity = contract.NodeCapacity(
            host_kind=labels[contract.HOST_KIND_LABEL],
            cpus=min(report.cpus, contract.MAX_CPUS) if report.cpus > 0 else None,
            dram_bytes=min(dram, contract.MAX_BYTES - 1),
            # Pooled slow memory is accounted on the pool, not the node (slow-bytes is node-local);
            # its size comes from configuration because no host can see the whole pool.
            slow_bytes=0 if config.slow_pool else min(slow, contract.MAX_BYTES - 1),
            llc_ways=ways,
            slow_pool=config.slow_pool,
            slow_pool_bytes=config.slow_pool_bytes if config.slow_pool else None,
        )
        labels, ann = capacity.to_metadata()
        # Rack-pool membership is the operator's (the chart's admission refuses an agent that
        # writes it): the agent knows it is pooled from its configuration, to publish no
        # node-local slow memory, and leaves the node's pool annotations as the operator set them.
        ann.pop(contract.SLOW_POOL_ANNOTATION, None)
        ann.pop(contract.SLOW_POOL_BYTES_ANNOTATION, None)
    else:
        ann[contract.DRAM_ANNOTATION] = str(dram)
    ann[AGENT_STATUS] = json.dumps(skipped, sort_keys=True, separators=(",", ":"))
    return CapacityPatch(labels, ann, skipped)
