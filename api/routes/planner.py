"""POST /v1/planner/capacity and /v1/planner/rebalance: OR-Tools plans, computed and returned.

Both are dry runs: nothing is stored or moved. Plans run in child processes (api.planning), never
in the API's threads. A capacity plan says which machine kind and how
many for a workload mix; a rebalancing plan says which pods to move where (and which CAT runs to
re-lay) to free machines, beside the greedy drain's answer for comparison. The cluster to
rebalance is the request's (`/rebalance`) or the one in the service's ledger (`/rebalance/live`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.auth import Permission
from api.deps import SessionDep, StateDep, require
from ledger import store as ledger
from ledger.rebalance import plan_live_moves
from ledger.types import Held, NodeCapacity
from model.planning_requests import (
    CapacityIn,
    LiveRebalanceIn,
    RebalanceIn,
    capacity_plan,
    rebalance_plan,
)

router = APIRouter(prefix="/v1/planner", tags=["planner"])
Planner = Annotated[object, Depends(require(Permission.recommend))]


@router.post("/capacity", summary="Which machine kind and how many for a workload mix")
async def capacity(
    body: CapacityIn, request: Request, state: StateDep, _: Planner
) -> dict[str, Any]:
    return await state.planner.run(capacity_plan, (body,), body.time_limit_seconds, request)


@router.post("/rebalance", summary="A dry-run plan of pod moves that frees machines")
async def rebalance(
    body: RebalanceIn, request: Request, state: StateDep, _: Planner
) -> dict[str, Any]:
    return await state.planner.run(rebalance_plan, (body,), body.time_limit_seconds, request)


@router.post(
    "/rebalance/live",
    summary="A dry-run plan of pod moves for the cluster in the ledger",
    description="The ledger's ready nodes, rack pools and reservations (each pod's CAT run as "
    "held) are planned as `/rebalance` plans a given cluster. Pods the planner cannot move "
    "safely are pinned or listed under `cluster.skipped` with the reason.",
)
async def rebalance_live(
    body: LiveRebalanceIn, request: Request, state: StateDep, session: SessionDep, _: Planner
) -> dict[str, Any]:
    nodes, pools, held = await run_in_threadpool(_ledger_now, session)
    return await state.planner.run(
        plan_live_moves, (body, nodes, pools, held), body.time_limit_seconds, request
    )


def _ledger_now(
    session: Session,
) -> tuple[list[NodeCapacity], dict[str, int], list[Held]]:
    loaded = ledger.load(session)
    # A dry run writes nothing: the connection goes back to the pool before the plan runs.
    session.close()
    return loaded
