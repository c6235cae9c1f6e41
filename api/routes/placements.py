"""Placements per pod, read-only (`tmc get placements`): the tiered resources each pod holds on
its node, and the decision they came from."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import BaseModel, Field
from sqlalchemy import RowMapping

from api import placements
from api.auth import Permission
from api.deps import SessionDep, require
from api.errors import NotFound
from api.paging import LIST_PAGE_DEFAULT, CursorParam, ListLimit, decode_cursor, link_next
from ledger import store as ledger
from model import Recommendation
from model.node_contract import StructurePlan
from store.orm import Reservation

router = APIRouter(prefix="/v1", tags=["placements"])
Reader = Annotated[object, Depends(require(Permission.read))]
Name = Annotated[str, Query(min_length=1, max_length=253)]


class PlacementOut(BaseModel):
    pod_uid: str
    namespace: str
    pod: str
    node: str
    workload: str | None = Field(description="null: the pod was placed without a decision")
    objective: str | None
    slow_ratio: float | None
    llc_ways: int | None = Field(description="ways the decision chose")
    reserved_llc_ways: int = Field(
        description="LLC ways the pod holds on its node: its mask's, or (llc_mask null) a count"
        " whose run the node chose"
    )
    vcpus: int
    dram_bytes: int
    slow_bytes: int
    slow_from_pool: bool
    llc_mask: int | None = Field(
        description="the contiguous CAT mask reserved on the node; null: the pod came through"
        " the DRA door, its ways a count (reserved_llc_ways) whose run the node chose"
    )
    recommendation_id: str | None
    created_at: datetime


class PlacementDetailOut(PlacementOut):
    predicted_slowdown: float | None = Field(description="against fastmax, by the model")
    predicted_seconds: float | None
    cost: float | None = Field(description="Eq. 1 cost of one run, in `currency`")
    currency: str | None
    plan: list[StructurePlan] = Field(description="per tagged structure: fast and slow bytes")


def _placement(row: RowMapping, counted: dict[str, int]) -> dict[str, Any]:
    """A placement's fields; `counted`: the ways held as counts, by pod uid (reservations
    without a mask only)."""
    r: Reservation = row[Reservation]
    mask = r.llc_mask or None  # 0: no run of tmc's (a placement's mask holds a way at least)
    return {
        "pod_uid": r.pod_uid,
        "namespace": r.namespace,
        "pod": r.pod_name,
        "node": r.node_name,
        "workload": row["workload"],
        "objective": row["objective"],
        "slow_ratio": row["slow_ratio"],
        "llc_ways": row["llc_ways"],
        "reserved_llc_ways": r.llc_mask.bit_count() if mask else counted.get(r.pod_uid, 0),
        "vcpus": r.vcpus,
        "dram_bytes": r.dram_bytes,
        "slow_bytes": r.slow_bytes,
        "slow_from_pool": r.slow_from_pool,
        "llc_mask": mask,
        "recommendation_id": r.recommendation_id,
        "created_at": r.created_at,
    }


@router.get(
    "/placements",
    response_model=list[PlacementOut],
    summary="What each pod holds, on which node, from which decision (by node, a page at a time)",
)
def list_placements(
    request: Request,
    response: Response,
    session: SessionDep,
    _: Reader,
    node: Name | None = None,
    namespace: Name | None = None,
    limit: ListLimit = LIST_PAGE_DEFAULT,
    cursor: CursorParam = None,
) -> list[PlacementOut]:
    after = None if cursor is None else tuple(decode_cursor(cursor, (str, str)))
    rows = placements.list_placements(
        session, node=node, namespace=namespace, after=after, limit=limit
    )
    if len(rows) == limit:
        last: Reservation = rows[-1][Reservation]
        link_next(request, response, [last.node_name, last.pod_uid])
    counted = ledger.counted_ways_of(
        session, (r.pod_uid for row in rows if not (r := row[Reservation]).llc_mask)
    )
    return [PlacementOut(**_placement(row, counted)) for row in rows]


@router.get(
    "/placements/{namespace}/{pod}",
    response_model=PlacementDetailOut,
    summary="One pod's placement with its predicted slowdown and per-structure plan",
    responses={404: {"description": "No placement for this pod"}},
)
def get_placement(
    session: SessionDep,
    _: Reader,
    namespace: Annotated[str, Path(max_length=253)],
    pod: Annotated[str, Path(max_length=253)],
) -> PlacementDetailOut:
    row = placements.find_placement(session, namespace, pod)
    if row is None:
        raise NotFound("placement", f"{namespace}/{pod}")
    r: Reservation = row[Reservation]
    counted = ledger.counted_ways_of(session, [] if r.llc_mask else [r.pod_uid])
    fields = _placement(row, counted)
    result = row["result"]
    if result is None:
        return PlacementDetailOut(
            **fields,
            predicted_slowdown=None,
            predicted_seconds=None,
            cost=None,
            currency=None,
            plan=[],
        )
    rec = Recommendation.model_validate(result)
    return PlacementDetailOut(
        **fields,
        predicted_slowdown=rec.chosen.slowdown,
        predicted_seconds=rec.chosen.predicted_seconds,
        cost=rec.chosen.cost,
        currency=rec.currency,
        plan=[
            StructurePlan(tag=p.tag, fast_bytes=p.fast_bytes, slow_bytes=p.slow_bytes)
            for p in rec.placement
        ],
    )
