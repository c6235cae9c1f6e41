"""POST /recommend (also at /v1/recommend) and the decision log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from api.auth import GRANTS, Permission, Role
from api.deps import AppState, SessionDep, StateDep, committed, require
from api.errors import InvalidInput
from api.paging import CursorParam, decode_cursor, link_next
from api.schemas import RecommendationOut, RecommendationSummary, RecommendIn
from api.services import recommendations as decisions
from api.services.recommendations import DecisionInput, RecommendationRecord
from model import Recommendation, parse_objective
from store.orm import RecommendationRow

router = APIRouter(tags=["recommendations"])
Recommender = Annotated[Role, Depends(require(Permission.recommend))]
Reader = Annotated[object, Depends(require(Permission.read))]


def recommendation_out(row: RecommendationRow, known: bool | None = None) -> RecommendationOut:
    return RecommendationOut(
        id=row.id,
        created_at=row.created_at,
        workload_id=row.workload_id,
        profile_id=row.profile_id,
        fitted_model_id=row.fitted_model_id,
        bundle_hash=row.bundle_hash,
        utilization_source=row.utilization_source,
        host_kind_known=known,
        recommendation=Recommendation.model_validate(row.result),
    )


def _recommend_in_thread(body: RecommendIn, state: AppState, role: Role) -> Response:
    """The decision committed before the response is made, the request's blocking work in one
    thread-pool hop (the hand-offs cost about as much CPU as the resolving query). For a named
    workload each statement commits on its own: it reads one row and writes single statements."""
    return committed(
        state,
        lambda session: _recommend(body, state, session, role),
        statements_alone=body.profile is None,
    )


def _recommend(body: RecommendIn, state: AppState, session: Session, role: Role) -> Response:
    objective = parse_objective(body.objective)
    threshold = body.threshold if body.threshold is not None else state.settings.default_threshold
    if body.utilization is not None:
        utilization, source = body.utilization, "request"
    else:
        utilization, source = state.utilization.current(session)
    record = decisions.decide(
        session,
        DecisionInput(
            workload=body.workload,
            bundle=body.profile,
            objective=objective,
            threshold=threshold,
            utilization=utilization,
            utilization_source=source,
            grid=body.grid,
            price_profile=body.price_profile,
            may_upload=Permission.upload in GRANTS[role],
            memory_bytes=body.memory_bytes,
            sized_from=None if body.memory_bytes is None else "caller",
            vcpus=body.vcpus,
        ),
        state.models,
    )
    state.metrics.recommendations.labels(record.recommendation.objective, source).inc()
    state.metrics.decisions_logged.labels("repeat" if record.repeated else "stored").inc()
    return Response(encode_record(record), media_type="application/json")


def encode_record(record: RecommendationRecord) -> bytes:
    """RecommendationOut as JSON. The recommendation is embedded as the bytes the decision log
    stored: checked by the model's types already, it is neither re-validated nor re-encoded."""
    head = orjson.dumps(
        {
            "id": record.id,
            "created_at": record.created_at.isoformat(),
            "workload_id": record.workload_id,
            "profile_id": record.profile_id,
            "fitted_model_id": record.fitted_model_id,
            "bundle_hash": record.bundle_hash,
            "utilization_source": record.utilization_source,
            "host_kind_known": record.host_kind_known,
        }
    )
    return head[:-1] + b',"recommendation":' + record.recommendation_json + b"}"


@router.post(
    "/recommend",
    response_model=RecommendationOut,
    summary="Recommend a configuration (Algorithm 1) for a workload or an inline bundle",
    responses={404: {"description": "Unknown workload"}, 409: {"description": "Nothing fitted"}},
)
async def recommend(body: RecommendIn, state: StateDep, role: Recommender) -> Response:
    return await run_in_threadpool(_recommend_in_thread, body, state, role)


@router.post("/v1/recommend", response_model=RecommendationOut)
async def recommend_v1(body: RecommendIn, state: StateDep, role: Recommender) -> Response:
    return await run_in_threadpool(_recommend_in_thread, body, state, role)


@router.get("/v1/recommendations/{rec_id}", response_model=RecommendationOut)
def get_recommendation(rec_id: str, session: SessionDep, _: Reader) -> RecommendationOut:
    return recommendation_out(decisions.recommendation(session, rec_id))


@router.get("/v1/recommendations", response_model=list[RecommendationSummary])
def list_recommendations(
    request: Request,
    response: Response,
    session: SessionDep,
    _: Reader,
    workload: Annotated[str | None, Query(max_length=128)] = None,
    objective: Annotated[str | None, Query(max_length=64)] = None,
    since: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    cursor: CursorParam = None,
) -> list[RecommendationSummary]:
    after = None
    if cursor is not None:
        when, rec_id = decode_cursor(cursor, (str, str))
        try:
            after = (datetime.fromisoformat(when), rec_id)
        except ValueError:
            raise InvalidInput("cursor: not a cursor this endpoint gave") from None
    rows = decisions.recommendation_page(
        session,
        workload=workload,
        objective=objective,
        since=since,
        limit=limit,
        offset=offset,
        after=after,
    )
    last = rows[-1] if len(rows) == limit else None
    link_next(request, response, None if last is None else [last.created_at.isoformat(), last.id])
    return [
        RecommendationSummary(
            id=r.id,
            created_at=r.created_at,
            workload_id=r.workload_id,
            objective=r.objective,
            threshold=r.threshold,
            slow_ratio=r.slow_ratio,
            llc_ways=r.llc_ways,
            utilization_source=r.utilization_source,
        )
        for r in rows
    ]
