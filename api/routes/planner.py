"""POST /v1/planner/capacity and /v1/planner/rebalance: OR-Tools plans, computed and returned.

Both are dry runs: nothing is stored or moved. A capacity plan says which machine kind and how
many for a workload mix; a rebalancing plan says which pods to move where (and which CAT runs to
re-lay) to free machines, beside the greedy drain's answer for comparison. The cluster to
rebalance is the request's (`/rebalance`) or the one in the service's ledger (`/rebalance/live`).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.auth import Permission
from api.deps import SessionDep, require
from ledger import store as ledger
from ledger.rebalance import live_cluster
from model.errors import InvalidRequest
from model.planning_requests import (
    CapacityIn,
    LiveRebalanceIn,
    RebalanceIn,
    capacity_plan,
    plan_moves,
    rebalance_plan,
)

router = APIRouter(prefix="/v1/planner", tags=["planner"])
Planner = Annotated[object, Depends(require(Permission.recommend))]


@router.post("/capacity", summary="Which machine kind and how many for a workload mix")
async def capacity(body: CapacityIn, _: Planner) -> dict[str, Any]:
    return await run_in_threadpool(capacity_plan, body)


@router.post("/rebalance", summary="A dry-run plan of pod moves that frees machines")
async def rebalance(body: RebalanceIn, _: Planner) -> dict[str, Any]:
    return await run_in_threadpool(rebalance_plan, body)


@router.post(
    "/rebalance/live",
    summary="A dry-run plan of pod moves for the cluster in the ledger",
    description="The ledger's ready nodes, rack pools and reservations (each pod's CAT run as "
    "held) are planned as `/rebalance` plans a given cluster. Pods the planner cannot move "
    "safely are pinned or listed under `cluster.skipped` with the reason.",
)
async def rebalance_live(body: LiveRebalanceIn, session: SessionDep, _: Planner) -> dict[str, Any]:
    return await run_in_threadpool(_rebalance_live, body, session)


def _rebalance_live(body: LiveRebalanceIn, session: Session) -> dict[str, Any]:
    nodes, pools, held = ledger.load(session)
    # A dry run writes nothing: the connection goes back to the pool before the solver runs.
    session.close()
    if body.nodes is not None:
        unknown = sorted(set(body.nodes) - {n.name for n in nodes})
        if unknown:
            raise InvalidRequest("nodes", f"not in the ledger: {', '.join(unknown[:10])}")
        chosen = set(body.nodes)
        nodes = [n for n in nodes if n.name in chosen]
        held = [h for h in held if h.node in chosen]
    live = live_cluster(nodes, pools, held, set(body.pinned_namespaces))
    if not live.nodes:
        raise InvalidRequest("nodes", "no ready node to plan")
    out = plan_moves(live.nodes, live.pods, live.pools, body.max_moves, body.time_limit_seconds)
    out["cluster"] = {
        "source": "ledger",
        "nodes": len(live.nodes),
        "pods": len(live.pods),
        "pinned": sum(not p.movable for p in live.pods),
        "pools": dict(zip(live.pool_names, live.pools, strict=True)),
        "skipped": [dataclasses.asdict(s) for s in live.skipped],
    }
    return out
