"""The service's tables (SQLAlchemy 2, typed). The schema changes only through migrations/."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
    true,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class CatMask(TypeDecorator[int]):
    """A CAT capacity bitmask (up to 64 bits) in a signed 64-bit BIGINT: bit 63 is stored as the
    sign (two's complement), so a 64-way host's top way round-trips instead of overflowing, and
    every reader gets the unsigned mask back."""

    impl = BigInteger
    cache_ok = True

    def process_bind_param(self, value: int | None, dialect: Dialect) -> int | None:
        return None if value is None else stored_mask(value)

    def process_result_value(self, value: int | None, dialect: Dialect) -> int | None:
        return None if value is None else read_mask(value)


def stored_mask(mask: int) -> int:
    """A CAT mask as a BIGINT column holds it (CatMask), for statements that bypass the type."""
    mask &= (1 << 64) - 1
    return mask - (1 << 64) if mask >> 63 else mask


def read_mask(value: int) -> int:
    """The unsigned CAT mask a BIGINT column's value stands for."""
    return int(value) & ((1 << 64) - 1)


class UtcDateTime(TypeDecorator[datetime]):
    """A moment in time, always read back with its zone. PostgreSQL keeps the zone; SQLite (the
    embedded mode) stores none, and its naive values were written in UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    def coerce_compared_value(self, op: Any, value: Any) -> Any:
        # `created_at - timedelta(...)` is a timestamp minus an interval, as for DateTime.
        return self.impl_instance.coerce_compared_value(op, value)


def new_id() -> str:
    return str(uuid.uuid4())


def as_id(key: str) -> str | None:
    """The id `key` spells (in its canonical form), or None when it is not an id but a name.

    Names that would parse as ids are refused at upload, so a key never means both.
    """
    if len(key) > 64:
        return None
    try:
        return str(uuid.UUID(key))
    except ValueError:
        return None


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}  # noqa: RUF012


class Timestamped:
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow, index=True)


class Workload(Timestamped, Base):
    __tablename__ = "workloads"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # The Kubernetes namespace whose pods the workload describes: only agents of nodes that ran
    # that namespace's pods may send its bundles and runs (`api.services.owners`). None: no
    # operator named one and no pod was placed for it yet.
    owner: Mapped[str | None] = mapped_column(String(253), default=None)


class Profile(Timestamped, Base):
    """One uploaded profile bundle, stored as received (canonical JSON), keyed by content hash."""

    __tablename__ = "profiles"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    workload_id: Mapped[str] = mapped_column(ForeignKey("workloads.id"), index=True)
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    input_label: Mapped[str] = mapped_column(String(128))
    version: Mapped[str] = mapped_column(String(128))
    host_kind: Mapped[str] = mapped_column(String(128))
    host_kind_known: Mapped[bool] = mapped_column(Boolean)
    # Deferred: the hot path never needs the measurements once the model is fitted.
    bundle: Mapped[dict[str, Any]] = mapped_column(deferred=True)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending|fitted|failed
    # Live: sent by a role that may upload, so the workload's recommendations may use it. An
    # inline bundle from any other role is kept for the decision's audit, never live.
    live: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    error: Mapped[str | None] = mapped_column(Text, default=None)


class FittedModelRow(Timestamped, Base):
    __tablename__ = "fitted_models"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    profile_id: Mapped[str] = mapped_column(ForeignKey("profiles.id"), unique=True)
    model_version: Mapped[str] = mapped_column(String(32))
    fit_path: Mapped[str] = mapped_column(String(32))
    flags: Mapped[list[Any]]
    model: Mapped[dict[str, Any]]


class PriceProfileRow(Timestamped, Base):
    __tablename__ = "price_profiles"
    __table_args__ = (UniqueConstraint("name", "version"),)
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    body: Mapped[dict[str, Any]]
    is_default: Mapped[bool] = mapped_column(Boolean, default=False)
    used: Mapped[bool] = mapped_column(Boolean, default=False)


class HostKind(Timestamped, Base):
    """A machine shape the cluster runs; profiles taken on another kind are flagged."""

    __tablename__ = "host_kinds"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    cpus: Mapped[int] = mapped_column(Integer)
    dram_bytes: Mapped[int] = mapped_column(BigInteger)
    slow_bytes: Mapped[int] = mapped_column(BigInteger)
    llc_ways: Mapped[int] = mapped_column(Integer, doc="one socket's LLC ways (one CAT domain)")
    slow_pooled: Mapped[bool] = mapped_column(Boolean, default=False)
    # What the capacity planner needs to carry a profile's ways over to this kind's cache and to
    # say when its slow memory is another technology than a profile's; a kind registered from a
    # node's published capacity knows none of them (one socket, size and tier not stated).
    sockets: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))
    llc_size_bytes: Mapped[int | None] = mapped_column(
        BigInteger, default=None, doc="one socket's LLC size; None: not stated"
    )
    slow_tier: Mapped[str | None] = mapped_column(
        String(16), default=None, doc="none, optane, cxl_local or cxl_pool; None: not stated"
    )


class RackPool(Timestamped, Base):
    __tablename__ = "rack_pools"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    slow_bytes: Mapped[int] = mapped_column(BigInteger)


class Node(Timestamped, Base):
    __tablename__ = "nodes"
    # A rack pool's members, for the pools' pages.
    __table_args__ = (Index("ix_nodes_pool_name", "pool_name"),)
    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    host_kind: Mapped[str] = mapped_column(ForeignKey("host_kinds.name"), index=True)
    cpus: Mapped[int] = mapped_column(Integer)
    dram_bytes: Mapped[int] = mapped_column(BigInteger)
    slow_bytes: Mapped[int] = mapped_column(BigInteger, doc="node-local slow memory")
    llc_ways: Mapped[int] = mapped_column(Integer)
    pool_name: Mapped[str | None] = mapped_column(ForeignKey("rack_pools.name"), default=None)
    ready: Mapped[bool] = mapped_column(Boolean, default=True)


class Reservation(Timestamped, Base):
    """Tiered resources held for one pod on one node (the extender's ledger)."""

    __tablename__ = "reservations"
    # Pages of the reservations and placements lists, by node then pod.
    # Pool draws per node with their size: a pools page sums its members' from the index alone.
    __table_args__ = (
        Index("ix_reservations_node_pod", "node_name", "pod_uid"),
        Index(
            "ix_reservations_pool_draws",
            "node_name",
            postgresql_include=["slow_bytes"],
            postgresql_where=text("slow_from_pool IS TRUE"),
            sqlite_where=text("slow_from_pool IS 1"),
        ),
    )
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    pod_uid: Mapped[str] = mapped_column(String(64), unique=True)
    namespace: Mapped[str] = mapped_column(String(253))
    pod_name: Mapped[str] = mapped_column(String(253))
    # No index of its own: ix_reservations_node_pod leads with it.
    node_name: Mapped[str] = mapped_column(ForeignKey("nodes.name"))
    vcpus: Mapped[int] = mapped_column(Integer)
    dram_bytes: Mapped[int] = mapped_column(BigInteger)
    slow_bytes: Mapped[int] = mapped_column(BigInteger)
    slow_from_pool: Mapped[bool] = mapped_column(Boolean, default=False)
    llc_mask: Mapped[int] = mapped_column(CatMask, doc="CAT capacity bitmask, contiguous")
    recommendation_id: Mapped[str | None] = mapped_column(
        ForeignKey("recommendations.id"), default=None, index=True
    )
    # The bind attempt that made the row, while it is the only one relying on it (None: reused
    # by a retry, or made by reconciliation).
    attempt: Mapped[str | None] = mapped_column(String(36), default=None)


class RecommendationRow(Timestamped, Base):
    """A decision with every input needed to replay and audit it."""

    __tablename__ = "recommendations"
    # The newest decision of a (workload, objective) pair, found without a sort.
    __table_args__ = (Index("ix_recommendations_pair", "workload_id", "objective", "created_at"),)
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    workload_id: Mapped[str] = mapped_column(ForeignKey("workloads.id"), index=True)
    profile_id: Mapped[str] = mapped_column(ForeignKey("profiles.id"))
    fitted_model_id: Mapped[str] = mapped_column(ForeignKey("fitted_models.id"))
    bundle_hash: Mapped[str] = mapped_column(String(64))
    model_version: Mapped[str] = mapped_column(String(32))
    price_profile_id: Mapped[str] = mapped_column(ForeignKey("price_profiles.id"))
    objective: Mapped[str] = mapped_column(String(64), index=True)
    threshold: Mapped[float] = mapped_column(Float)
    grid: Mapped[str] = mapped_column(String(64))
    machine: Mapped[dict[str, Any]]
    utilization: Mapped[dict[str, Any]]
    utilization_source: Mapped[str] = mapped_column(String(16))
    slow_ratio: Mapped[float] = mapped_column(Float)
    llc_ways: Mapped[int] = mapped_column(Integer)
    # Deferred: a list of decisions needs their summaries, not their 10-15 KB explanations (a
    # page of 100 once spent most of its time decoding them); one decision reads it when asked.
    result: Mapped[dict[str, Any]] = mapped_column(deferred=True)
    # A decision that repeats its pair's last one (same inputs, same choice) is not stored again:
    # it is counted here, with the time it was last made (`api.services.recommendations`).
    decision_key: Mapped[str] = mapped_column(String(64), default="")
    repeats: Mapped[int] = mapped_column(Integer, default=0)
    last_decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), default=None)


