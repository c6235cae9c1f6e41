"""Every SQL query of the service. Services call these; nothing else touches the session's SQL."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar, cast

from sqlalchemy import (
    Select,
    String,
    Table,
    bindparam,
    delete,
    exists,
    func,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased

from model import MachineShape
from model.memo import Recent
from store.orm import (
    ApiToken,
    Base,
    FittedModelRow,
    HostKind,
    PlacementRecord,
    PriceProfileRow,
    Profile,
    RackPool,
    RecommendationRow,
    Reservation,
    UtilizationSample,
    VerificationRunRow,
    Workload,
    as_id,
)

R = TypeVar("R", bound=Base)


def insert_once(session: Session, row: R, existing: Select[R]) -> tuple[R, bool]:
    """Insert `row`, or return the row a concurrent writer inserted first (unique key clash).

    A savepoint keeps the clash from aborting the surrounding transaction.
    """
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
        return row, True
    except IntegrityError:
        found = session.scalars(existing).one_or_none()
        if found is None:
            raise
        return found, False


# -- workloads and profiles -----------------------------------------------------------------


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


# -- price profiles -------------------------------------------------------------------------


def default_price_profile(session: Session) -> PriceProfileRow | None:
    return session.scalars(
        select(PriceProfileRow).where(PriceProfileRow.is_default.is_(True))
    ).one_or_none()


def get_price_profile(session: Session, name: str, version: int) -> PriceProfileRow | None:
    return session.scalars(
        select(PriceProfileRow).where(
            PriceProfileRow.name == name, PriceProfileRow.version == version
        )
    ).one_or_none()


def latest_price_profile_version(session: Session, name: str) -> int:
    found = session.scalar(
        select(func.max(PriceProfileRow.version)).where(PriceProfileRow.name == name)
    )
    return int(found or 0)


def list_price_profiles(session: Session) -> Sequence[PriceProfileRow]:
    return session.scalars(
        select(PriceProfileRow).order_by(PriceProfileRow.name, PriceProfileRow.version)
    ).all()


def insert_price_profile(session: Session, row: PriceProfileRow) -> tuple[PriceProfileRow, bool]:
    return insert_once(
        session,
        row,
        select(PriceProfileRow).where(
            PriceProfileRow.name == row.name, PriceProfileRow.version == row.version
        ),
    )


def make_default_price_profile(session: Session, row: PriceProfileRow) -> None:
    """Exactly one default, whatever runs concurrently: every price profile row is locked first,
    always in the same order (so two callers queue instead of deadlocking), then one statement
    sets the flag on `row` and clears it everywhere else. The later caller wins, whole."""
    session.execute(select(PriceProfileRow.id).order_by(PriceProfileRow.id).with_for_update()).all()
    session.execute(
        update(PriceProfileRow)
        .values(is_default=PriceProfileRow.id == row.id)
        .execution_options(synchronize_session=False)
    )
    session.refresh(row)


def mark_price_profile_used(session: Session, profile_id: str) -> None:
    session.execute(
        update(PriceProfileRow)
        .where(PriceProfileRow.id == profile_id, PriceProfileRow.used.is_(False))
        .values(used=True)
    )


# -- cluster --------------------------------------------------------------------------------


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


# -- recommendations ------------------------------------------------------------------------


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


# -- cluster --------------------------------------------------------------------------------


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


# -- tokens ---------------------------------------------------------------------------------


def find_token(session: Session, token_hash: str) -> ApiToken | None:
    return session.scalars(
        select(ApiToken).where(ApiToken.token_hash == token_hash, ApiToken.revoked_at.is_(None))
    ).one_or_none()


# -- the /recommend hot path: one round trip to resolve everything ----------------------------


@dataclass(frozen=True)
class Resolved:
    workload_id: str
    profile_id: str
    content_hash: str
    profile_status: str
    profile_error: str | None
    fitted_id: str | None
    model_version: str | None
    kind: MachineShape | None  # the shape of the cluster's host kind for the profile, if known
    default_price_id: str | None
    # The profile's verification runs: how many, and the newest's id. Together they say whether
    # a cached copy of the runs is still current, without reading the runs.
    run_count: int
    newest_run_id: str | None


def resolve_for_recommendation(
    session: Session, *, workload_key: str | None = None, profile_id: str | None = None
) -> Resolved | None:
    """Workload (by name or id) or profile -> its newest usable profile, that profile's fit, the
    cluster's host kind for it, and the default price profile, in a single query. Run on the
    session's connection: its columns are plain values, and the ORM's execution and loading
    cost more CPU than the query does."""
    if profile_id is not None:
        statement, params = _RESOLVE_PROFILE, {"profile_id": profile_id}
    else:
        assert workload_key is not None
        workload_id = as_id(workload_key)
        if workload_id is not None:
            statement, params = _RESOLVE_WORKLOAD_ID, {"key": workload_id}
        else:
            statement, params = _RESOLVE_WORKLOAD_NAME, {"key": workload_key}
    row = session.connection().execute(statement, params).first()
    if row is None:
        return None
    return Resolved(
        workload_id=row[0],
        profile_id=row[1],
        content_hash=row[2],
        profile_status=row[3],
        profile_error=row[4],
        fitted_id=row[5],
        model_version=row[6],
        kind=None if row[7] is None else _kind_shape(*row[7:12]),
        default_price_id=row[12],
        run_count=row[13],
        newest_run_id=row[14],
    )


def _kind_shape(
    cpus: int, dram_bytes: int, slow_bytes: int, llc_ways: int, slow_pooled: bool
) -> MachineShape:
    """A host kind's shape, made once per distinct shape (a cluster has a handful)."""
    key = (cpus, dram_bytes, slow_bytes, llc_ways, slow_pooled)
    return _KIND_SHAPES.get_or_compute(
        key,
        lambda: MachineShape(
            cpus=cpus,
            dram_bytes=dram_bytes,
            slow_bytes=slow_bytes,
            llc_ways=llc_ways,
            slow_pooled=slow_pooled,
        ),
    )


