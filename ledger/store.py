"""The tiered-resource ledger: reservations of DRAM, slow memory (node-local or from the node's
rack pool) and a contiguous run of LLC ways, in the service's database (store.orm's tables).

The placement engine (Go: tmc-scheduler's plugin or tmc-extender) places pods from its own cache
and the API server (a bound pod's placement annotation is the truth); this ledger is the
**mirror** of those placements, written from the pod watch by `mirror` (a full listing) and
`record`/`forget` (events), and read by the dashboard, the planner, the rebalancer and
verification runs (`placement_log`). It holds no placement rule of its own. Every write runs
inside the caller's transaction (store.db.unit_of_work).

A pod placed through the DRA door holds its LLC ways as a count, the node picking their run: its
reservation's mask is 0 (no run: a mask 0 is never a placement's, which holds at least one way)
and the count is its placement-log row's `llc_ways`, written in the same statement and kept as
long as the reservation (`counted_ways`). Old rows read as before: a row with a mask counts the
mask's ways, and no row was written with mask 0 and ways logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

import orjson
from sqlalchemy import ColumnElement, Table, case, delete, func, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from ledger.types import Held, NodeCapacity
from ledger.utilization import Totals, utilization_of
from model import Utilization
from store.orm import (
    Node,
    PlacementRecord,
    RackPool,
    RecommendationRow,
    Reservation,
    new_id,
    read_mask,
    stored_mask,
    utcnow,
)

log = logging.getLogger("tmc.ledger")

# The mirror's batches are written with the tables' statements, not the ORM's bulk path: rows are
# plain values and nothing reads them back as objects.
_RESERVATIONS = cast(Table, Reservation.__table__)
_PLACEMENT_LOG = cast(Table, PlacementRecord.__table__)


# The LLC ways a reservation holds as a count (0 for one with a mask): its placement-log row's,
# looked up by primary key for the rows without a mask only (CASE evaluates the branch it takes).
counted_ways: ColumnElement[int] = case(
    (
        Reservation.llc_mask == 0,
        func.coalesce(
            select(PlacementRecord.llc_ways)
            .where(PlacementRecord.pod_uid == Reservation.pod_uid)
            .scalar_subquery(),
            0,
        ),
    ),
    else_=0,
)


def held_of(row: Reservation, counted: int = 0) -> Held:
    """A reservation row as the cache keeps it; `counted`: its ways held as a count."""
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
        counted_ways=counted,
    )


def counted_ways_of(session: Session, pod_uids: Iterable[str]) -> dict[str, int]:
    """The ways held as a count by those of these pods whose reservations have no mask (the DRA
    door's), by pod uid: one look-up for a page of reservations, a pod with a mask absent."""
    uids = sorted(set(pod_uids))
    if not uids:
        return {}
    rows = session.execute(
        select(Reservation.pod_uid, counted_ways).where(
            Reservation.pod_uid.in_(uids), Reservation.llc_mask == 0
        )
    )
    return {uid: int(n or 0) for uid, n in rows}


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
    rows = session.execute(select(Reservation, counted_ways))
    held = [held_of(r, int(n or 0)) for r, n in rows]
    return nodes, pools, held


def _pod_columns(p: Placed) -> dict[str, object]:
    """Who the placement is of and where: the columns a reservation and a placement-log row share."""
    return {
        "pod_uid": p.held.pod_uid,
        "namespace": p.held.namespace,
        "pod_name": p.held.pod_name,
        "node_name": p.held.node,
    }


def _held_columns(p: Placed, rid: str | None) -> dict[str, object]:
    """A reservation's columns for `p` but its mask (stored by dialect) and bookkeeping; `rid`: the
    decision the row names (None when the ledger does not have it)."""
    return {
        **_pod_columns(p),
        "vcpus": p.held.vcpus,
        "dram_bytes": p.held.dram_bytes,
        "slow_bytes": p.held.slow_bytes,
        "slow_from_pool": p.held.slow_from_pool,
        "recommendation_id": rid,
    }


def _log_placements(session: Session, placed: list[tuple[Placed, str | None]]) -> None:
    """The placements, as the evidence a verification run of each pod is checked against: one
    statement inserting each pod's record or updating the one it has (its `created_at`, when the
    pod was first placed, is kept). `placed`: each placement with the decision its row names."""
    if not placed:
        return
    values = [
        {
            **_pod_columns(p),
            "recommendation_id": rid,
            "slow_ratio": p.slow_ratio,
            "llc_ways": p.held.llc_ways,
            "created_at": utcnow(),
        }
        for p, rid in placed
    ]
    # The service's two databases (store.db): PostgreSQL, and SQLite for the embedded mode.
    postgres = session.get_bind().dialect.name == "postgresql"
    stmt = pg_insert(_PLACEMENT_LOG) if postgres else sqlite_insert(_PLACEMENT_LOG)
    updated = ("namespace", "pod_name", "node_name", "recommendation_id", "slow_ratio", "llc_ways")
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["pod_uid"],
            set_={name: stmt.excluded[name] for name in updated},
        ),
        values,
    )


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
    fallback_reason: str | None = None  # the same as a code (placement.fallback_reason)


