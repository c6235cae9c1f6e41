"""Verification runs and the placed pods they speak for."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import (
    delete,
    func,
    select,
)
from sqlalchemy.orm import Session

from api.repositories.common import insert_once
from store.orm import (
    PlacementRecord,
    RecommendationRow,
    VerificationRunRow,
)


def verification_runs(session: Session, profile_id: str, limit: int) -> list[VerificationRunRow]:
    """A profile's newest `limit` verification runs, oldest first."""
    rows = session.scalars(
        select(VerificationRunRow)
        .where(VerificationRunRow.profile_id == profile_id)
        .order_by(VerificationRunRow.created_at.desc(), VerificationRunRow.id)
        .limit(limit)
    ).all()
    return list(reversed(rows))


@dataclass(frozen=True)
class PlacedPod:
    """What the placement log says of a pod: where it ran, for which workload, in what."""

    node: str
    namespace: str
    workload_id: str | None  # None: placed by the fallback, not by a recommendation
    slow_ratio: float
    llc_ways: int


def placed_pod(session: Session, pod_uid: str) -> PlacedPod | None:
    row = session.execute(
        select(
            PlacementRecord.node_name,
            PlacementRecord.namespace,
            RecommendationRow.workload_id,
            PlacementRecord.slow_ratio,
            PlacementRecord.llc_ways,
        )
        .outerjoin(RecommendationRow, RecommendationRow.id == PlacementRecord.recommendation_id)
        .where(PlacementRecord.pod_uid == pod_uid)
    ).first()
    return None if row is None else PlacedPod(*row)


def delete_verification_run(session: Session, profile_id: str, run_id: str) -> bool:
    result = session.execute(
        delete(VerificationRunRow).where(
            VerificationRunRow.profile_id == profile_id, VerificationRunRow.run_id == run_id
        )
    )
    return bool(getattr(result, "rowcount", 0))


def add_verification_run(
    session: Session, row: VerificationRunRow, limit: int
) -> tuple[VerificationRunRow, bool]:
    """Insert a run, or return the one stored under the same (profile, run_id). A profile holds
    at most `limit` runs: at the limit, the oldest goes (the newest are the ones decisions use,
    and a full table must not refuse the run that corrects it)."""
    existing = select(VerificationRunRow).where(
        VerificationRunRow.profile_id == row.profile_id,
        VerificationRunRow.run_id == row.run_id,
    )
    found = session.scalars(existing).one_or_none()
    if found is not None:
        return found, False
    stored = session.scalar(
        select(func.count()).where(VerificationRunRow.profile_id == row.profile_id)
    )
    excess = (stored or 0) - limit + 1
    if excess > 0:
        oldest = (
            select(VerificationRunRow.id)
            .where(VerificationRunRow.profile_id == row.profile_id)
            .order_by(VerificationRunRow.created_at, VerificationRunRow.id)
            .limit(excess)
        )
        session.execute(delete(VerificationRunRow).where(VerificationRunRow.id.in_(oldest)))
    return insert_once(session, row, existing)
