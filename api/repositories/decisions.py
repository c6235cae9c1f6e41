"""The decision log: recommendations by id and by workload, repeats, pruning."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    bindparam,
    delete,
    exists,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.orm import Session, aliased

from store.orm import (
    PlacementRecord,
    RecommendationRow,
    Reservation,
)


def get_recommendation(session: Session, rec_id: str) -> RecommendationRow | None:
    return session.get(RecommendationRow, rec_id)


def list_recommendations(
    session: Session,
    *,
    workload_id: str | None,
    objective: str | None,
    since: datetime | None,
    limit: int,
    offset: int,
    after: tuple[datetime, str] | None = None,
) -> Sequence[RecommendationRow]:
    """Newest first; `after` is the (created_at, id) of the previous page's last row."""
    query = select(RecommendationRow).order_by(
        RecommendationRow.created_at.desc(), RecommendationRow.id.desc()
    )
    if after is not None:
        query = query.where(tuple_(RecommendationRow.created_at, RecommendationRow.id) < after)
    if workload_id is not None:
        query = query.where(RecommendationRow.workload_id == workload_id)
    if objective is not None:
        query = query.where(RecommendationRow.objective == objective)
    if since is not None:
        query = query.where(RecommendationRow.created_at >= since)
    return session.scalars(query.limit(limit).offset(offset)).all()


@dataclass(frozen=True)
class DecisionHead:
    """What the hot path needs of a pair's newest decision: never its explanation."""

    id: str
    created_at: datetime
    decision_key: str


_LATEST_DECISION = (
    select(RecommendationRow.id, RecommendationRow.created_at, RecommendationRow.decision_key)
    .where(
        RecommendationRow.workload_id == bindparam("workload_id"),
        RecommendationRow.objective == bindparam("objective"),
    )
    .order_by(RecommendationRow.created_at.desc(), RecommendationRow.id.desc())
    .limit(1)
)


def latest_decision(session: Session, workload_id: str, objective: str) -> DecisionHead | None:
    """The newest decision of a (workload, objective) pair: its id, time and key."""
    row = (
        session.connection()
        .execute(_LATEST_DECISION, {"workload_id": workload_id, "objective": objective})
        .first()
    )
    return None if row is None else DecisionHead(row.id, row.created_at, row.decision_key)


_COUNT_REPEATS = (
    update(RecommendationRow)
    .where(RecommendationRow.id == bindparam("rec_id"))
    .values(
        repeats=RecommendationRow.repeats + bindparam("count"),
        last_decided_at=bindparam("at"),
    )
)


def count_repeat(session: Session, rec_id: str, at: datetime, count: int = 1) -> None:
    """`count` more decisions identical to `rec_id`, the last made at `at`."""
    session.connection().execute(_COUNT_REPEATS, {"rec_id": rec_id, "at": at, "count": count})


def prune_decisions(session: Session, before: datetime, batch: int = 5000) -> int:
    """Delete up to `batch` decisions last made before `before` that no placement and no
    reservation names (the decision a pod was placed by lives as long as its placement log row),
    and that are not their pair's newest. Returns how many were deleted."""
    newer = aliased(RecommendationRow)
    old = (
        select(RecommendationRow.id)
        .where(
            RecommendationRow.created_at < before,
            or_(
                RecommendationRow.last_decided_at.is_(None),
                RecommendationRow.last_decided_at < before,
            ),
            ~exists().where(PlacementRecord.recommendation_id == RecommendationRow.id),
            ~exists().where(Reservation.recommendation_id == RecommendationRow.id),
            exists().where(
                newer.workload_id == RecommendationRow.workload_id,
                newer.objective == RecommendationRow.objective,
                newer.created_at > RecommendationRow.created_at,
            ),
        )
        .limit(batch)
    )
    ids = list(session.scalars(old))
    if ids:
        session.execute(delete(RecommendationRow).where(RecommendationRow.id.in_(ids)))
    return len(ids)