@dataclass
class Mirrored:
    recorded: list[str] = field(default_factory=list)  # rows written (new or changed)
    released: list[str] = field(default_factory=list)  # rows of pods no longer bound
    # Bound pods on a node the ledger does not have (not a tmc node by its annotations).
    skipped: list[str] = field(default_factory=list)


# What a reservation row holds, compared with a pod's placement to find the rows to write.
_HELD_COLUMNS = (
    Reservation.pod_uid,
    Reservation.node_name,
    Reservation.vcpus,
    Reservation.dram_bytes,
    Reservation.slow_bytes,
    Reservation.slow_from_pool,
    Reservation.llc_mask,
    counted_ways,
)


def _held_key(h: Held) -> tuple[str, int, int, int, bool, int, int]:
    return (
        h.node,
        h.vcpus,
        h.dram_bytes,
        h.slow_bytes,
        h.slow_from_pool,
        h.llc_mask,
        h.counted_ways,
    )


def _changed(
    placed: Mapping[str, Placed],
    rows: Mapping[str, tuple[object, ...]],
    nodes: set[str],
    out: Mirrored,
) -> list[Placed]:
    """The placements (by pod uid) to write: those whose row (`rows`, `_held_key`'s order) says
    otherwise, on a node the ledger has (`nodes`); a pod on another node is skipped (the node's
    registration comes first in the feeder's order). `out` records what is written or skipped."""
    writes: list[Placed] = []
    for uid, p in placed.items():
        if rows.get(uid) == _held_key(p.held):
            continue
        if p.held.node not in nodes:
            out.skipped.append(uid)
            continue
        writes.append(p)
        out.recorded.append(uid)
    return writes


def _decisions_named(placed: list[Placed], known: set[str]) -> list[str | None]:
    """The decision each placement's row names: its own when the ledger has it, else none."""
    return [p.recommendation_id if p.recommendation_id in known else None for p in placed]


def _known_decisions(session: Session, placed: Iterable[Placed]) -> set[str]:
    ids = {p.recommendation_id for p in placed if p.recommendation_id}
    if not ids:
        return set()
    return set(session.scalars(select(RecommendationRow.id).where(RecommendationRow.id.in_(ids))))


def _write(session: Session, placed: list[Placed], replaced: Iterable[str]) -> None:
    """Each pod's row made what its placement says, in a few statements for the whole batch:
    the rows it replaces (`replaced`, pod uids) deleted, the new rows inserted, the placements
    logged. Written with SQL statements, not ORM objects: a burst's rows cost one round trip
    and no per-row bookkeeping; a Reservation already loaded in the session is not refreshed."""
    replaced = list(replaced)
    rids = _decisions_named(placed, _known_decisions(session, placed))
    if _postgres(session):
        _write_postgres(session, placed, rids, replaced)
        return
    if replaced:
        session.execute(delete(Reservation).where(Reservation.pod_uid.in_(replaced)))
    if not placed:
        return
    with_rid = list(zip(placed, rids, strict=True))
    session.execute(
        insert(_RESERVATIONS),
        [
            {
                **_held_columns(p, rid),
                "id": new_id(),
                "llc_mask": p.held.llc_mask,
                "attempt": None,
                "created_at": utcnow(),
            }
            for p, rid in with_rid
        ],
    )
    _log_placements(session, with_rid)


