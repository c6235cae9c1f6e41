"""The tiered-resource ledger: reservations of DRAM, slow memory (node-local or from the node's
rack pool) and a contiguous run of LLC ways, in the service's database (store.orm's tables).

The placement engine (Go: tmc-scheduler's plugin or tmc-extender) places pods from its own cache
and the API server (a bound pod's placement annotation is the truth); this ledger is the
**mirror** of those placements, written from the pod watch by `mirror` (a full listing) and
`record`/`forget` (events), and read by the dashboard, the planner, the rebalancer and
verification runs (`placement_log`). It holds no placement rule of its own. Every write runs
inside the caller's transaction (store.db.unit_of_work).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from ledger.types import Held, NodeCapacity
from ledger.utilization import Totals, utilization_of
from model import Utilization
from store.orm import Node, PlacementRecord, RackPool, RecommendationRow, Reservation

log = logging.getLogger("tmc.ledger")


def held_of(row: Reservation) -> Held:
    return Held(
        pod_uid=row.pod_uid,
        namespace=row.namespace,
        pod_name=row.pod_name,
        node=row.node_name,
        vcpus=row.vcpus,
        dram_bytes=row.dram_bytes,
        slow_bytes=row.slow_bytes,
        slow_from_pool=row.slow_from_pool,
        llc_mask=row.llc_mask,
    )


def load(session: Session) -> tuple[list[NodeCapacity], dict[str, int], list[Held]]:
    """Everything the extender's cache is built from."""
    nodes = [
        NodeCapacity(
            name=n.name,
            host_kind=n.host_kind,
            cpus=n.cpus,
            dram_bytes=n.dram_bytes,
            slow_bytes=n.slow_bytes,
            llc_ways=n.llc_ways,
            pool=n.pool_name,
            ready=n.ready,
        )
        for n in session.scalars(select(Node).order_by(Node.name))
    ]
    pools = {p.name: p.slow_bytes for p in session.scalars(select(RackPool))}
    held = [held_of(r) for r in session.scalars(select(Reservation))]
    return nodes, pools, held


def _log_placement(
    session: Session,
    row: Reservation,
    slow_ratio: float,
    logged: dict[str, PlacementRecord] | None = None,
) -> None:
    """The placement, as the evidence a verification run of this pod is checked against.
    `logged`: the batch's existing records, loaded at once (None: looked up here)."""
    if logged is not None:
        found = logged.get(row.pod_uid)
    else:
        # No autoflush: the rows a batch adds are written together when it ends, not one
        # flush (and round trip) per pod before each lookup.
        with session.no_autoflush:
            found = session.get(PlacementRecord, row.pod_uid)
    if found is None:
        found = PlacementRecord(pod_uid=row.pod_uid)
        session.add(found)
    found.namespace, found.pod_name, found.node_name = row.namespace, row.pod_name, row.node_name
    found.recommendation_id = row.recommendation_id
    found.slow_ratio, found.llc_ways = slow_ratio, row.llc_mask.bit_count()


def prune_placement_log(session: Session, before: datetime) -> None:
    """Forget placements made before `before` whose pods hold nothing any more."""
    held = select(Reservation.pod_uid)
    session.execute(
        delete(PlacementRecord).where(
            PlacementRecord.created_at < before, PlacementRecord.pod_uid.not_in(held)
        )
    )


@dataclass(frozen=True)
class Placed:
    """A bound pod's placement, as its annotation says: what it holds, and for the placement log
    the decision it came from."""

    held: Held
    recommendation_id: str | None
    slow_ratio: float
    fallback: str | None = None  # why the pod holds the fallback, when it does


@dataclass
class Mirrored:
    recorded: list[str] = field(default_factory=list)  # rows written (new or changed)
    released: list[str] = field(default_factory=list)  # rows of pods no longer bound
    # Bound pods on a node the ledger does not have (not a tmc node by its annotations).
    skipped: list[str] = field(default_factory=list)


def _same(row: Reservation, h: Held) -> bool:
    return (
        row.node_name == h.node
        and row.vcpus == h.vcpus
        and row.dram_bytes == h.dram_bytes
        and row.slow_bytes == h.slow_bytes
        and row.slow_from_pool == h.slow_from_pool
        and row.llc_mask == h.llc_mask
    )


def _known_decisions(session: Session, placed: Iterable[Placed]) -> set[str]:
    ids = {p.recommendation_id for p in placed if p.recommendation_id}
    if not ids:
        return set()
    return set(session.scalars(select(RecommendationRow.id).where(RecommendationRow.id.in_(ids))))


def _write(
    session: Session,
    found: Reservation | None,
    p: Placed,
    known: set[str],
    logged: dict[str, PlacementRecord] | None = None,
) -> None:
    h = p.held
    if found is not None:
        session.delete(found)
        session.flush()
    rid = p.recommendation_id if p.recommendation_id in known else None
    row = Reservation(
        pod_uid=h.pod_uid,
        namespace=h.namespace,
        pod_name=h.pod_name,
        node_name=h.node,
        vcpus=h.vcpus,
        dram_bytes=h.dram_bytes,
        slow_bytes=h.slow_bytes,
        slow_from_pool=h.slow_from_pool,
        llc_mask=h.llc_mask,
        recommendation_id=rid,
    )
    session.add(row)
    _log_placement(session, row, p.slow_ratio, logged)


