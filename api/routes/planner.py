"""POST /v1/planner/capacity and /v1/planner/rebalance: OR-Tools plans, computed and returned.

Both are dry runs: nothing is stored or moved. A capacity plan says which machine kind and how
many for a workload mix; a rebalancing plan says which pods to move where (and which CAT runs to
re-lay) to free machines, beside the greedy drain's answer for comparison.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from api.auth import Permission
from api.deps import require
from model.planning_requests import CapacityIn, RebalanceIn, capacity_plan, rebalance_plan

router = APIRouter(prefix="/v1/planner", tags=["planner"])
Planner = Annotated[object, Depends(require(Permission.recommend))]


@router.post("/capacity", summary="Which machine kind and how many for a workload mix")
async def capacity(body: CapacityIn, _: Planner) -> dict[str, Any]:
    return await run_in_threadpool(capacity_plan, body)


@router.post("/rebalance", summary="A dry-run plan of pod moves that frees machines")
async def rebalance(body: RebalanceIn, _: Planner) -> dict[str, Any]:
    return await run_in_threadpool(rebalance_plan, body)
