"""Decisions: Algorithm 1 for a workload (or an inline bundle), recorded in the decision log.

`decide` is the one use case behind `POST /recommend` and the scheduler's decisions. It takes
everything it needs explicitly (the utilization vector and where it came from included) and
returns a typed record; encoding it for HTTP is the route's business.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy.orm import Session

from api import repositories as repo
from api.errors import InvalidInput, NotFitted, NotFound
from api.services.models import GridName, ModelCache
from api.services.prices import ensure_default_price_profile, parse_price_key
from api.services.profiles import fit_profile, upload_profile
from model import Objective, Recommendation, Utilization
from model.recommend import choose, shortlist
from model.recommendation import SizedFrom
from store.db import EncodedJSON, after_commit
from store.orm import RecommendationRow, new_id, utcnow


@dataclass(frozen=True)
class DecisionInput:
    workload: str | None  # a name or an id; or
    bundle: bytes | dict[str, Any] | None  # an inline profile bundle
    objective: Objective
    threshold: float
    utilization: Utilization
    utilization_source: str  # "request" (given by the caller), "redis" or "database"
    grid: GridName = "paper"
    price_profile: str | None = None  # "name@version"; None: the default
    # Whether an inline bundle may become the workload's live profile (the caller may upload).
    may_upload: bool = False
    # The memory size the workload runs at, and whose it is ("request": a pod's memory request,
    # "caller": a size the caller gave); None: the profile's footprint.
    memory_bytes: int | None = None
    sized_from: SizedFrom | None = None
    # The vCPUs the workload runs with (a pod's CPU request rounded up, a caller's); None: the
    # profile's.
    vcpus: int | None = None


@dataclass(frozen=True)
class RecommendationRecord:
    """A decision as the decision log holds it: its inputs' identities and the recommendation."""

    id: str
    created_at: datetime
    workload_id: str
    profile_id: str
    fitted_model_id: str
    bundle_hash: str
    utilization_source: str
    host_kind_known: bool
    recommendation: Recommendation
    # The recommendation as JSON, encoded once: the decision log stores these bytes, and the
    # HTTP response may embed them as they are.
    recommendation_json: bytes
    # Counted on the pair's identical newest decision rather than stored again.
    repeated: bool = False


# Set on a session whose statements each commit on their own (`single_statements`).
_SINGLE_STATEMENTS = "tmc.single_statements"


class NeedsTransaction(Exception):
    """Raised by `decide` on a `single_statements` session when the decision must write several
    statements together (a profile's first fit, the default price profile's creation): the
    caller decides again in a transaction. Nothing was written."""


def single_statements(session: Session) -> None:
    """Let `session` run each statement in a transaction of its own. A decision for a fitted
    workload reads one row and writes at most two single statements (marking its price profile
    used, then storing the decision or counting a repeat): without BEGIN and COMMIT it is one
    round trip to the database where it was three. Call before the session's first statement."""
    session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
    session.info[_SINGLE_STATEMENTS] = True


@dataclass(frozen=True)
class _Answer:
    """Algorithm 1's answer, kept for its inputs: shared between requests, so never changed."""

    recommendation: Recommendation
    result: dict[str, Any]  # its JSON form
    encoded: EncodedJSON  # and those bytes


