"""Verification runs: measured runs of a workload in a configuration, kept against the profile
its recommendations use."""

from __future__ import annotations

from sqlalchemy.orm import Session

from api import repositories as repo
from api.errors import Conflict, NotFitted, NotFound
from store.orm import VerificationRunRow

# Runs kept per profile: recommendations use the newest MAX_OBSERVATIONS; the rest is history,
# bounded so that a looping caller cannot grow the table without end.
MAX_STORED_RUNS = 256


def add_verification_run(
    session: Session,
    workload_key: str,
    run_id: str,
    slow_ratio: float,
    llc_ways: int,
    seconds: float,
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
    wanted = VerificationRunRow(
        profile_id=resolved.profile_id,
        run_id=run_id,
        slow_ratio=slow_ratio,
        llc_ways=llc_ways,
        seconds=seconds,
    )
    row, created = repo.add_verification_run(session, wanted, MAX_STORED_RUNS)
    if not created and (row.slow_ratio, row.llc_ways, row.seconds) != (
        slow_ratio,
        llc_ways,
        seconds,
    ):
        raise Conflict(f"run {run_id!r} is stored with other values")
    return row, workload.name, created