class VerificationRunRow(Timestamped, Base):
    """One measured run of a workload in a configuration tmc chose (`model.verification`),
    against the profile whose model it checks. Idempotent per (profile, run_id)."""

    __tablename__ = "verification_runs"
    __table_args__ = (UniqueConstraint("profile_id", "run_id"),)
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    profile_id: Mapped[str] = mapped_column(ForeignKey("profiles.id"), index=True)
    run_id: Mapped[str] = mapped_column(String(128))
    slow_ratio: Mapped[float] = mapped_column(Float)
    llc_ways: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column(Float)
    # What the node enforced at the run's creation (`model.verification.AppliedConfiguration`).
    applied: Mapped[dict[str, Any] | None] = mapped_column(default=None)


class ApiToken(Timestamped, Base):
    __tablename__ = "api_tokens"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), default=None)
    # An agent token may speak for one node only (its verification runs are that node's pods').
    node: Mapped[str | None] = mapped_column(String(253), default=None)


class PlacementRecord(Timestamped, Base):
    """A pod tmc placed: where, from which decision, in which configuration. Kept after the
    reservation is released, as the evidence a verification run is checked against."""

    __tablename__ = "placement_log"
    # Whether a node ran a namespace's pods: the evidence an agent's upload is checked against.
    __table_args__ = (Index("ix_placement_log_node_namespace", "node_name", "namespace"),)
    pod_uid: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(253))
    pod_name: Mapped[str] = mapped_column(String(253))
    node_name: Mapped[str] = mapped_column(String(253))
    recommendation_id: Mapped[str | None] = mapped_column(String(36), default=None, index=True)
    slow_ratio: Mapped[float] = mapped_column(Float)
    llc_ways: Mapped[int] = mapped_column(Integer)


class UtilizationSample(Base):
    """The cluster's utilization at one moment: the history the dashboard draws."""

    __tablename__ = "utilization_samples"
    at: Mapped[datetime] = mapped_column(UtcDateTime(), primary_key=True)
    cpu: Mapped[float] = mapped_column(Float)
    dram: Mapped[float] = mapped_column(Float)
    slow: Mapped[float] = mapped_column(Float)
    llc: Mapped[float] = mapped_column(Float)
