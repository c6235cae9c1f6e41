"""The cluster as the ledger mirrors it: host kinds, reservations, rack pools, pending fits, and the utilization history."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import (
    delete,
    func,
    select,
    tuple_,
)
from sqlalchemy.orm import Session

from store.orm import (
    HostKind,
    Profile,
    RackPool,
    Reservation,
    UtilizationSample,
)


def get_host_kind(session: Session, name: str) -> HostKind | None:
    return session.get(HostKind, name)


def list_host_kinds(session: Session) -> Sequence[HostKind]:
    return session.scalars(select(HostKind).order_by(HostKind.name)).all()


def list_reservations(
    session: Session,
    node_name: str | None = None,
    *,
    after: tuple[str, ...] | None = None,
    limit: int | None = None,
) -> Sequence[Reservation]:
    """By node, then pod uid (one index); `after` is the previous page's last (node, uid)."""
    query = select(Reservation).order_by(Reservation.node_name, Reservation.pod_uid)
    if node_name is not None:
        query = query.where(Reservation.node_name == node_name)
    if after is not None:
        query = query.where(tuple_(Reservation.node_name, Reservation.pod_uid) > after)
    if limit is not None:
        query = query.limit(limit)
    return session.scalars(query).all()


def pool_sizes(session: Session) -> dict[str, int]:
    return {
        name: size for name, size in session.execute(select(RackPool.name, RackPool.slow_bytes))
    }


def pending_fits(session: Session) -> int:
    """Profiles whose fit has not run yet."""
    return int(
        session.scalar(select(func.count()).select_from(Profile).where(Profile.status == "pending"))
        or 0
    )


def record_utilization(session: Session, sample: UtilizationSample) -> None:
    session.merge(sample)  # two snapshots in the same instant are one sample


def utilization_history(
    session: Session, since: datetime, limit: int
) -> Sequence[UtilizationSample]:
    return session.scalars(
        select(UtilizationSample)
        .where(UtilizationSample.at >= since)
        .order_by(UtilizationSample.at.desc())
        .limit(limit)
    ).all()


def prune_utilization(session: Session, before: datetime) -> None:
    session.execute(delete(UtilizationSample).where(UtilizationSample.at < before))
