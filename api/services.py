"""The service's use cases: upload, fit, recommend, price profiles, cluster state.

Each function takes an open session (one transaction per request or task); SQL stays in
repositories, the TMC math in model/.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import orjson
from sqlalchemy.orm import Session

from api import repositories as repo
from api.db import EncodedJSON, after_commit
from api.errors import ApiError, Conflict, NotFound
from api.orm import (
    FittedModelRow,
    HostKind,
    Node,
    PriceProfileRow,
    Profile,
    RackPool,
    VerificationRunRow,
    as_id,
    new_id,
    utcnow,
)
from api.utilization import UtilizationReader
from ledger import store as ledger
from model import (
    DEFAULT_PRICE_PROFILE,
    FittedModel,
    Grid,
    InvalidBundle,
    MachineShape,
    Objective,
    Predictor,
    PriceProfile,
    Problem,
    ProfileBundle,
    Recommendation,
    TmcError,
    Utilization,
    fit,
    host_grid,
    machine_of_host,
    paper_grid,
    parse_bundle,
    recommend,
)
from model.verification import MAX_OBSERVATIONS, Observation

GridName = Literal["paper", "host"]


# -- profiles ---------------------------------------------------------------------------------


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
    enqueue_fit: Callable[[str], None],
    *,
    live: bool = True,
) -> Upload:
    """Store a bundle once (by content hash) and have it fitted after the commit. `live`: the
    caller may upload, so the workload's recommendations may use it (see Profile.live)."""
    bundle = parse_bundle(body)
    if as_id(bundle.workload.name) is not None:
        # A name spelled like an id would make a workload key mean two workloads.
        raise InvalidBundle(
            [Problem("workload.name", "must not have the form of an id (a UUID); name it")]
        )
    digest = content_hash(bundle)
    workload = repo.get_or_create_workload(session, bundle.workload.name)
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
    if created:
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


@dataclass(frozen=True)
class Prepared:
    """A fitted model ready for the hot path, with what it needs of its bundle's host."""

    predictor: Predictor
    bundle_machine: MachineShape
    host_grid: Grid

    def machine(self, kind: HostKind | None) -> MachineShape:
        """The cluster's shape for the profile's host kind, else the bundle's own host."""
        return machine_of_kind(kind) if kind is not None else self.bundle_machine

    def grid(self, name: GridName) -> Grid:
        return self.host_grid if name == "host" else PAPER_GRID


class ModelCache:
    """Fitted models and price profile versions are immutable rows, so they are kept in memory,
    prepared, after the first use."""

    def __init__(self, size: int = 512) -> None:
        self._size = size
        self._models: OrderedDict[str, Prepared] = OrderedDict()
        self._prices: dict[str, PriceProfile] = {}
        self.prices_known_used: set[str] = set()
        self._lock = threading.Lock()

    def model(self, session: Session, fitted_id: str) -> Prepared:
        with self._lock:
            found = self._models.get(fitted_id)
            if found is not None:
                self._models.move_to_end(fitted_id)
                return found
        row = repo.get_fitted(session, fitted_id)
        if row is None:
            raise NotFound("fitted model", fitted_id)
        profile = repo.get_profile(session, row.profile_id)
        assert profile is not None  # a foreign key
        host = ProfileBundle.model_validate(profile.bundle).host
        prepared = Prepared(
            predictor=Predictor(FittedModel.model_validate(row.model)),
            bundle_machine=machine_of_host(host),
            host_grid=host_grid(host.llc_ways, host.min_llc_ways),
        )
        with self._lock:
            self._models[fitted_id] = prepared
            while len(self._models) > self._size:
                self._models.popitem(last=False)
        return prepared

    def price(self, session: Session, price_id: str) -> PriceProfile:
        found = self._prices.get(price_id)
        if found is None:
            row = repo.get_price_profile_by_id(session, price_id)
            if row is None:
                raise NotFound("price profile", price_id)
            found = self._prices[price_id] = PriceProfile.model_validate(row.body)
        return found


# -- recommendations --------------------------------------------------------------------------


@dataclass(frozen=True)
class RecommendInput:
    workload: str | None
    bundle: dict[str, Any] | None
    objective: Objective
    threshold: float
    utilization: Utilization | None
    grid: GridName
    price_profile: str | None  # "name@version"; None: the default
    # Whether an inline bundle may become the workload's live profile (the caller may upload).
    may_upload: bool = False


