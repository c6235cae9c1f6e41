"""POST /v1/tiering/recommend: dynamic-tiering advice for a workload's stored profile or an
inline tiering profile (fast-tier size within τ, migration period trials, knob settings)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import ConfigDict, Field, ValidationError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.auth import Permission
from api.deps import SessionDep, StateDep, require
from api.errors import PROBLEM, ApiError
from api.planning import tiering_advice
from api.services import profiles
from model.bundle import ProfileBundle
from model.tiering import TieringAdvice, TieringProfile, TieringRequest

router = APIRouter(tags=["tiering"])
TIERING_WALL_FACTOR = 10.0
TIERING_WALL_SECONDS = 20.0
Advisor = Annotated[object, Depends(require(Permission.recommend))]


class TieringRecommendIn(TieringRequest):
    """The advice request (`model.tiering.TieringRequest`) and whose profile it is about."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)
    workload: str | None = Field(
        default=None, max_length=128, description="a workload whose latest profile has tiering"
    )
    profile: TieringProfile | None = Field(default=None, description="or an inline profile")


def _stored_profile(session: Session, name: str) -> tuple[TieringProfile, ProfileBundle]:
    row = profiles.latest_bundle(session, name)
    try:
        bundle = ProfileBundle.model_validate(row.bundle)
        tiering = bundle.tiering
    except ValidationError as exc:  # stored before this version: say so, do not crash
        raise ApiError(
            409,
            "No tiering profile",
            f"the stored profile cannot be read: {exc.error_count()} errors",
        ) from exc
    if tiering is None:
        raise ApiError(
            409,
            "No tiering profile",
            f"the latest profile of {name!r} carries no tiering section; profile it with"
            " `tmc-agent profile --backend trace --tiering` or send the profile inline",
        )
    return tiering, bundle


@router.post(
    "/v1/tiering/recommend",
    response_model=TieringAdvice,
    summary="Dynamic-tiering advice: fast-tier size within τ, migration period, knob settings",
    description="The advice is computed in a process of its own at a lower CPU priority, as "
    "plans are (at most as many at once as plans, the rest queued; 503 with Retry-After when "
    "the queue is full), within the request's `time_budget_seconds` of CPU.",
    responses={
        404: {"description": "Unknown workload", "content": {PROBLEM: {}}},
        409: {"description": "No tiering profile for the workload", "content": {PROBLEM: {}}},
        503: {"description": "Too many plans and advice waiting; retry", "content": {PROBLEM: {}}},
    },
)
async def recommend_tiering(
    body: TieringRecommendIn,
    request: Request,
    state: StateDep,
    session: SessionDep,
    _: Advisor,
) -> TieringAdvice:
    if (body.profile is None) == (body.workload is None):
        raise ApiError(422, "Invalid request", "give exactly one of workload and profile")
    bundle: ProfileBundle | None = None
    if body.profile is not None:
        profile = body.profile
    else:
        profile, bundle = await run_in_threadpool(_stored_profile, session, str(body.workload))
    session.close()  # the advice reads nothing more: the connection goes back to the pool
    advice_request = TieringRequest.model_validate(body.model_dump(exclude={"workload", "profile"}))
    # The budget is CPU seconds, checked by the advice itself; the runner's limit is a wall-clock
    # backstop, and a child at a lower priority on a busy machine gets a small share of a core.
    backstop = TIERING_WALL_FACTOR * advice_request.time_budget_seconds + TIERING_WALL_SECONDS
    answer = await state.planner.run(
        tiering_advice, (profile, advice_request, bundle), backstop, request
    )
    return TieringAdvice.model_validate(answer)