# PostgreSQL (the service's database) reads and writes a batch as one JSON parameter, its rows
# unpacked by the server: one statement whatever the number of rows, its text the same for every
# batch (prepared once by the driver), and no per-row parameter handling in SQLAlchemy or per-row
# messages in the driver's pipeline, which were most of the mirror's CPU per pod (as column
# arrays, the driver's array dumping still cost 8 us a pod). SQLite (the embedded mode) keeps the
# statements above.
_BATCH_ROWS = """
    json_to_recordset(%(rows)s::json) AS i(pod_uid varchar, namespace varchar,
        pod_name varchar, node_name varchar, vcpus integer, dram_bytes bigint,
        slow_bytes bigint, slow_from_pool boolean, llc_mask bigint, recommendation_id varchar,
        slow_ratio float8, llc_ways integer)
"""
# The new rows inserted and the placements logged in one statement (two tables: a statement's
# parts do not meet). A placement-log row keeps its `created_at`, when the pod was first placed.
_PG_WRITE = f"""
    WITH i AS (SELECT * FROM {_BATCH_ROWS}),
    held AS (
        INSERT INTO reservations (id, pod_uid, namespace, pod_name, node_name, vcpus, dram_bytes,
            slow_bytes, slow_from_pool, llc_mask, recommendation_id, attempt, created_at)
        SELECT gen_random_uuid()::text, pod_uid, namespace, pod_name, node_name, vcpus,
            dram_bytes, slow_bytes, slow_from_pool, llc_mask, recommendation_id, NULL, %(at)s
        FROM i
    )
    INSERT INTO placement_log (pod_uid, namespace, pod_name, node_name, recommendation_id,
        slow_ratio, llc_ways, created_at)
    SELECT pod_uid, namespace, pod_name, node_name, recommendation_id, slow_ratio, llc_ways,
        %(at)s
    FROM i
    ON CONFLICT (pod_uid) DO UPDATE SET namespace = EXCLUDED.namespace,
        pod_name = EXCLUDED.pod_name, node_name = EXCLUDED.node_name,
        recommendation_id = EXCLUDED.recommendation_id, slow_ratio = EXCLUDED.slow_ratio,
        llc_ways = EXCLUDED.llc_ways
"""
# Per pod of a batch (by its position): the row the ledger holds for it (NULLs when none),
# whether its node is known, and whether the decision it names is: three look-ups in one.
_PG_LOOKUP = """
    SELECT i.n, r.pod_uid IS NOT NULL, r.node_name, r.vcpus, r.dram_bytes, r.slow_bytes,
        r.slow_from_pool, r.llc_mask,
        CASE WHEN r.llc_mask = 0 THEN COALESCE(l.llc_ways, 0) ELSE 0 END,
        n.name IS NOT NULL, d.id IS NOT NULL
    FROM json_to_recordset(%(rows)s::json)
        AS i(n integer, pod_uid varchar, node_name varchar, recommendation_id varchar)
    LEFT JOIN reservations r ON r.pod_uid = i.pod_uid
    LEFT JOIN placement_log l ON l.pod_uid = i.pod_uid
    LEFT JOIN nodes n ON n.name = i.node_name
    LEFT JOIN recommendations d ON d.id = i.recommendation_id
"""
_PG_DELETE = "DELETE FROM reservations WHERE pod_uid = ANY(%(uid)s::varchar[])"


def _json(rows: Sequence[Mapping[str, object]]) -> str:
    return orjson.dumps(rows).decode()


def _postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def _record_postgres(session: Session, latest: dict[str, Placed]) -> Mirrored:
    """`record` on PostgreSQL: one look-up and one write (and a delete of the rows replaced,
    when there are some) for the whole batch."""
    out = Mirrored()
    # What the session holds goes first, as any ORM statement would flush it.
    session.flush()
    conn = session.connection()
    batch = list(latest.values())
    found = conn.exec_driver_sql(
        _PG_LOOKUP,
        {
            "rows": _json(
                [
                    {
                        "n": i,
                        "pod_uid": p.held.pod_uid,
                        "node_name": p.held.node,
                        "recommendation_id": p.recommendation_id,
                    }
                    for i, p in enumerate(batch)
                ]
            )
        },
    ).all()
    # The lookup's rows as the shared rule reads them: each pod's row, the nodes and the
    # decisions the ledger has.
    rows: dict[str, tuple[object, ...]] = {}
    nodes: set[str] = set()
    known: set[str] = set()
    for n, has_row, node, vcpus, dram, slow, pool, mask, counted, node_known, rid_known in found:
        p = batch[int(n)]
        if has_row:
            rows[p.held.pod_uid] = (node, vcpus, dram, slow, pool, read_mask(mask), counted)
        if node_known:
            nodes.add(p.held.node)
        if rid_known and p.recommendation_id:
            known.add(p.recommendation_id)
    writes = _changed(latest, rows, nodes, out)
    replaced = [p.held.pod_uid for p in writes if p.held.pod_uid in rows]
    _write_postgres(session, writes, _decisions_named(writes, known), replaced)
    return out