@dataclass(frozen=True)
class Recommended:
    """What the API returns: the decision's id and inputs, and the recommendation (as JSON)."""

    body: dict[str, Any]
    encoded: bytes  # body as JSON, encoded once: the response sends these bytes
    objective: str
    utilization_source: str
    recommendation: Recommendation  # the same decision, typed (api.decisions reads this)


PAPER_GRID = paper_grid()


def recommend_for(
    session: Session,
    req: RecommendInput,
    cache: ModelCache,
    utilization: UtilizationReader,
    enqueue_fit: Callable[[str], None],
) -> Recommended:
    if req.bundle is not None:
        upload = upload_profile(session, req.bundle, enqueue_fit, live=req.may_upload)
        resolved = repo.resolve_for_recommendation(session, profile_id=upload.profile.id)
    elif req.workload is not None:
        resolved = repo.resolve_for_recommendation(session, workload_key=req.workload)
        if resolved is None:
            if repo.find_workload(session, req.workload) is None:
                raise NotFound("workload", req.workload)
            raise ApiError(409, "Not fitted", f"workload {req.workload!r} has no usable profile")
    else:
        raise ApiError(422, "Invalid request", "give a workload (name or id) or an inline bundle")
    assert resolved is not None

    fitted_id, model_version = resolved.fitted_id, resolved.model_version
    if fitted_id is None:
        # Fitting takes milliseconds: rather than make the caller wait for the task, fit now;
        # the task will find the fit done.
        row = fit_profile(session, resolved.profile_id)
        if row is None:
            detail = f"the profile cannot be fitted: {resolved.profile_error or 'see its status'}"
            raise ApiError(422, "Invalid profile bundle", detail)
        fitted_id, model_version = row.id, row.model_version
    prepared = cache.model(session, fitted_id)
    machine = prepared.machine(resolved.kind)
    grid = prepared.grid(req.grid)
    observations = [
        Observation(slow_ratio=r.slow_ratio, llc_ways=r.llc_ways, seconds=r.seconds)
        for r in repo.verification_runs(session, resolved.profile_id, MAX_OBSERVATIONS)
    ]

    if req.price_profile is not None:
        name, version = parse_price_key(req.price_profile)
        price_row = repo.get_price_profile(session, name, version)
        if price_row is None:
            raise NotFound("price profile", req.price_profile)
        price_id = price_row.id
    else:
        price_id = resolved.default_price_id or ensure_default_price_profile(session).id
    prices = cache.price(session, price_id)
    if price_id not in cache.prices_known_used:
        repo.mark_price_profile_used(session, price_id)
        after_commit(session, lambda: cache.prices_known_used.add(price_id))

    if req.utilization is not None:
        util, source = req.utilization, "request"
    else:
        util, source = utilization.current(session)
    rec = recommend(
        prepared.predictor,
        machine=machine,
        prices=prices,
        utilization=util,
        objective=req.objective,
        threshold=req.threshold,
        grid=grid,
        observations=observations,
    )
    result = rec.model_dump(mode="json")
    # Encoded once: the decision log stores these bytes and the response embeds them.
    result_json = EncodedJSON(orjson.dumps(result))
    chosen = rec.chosen.configuration
    created_at = utcnow()
    record = {
        "id": new_id(),
        "created_at": created_at,
        "workload_id": resolved.workload_id,
        "profile_id": resolved.profile_id,
        "fitted_model_id": fitted_id,
        "bundle_hash": resolved.content_hash,
        "model_version": model_version,
        "price_profile_id": price_id,
        "objective": rec.objective,
        "threshold": rec.threshold,
        "grid": rec.grid,
        "machine": result["machine"],
        "utilization": result["utilization"],
        "utilization_source": source,
        "slow_ratio": chosen.slow_ratio,
        "llc_ways": chosen.llc_ways,
        "result": result_json,
    }
    repo.insert_recommendation(session, record)
    head = {
        "id": record["id"],
        "created_at": created_at.isoformat(),
        "workload_id": resolved.workload_id,
        "profile_id": resolved.profile_id,
        "fitted_model_id": fitted_id,
        "bundle_hash": resolved.content_hash,
        "utilization_source": source,
        "host_kind_known": resolved.kind is not None,
    }
    return Recommended(
        body={**head, "recommendation": result},
        encoded=orjson.dumps(head)[:-1] + b',"recommendation":' + result_json + b"}",
        objective=rec.objective,
        utilization_source=source,
        recommendation=rec,
    )


