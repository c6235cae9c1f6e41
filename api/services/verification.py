"""Verification runs: measured runs of a workload in a configuration, kept against the profile
its recommendations use.

A run speaks for a pod tmc placed. An agent's run must name (by its run_id, the pod's uid) a
pod of the placement log, placed for this workload by a recommendation, in the configuration the
run reports, in the workload's owner namespace (`api.services.owners`), on the node the agent's
token names. A token that names no node reports no run: it cannot show where the pod ran. An
operator may record any run (a measurement made outside the cluster) and delete one.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy.orm import Session

from api import repositories as repo
from api.auth import Caller, Role
from api.errors import ApiError, Conflict, NotFitted, NotFound
from api.services import owners
from model.node_contract import RUN_NOT_PLACED
from model.verification import MAX_OBSERVATIONS
from store.orm import VerificationRunRow, Workload

# Runs kept per profile: recommendations use the newest MAX_OBSERVATIONS; the rest is history,
# bounded so that a looping caller cannot grow the table without end (the oldest go first).
MAX_STORED_RUNS = 256


def _refused(detail: str, title: str = "Forbidden") -> ApiError:
    return ApiError(403, title, detail)


def check_provenance(
    session: Session, caller: Caller, workload: Workload, run_id: str, slow_ratio: float, ways: int
) -> None:
    """Raise unless `caller` may report this run (see the module's docstring)."""
    if caller.role is Role.operator:
        return
    owners.check_reporter(caller)
    placed = repo.placed_pod(session, run_id)
    if placed is None:
        raise _refused(
            f"run {run_id!r} names no pod tmc placed: an agent reports the runs of the pods tmc"
            " placed (the run_id is the pod's uid); an operator may record other runs",
            RUN_NOT_PLACED,
        )
    if placed.node != caller.node:
        raise _refused(
            f"this token speaks for node {caller.node}; pod {run_id} ran on {placed.node}"
        )
    if placed.workload_id != workload.id:
        raise ApiError(
            422,
            "Invalid request",
            f"pod {run_id} was not placed for this workload by a recommendation",
        )
    owners.check_pod_owner(session, workload, placed.namespace)
    if placed.llc_ways != ways or not math.isclose(placed.slow_ratio, slow_ratio, abs_tol=1e-6):
        raise ApiError(
            422,
            "Invalid request",
            f"pod {run_id} was placed at slow ratio {placed.slow_ratio:g} with {placed.llc_ways}"
            f" LLC ways, not at {slow_ratio:g} with {ways}",
        )


def add_verification_run(
    session: Session,
    caller: Caller,
    workload_key: str,
    run_id: str,
    slow_ratio: float,
    llc_ways: int,
    seconds: float,
    applied: dict[str, Any] | None = None,
) -> tuple[VerificationRunRow, str, bool]:
    """Store a measured run against the profile the workload's recommendations use now.
    Returns the row, the workload's name, and whether it is new; the same run_id with other
    values is a conflict."""
    workload = repo.find_workload(session, workload_key)
    if workload is None:
        raise NotFound("workload", workload_key)
    resolved = repo.resolve_for_recommendation(session, workload_key=workload.id)
    if resolved is None:
        raise NotFitted(f"workload {workload.name!r} has no usable profile")
    check_provenance(session, caller, workload, run_id, slow_ratio, llc_ways)
    wanted = VerificationRunRow(
        profile_id=resolved.profile_id,
        run_id=run_id,
        slow_ratio=slow_ratio,
        llc_ways=llc_ways,
        seconds=seconds,
        applied=applied,
    )
    row, created = repo.add_verification_run(session, wanted, MAX_STORED_RUNS)
    if not created and (row.slow_ratio, row.llc_ways, row.seconds, row.applied) != (
        slow_ratio,
        llc_ways,
        seconds,
        applied,
    ):
        raise Conflict(f"run {run_id!r} is stored with other values")
    return row, workload.name, created


def delete_verification_run(session: Session, workload_key: str, run_id: str) -> None:
    """An operator's removal of a run (one that should not count); NotFound when there is none."""
    workload = repo.find_workload(session, workload_key)
    if workload is None:
        raise NotFound("workload", workload_key)
    resolved = repo.resolve_for_recommendation(session, workload_key=workload.id)
    if resolved is None or not repo.delete_verification_run(session, resolved.profile_id, run_id):
        raise NotFound("verification run", run_id)


def runs_in_use(session: Session, workload_key: str) -> tuple[Workload, list[VerificationRunRow]]:
    """The workload and the runs its recommendations are corrected with now (those of the
    profile in use, newest last; none before it has one)."""
    workload = repo.find_workload(session, workload_key)
    if workload is None:
        raise NotFound("workload", workload_key)
    resolved = repo.resolve_for_recommendation(session, workload_key=workload.id)
    if resolved is None:
        return workload, []
    return workload, repo.verification_runs(session, resolved.profile_id, MAX_OBSERVATIONS)
