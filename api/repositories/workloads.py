"""Workloads, their owners and their profiles and fits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import (
    exists,
    func,
    select,
    update,
)
from sqlalchemy.orm import Session

from api.repositories.common import insert_once
from store.orm import (
    FittedModelRow,
    PlacementRecord,
    Profile,
    RecommendationRow,
    Workload,
    as_id,
)


def get_or_create_workload(session: Session, name: str) -> Workload:
    found = session.scalars(select(Workload).where(Workload.name == name)).one_or_none()
    if found is not None:
        return found
    row, _ = insert_once(
        session, Workload(name=name), select(Workload).where(Workload.name == name)
    )
    return row


def set_workload_owner(session: Session, workload: Workload, owner: str) -> None:
    workload.owner = owner
    session.flush()


def first_placed_namespace(session: Session, workload_id: str) -> str | None:
    """The namespace of the earliest pod the placement log holds for the workload (placed by one
    of its recommendations), or None when no pod was placed for it."""
    return session.scalar(
        select(PlacementRecord.namespace)
        .join(RecommendationRow, RecommendationRow.id == PlacementRecord.recommendation_id)
        .where(RecommendationRow.workload_id == workload_id)
        .order_by(PlacementRecord.created_at, PlacementRecord.pod_uid)
        .limit(1)
    )


def first_placed_namespaces(session: Session, workload_ids: Sequence[str]) -> dict[str, str]:
    """`first_placed_namespace` for a page of workloads at once (those with a placed pod)."""
    if not workload_ids:
        return {}
    rank = (
        func.row_number()
        .over(
            partition_by=RecommendationRow.workload_id,
            order_by=(PlacementRecord.created_at, PlacementRecord.pod_uid),
        )
        .label("rank")
    )
    ranked = (
        select(RecommendationRow.workload_id, PlacementRecord.namespace, rank)
        .join(RecommendationRow, RecommendationRow.id == PlacementRecord.recommendation_id)
        .where(RecommendationRow.workload_id.in_(workload_ids))
        .subquery()
    )
    rows = session.execute(
        select(ranked.c.workload_id, ranked.c.namespace).where(ranked.c.rank == 1)
    )
    return {workload_id: namespace for workload_id, namespace in rows}


def node_ran_namespace(session: Session, node: str, namespace: str) -> bool:
    """Whether the placement log holds a pod of `namespace` placed on `node`."""
    return bool(
        session.scalar(
            select(
                exists().where(
                    PlacementRecord.node_name == node, PlacementRecord.namespace == namespace
                )
            )
        )
    )


def find_workload(session: Session, key: str) -> Workload | None:
    """A workload by id when `key` is an id, else by name (never both: see `as_id`)."""
    workload_id = as_id(key)
    if workload_id is not None:
        return session.get(Workload, workload_id)
    return session.scalars(select(Workload).where(Workload.name == key)).one_or_none()


def list_workloads(
    session: Session, limit: int, offset: int, after: str | None = None
) -> Sequence[Workload]:
    """By name; `after` is the previous page's last name."""
    query = select(Workload).order_by(Workload.name)
    if after is not None:
        query = query.where(Workload.name > after)
    return session.scalars(query.limit(limit).offset(offset)).all()


def profiles_of_many(session: Session, workload_ids: Sequence[str]) -> dict[str, list[Profile]]:
    """Each workload's profiles, newest first, in one query (a page of workloads at once)."""
    found: dict[str, list[Profile]] = {w: [] for w in workload_ids}
    if not workload_ids:
        return found
    rows = session.scalars(
        select(Profile)
        .where(Profile.workload_id.in_(workload_ids))
        .order_by(Profile.workload_id, Profile.created_at.desc())
    )
    for p in rows:
        found[p.workload_id].append(p)
    return found


def insert_profile(session: Session, profile: Profile) -> tuple[Profile, bool]:
    return insert_once(
        session, profile, select(Profile).where(Profile.content_hash == profile.content_hash)
    )


def get_profile(session: Session, profile_id: str) -> Profile | None:
    return session.get(Profile, profile_id)


def latest_profile(session: Session, workload_id: str) -> Profile | None:
    """The newest profile of a workload that has not failed to fit."""
    return session.scalars(
        select(Profile)
        .where(
            Profile.workload_id == workload_id,
            Profile.status != "failed",
            Profile.live.is_(True),
        )
        .order_by(Profile.created_at.desc(), Profile.id)
        .limit(1)
    ).one_or_none()


def profiles_of(session: Session, workload_id: str) -> Sequence[Profile]:
    return session.scalars(
        select(Profile)
        .where(Profile.workload_id == workload_id)
        .order_by(Profile.created_at.desc())
    ).all()


def fitted_for_profile(session: Session, profile_id: str) -> FittedModelRow | None:
    return session.scalars(
        select(FittedModelRow).where(FittedModelRow.profile_id == profile_id)
    ).one_or_none()


def insert_fitted(session: Session, row: FittedModelRow) -> tuple[FittedModelRow, bool]:
    return insert_once(
        session, row, select(FittedModelRow).where(FittedModelRow.profile_id == row.profile_id)
    )


def get_fitted(session: Session, fitted_id: str) -> FittedModelRow | None:
    return session.get(FittedModelRow, fitted_id)


def make_profile_live(session: Session, profile_id: str) -> None:
    session.execute(update(Profile).where(Profile.id == profile_id).values(live=True))


def pending_profiles(session: Session, created_before: datetime, limit: int) -> Sequence[str]:
    """Profiles still waiting for their fit since before `created_before`, oldest first."""
    return session.scalars(
        select(Profile.id)
        .where(Profile.status == "pending", Profile.created_at < created_before)
        .order_by(Profile.created_at)
        .limit(limit)
    ).all()


def set_profile_status(session: Session, profile_id: str, status: str, error: str | None) -> None:
    session.execute(
        update(Profile).where(Profile.id == profile_id).values(status=status, error=error)
    )
