"""The /recommend hot path: one round trip resolves a workload's profile, fit, prices and host kind; the decision is inserted in one statement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

from pydantic import ValidationError
from sqlalchemy import (
    Select,
    String,
    Table,
    bindparam,
    func,
    select,
)
from sqlalchemy.orm import Session

from model import MachineShape
from model.memo import Recent
from store.orm import (
    FittedModelRow,
    HostKind,
    PriceProfileRow,
    Profile,
    RecommendationRow,
    VerificationRunRow,
    Workload,
    as_id,
)


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
) -> MachineShape | None:
    """A host kind's shape, made once per distinct shape (a cluster has a handful); None for a
    stored row that is no machine (no DRAM), which is then priced as the bundle's own host."""
    key = (cpus, dram_bytes, slow_bytes, llc_ways, slow_pooled)
    found = _KIND_SHAPES.get(key)
    if found is not None:
        return found
    try:
        shape = MachineShape(
            cpus=cpus,
            dram_bytes=dram_bytes,
            slow_bytes=slow_bytes,
            llc_ways=llc_ways,
            slow_pooled=slow_pooled,
        )
    except ValidationError:
        return None
    _KIND_SHAPES.put(key, shape)
    return shape


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
