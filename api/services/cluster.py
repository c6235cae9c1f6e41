"""Each node's utilization per resource and whether it strands capacity, from the ledger: one
reading for the Nodes and Cluster pages and for the metrics."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from api import repositories as repo
from ledger import nodes as ledger_nodes
from model.resources import Utilization
from model.stranding import node_utilization
from store.orm import HostKind, Reservation, UtilizationSample


def node_utilizations(
    session: Session, *, after: str | None = None, limit: int | None = None
) -> list[tuple[ledger_nodes.NodeUse, Utilization]]:
    """Every node (or one page of them, by name) with what it holds and its utilization; a
    pooled node's slow memory is its share of the pool (the pool's size over its member
    nodes, all of them, whatever the page)."""
    uses = ledger_nodes.node_use(session, after=after, limit=limit)
    sizes = repo.pool_sizes(session)
    members = ledger_nodes.pool_member_counts(session) if uses else {}
    out = []
    for u in uses:
        n = u.node
        if n.pool_name is None:
            slow: float = n.slow_bytes
        else:
            slow = sizes.get(n.pool_name, 0) / max(1, members.get(n.pool_name, 0))
        util = node_utilization(
            cpus=n.cpus,
            dram_bytes=n.dram_bytes,
            slow_bytes=slow,
            llc_ways=n.llc_ways,
            reserved_cpus=u.reserved_cpus,
            reserved_dram_bytes=u.reserved_dram_bytes,
            reserved_slow_bytes=u.reserved_slow_bytes,
            reserved_llc_ways=u.llc_mask.bit_count() + u.counted_ways,
        )
        out.append((u, util))
    return out


def host_kinds(session: Session) -> Sequence[HostKind]:
    """The registered host kinds, by name."""
    return repo.list_host_kinds(session)


def utilization_since(session: Session, since: datetime, limit: int) -> list[UtilizationSample]:
    """The utilization samples since `since`, oldest first (at most the newest `limit`)."""
    return list(reversed(repo.utilization_history(session, since, limit=limit)))


def reservations_page(
    session: Session, node: str | None, after: tuple[str, ...] | None, limit: int
) -> Sequence[Reservation]:
    """A page of the mirrored reservations by node and pod uid, after the (node, uid) given."""
    return repo.list_reservations(session, node, after=after, limit=limit)
