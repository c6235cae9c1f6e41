"""The service's answer to the scheduler: one typed call, no response dictionaries.

The extender asks "what should a pod of this workload get, for this objective, against this
utilization?" and gets a `WorkloadDecision` (the configuration and the per-structure plan) or a
`NoDecision` that says why not, which it turns into the documented fallback. Every decision is
written to the same decision log as `POST /recommend` (`/v1/recommendations/{id}`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api import services
from api.db import unit_of_work
from api.errors import ApiError
from api.utilization import UtilizationReader
from model import Configuration, Objective, TmcError, Utilization
from model.node_contract import StructurePlan


@dataclass(frozen=True)
class DecisionRequest:
    workload: str
    objective: Objective
    threshold: float
    utilization: Utilization


@dataclass(frozen=True)
class WorkloadDecision:
    recommendation_id: str
    configuration: Configuration
    plan: tuple[StructurePlan, ...]  # per tagged structure, fast and slow bytes


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
        self._models = services.ModelCache()
        self._unused_reader = UtilizationReader(None, 60.0)  # utilization is always given

    def decide(self, req: DecisionRequest) -> WorkloadDecision:
        query = services.RecommendInput(
            workload=req.workload,
            bundle=None,
            objective=req.objective,
            threshold=req.threshold,
            utilization=req.utilization,
            grid="paper",
            price_profile=None,
        )
        try:
            with unit_of_work(self._sessions) as session:
                rec = services.recommend_for(
                    session, query, self._models, self._unused_reader, _no_enqueue
                )
        except (TmcError, ApiError) as exc:  # no such workload, no usable profile, infeasible
            raise NoDecision(f"no recommendation for workload {req.workload!r}: {exc}") from exc
        except SQLAlchemyError as exc:
            raise NoDecision(
                "the recommendation service's database is unavailable", transient=True
            ) from exc
        r = rec.recommendation
        plan = tuple(
            StructurePlan(tag=p.tag, fast_bytes=p.fast_bytes, slow_bytes=p.slow_bytes)
            for p in r.placement
        )
        return WorkloadDecision(
            recommendation_id=str(rec.body["id"]), configuration=r.chosen.configuration, plan=plan
        )


def _no_enqueue(_profile_id: str) -> None:
    """Decisions never upload: there is no fit task to enqueue."""