def record(session: Session, placed: Iterable[Placed]) -> Mirrored:
    """Mirror bound pods' placements (watch events): each pod's row made equal to what its
    annotation says, and its placement logged. A pod on a node the ledger does not have is
    skipped (the node's registration comes first in the feeder's order). A few queries per
    batch, not per pod: a burst's events arrive together."""
    out = Mirrored()
    placed = list(placed)
    if not placed:
        return out
    uids = [p.held.pod_uid for p in placed]
    rows = {
        r.pod_uid: r
        for r in session.scalars(select(Reservation).where(Reservation.pod_uid.in_(uids)))
    }
    # The batch's placement-log records, loaded at once: no lookup (and no flush) per pod.
    logged = {
        r.pod_uid: r
        for r in session.scalars(select(PlacementRecord).where(PlacementRecord.pod_uid.in_(uids)))
    }
    known = _known_decisions(session, placed)
    nodes = set(
        session.scalars(select(Node.name).where(Node.name.in_({p.held.node for p in placed})))
    )
    for p in placed:
        found = rows.get(p.held.pod_uid)
        if found is not None and _same(found, p.held):
            continue
        if p.held.node not in nodes:
            out.skipped.append(p.held.pod_uid)
            continue
        _write(session, found, p, known, logged)
        out.recorded.append(p.held.pod_uid)
    session.flush()
    return out


def mirror(session: Session, bound: Mapping[str, Placed]) -> Mirrored:
    """Make the reservations exactly the bound pods' placements (a full listing of the API
    server): rows of pods no longer bound go, missing or different rows are written. What the
    API server says is recorded as it is; the extender, not the mirror, decides placements."""
    out = Mirrored()
    rows = {r.pod_uid: r for r in session.scalars(select(Reservation))}
    for uid, row in rows.items():
        if uid not in bound:
            session.delete(row)
            out.released.append(uid)
    session.flush()
    known = _known_decisions(session, bound.values())
    nodes = set(session.scalars(select(Node.name)))
    for uid, p in bound.items():
        found = rows.get(uid)
        if found is not None and _same(found, p.held):
            continue
        if p.held.node not in nodes:
            out.skipped.append(uid)
            continue
        _write(session, found, p, known)
        out.recorded.append(uid)
    session.flush()
    if out.recorded or out.released or out.skipped:
        log.info(
            "mirrored the bound pods: %d written, %d released, %d on unknown nodes",
            len(out.recorded),
            len(out.released),
            len(out.skipped),
        )
    return out


def forget(session: Session, pod_uids: Iterable[str]) -> int:
    """Drop the rows of pods that are gone or finished (watch events); how many there were."""
    uids = list(pod_uids)
    if not uids:
        return 0
    result = session.execute(delete(Reservation).where(Reservation.pod_uid.in_(uids)))
    return int(getattr(result, "rowcount", 0) or 0)


def totals(session: Session) -> Totals:
    """Capacity and use by `ledger.utilization`'s rule, from the tables.

    What is reserved on ready nodes is every reservation's sums less those on nodes that are
    not ready: one scan of the reservations with no join (joining every reservation to its node
    cost several times the scan at 100,000 pods), and an indexed look at the few nodes that are
    not ready. Masks are contiguous runs of at most 64 ways, so a fleet holds at most a few
    thousand distinct ones: the reservations are summed per mask in the database and the ways
    popcounted here."""
    cap = session.execute(
        select(
            func.coalesce(func.sum(Node.cpus), 0),
            func.coalesce(func.sum(Node.dram_bytes), 0),
            func.coalesce(func.sum(Node.slow_bytes), 0),
            func.coalesce(func.sum(Node.llc_ways), 0),
            func.count(Node.name),
        ).where(Node.ready.is_(True))
    ).one()
    pooled = session.scalar(select(func.coalesce(func.sum(RackPool.slow_bytes), 0)))
    per_mask = (
        Reservation.llc_mask,
        func.count(),
        func.sum(Reservation.vcpus),
        func.sum(Reservation.dram_bytes),
        func.sum(Reservation.slow_bytes).filter(Reservation.slow_from_pool.is_(False)),
    )
    every = session.execute(
        select(
            *per_mask,
            func.sum(Reservation.slow_bytes).filter(Reservation.slow_from_pool.is_(True)),
        ).group_by(Reservation.llc_mask)
    ).all()
    not_ready = session.execute(
        select(*per_mask)
        .join(Node, Node.name == Reservation.node_name)
        .where(Node.ready.is_not(True))
        .group_by(Reservation.llc_mask)
    ).all()
    used = [0, 0, 0, 0]  # vcpus, DRAM, local slow, ways: on ready nodes
    from_pools = 0  # every reservation's, as the pools are counted whatever their nodes
    for sign, rows in ((1, every), (-1, not_ready)):
        for row in rows:
            mask, count, vcpus, dram, local = row[:5]
            used[0] += sign * int(vcpus or 0)
            used[1] += sign * int(dram or 0)
            used[2] += sign * int(local or 0)
            used[3] += sign * int(mask).bit_count() * int(count)
    for row in every:
        from_pools += int(row[5] or 0)
    return Totals(
        cpus=int(cap[0]),
        dram_bytes=int(cap[1]),
        slow_bytes=int(cap[2]) + int(pooled or 0),
        llc_ways=int(cap[3]),
        reserved_cpus=used[0],
        reserved_dram_bytes=used[1],
        reserved_slow_bytes=used[2] + from_pools,
        reserved_llc_ways=used[3],
        nodes=int(cap[4]),
    )


def utilization(session: Session) -> Utilization:
    """The cluster's U now, from the tables."""
    return utilization_of(totals(session))
