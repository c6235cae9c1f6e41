"""Read-only queries behind `GET /v1/placements`: what each pod was given, on which node, for
which workload and decision. One statement for the list; the decision's full result (for the
per-structure plan) is read only for the one pod asked about."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import RowMapping, Select, select, tuple_
from sqlalchemy.orm import Session

from store.orm import RecommendationRow, Reservation, Workload


def _statement(*extra: Any) -> Select[Any]:
    return (
        select(
            Reservation,
            Workload.name.label("workload"),
            RecommendationRow.objective,
            RecommendationRow.slow_ratio,
            RecommendationRow.llc_ways,
            *extra,
        )
        .outerjoin(RecommendationRow, Reservation.recommendation_id == RecommendationRow.id)
        .outerjoin(Workload, RecommendationRow.workload_id == Workload.id)
    )


def list_placements(
    session: Session,
    *,
    node: str | None,
    namespace: str | None,
    after: tuple[str, ...] | None = None,
    limit: int | None = None,
) -> Sequence[RowMapping]:
    """By node, then pod uid (the reservations' index); `after` is the previous page's last
    (node, uid)."""
    query = _statement().order_by(Reservation.node_name, Reservation.pod_uid)
    if node is not None:
        query = query.where(Reservation.node_name == node)
    if namespace is not None:
        query = query.where(Reservation.namespace == namespace)
    if after is not None:
        query = query.where(tuple_(Reservation.node_name, Reservation.pod_uid) > after)
    if limit is not None:
        query = query.limit(limit)
    return session.execute(query).mappings().all()


def find_placement(session: Session, namespace: str, pod: str) -> RowMapping | None:
    query = _statement(RecommendationRow.result).where(
        Reservation.namespace == namespace, Reservation.pod_name == pod
    )
    return (
        session.execute(query.order_by(Reservation.created_at.desc()).limit(1)).mappings().first()
    )