# -- verification runs ------------------------------------------------------------------------

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
        raise ApiError(409, "Not fitted", f"workload {workload.name!r} has no usable profile")
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


def machine_of_kind(kind: HostKind) -> MachineShape:
    return MachineShape(
        cpus=kind.cpus,
        dram_bytes=kind.dram_bytes,
        slow_bytes=kind.slow_bytes,
        llc_ways=kind.llc_ways,
        slow_pooled=kind.slow_pooled,
    )


# -- price profiles ---------------------------------------------------------------------------


def parse_price_key(key: str) -> tuple[str, int]:
    name, sep, version = key.partition("@")
    if not sep or not version.isdigit():
        raise ApiError(422, "Invalid request", f"price profile {key!r} is not name@version")
    return name, int(version)


def resolve_price_profile(
    session: Session, key: str | None
) -> tuple[PriceProfileRow, PriceProfile]:
    if key is None:
        row = repo.default_price_profile(session) or ensure_default_price_profile(session)
    else:
        name, version = parse_price_key(key)
        found = repo.get_price_profile(session, name, version)
        if found is None:
            raise NotFound("price profile", key)
        row = found
    return row, PriceProfile.model_validate(row.body)


def ensure_default_price_profile(session: Session) -> PriceProfileRow:
    """The paper's method as the built-in default, created once."""
    builtin = DEFAULT_PRICE_PROFILE
    row, _ = repo.insert_price_profile(
        session,
        PriceProfileRow(
            name=builtin.name,
            version=builtin.version,
            body=builtin.model_dump(mode="json"),
            is_default=repo.default_price_profile(session) is None,
        ),
    )
    return row


def create_price_profile(session: Session, body: dict[str, Any]) -> PriceProfileRow:
    """A new version of a named profile; the version number is assigned here."""
    name = str(body.get("name", ""))
    version = repo.latest_price_profile_version(session, name) + 1
    profile = PriceProfile.model_validate({**body, "version": version})
    row, created = repo.insert_price_profile(
        session,
        PriceProfileRow(name=profile.name, version=version, body=profile.model_dump(mode="json")),
    )
    if not created:
        raise Conflict(f"price profile {profile.key} was created concurrently; retry")
    return row


def make_default(session: Session, key: str) -> PriceProfileRow:
    name, version = parse_price_key(key)
    row = repo.get_price_profile(session, name, version)
    if row is None:
        raise NotFound("price profile", key)
    repo.make_default_price_profile(session, row)
    return row


# -- cluster ----------------------------------------------------------------------------------


def cluster_utilization(session: Session) -> Utilization:
    return ledger.utilization(session)


def register_host_kind(session: Session, name: str, machine: MachineShape) -> HostKind:
    row = repo.get_host_kind(session, name)
    if row is None:
        row = HostKind(name=name)
        session.add(row)
    row.cpus = machine.cpus
    row.dram_bytes = machine.dram_bytes
    row.slow_bytes = machine.slow_bytes
    row.llc_ways = machine.llc_ways
    row.slow_pooled = machine.slow_pooled
    session.flush()
    return row


def register_pool(session: Session, name: str, slow_bytes: int) -> RackPool:
    row = repo.get_pool(session, name)
    if row is None:
        row = RackPool(name=name, slow_bytes=slow_bytes)
        session.add(row)
    row.slow_bytes = slow_bytes
    session.flush()
    return row


def register_node(
    session: Session,
    name: str,
    host_kind: str,
    *,
    cpus: int,
    dram_bytes: int,
    slow_bytes: int,
    llc_ways: int,
    pool_name: str | None,
) -> Node:
    if repo.get_host_kind(session, host_kind) is None:
        raise NotFound("host kind", host_kind)
    if pool_name is not None and repo.get_pool(session, pool_name) is None:
        raise NotFound("rack pool", pool_name)
    row = repo.get_node(session, name)
    if row is None:
        row = Node(name=name)
        session.add(row)
    row.host_kind = host_kind
    row.cpus, row.dram_bytes, row.slow_bytes, row.llc_ways = cpus, dram_bytes, slow_bytes, llc_ways
    row.pool_name = pool_name
    session.flush()
    return row
