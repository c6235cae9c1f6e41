"""Profiles: a bundle stored once by its content, and fitted once. Who may upload a workload's
bundles, and how a workload gets its owner: `api.services.owners`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session

from api import repositories as repo
from api.auth import Caller
from api.errors import ApiError, NotFitted, NotFound
from api.services import owners
from model import InvalidBundle, Problem, ProfileBundle, TmcError, fit, parse_bundle
from store.db import after_commit
from store.orm import FittedModelRow, HostKind, Profile, Workload, as_id, utcnow


def content_hash(bundle: ProfileBundle) -> str:
    """Hash of the bundle's canonical JSON: the same measurements always hash alike, however the
    agent spaced or ordered its keys."""
    canonical = json.dumps(bundle.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Upload:
    profile: Profile
    workload_name: str
    created: bool


def upload_profile(
    session: Session,
    body: bytes | dict[str, Any],
    enqueue_fit: Callable[[str], None] | None,
    *,
    live: bool = True,
    uploader: Caller | None = None,
    owner: str | None = None,
) -> Upload:
    """Store a bundle once (by content hash) and, with `enqueue_fit`, have it fitted after the
    commit (None: the caller fits it in this transaction itself). `live`: the caller may upload,
    so the workload's recommendations may use it (see Profile.live). `uploader`: the token that
    sent it, held to the workload's owner (None: the service itself, seeding its own data);
    `owner`: the namespace the uploader says the workload belongs to."""
    bundle = parse_bundle(body)
    if as_id(bundle.workload.name) is not None:
        # A name spelled like an id would make a workload key mean two workloads.
        raise InvalidBundle(
            [Problem("workload.name", "must not have the form of an id (a UUID); name it")]
        )
    name = bundle.workload.name
    if uploader is not None:
        existing = repo.find_workload(session, name)
        owner = owners.check_upload(session, uploader, existing, name, owner)
    elif owner is not None:
        owners.check_namespace(owner)
    digest = content_hash(bundle)
    workload = repo.get_or_create_workload(session, name)
    if owner is not None and workload.owner != owner:
        repo.set_workload_owner(session, workload, owner)
    known = repo.get_host_kind(session, bundle.host.host_kind) is not None
    profile, created = repo.insert_profile(
        session,
        Profile(
            workload_id=workload.id,
            content_hash=digest,
            input_label=bundle.workload.input_label,
            version=bundle.workload.version,
            host_kind=bundle.host.host_kind,
            host_kind_known=known,
            bundle=bundle.model_dump(mode="json"),
            status="pending",
            live=live,
        ),
    )
    if created and enqueue_fit is not None:
        profile_id = profile.id
        after_commit(session, lambda: enqueue_fit(profile_id))
    elif live and not profile.live:
        # Sent inline before by a role that may not upload; now an uploader vouches for it.
        repo.make_profile_live(session, profile.id)
        profile.live = True
    return Upload(profile=profile, workload_name=workload.name, created=created)


def fit_profile(session: Session, profile_id: str) -> FittedModelRow | None:
    """Fit a stored profile once. Idempotent: a second call (a retried or redelivered task, or a
    recommendation that got there first) returns the existing fit. None if the fit failed."""
    existing = repo.fitted_for_profile(session, profile_id)
    if existing is not None:
        return existing
    profile = repo.get_profile(session, profile_id)
    if profile is None:
        raise NotFound("profile", profile_id)
    if profile.status == "failed":
        return None
    try:
        fitted = fit(ProfileBundle.model_validate(profile.bundle))
    except (TmcError, ValueError) as exc:
        repo.set_profile_status(session, profile_id, "failed", str(exc))
        return None
    row, _ = repo.insert_fitted(
        session,
        FittedModelRow(
            profile_id=profile_id,
            model_version=fitted.model_version,
            fit_path=fitted.diagnostics.path,
            flags=[f.code for f in fitted.diagnostics.flags],
            model=fitted.model_dump(mode="json"),
        ),
    )
    repo.set_profile_status(session, profile_id, "fitted", None)
    return row


# At most this many profiles per sweep: a backlog drains over a few sweeps, not in one burst.
SWEEP_BATCH = 500


def stale_pending_profiles(session: Session, older_than_seconds: float) -> list[str]:
    """Profiles pending for longer than `older_than_seconds`: their fit task was lost (or is
    slow; fitting twice is harmless, the fit is idempotent)."""
    cutoff = utcnow() - timedelta(seconds=older_than_seconds)
    return list(repo.pending_profiles(session, cutoff, SWEEP_BATCH))


# -- reading workloads and profiles ------------------------------------------------------------


def workload(session: Session, key: str) -> Workload:
    """The workload named `key` (its name or id); NotFound otherwise."""
    found = repo.find_workload(session, key)
    if found is None:
        raise NotFound("workload", key)
    return found


def profile_with_workload(session: Session, profile_id: str) -> tuple[Profile, str]:
    """A stored profile and its workload's name ("" when the workload is gone)."""
    profile = repo.get_profile(session, profile_id)
    if profile is None:
        raise NotFound("profile", profile_id)
    owner = repo.find_workload(session, profile.workload_id)
    return profile, owner.name if owner else ""


@dataclass(frozen=True)
class WorkloadView:
    """A workload as it is shown: its owner (named, or from its first placed pod) and profiles."""

    workload: Workload
    owner: str | None
    profiles: Sequence[Profile]


def workload_page(
    session: Session, limit: int, offset: int, after: str | None
) -> list[WorkloadView]:
    """A page of workloads by name, each with its owner and profiles (three queries)."""
    workloads = repo.list_workloads(session, limit, offset, after)
    profiles = repo.profiles_of_many(session, [w.id for w in workloads])
    first = repo.first_placed_namespaces(session, [w.id for w in workloads if w.owner is None])
    return [WorkloadView(w, w.owner or first.get(w.id), profiles[w.id]) for w in workloads]


def workload_view(session: Session, w: Workload) -> WorkloadView:
    return WorkloadView(w, owners.owner_of(session, w), repo.profiles_of(session, w.id))


def name_owner(session: Session, key: str, owner: str) -> WorkloadView:
    """An operator names the namespace a workload belongs to (idempotent)."""
    w = workload(session, key)
    repo.set_workload_owner(session, w, owners.check_namespace(owner))
    return workload_view(session, w)


@dataclass(frozen=True)
class FittedWorkload:
    """What a workload's model page reads: its latest usable profile, that profile's fit, and
    the registered host kind the profile was taken on (None when it is not registered)."""

    workload: Workload
    profile: Profile
    fitted: FittedModelRow
    host_kind: HostKind | None


def fitted_workload(session: Session, key: str) -> FittedWorkload:
    """The workload's latest profile and its fit; NotFitted while either is missing (reading
    never fits: the fit task, or a first recommendation, does)."""
    w = workload(session, key)
    profile = repo.latest_profile(session, w.id)
    if profile is None:
        raise NotFitted(f"workload {key!r} has no usable profile")
    row = repo.fitted_for_profile(session, profile.id)
    if row is None:
        raise NotFitted(f"the latest profile of {key!r} is not fitted yet; retry shortly")
    return FittedWorkload(w, profile, row, repo.get_host_kind(session, profile.host_kind))


def latest_bundle(session: Session, key: str) -> Profile:
    """The workload's latest profile; a 409 problem while it has none."""
    w = workload(session, key)
    row = repo.latest_profile(session, w.id)
    if row is None:
        raise ApiError(409, "No profile", f"workload {key!r} has no profile yet")
    return row
