"""POST /v1/planner/capacity, /shadow-prices and /rebalance: OR-Tools plans, computed and returned.

Both are dry runs: nothing is stored or moved. Plans run in child processes (api.planning), never
in the API's threads. A capacity plan says which machine kind and how
many for a workload mix; a rebalancing plan says which pods to move where (and which CAT runs to
re-lay) to free machines, beside the greedy drain's answer for comparison. The cluster to
rebalance is the request's (`/rebalance`) or the one in the service's ledger (`/rebalance/live`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.auth import Permission
from api.deps import SessionDep, StateDep, require
from api.services.prices import resolve_price_profile
from ledger import store as ledger
from ledger.rebalance import plan_live_moves
from ledger.types import Held, NodeCapacity
from model.planning_requests import (
    CapacityIn,
    LiveRebalanceIn,
    RebalanceIn,
    ShadowPricesIn,
    capacity_plan,
    rebalance_plan,
    shadow_price_plan,
)
from model.pricing import PriceProfile

router = APIRouter(prefix="/v1/planner", tags=["planner"])
Planner = Annotated[object, Depends(require(Permission.recommend))]


class CapacityRequest(CapacityIn):
    price_profile: str | None = Field(
        default=None,
        max_length=200,
        description="a stored price profile by name@version (`GET /v1/price-profiles`), e.g. "
        "`paper-3dxp@1`: its unit prices price every machine kind, and `prices`, "
        "`llc_area_share` and `slow_to_dram` are not used. Default: the shipped profile "
        "`prices` names (gce-n1 is paper-3dxp@1, msv2-lsq is msv2-lsq@1)",
    )


@router.post(
    "/capacity",
    summary="Which machine kind and how many for a workload mix",
    description="`kinds` are the machine kinds to compare: the operator's own (e.g. those of "
    "`GET /v1/cluster/host-kinds`), or by default Fig. 9's family, the paper's twelve: "
    "`24G-128P` has 24 GiB of DRAM and a 128 GiB slow-memory pool shared by its rack "
    "(`P`, a share of `rack_nodes` machines), `24G-128L` 128 GiB of local slow memory (`L`). "
    "Per kind, `machines` is the plan's count, `greedy_machines` what first-fit decreasing "
    "needs with every workload in its cheapest option, `total_hour` what the machines cost "
    "per hour, and `tenant_hour` what the workloads' tenants pay per hour for their runs. "
    "`machines_content` lists, per planned machine, its VMs at the peak by `class#option`, "
    "and `options` each class's options by index (vCPUs, DRAM, slow memory, ways): the "
    "answer as it stands is what `tmc plan patterns apply` adopts as node patterns. "
    "`price_profile` in the answer is the key of the prices used.",
)
async def capacity(
    body: CapacityRequest, request: Request, state: StateDep, session: SessionDep, _: Planner
) -> dict[str, Any]:
    plain = CapacityIn.model_validate(body.model_dump(exclude={"price_profile"}))
    prices = await _named_prices(session, body.price_profile)
    return await state.planner.run(capacity_plan, (plain, prices), body.time_limit_seconds, request)


async def _named_prices(session: Session, key: str | None) -> PriceProfile | None:
    """A stored price profile by name@version, or None for the request's shipped one. The
    session is closed either way: a plan writes nothing, and the connection goes back to the
    pool before it runs."""
    prices = None
    if key is not None:
        _row, prices = await run_in_threadpool(resolve_price_profile, session, key)
    session.close()
    return prices


class ShadowPricesRequest(ShadowPricesIn):
    price_profile: str | None = Field(
        default=None,
        max_length=200,
        description="the list prices as a stored profile by name@version (default: the shipped"
        " profile `prices` names)",
    )


# The packing LP is solved in milliseconds; this bounds a pathological one.
SHADOW_PRICES_SECONDS = 5.0


@router.post(
    "/shadow-prices",
    summary="What each resource is worth to a mix's packing, and prices to decide in",
    description="The LP relaxation of packing `classes` (each VM in any of its options, held "
    "for its `seconds`) on machines of `kind`, solved by OR-Tools' GLOP. Its dual values are "
    "the machines a unit of each resource costs; times one machine's hour at list prices they "
    "are the resource's shadow price. The answer gives three price profiles: `list`, "
    "`shadow` (a machine costs the same, split by what the packing is short of) and `blend` "
    "(`blend` x shadow + (1 - `blend`) x list). Store one with `POST /v1/price-profiles` to "
    "recommend in it. A dry run: nothing is stored.",
)
async def shadow_prices_route(
    body: ShadowPricesRequest, request: Request, state: StateDep, session: SessionDep, _: Planner
) -> dict[str, Any]:
    plain = ShadowPricesIn.model_validate(body.model_dump(exclude={"price_profile"}))
    prices = await _named_prices(session, body.price_profile)
    return await state.planner.run(
        shadow_price_plan, (plain, prices), SHADOW_PRICES_SECONDS, request
    )


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
