"""The service's answer to the scheduler: one typed call, no response dictionaries.

The recommendation publisher asks "what should a pod of this workload get, for this objective,
against this utilization?" and gets a `WorkloadDecision` (the configuration and the per-structure
plan) or a `NoDecision` that says why not, which it publishes as the documented fallback. Every decision is
written to the same decision log as `POST /recommend` (`/v1/recommendations/{id}`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.services.models import ModelCache
from api.services.recommendations import DecisionInput, decide
from model import Configuration, NoFeasibleConfiguration, Objective, TmcError, Utilization
from model.node_contract import StructurePlan
from store.db import unit_of_work
from store.orm import FittedModelRow, PriceProfileRow, Profile, VerificationRunRow, Workload


@dataclass(frozen=True)
class DecisionRequest:
    workload: str
    objective: Objective
    threshold: float
    utilization: Utilization
    # The pods' memory request, in bytes: the decision is priced, fitted and planned at it.
    # None: at the profile's traced footprint.
    memory_bytes: int | None = None
    # The pods' CPU request rounded up to whole vCPUs, likewise; None: the profile's vCPUs.
    vcpus: int | None = None


@dataclass(frozen=True)
class WorkloadDecision:
    recommendation_id: str
    configuration: Configuration
    plan: tuple[StructurePlan, ...]  # per tagged structure, fast and slow bytes
    # The decision log counted it on the pair's identical newest decision instead of a new row.
    repeated: bool = False
    # The footprint the profile traced (None: not recorded with the decision).
    profile_bytes: int | None = None
    # Algorithm 1's other candidates within T, in its order after `configuration` (lowest
    # packing penalty first), priced at the same size.
    alternatives: tuple[Configuration, ...] = ()


class NoDecision(Exception):
    """No recommendation can be made; `reason` is what the pod's fallback annotation says."""

    def __init__(self, reason: str, *, transient: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.transient = transient  # the database was unreachable: worth asking again soon


class DecisionService:
    """Holds the fitted-model cache across calls; thread-safe (one transaction per call)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self._models = ModelCache()

    def decide(self, req: DecisionRequest) -> WorkloadDecision:
        query = DecisionInput(
            workload=req.workload,
            bundle=None,
            objective=req.objective,
            threshold=req.threshold,
            utilization=req.utilization,
            utilization_source="request",  # the publisher's, read from the ledger's mirror
            memory_bytes=req.memory_bytes,
            sized_from=None if req.memory_bytes is None else "request",
            vcpus=req.vcpus,
        )
        try:
            with unit_of_work(self._sessions) as session:
                record = decide(session, query, self._models)
        except TmcError as exc:  # no such workload, no usable profile, nothing feasible
            raise NoDecision(f"no recommendation for workload {req.workload!r}: {exc}") from exc
        except SQLAlchemyError as exc:
            raise NoDecision(
                "the recommendation service's database is unavailable", transient=True
            ) from exc
        r = record.recommendation
        if not r.objective_met:
            # Verification runs put the objective out of reach: the pair's pods get the
            # fallback (everything in DRAM) with the runs named, not the closest miss.
            unmet = r.unmet.reason if r.unmet is not None else "objective out of reach"
            raise NoDecision(
                f"no recommendation for workload {req.workload!r}: {unmet}"
            ) from NoFeasibleConfiguration(unmet)
        plan = tuple(
            StructurePlan(tag=p.tag, fast_bytes=p.fast_bytes, slow_bytes=p.slow_bytes)
            for p in r.placement
        )
        chosen = r.chosen.configuration
        return WorkloadDecision(
            recommendation_id=record.id,
            configuration=chosen,
            plan=plan,
            repeated=record.repeated,
            profile_bytes=r.footprint_bytes,
            alternatives=tuple(
                c.configuration for c in r.within_threshold if c.configuration != chosen
            ),
        )


@dataclass(frozen=True)
class NewFit:
    """A fitted model, as the publisher looks for new ones: its id, when it was made, and the
    workload whose profile it fits."""

    fit_id: str
    created_at: datetime
    workload: str


def runs_since(sessions: sessionmaker[Session], after: datetime | None) -> list[NewFit]:
    """The verification runs stored after `after` (all of them when None), as (run row id, its
    time, its workload): a run corrects its workload's decisions, so its pairs are decided again."""
    query = select(VerificationRunRow.id, VerificationRunRow.created_at, Workload.name).join(
        Profile, VerificationRunRow.profile_id == Profile.id
    )
    query = query.join(Workload, Profile.workload_id == Workload.id)
    if after is not None:
        query = query.where(VerificationRunRow.created_at > after)
    with sessions() as session:
        return [NewFit(run_id, created, name) for run_id, created, name in session.execute(query)]


def default_prices(sessions: sessionmaker[Session]) -> str | None:
    """The id of the default price profile (decisions are priced with it): when it changes,
    every pair is decided again."""
    with sessions() as session:
        found = session.scalar(
            select(PriceProfileRow.id).where(PriceProfileRow.is_default.is_(True)).limit(1)
        )
    return None if found is None else str(found)


def fits_since(sessions: sessionmaker[Session], after: datetime | None) -> list[NewFit]:
    """The fitted models made after `after` (all of them when None): one query on the fits'
    indexed creation time, so that the scheduler's publisher can publish a new fit at once."""
    query = select(FittedModelRow.id, FittedModelRow.created_at, Workload.name).join(
        Profile, FittedModelRow.profile_id == Profile.id
    )
    query = query.join(Workload, Profile.workload_id == Workload.id)
    if after is not None:
        query = query.where(FittedModelRow.created_at > after)
    with sessions() as session:
        return [NewFit(fit_id, created, name) for fit_id, created, name in session.execute(query)]