_KIND_SHAPES: Recent[tuple[int, int, int, int, bool], MachineShape] = Recent(64)


def _resolve_statement(by: Literal["profile", "workload_id", "workload_name"]) -> Select[Any]:
    # Built once at import: composing a statement costs more CPU than running it.
    default_price = (
        select(PriceProfileRow.id).where(PriceProfileRow.is_default.is_(True)).scalar_subquery()
    )
    run_count = (
        select(func.count())
        .where(VerificationRunRow.profile_id == Profile.id)
        .scalar_subquery()
        .correlate(Profile)
    )
    newest_run = (
        select(VerificationRunRow.id)
        .where(VerificationRunRow.profile_id == Profile.id)
        .order_by(VerificationRunRow.created_at.desc(), VerificationRunRow.id)
        .limit(1)
        .scalar_subquery()
        .correlate(Profile)
    )
    columns = (
        Profile.workload_id,
        Profile.id,
        Profile.content_hash,
        Profile.status,
        Profile.error,
        FittedModelRow.id,
        FittedModelRow.model_version,
        # The kind's shape (None when the cluster has no such kind: cpus is never null).
        HostKind.cpus,
        HostKind.dram_bytes,
        HostKind.slow_bytes,
        HostKind.llc_ways,
        HostKind.slow_pooled,
        default_price,
        run_count,
        newest_run,
    )
    if by == "profile":
        query = select(*columns).select_from(Profile).where(Profile.id == bindparam("profile_id"))
    else:
        newest = (
            select(Profile.id)
            .where(
                Profile.workload_id == Workload.id,
                Profile.status != "failed",
                Profile.live.is_(True),
            )
            .order_by(Profile.created_at.desc(), Profile.id)
            .limit(1)
            .scalar_subquery()
            .correlate(Workload)
        )
        key = bindparam("key", type_=String)
        query = (
            select(*columns)
            .select_from(Workload)
            .join(Profile, Profile.id == newest)
            .where(Workload.id == key if by == "workload_id" else Workload.name == key)
        )
    return query.outerjoin(FittedModelRow, FittedModelRow.profile_id == Profile.id).outerjoin(
        HostKind, HostKind.name == Profile.host_kind
    )


_RESOLVE_PROFILE = _resolve_statement("profile")
_RESOLVE_WORKLOAD_ID = _resolve_statement("workload_id")
_RESOLVE_WORKLOAD_NAME = _resolve_statement("workload_name")
_INSERT_RECOMMENDATION = cast(Table, RecommendationRow.__table__).insert()


def insert_recommendation(session: Session, values: dict[str, object]) -> None:
    session.connection().execute(_INSERT_RECOMMENDATION, values)


def get_price_profile_by_id(session: Session, price_id: str) -> PriceProfileRow | None:
    return session.get(PriceProfileRow, price_id)


# -- utilization history --------------------------------------------------------------------


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


# -- verification runs --------------------------------------------------------------------------


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
