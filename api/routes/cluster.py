"""Cluster state: host kinds, nodes, rack pools, capacity, reservations, utilization."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from api.auth import Permission
from api.deps import SessionDep, StateDep, require
from api.paging import LIST_PAGE_DEFAULT, CursorParam, ListLimit, decode_cursor, link_next
from api.schemas import (
    CapacityOut,
    HostKindIn,
    NodeIn,
    NodeOut,
    PoolIn,
    PoolOut,
    ReservationOut,
    StrandingOut,
    UtilizationOut,
    UtilizationPoint,
)
from api.services import cluster
from api.services.cluster import node_utilizations
from ledger import nodes as ledger_nodes
from ledger import store as ledger
from ledger.types import NodeCapacity
from ledger.utilization import utilization_of
from model.resources import MachineShape
from model.stranding import stranding
from store.orm import HostKind

router = APIRouter(prefix="/v1/cluster", tags=["cluster"])


# A pod placed through the DRA door holds its LLC ways as a count whose run its node chose: in no
# mask. The node and reservation views name those ways beside the masks (same schema names).
Admin = Annotated[object, Depends(require(Permission.admin))]
Reader = Annotated[object, Depends(require(Permission.read))]


def _host_kind_out(kind: HostKind, machine: MachineShape) -> HostKindIn:
    return HostKindIn.model_validate(
        {
            "name": kind.name,
            "machine": machine,
            "sockets": kind.sockets,
            "llc_size_bytes": kind.llc_size_bytes,
            "slow_tier": kind.slow_tier,
        }
    )


@router.get("/host-kinds", response_model=list[HostKindIn])
def host_kinds(session: SessionDep, _: Reader) -> list[HostKindIn]:
    # A stored row that is no machine (no DRAM) is left out, logged, rather than failing the list.
    kinds = [(k, ledger_nodes.machine_of_kind(k)) for k in cluster.host_kinds(session)]
    return [_host_kind_out(k, m) for k, m in kinds if m is not None]


@router.put(
    "/host-kinds",
    response_model=HostKindIn,
    summary="Register or update a host kind (the whole kind: the same body twice changes nothing)",
)
def put_host_kind(body: HostKindIn, session: SessionDep, _: Admin) -> HostKindIn:
    row = ledger_nodes.register_host_kind(
        session,
        body.name,
        body.machine,
        sockets=body.sockets,
        llc_size_bytes=None if body.llc_size_bytes is None else int(body.llc_size_bytes),
        slow_tier=body.slow_tier,
    )
    return _host_kind_out(row, body.machine)


@router.get(
    "/nodes",
    response_model=list[NodeOut],
    summary="Nodes by name, a page at a time (the Link header names the next page)",
)
def nodes(
    request: Request,
    response: Response,
    session: SessionDep,
    _: Reader,
    limit: ListLimit = LIST_PAGE_DEFAULT,
    cursor: CursorParam = None,
) -> list[NodeOut]:
    after = None if cursor is None else decode_cursor(cursor, (str,))[0]
    out = []
    page = node_utilizations(session, after=after, limit=limit)
    link_next(request, response, [page[-1][0].node.name] if len(page) == limit else None)
    for u, util in page:
        strands = stranding(util)
        out.append(
            NodeOut(
                name=u.node.name,
                host_kind=u.node.host_kind,
                cpus=u.node.cpus,
                dram_bytes=u.node.dram_bytes,
                slow_bytes=u.node.slow_bytes,
                llc_ways=u.node.llc_ways,
                pool=u.node.pool_name,
                ready=u.node.ready,
                reserved_cpus=u.reserved_cpus,
                reserved_dram_bytes=u.reserved_dram_bytes,
                reserved_slow_bytes=u.reserved_slow_bytes,
                llc_mask=u.llc_mask,
                reserved_llc_ways=u.llc_mask.bit_count() + u.counted_ways,
                counted_llc_ways=u.counted_ways,
                utilization=util,
                stranding=None
                if strands is None
                else StrandingOut(full=list(strands.full), idle=list(strands.idle)),
            )
        )
    return out


@router.put(
    "/nodes",
    response_model=NodeIn,
    summary="Register or update a node",
    description="The same rule as a node agent's published capacity: an unknown host kind is "
    "registered from this node's shape, and an unknown rack pool with `pool_slow_bytes` (zero "
    "when absent, until PUT /v1/cluster/pools sizes it).",
)
def put_node(body: NodeIn, session: SessionDep, _: Admin) -> NodeIn:
    capacity = NodeCapacity(
        name=body.name,
        host_kind=body.host_kind,
        cpus=body.cpus,
        dram_bytes=body.dram_bytes,
        slow_bytes=body.slow_bytes,
        llc_ways=body.llc_ways,
        pool=body.pool,
    )
    ledger_nodes.register_node(session, capacity, body.pool_slow_bytes)
    return body


@router.get(
    "/pools",
    response_model=list[PoolOut],
    summary="Rack pools by name, a page at a time (the Link header names the next page)",
)
def pools(
    request: Request,
    response: Response,
    session: SessionDep,
    _: Reader,
    limit: ListLimit = LIST_PAGE_DEFAULT,
    cursor: CursorParam = None,
) -> list[PoolOut]:
    after = None if cursor is None else decode_cursor(cursor, (str,))[0]
    page = ledger_nodes.pool_use(session, after=after, limit=limit)
    link_next(request, response, [page[-1].pool.name] if len(page) == limit else None)
    return [
        PoolOut(
            name=u.pool.name,
            slow_bytes=u.pool.slow_bytes,
            reserved_slow_bytes=u.reserved_slow_bytes,
            nodes=u.nodes,
        )
        for u in page
    ]


@router.put("/pools", response_model=PoolIn, summary="Register or resize a rack pool")
def put_pool(body: PoolIn, session: SessionDep, _: Admin) -> PoolIn:
    ledger_nodes.register_pool(session, body.name, body.slow_bytes)
    return body


@router.get("/capacity", response_model=CapacityOut)
def capacity(session: SessionDep, _: Reader) -> CapacityOut:
    t = ledger.totals(session)
    return CapacityOut(
        nodes=t.nodes,
        cpus=t.cpus,
        dram_bytes=t.dram_bytes,
        slow_bytes=t.slow_bytes,
        llc_ways=t.llc_ways,
        reserved_cpus=t.reserved_cpus,
        reserved_dram_bytes=t.reserved_dram_bytes,
        reserved_slow_bytes=t.reserved_slow_bytes,
        reserved_llc_ways=t.reserved_llc_ways,
        utilization=utilization_of(t),
    )


@router.get("/utilization", response_model=UtilizationOut, summary="What /recommend would use now")
def utilization(state: StateDep, session: SessionDep, _: Reader) -> UtilizationOut:
    util, source = state.utilization.current(session)
    return UtilizationOut(utilization=util, source=source)


@router.get(
    "/history",
    response_model=list[UtilizationPoint],
    summary="Utilization samples, oldest first (one per snapshot period)",
)
def history(
    session: SessionDep,
    _: Reader,
    minutes: Annotated[int, Query(ge=1, le=7 * 24 * 60)] = 60,
) -> list[UtilizationPoint]:
    since = datetime.now(UTC) - timedelta(minutes=minutes)
    return [
        UtilizationPoint(at=r.at, cpu=r.cpu, dram=r.dram, slow=r.slow, llc=r.llc)
        for r in cluster.utilization_since(session, since, limit=5000)
    ]


@router.get(
    "/reservations",
    response_model=list[ReservationOut],
    summary="Reservations by node and pod uid, a page at a time",
)
def reservations(
    request: Request,
    response: Response,
    session: SessionDep,
    _: Reader,
    node: Annotated[str | None, Query(min_length=1, max_length=253)] = None,
    limit: ListLimit = LIST_PAGE_DEFAULT,
    cursor: CursorParam = None,
) -> list[ReservationOut]:
    after = None if cursor is None else tuple(decode_cursor(cursor, (str, str)))
    rows = cluster.reservations_page(session, node, after, limit)
    last = rows[-1] if len(rows) == limit else None
    link_next(request, response, None if last is None else [last.node_name, last.pod_uid])
    counted = ledger.counted_ways_of(session, (r.pod_uid for r in rows if not r.llc_mask))
    return [
        ReservationOut(
            id=r.id,
            pod_uid=r.pod_uid,
            namespace=r.namespace,
            pod_name=r.pod_name,
            node_name=r.node_name,
            vcpus=r.vcpus,
            dram_bytes=r.dram_bytes,
            slow_bytes=r.slow_bytes,
            slow_from_pool=r.slow_from_pool,
            # 0 is no run of tmc's: a placement's mask holds a way at least.
            llc_mask=r.llc_mask or None,
            llc_ways=r.llc_mask.bit_count() or counted.get(r.pod_uid, 0),
            recommendation_id=r.recommendation_id,
            created_at=r.created_at,
        )
        for r in rows
    ]