def _write_postgres(
    session: Session, placed: list[Placed], rids: list[str | None], replaced: list[str]
) -> None:
    """`_write` on PostgreSQL: `placed` with the decision each row names (`rids`)."""
    conn = session.connection()
    if replaced:
        conn.exec_driver_sql(_PG_DELETE, {"uid": replaced})
    if not placed:
        return
    rows = [
        {
            **_held_columns(p, rid),
            "llc_mask": stored_mask(p.held.llc_mask),
            "slow_ratio": p.slow_ratio,
            "llc_ways": p.held.llc_ways,
        }
        for p, rid in zip(placed, rids, strict=True)
    ]
    conn.exec_driver_sql(
        _PG_WRITE,
        {
            "rows": _json(rows),
            "at": utcnow(),
        },
    )


def record(session: Session, placed: Iterable[Placed]) -> Mirrored:
    """Mirror bound pods' placements (watch events): each pod's row made equal to what its
    annotation says, and its placement logged. A pod on a node the ledger does not have is
    skipped (the node's registration comes first in the feeder's order). A few statements per
    batch, not per pod: a burst's events arrive together."""
    out = Mirrored()
    # One placement per pod, its latest (a batch is the latest state per pod already).
    latest = {p.held.pod_uid: p for p in placed}
    if not latest:
        return out
    if _postgres(session):
        return _record_postgres(session, latest)
    uids = list(latest)
    rows = {
        r[0]: tuple(r[1:])
        for r in session.execute(select(*_HELD_COLUMNS).where(Reservation.pod_uid.in_(uids)))
    }
    nodes = set(
        session.scalars(
            select(Node.name).where(Node.name.in_({p.held.node for p in latest.values()}))
        )
    )
    writes = _changed(latest, rows, nodes, out)
    _write(session, writes, (p.held.pod_uid for p in writes if p.held.pod_uid in rows))
    return out


def mirror(session: Session, bound: Mapping[str, Placed]) -> Mirrored:
    """Make the reservations exactly the bound pods' placements (a full listing of the API
    server): rows of pods no longer bound go, missing or different rows are written. What the
    API server says is recorded as it is; the extender, not the mirror, decides placements."""
    out = Mirrored()
    rows = {r[0]: tuple(r[1:]) for r in session.execute(select(*_HELD_COLUMNS))}
    out.released = [uid for uid in rows if uid not in bound]
    nodes = set(session.scalars(select(Node.name)))
    writes = _changed(bound, rows, nodes, out)
    replaced = [*out.released, *(p.held.pod_uid for p in writes if p.held.pod_uid in rows)]
    # Every row replaced or released goes before any is written (a pod's new row may not meet
    # its old one); in bounded statements: a listing may rewrite every row.
    for i in range(0, len(replaced), _CHUNK):
        _write(session, [], replaced[i : i + _CHUNK])
    for i in range(0, len(writes), _CHUNK):
        _write(session, writes[i : i + _CHUNK], [])
    if out.recorded or out.released or out.skipped:
        log.info(
            "mirrored the bound pods: %d written, %d released, %d on unknown nodes",
            len(out.recorded),
            len(out.released),
            len(out.skipped),
        )
    return out


# Rows per statement when a listing rewrites many: a bounded IN list and parameter count.
_CHUNK = 1000


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
    popcounted here; the ways of reservations without a mask (DRA claims) are their counts,
    summed there."""
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
        func.sum(counted_ways),
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
            mask, count, vcpus, dram, local, counted = row[:6]
            used[0] += sign * int(vcpus or 0)
            used[1] += sign * int(dram or 0)
            used[2] += sign * int(local or 0)
            used[3] += sign * (int(mask).bit_count() * int(count) + int(counted or 0))
    for row in every:
        from_pools += int(row[6] or 0)
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
