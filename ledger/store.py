"""The tiered-resource ledger: reservations of DRAM, slow memory (node-local or from the node's
rack pool) and a contiguous run of LLC ways, in the service's database (store.orm's tables).

The extender places pods from its own cache and the API server (a bound pod's placement
annotation is the truth); this ledger is the **mirror** of those placements, written from the
pod watch by `mirror` (a full listing) and `record`/`release` (one event each), and read by the
dashboard, the planner, the rebalancer and verification runs (`placement_log`). Every write runs
inside the caller's transaction (store.db.unit_of_work).

`reserve` places by itself, for the embedded demo (no API server): it takes row locks (SELECT ...
FOR UPDATE on PostgreSQL) on the node and, for pooled slow memory, on the rack pool, always in that
order, then re-reads what is held under the lock, so that two reservations racing for the same
node, or for the same pool from two nodes, are serialised and neither double-books. SQLite ignores
FOR UPDATE but runs one writer at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from ledger.types import Held, HeldElsewhere, NodeCapacity, NoRoom
from ledger.utilization import Totals, utilization_of
from model import Utilization
from model.packing import best_fit_run, free_runs, run_mask
from store.orm import Node, PlacementRecord, RackPool, RecommendationRow, Reservation, utcnow

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


@dataclass(frozen=True)
class Want:
    pod_uid: str
    namespace: str
    pod_name: str
    vcpus: int
    dram_bytes: int
    slow_bytes: int
    llc_ways: int | None  # None: the fallback's "all available ways" (the longest free run)
    recommendation_id: str | None
    slow_ratio: float = 0.0  # the decision's, for the placement log


def reserve(session: Session, node_name: str, want: Want, attempt: str) -> Held:
    """Reserve `want` on `node_name` for the bind attempt `attempt`, or raise NoRoom or
    HeldElsewhere. Idempotent per pod and node: a retried bind to the same node gets the
    reservation the pod already has there (then owned by no single attempt, see `release`), or a
    fresh one when the decision changed. The caller has checked that the pod is not bound. A
    reservation of it on another node then belongs to a bind in flight there (HeldElsewhere),
    unless it is older than any bind can take: that bind died, and its row goes.

    The node's row lock comes first, then the pod's reservation is read under it: two binds of
    one pod to one node (a retry racing the original) serialise on the node and the second finds
    the first's row. Two binds of one pod to different nodes may both insert; the unique pod_uid
    makes the later commit fail, and the caller answers that another attempt is binding it."""
    node = session.scalars(
        select(Node).where(Node.name == node_name).with_for_update()
    ).one_or_none()
    found = session.scalars(
        select(Reservation).where(Reservation.pod_uid == want.pod_uid).with_for_update()
    ).one_or_none()
    if found is not None and found.node_name != node_name:
        if not _from_a_dead_attempt(found):
            raise HeldElsewhere(found.node_name)
        # A bind that died between its commit and its Binding (the extender killed, say): the
        # pod is unbound (the caller checked), so its old row goes.
        session.delete(found)
        session.flush()
        found = None
    if found is not None:
        same = (
            found.vcpus == want.vcpus
            and found.dram_bytes == want.dram_bytes
            and found.slow_bytes == want.slow_bytes
            and (want.llc_ways is None or found.llc_mask.bit_count() == want.llc_ways)
        )
        if same:
            # Two attempts now rely on this row: neither may release it alone. Should both
            # fail, it stays until the pod goes.
            found.attempt = None
            session.flush()
            return held_of(found)
        # Another decision for the pod on the same node (recomputed since the first attempt):
        # the old row goes, the pod gets what is asked now.
        session.delete(found)
        session.flush()

    if node is None:
        raise NoRoom(f"node {node_name} is not in the ledger")
    if not node.ready:
        raise NoRoom(f"node {node_name} is not ready")
    held = session.scalars(select(Reservation).where(Reservation.node_name == node_name)).all()
    if node.cpus - sum(r.vcpus for r in held) < want.vcpus:
        raise NoRoom(f"node {node_name}: not enough free CPUs")
    if node.dram_bytes - sum(r.dram_bytes for r in held) < want.dram_bytes:
        raise NoRoom(f"node {node_name}: not enough free DRAM")

    from_pool = False
    if want.slow_bytes > 0:
        local_free = node.slow_bytes - sum(r.slow_bytes for r in held if not r.slow_from_pool)
        if local_free < want.slow_bytes:
            if node.pool_name is None:
                raise NoRoom(f"node {node_name}: not enough free slow memory")
            pool = session.scalars(
                select(RackPool).where(RackPool.name == node.pool_name).with_for_update()
            ).one()
            if pool.slow_bytes - pool_used(session, pool.name) < want.slow_bytes:
                raise NoRoom(f"rack pool {pool.name}: not enough free slow memory")
            from_pool = True

    used = 0
    for r in held:
        used |= r.llc_mask
    mask = choose_ways(used, node.llc_ways, want.llc_ways)
    if mask is None:
        raise NoRoom(f"node {node_name}: no free run of {want.llc_ways} contiguous LLC ways")

    row = Reservation(
        pod_uid=want.pod_uid,
        namespace=want.namespace,
        pod_name=want.pod_name,
        node_name=node_name,
        vcpus=want.vcpus,
        dram_bytes=want.dram_bytes,
        slow_bytes=want.slow_bytes,
        slow_from_pool=from_pool,
        llc_mask=mask,
        recommendation_id=want.recommendation_id,
        attempt=attempt,
    )
    session.add(row)
    _log_placement(session, row, want.slow_ratio)
    session.flush()
    return held_of(row)


def choose_ways(used: int, ways: int, need: int | None) -> int | None:
    """The CAT run a new reservation gets on a node whose held ways are `used`: best fit for
    `need` ways, or, for the fallback (`need` None), every way of the longest free run (the
    lowest on a tie). None when nothing fits. The one rule for the ledger and the extender."""
    if need is None:
        runs = free_runs(used, ways)
        start, length = max(runs, key=lambda run: (run[1], -run[0]), default=(0, 0))
        return run_mask(start, length) if length else None
    return best_fit_run(used, ways, need)


# No bind takes this long (kube-scheduler gives an extender verb 5 s): a younger reservation of an
# unbound pod on another node is a bind in flight, an older one a bind that died.
BIND_IN_FLIGHT = timedelta(seconds=15)


def _from_a_dead_attempt(row: Reservation) -> bool:
    return utcnow() - row.created_at > BIND_IN_FLIGHT


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


def pool_used(session: Session, pool: str) -> int:
    used = session.scalar(
        select(func.coalesce(func.sum(Reservation.slow_bytes), 0))
        .join(Node, Node.name == Reservation.node_name)
        .where(Node.pool_name == pool, Reservation.slow_from_pool.is_(True))
    )
    return int(used or 0)


def release(
    session: Session, pod_uid: str, node_name: str | None = None, attempt: str | None = None
) -> bool:
    """Release the pod's reservation: only the one on `node_name`, when given (a failed bind to
    one node never releases what another attempt holds elsewhere), and only while `attempt` owns
    it, when given (a failed attempt never releases a row that another attempt also relies on)."""
    query = delete(Reservation).where(Reservation.pod_uid == pod_uid)
    if node_name is not None:
        query = query.where(Reservation.node_name == node_name)
    if attempt is not None:
        query = query.where(Reservation.attempt == attempt)
    result = session.execute(query)
    return bool(getattr(result, "rowcount", 0))


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