def decide(session: Session, req: DecisionInput, cache: ModelCache) -> RecommendationRecord:
    """Recommend and record. Raises NotFound (no such workload or price profile), NotFitted (no
    usable profile), InvalidInput or the model's errors (an invalid bundle, nothing feasible)."""
    if req.bundle is not None:
        # An inline bundle is fitted below, in this transaction: no fit task is wanted.
        upload = upload_profile(session, req.bundle, None, live=req.may_upload)
        resolved = repo.resolve_for_recommendation(session, profile_id=upload.profile.id)
    elif req.workload is not None:
        resolved = repo.resolve_for_recommendation(session, workload_key=req.workload)
        if resolved is None:
            if repo.find_workload(session, req.workload) is None:
                raise NotFound("workload", req.workload)
            raise NotFitted(f"workload {req.workload!r} has no usable profile")
    else:
        raise InvalidInput("give a workload (name or id) or an inline bundle")
    assert resolved is not None

    fitted_id, model_version = resolved.fitted_id, resolved.model_version
    single = bool(session.info.get(_SINGLE_STATEMENTS))
    if fitted_id is None and single:
        raise NeedsTransaction("a first fit")
    if fitted_id is None:
        # The first decision for a profile whose fit task has not run yet: fitting takes
        # milliseconds, so it is done here rather than make the caller wait; the task will find
        # the fit done.
        row = fit_profile(session, resolved.profile_id)
        if row is None:
            reason = resolved.profile_error or "see its status"
            raise NotFitted(f"the profile cannot be fitted: {reason}")
        fitted_id, model_version = row.id, row.model_version
    prepared = cache.model(session, fitted_id)
    machine = prepared.machine(resolved.kind)
    grid = prepared.grid(req.grid)
    observations = list(
        cache.observations(session, resolved.profile_id, resolved.run_count, resolved.newest_run_id)
    )

    if req.price_profile is not None:
        name, version = parse_price_key(req.price_profile)
        price_row = repo.get_price_profile(session, name, version)
        if price_row is None:
            raise NotFound("price profile", req.price_profile)
        price_id = price_row.id
    else:
        if resolved.default_price_id is None and single:
            raise NeedsTransaction("the default price profile's creation")
        price_id = resolved.default_price_id or ensure_default_price_profile(session).id
    prices = cache.price(session, price_id)
    if price_id not in cache.prices_known_used:
        repo.mark_price_profile_used(session, price_id)
        after_commit(session, lambda: cache.prices_known_used.add(price_id))

    question = (
        fitted_id,
        machine,
        req.grid,  # with the fit, names the grid
        resolved.profile_id,
        resolved.run_count,
        resolved.newest_run_id,
        price_id,
        req.objective,
        req.threshold,
        req.memory_bytes,
        req.sized_from,
        req.vcpus,
    )
    inputs = (question, req.utilization)
    answered: _Answer | None = cache.results.get(inputs)
    if answered is None:
        short = cache.shortlists.get_or_compute(
            question,
            lambda: shortlist(
                prepared.predictor,
                machine=machine,
                prices=prices,
                objective=req.objective,
                threshold=req.threshold,
                grid=grid,
                observations=observations,
                memory_bytes=req.memory_bytes,
                sized_from=req.sized_from,
                vcpus=req.vcpus,
            ),
        )
        rec = choose(short, req.utilization)
        result = rec.model_dump(mode="json")
        answered = _Answer(rec, result, EncodedJSON(orjson.dumps(result)))
        cache.results.put(inputs, answered)
    rec, result, encoded = answered.recommendation, answered.result, answered.encoded
    chosen = rec.chosen.configuration
    key = decision_key(
        resolved.workload_id,
        resolved.profile_id,
        fitted_id,
        model_version,
        price_id,
        rec.objective,
        rec.threshold,
        rec.grid,
        result["machine"],
        f"{resolved.run_count}:{resolved.newest_run_id}",
        chosen.slow_ratio,
        chosen.llc_ways,
        # A decision at a given size is another decision; one at the profile's footprint keeps
        # the key it always had, so that it still counts as a repeat of those made before sizes.
        *(() if req.memory_bytes is None else (rec.memory_bytes, rec.sized_from)),
        *(() if req.vcpus is None else (f"vcpus={rec.vcpus}",)),
    )
    now = utcnow()
    memo = cache.decisions
    seen = memo.find(key)
    if seen is None:
        last = repo.latest_decision(session, resolved.workload_id, rec.objective)
        if last is not None and last.decision_key == key:
            memo.remember(key, last.id, last.created_at, written=False)
            seen = (last.id, last.created_at)
    repeated = seen is not None
    if seen is not None:
        # The same decision again: counted on the stored one, whose id the caller (and a pod
        # placed by it) refers to. Its stored explanation is the first one's; only the live
        # utilization it was weighed against may have moved, within what kept the same choice.
        due = memo.due(key)
        if due:
            repo.count_repeat(session, seen[0], now, due)
        after_commit(session, lambda: memo.counted(key, due))
    rec_id, created_at = seen if seen is not None else (new_id(), now)
    record = RecommendationRecord(
        id=rec_id,
        created_at=created_at,
        workload_id=resolved.workload_id,
        profile_id=resolved.profile_id,
        fitted_model_id=fitted_id,
        bundle_hash=resolved.content_hash,
        utilization_source=req.utilization_source,
        host_kind_known=resolved.kind is not None,
        recommendation=rec,
        recommendation_json=encoded,
        repeated=repeated,
    )
    if repeated:
        return record
    repo.insert_recommendation(
        session,
        {
            "id": record.id,
            "created_at": record.created_at,
            "workload_id": record.workload_id,
            "profile_id": record.profile_id,
            "fitted_model_id": fitted_id,
            "bundle_hash": record.bundle_hash,
            "model_version": model_version,
            "price_profile_id": price_id,
            "objective": rec.objective,
            "threshold": rec.threshold,
            "grid": rec.grid,
            "machine": result["machine"],
            "utilization": result["utilization"],
            "utilization_source": req.utilization_source,
            "slow_ratio": chosen.slow_ratio,
            "llc_ways": chosen.llc_ways,
            "result": encoded,
            "decision_key": key,
            "repeats": 0,
            "last_decided_at": None,
        },
    )
    after_commit(session, lambda: memo.remember(key, record.id, record.created_at, written=True))
    return record


def decision_key(*parts: object) -> str:
    """What identifies a decision: its inputs (profile, fit, model version, prices, objective,
    threshold, grid, machine, verification runs) and its choice. JSON with sorted keys, so a
    dict's order does not matter, then SHA-256."""
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()


def recommendation(session: Session, rec_id: str) -> RecommendationRow:
    """A logged decision by id; NotFound otherwise."""
    row = repo.get_recommendation(session, rec_id)
    if row is None:
        raise NotFound("recommendation", rec_id)
    return row


def recommendation_page(
    session: Session,
    *,
    workload: str | None,
    objective: str | None,
    since: datetime | None,
    limit: int,
    offset: int,
    after: tuple[datetime, str] | None,
) -> Sequence[RecommendationRow]:
    """Logged decisions, newest first, of one workload (by name or id) if given; `after` is the
    (created_at, id) of the previous page's last one."""
    workload_id = None
    if workload is not None:
        found = repo.find_workload(session, workload)
        if found is None:
            raise NotFound("workload", workload)
        workload_id = found.id
    return repo.list_recommendations(
        session,
        workload_id=workload_id,
        objective=objective,
        since=since,
        limit=limit,
        offset=offset,
        after=after,
    )
