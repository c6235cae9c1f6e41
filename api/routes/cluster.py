"""Cluster state: host kinds, nodes, rack pools, capacity, reservations, utilization."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from api import repositories as repo
from api import services
from api.auth import Permission
from api.db import unit_of_work
from api.deps import StateDep, require
from api.schemas import (
    CapacityOut,
    HostKindIn,
    NodeIn,
    NodeOut,
    PoolIn,
    PoolOut,
    ReservationOut,
    UtilizationOut,
    UtilizationPoint,
)
from ledger import store as ledger
from ledger.utilization import utilization_of

router = APIRouter(prefix="/v1/cluster", tags=["cluster"])
Admin = Annotated[object, Depends(require(Permission.admin))]
Reader = Annotated[object, Depends(require(Permission.read))]


@router.get("/host-kinds", response_model=list[HostKindIn])
def host_kinds(state: StateDep, _: Reader) -> list[HostKindIn]:
    with unit_of_work(state.sessions) as session:
        return [
            HostKindIn(name=k.name, machine=services.machine_of_kind(k))
            for k in repo.list_host_kinds(session)
        ]


@router.put("/host-kinds", response_model=HostKindIn, summary="Register or update a host kind")
def put_host_kind(body: HostKindIn, state: StateDep, _: Admin) -> HostKindIn:
    with unit_of_work(state.sessions) as session:
        row = services.register_host_kind(session, body.name, body.machine)
        return HostKindIn(name=row.name, machine=services.machine_of_kind(row))


@router.get("/nodes", response_model=list[NodeOut])
def nodes(state: StateDep, _: Reader) -> list[NodeOut]:
    with unit_of_work(state.sessions) as session:
        out = []
        for n in repo.list_nodes(session):
            held = repo.list_reservations(session, n.name)
            mask = 0
            for r in held:
                mask |= r.llc_mask
            out.append(
                NodeOut(
                    name=n.name,
                    host_kind=n.host_kind,
                    cpus=n.cpus,
                    dram_bytes=n.dram_bytes,
                    slow_bytes=n.slow_bytes,
                    llc_ways=n.llc_ways,
                    pool=n.pool_name,
                    ready=n.ready,
                    reserved_cpus=sum(r.vcpus for r in held),
                    reserved_dram_bytes=sum(r.dram_bytes for r in held),
                    reserved_slow_bytes=sum(r.slow_bytes for r in held),
                    llc_mask=mask,
                )
            )
        return out


@router.put("/nodes", response_model=NodeIn, summary="Register or update a node")
def put_node(body: NodeIn, state: StateDep, _: Admin) -> NodeIn:
    with unit_of_work(state.sessions) as session:
        services.register_node(
            session,
            body.name,
            body.host_kind,
            cpus=body.cpus,
            dram_bytes=body.dram_bytes,
            slow_bytes=body.slow_bytes,
            llc_ways=body.llc_ways,
            pool_name=body.pool,
        )
    return body


@router.get("/pools", response_model=list[PoolOut])
def pools(state: StateDep, _: Reader) -> list[PoolOut]:
    with unit_of_work(state.sessions) as session:
        nodes = repo.list_nodes(session)
        held = repo.list_reservations(session)
        out = []
        for p in repo.list_pools(session):
            members = [n.name for n in nodes if n.pool_name == p.name]
            reserved = sum(
                r.slow_bytes for r in held if r.slow_from_pool and r.node_name in members
            )
            out.append(
                PoolOut(
                    name=p.name,
                    slow_bytes=p.slow_bytes,
                    reserved_slow_bytes=reserved,
                    nodes=members,
                )
            )
        return out


@router.put("/pools", response_model=PoolIn, summary="Register or resize a rack pool")
def put_pool(body: PoolIn, state: StateDep, _: Admin) -> PoolIn:
    with unit_of_work(state.sessions) as session:
        services.register_pool(session, body.name, body.slow_bytes)
    return body


@router.get("/capacity", response_model=CapacityOut)
def capacity(state: StateDep, _: Reader) -> CapacityOut:
    with unit_of_work(state.sessions) as session:
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
def utilization(state: StateDep, _: Reader) -> UtilizationOut:
    with unit_of_work(state.sessions) as session:
        util, source = state.utilization.current(session)
    return UtilizationOut(utilization=util, source=source)


@router.get(
    "/history",
    response_model=list[UtilizationPoint],
    summary="Utilization samples, oldest first (one per snapshot period)",
)
def history(
    state: StateDep,
    _: Reader,
    minutes: Annotated[int, Query(ge=1, le=7 * 24 * 60)] = 60,
) -> list[UtilizationPoint]:
    since = datetime.now(UTC) - timedelta(minutes=minutes)
    with unit_of_work(state.sessions) as session:
        rows = repo.utilization_history(session, since, limit=5000)
        return [
            UtilizationPoint(at=r.at, cpu=r.cpu, dram=r.dram, slow=r.slow, llc=r.llc)
            for r in reversed(rows)
        ]


@router.get("/reservations", response_model=list[ReservationOut])
def reservations(state: StateDep, _: Reader) -> list[ReservationOut]:
    with unit_of_work(state.sessions) as session:
        return [
            ReservationOut.model_validate(r, from_attributes=True)
            for r in repo.list_reservations(session)
        ]
