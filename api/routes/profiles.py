"""Profile uploads (agents) and workloads with their fitted models."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from api.auth import Caller, Permission
from api.deps import SessionDep, StateDep, require, require_caller
from api.openapi import PROFILE_BUNDLE_REF
from api.paging import CursorParam, decode_cursor, link_next
from api.schemas import (
    ProfileOut,
    VerificationRunIn,
    VerificationRunOut,
    WorkloadModelOut,
    WorkloadOut,
    WorkloadOwnerIn,
)
from api.services import prices as price_profiles
from api.services import profiles, verification
from ledger import nodes as ledger_nodes
from model import predicted_grid
from model.verification import AppliedConfiguration
from store.orm import Profile, VerificationRunRow

router = APIRouter(prefix="/v1", tags=["profiles"])
UploadingCaller = Annotated[Caller, Depends(require_caller(Permission.upload))]
Admin = Annotated[object, Depends(require(Permission.admin))]
Reader = Annotated[object, Depends(require(Permission.read))]


def profile_out(p: Profile, workload: str) -> ProfileOut:
    return ProfileOut(
        id=p.id,
        workload=workload,
        workload_id=p.workload_id,
        content_hash=p.content_hash,
        input_label=p.input_label,
        version=p.version,
        host_kind=p.host_kind,
        host_kind_known=p.host_kind_known,
        status=p.status,
        error=p.error,
        created_at=p.created_at,
        live=p.live,
    )


@router.post(
    "/profiles",
    status_code=201,
    response_model=ProfileOut,
    summary="Upload a profile bundle (idempotent by content hash)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": PROFILE_BUNDLE_REF}},
        }
    },
    description="A workload belongs to a namespace, its owner (`owner` in `GET "
    "/v1/workloads/{key}`). An agent uploads the bundles of an owned workload only with a token "
    "made for a node (`tmc token create --role agent --node NAME`) that ran a pod of the owner, "
    "as the placement log records it (403 otherwise, an identical bundle included). A workload "
    "nobody owns yet (no operator named an owner, no pod was placed for it) takes bundles from "
    "any agent; its owner is then the namespace of its first placed pod. `owner` names the "
    "namespace with the upload: an operator's sets or changes it; an agent's claims a workload "
    "nobody owns, from a node that ran a pod of that namespace. An operator may upload any "
    "bundle.",
    responses={
        200: {"description": "Already uploaded: the existing profile", "model": ProfileOut},
        403: {"description": "The caller may not speak for this workload"},
        413: {"description": "The bundle is too large"},
    },
)
async def upload_profile(
    request: Request,
    response: Response,
    state: StateDep,
    session: SessionDep,
    caller: UploadingCaller,
    owner: Annotated[
        str | None,
        Query(min_length=1, max_length=63, description="The workload's namespace"),
    ] = None,
) -> ProfileOut:
    body = await request.body()
    # The fit is enqueued once the request's transaction has committed.
    upload = await run_in_threadpool(
        profiles.upload_profile,
        session,
        body,
        state.enqueue_fit,
        uploader=caller,
        owner=owner,
    )
    state.metrics.uploads.labels("created" if upload.created else "duplicate").inc()
    if not upload.created:
        response.status_code = 200
    return profile_out(upload.profile, upload.workload_name)


@router.get("/profiles/{profile_id}", response_model=ProfileOut)
def get_profile(profile_id: str, session: SessionDep, _: Reader) -> ProfileOut:
    p, workload_name = profiles.profile_with_workload(session, profile_id)
    return profile_out(p, workload_name)


@router.get("/workloads", response_model=list[WorkloadOut])
def list_workloads(
    request: Request,
    response: Response,
    session: SessionDep,
    _: Reader,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    cursor: CursorParam = None,
) -> list[WorkloadOut]:
    after = None if cursor is None else decode_cursor(cursor, (str,))[0]
    page = profiles.workload_page(session, limit, offset, after)
    link_next(request, response, [page[-1].workload.name] if len(page) == limit else None)
    return [workload_out(view) for view in page]


@router.get("/workloads/{key}", response_model=WorkloadOut, summary="A workload by name or id")
def get_workload(key: str, session: SessionDep, _: Reader) -> WorkloadOut:
    return workload_out(profiles.workload_view(session, profiles.workload(session, key)))


def workload_out(view: profiles.WorkloadView) -> WorkloadOut:
    w = view.workload
    return WorkloadOut(
        id=w.id,
        name=w.name,
        owner=view.owner,
        created_at=w.created_at,
        profiles=[profile_out(p, w.name) for p in view.profiles],
    )


@router.put(
    "/workloads/{key}/owner",
    response_model=WorkloadOut,
    summary="Name the namespace a workload belongs to (operator)",
    description="From then on agents send the workload's bundles and verification runs only "
    "from nodes that ran that namespace's pods, whatever pods were placed for it before. "
    "Idempotent.",
)
def set_workload_owner(
    key: str, body: WorkloadOwnerIn, session: SessionDep, _: Admin
) -> WorkloadOut:
    return workload_out(profiles.name_owner(session, key, body.owner))


@router.get(
    "/workloads/{key}/model",
    response_model=WorkloadModelOut,
    summary="The fitted model, its diagnostics, and predicted time and cost over the grid",
)
def get_workload_model(
    key: str,
    state: StateDep,
    session: SessionDep,
    _: Reader,
    grid: Annotated[str, Query(pattern="^(paper|host)$")] = "paper",
) -> WorkloadModelOut:
    found = profiles.fitted_workload(session, key)
    w, profile, row, kind = found.workload, found.profile, found.fitted, found.host_kind
    # The prepared model already holds the fit and what it needs of the bundle's host.
    prepared = state.models.model(session, row.id)
    fitted = prepared.predictor.model
    machine = prepared.machine(None if kind is None else ledger_nodes.machine_of_kind(kind))
    chosen_grid = prepared.grid("host" if grid == "host" else "paper")
    _, prices = price_profiles.resolve_price_profile(session, None)
    points = predicted_grid(prepared.predictor, machine=machine, prices=prices, grid=chosen_grid)
    return WorkloadModelOut(
        workload=w.name,
        profile_id=profile.id,
        fitted_model_id=row.id,
        model=fitted,
        diagnostics=fitted.diagnostics,
        grid=chosen_grid.name,
        price_profile=prices.key,
        points=points,
    )


def run_out(r: VerificationRunRow, workload: str) -> VerificationRunOut:
    return VerificationRunOut(
        id=r.id,
        workload=workload,
        profile_id=r.profile_id,
        run_id=r.run_id,
        slow_ratio=r.slow_ratio,
        llc_ways=r.llc_ways,
        seconds=r.seconds,
        applied=None if r.applied is None else AppliedConfiguration.model_validate(r.applied),
        created_at=r.created_at,
    )


@router.post(
    "/workloads/{key}/verification-runs",
    status_code=201,
    response_model=VerificationRunOut,
    summary="Record a measured run in a configuration (idempotent by run_id)",
    description="The run checks the model of the profile the workload's recommendations use "
    "now: they are corrected at its configuration and, less, at its neighbours; a run that is "
    "physically implausible against the profile and the prediction is kept but ignored, with a "
    "flag naming it (model/verification.py). A recommendation names "
    "the run it wants under `verification.next_slow_ratio` / `next_llc_ways`. 200 with the "
    "stored run when its run_id was posted before with the same values, 409 with others. An "
    "agent reports runs of pods tmc placed only: the run_id is the pod's uid, the workload and "
    "configuration must be the placement's, the pod must be in the workload's owner namespace "
    "(`owner` in `GET /v1/workloads/{key}`), and the agent's token must be made for the node "
    "the pod ran on (`tmc token create --role agent --node NAME`; 403 otherwise): a token that "
    "names no node reports no run, since it cannot show where the pod ran. An operator may "
    "record any run.",
    responses={403: {"description": "The caller may not speak for this run"}},
)
def add_verification_run(
    key: str,
    body: VerificationRunIn,
    response: Response,
    session: SessionDep,
    caller: UploadingCaller,
) -> VerificationRunOut:
    applied = None if body.applied is None else body.applied.model_dump(mode="json")
    row, name, created = verification.add_verification_run(
        session, caller, key, body.run_id, body.slow_ratio, body.llc_ways, body.seconds, applied
    )
    if not created:
        response.status_code = 200
    return run_out(row, name)


@router.delete(
    "/workloads/{key}/verification-runs/{run_id}",
    status_code=204,
    summary="Delete a verification run (operator): it no longer corrects the workload's model",
)
def delete_verification_run(
    key: str,
    run_id: Annotated[str, Path(min_length=1, max_length=128)],
    session: SessionDep,
    _: Admin,
) -> Response:
    verification.delete_verification_run(session, key, run_id)
    return Response(status_code=204)


@router.get(
    "/workloads/{key}/verification-runs",
    response_model=list[VerificationRunOut],
    summary="The runs the workload's recommendations are corrected with (newest last)",
)
def list_verification_runs(key: str, session: SessionDep, _: Reader) -> list[VerificationRunOut]:
    w, rows = verification.runs_in_use(session, key)
    return [run_out(r, w.name) for r in rows]
