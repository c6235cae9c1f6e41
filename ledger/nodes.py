"""The cluster's shape in the ledger: host kinds, rack pools and nodes, and what each holds.

One registration rule for every writer (an operator through the API, a node agent through the
feeder, the demo): a node of an unknown host kind registers that kind from its own shape, and a
node on an unknown rack pool registers the pool with the size it publishes (zero when it
publishes none, until an operator sizes it). Every write runs inside the caller's transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from ledger.store import counted_ways
from ledger.types import NodeCapacity
from model import MachineShape
from model.capacity import SlowTier
from store.orm import HostKind, Node, RackPool, Reservation

log = logging.getLogger("tmc.ledger.nodes")


def shape_of_kind(kind: HostKind) -> MachineShape:
    return MachineShape(
        cpus=kind.cpus,
        dram_bytes=kind.dram_bytes,
        slow_bytes=kind.slow_bytes,
        llc_ways=kind.llc_ways,
        slow_pooled=kind.slow_pooled,
    )


def machine_of_kind(kind: HostKind) -> MachineShape | None:
    """The kind's machine, or None for a row that is not one (no DRAM: registered from a node's
    capacity before such nodes were refused), logged: readers skip it rather than fail."""
    try:
        return shape_of_kind(kind)
    except ValidationError as exc:
        log.warning("host kind %s is not a machine, skipped: %s", kind.name, exc.errors()[0]["msg"])
        return None


def register_host_kind(
    session: Session,
    name: str,
    machine: MachineShape,
    *,
    sockets: int = 1,
    llc_size_bytes: int | None = None,
    slow_tier: SlowTier | None = None,
) -> HostKind:
    """Define a host kind, or redefine it whole (an operator refining what a first node implied):
    its shape, and its sockets, one socket's LLC size and its slow tier's technology, which a
    redefinition that leaves them out resets to one socket and not stated."""
    row = session.get(HostKind, name)
    if row is None:
        row = HostKind(name=name)
        session.add(row)
    row.cpus = machine.cpus
    row.dram_bytes = machine.dram_bytes
    row.slow_bytes = machine.slow_bytes
    row.llc_ways = machine.llc_ways
    row.slow_pooled = machine.slow_pooled
    row.sockets = sockets
    row.llc_size_bytes = llc_size_bytes
    row.slow_tier = slow_tier
    session.flush()
    return row


def register_pool(session: Session, name: str, slow_bytes: int) -> RackPool:
    row = session.get(RackPool, name)
    if row is None:
        row = RackPool(name=name, slow_bytes=slow_bytes)
        session.add(row)
    row.slow_bytes = slow_bytes
    session.flush()
    return row


@dataclass(frozen=True)
class Registered:
    node: Node
    new_host_kind: bool  # the node's kind was unknown and was registered from its shape
    new_pool: bool


def pool_sizes(
    claims: Iterable[tuple[str | None, int | None]], configured: Mapping[str, int]
) -> dict[str, int]:
    """Each rack pool's size, from its members' claims (pool name, size each node publishes):
    the operator's configured size when there is one, else the smallest claim of a current
    member, so that one node can shrink a pool but not grow it (the placement engine's rule).
    A pool with no configured size and no claim is left out."""
    sizes: dict[str, int] = {}
    for pool, claim in claims:
        if pool is None:
            continue
        if pool in configured:
            sizes[pool] = configured[pool]
        elif claim is not None:
            sizes[pool] = min(claim, sizes.get(pool, claim))
    return sizes


def register_node(session: Session, cap: NodeCapacity, pool_bytes: int | None = None) -> Registered:
    """A node as its agent publishes it, or as an operator declares it. `pool_bytes`: the rack
    pool's size when the publisher knows it (a known pool is resized to it)."""
    if cap.dram_bytes < 1:
        # Nothing tiered fits a node without DRAM (the engine filters it out too); its CPUs and
        # ways would only swell the cluster's capacity, and a kind made from it is no machine.
        raise ValueError(f"node {cap.name} has no DRAM: it can hold no tiered pod")
    new_kind = session.get(HostKind, cap.host_kind) is None
    if new_kind:
        session.add(
            HostKind(
                name=cap.host_kind,
                cpus=cap.cpus,
                dram_bytes=cap.dram_bytes,
                slow_bytes=cap.slow_bytes or (pool_bytes or 0),
                llc_ways=cap.llc_ways,
                slow_pooled=cap.pool is not None,
            )
        )
    new_pool = False
    if cap.pool is not None:
        pool = session.get(RackPool, cap.pool)
        if pool is None:
            new_pool = True
            session.add(RackPool(name=cap.pool, slow_bytes=pool_bytes or 0))
        elif pool_bytes is not None:
            pool.slow_bytes = pool_bytes
    session.flush()
    row = session.get(Node, cap.name)
    if row is None:
        row = Node(name=cap.name)
        session.add(row)
    row.host_kind, row.cpus, row.dram_bytes = cap.host_kind, cap.cpus, cap.dram_bytes
    row.slow_bytes, row.llc_ways, row.pool_name, row.ready = (
        cap.slow_bytes,
        cap.llc_ways,
        cap.pool,
        cap.ready,
    )
    session.flush()
    return Registered(node=row, new_host_kind=new_kind, new_pool=new_pool)


def set_ready(session: Session, name: str, ready: bool) -> None:
    """A node that left the cluster keeps its row (reservations point at it) but takes no more."""
    row = session.get(Node, name)
    if row is not None:
        row.ready = ready


@dataclass(frozen=True)
class NodeUse:
    """A node and what is reserved on it."""

    node: Node
    reserved_cpus: int
    reserved_dram_bytes: int
    reserved_slow_bytes: int  # local and from its pool
    reserved_pool_bytes: int  # of which from its rack pool
    llc_mask: int  # the union of the reserved CAT masks
    # The ways reserved as counts, whose run the node picks (DRA claims): in no mask above.
    counted_ways: int = 0


def _page(query: Select[Any], name: Any, after: str | None, limit: int | None) -> Select[Any]:
    """Rows by `name`: all of them, or a page of `limit` after the one named `after`."""
    query = query.order_by(name)
    if after is not None:
        query = query.where(name > after)
    return query if limit is None else query.limit(limit)


def node_use(
    session: Session, *, after: str | None = None, limit: int | None = None
) -> list[NodeUse]:
    """Nodes by name with their reserved sums (nodes without reservations included): all of
    them, or one page of `limit` after the node named `after`. A page reads only its own
    nodes' reservations, so its cost does not grow with the fleet."""
    nodes: list[Node] = list(session.scalars(_page(select(Node), Node.name, after, limit)))
    if not nodes:
        return []
    held = select(
        Reservation.node_name,
        Reservation.vcpus,
        Reservation.dram_bytes,
        Reservation.slow_bytes,
        Reservation.slow_from_pool,
        Reservation.llc_mask,
        counted_ways,
    )
    if limit is not None or after is not None:
        # A page is a run of consecutive names, and a reservation's node is a node: those
        # between the page's first and last name are the page's, one range of the index (a
        # list of the page's names would be hundreds of parameters to bind and plan).
        held = held.where(Reservation.node_name.between(nodes[0].name, nodes[-1].name))
    sums: dict[str, list[int]] = {n.name: [0, 0, 0, 0, 0, 0] for n in nodes}
    for name, vcpus, dram, slow, from_pool, mask, counted in session.execute(held):
        acc = sums.get(name)
        if acc is None:  # a reservation on a node of another page
            continue
        acc[0] += vcpus
        acc[1] += dram
        acc[2] += slow
        acc[3] += slow if from_pool else 0
        acc[4] |= mask
        acc[5] += int(counted or 0)
    return [NodeUse(n, *sums[n.name]) for n in nodes]


def pool_member_counts(session: Session) -> dict[str, int]:
    """Per rack pool, how many nodes draw on it."""
    rows = session.execute(
        select(Node.pool_name, func.count())
        .where(Node.pool_name.is_not(None))
        .group_by(Node.pool_name)
    )
    return {str(name): int(count) for name, count in rows}


@dataclass(frozen=True)
class PoolUse:
    pool: RackPool
    reserved_slow_bytes: int
    nodes: list[str]


def pool_use(
    session: Session, *, after: str | None = None, limit: int | None = None
) -> list[PoolUse]:
    """Rack pools by name (all, or a page of `limit` after `after`) with their member nodes and
    what those reserved from the pool: two queries whose cost follows the page, not the
    fleet."""
    pools: list[RackPool] = list(
        session.scalars(_page(select(RackPool), RackPool.name, after, limit))
    )
    if not pools:
        return []
    members: dict[str, list[str]] = {p.name: [] for p in pools}
    reserved: dict[str, int] = {p.name: 0 for p in pools}
    # Per member node, its pool draws from the draws' partial index (node, size): a correlated
    # subquery, as a join made PostgreSQL hash every pooled reservation of the fleet for one
    # page. The page's pools are a run of consecutive names, so their members are the nodes
    # whose pool lies between the first and last: one range of the pool index, one round trip.
    drawn = (
        select(func.sum(Reservation.slow_bytes))
        .where(Reservation.node_name == Node.name, Reservation.slow_from_pool.is_(True))
        .correlate(Node)
        .scalar_subquery()
    )
    rows = session.execute(
        select(Node.pool_name, Node.name, drawn)
        .where(Node.pool_name.between(pools[0].name, pools[-1].name))
        .order_by(Node.name)
    )
    for pool_name, node_name, slow in rows:
        members[str(pool_name)].append(node_name)
        reserved[str(pool_name)] += int(slow or 0)
    return [
        PoolUse(pool=p, reserved_slow_bytes=reserved[p.name], nodes=members[p.name]) for p in pools
    ]
