"""Who a workload belongs to, and which agents may speak for it.

A workload describes the pods of one Kubernetes namespace, its *owner*. Its bundles set its
model and its verification runs correct it, so both would let whoever sends them steer the
configuration its pods get; an agent therefore speaks for a workload only from a node that ran
its owner's pods, as the placement log (written by the ledger's mirror from the pod watch, never
by an agent) records them.

How a workload gets its owner, first rule that applies:
1. An operator names it: `PUT /v1/workloads/{key}/owner`, or `POST /v1/profiles?owner=NS` with the
   bundle (creating the workload with its owner, or changing it).
2. An agent whose token names a node claims a workload nobody owns with `?owner=NS` on its
   upload, when the placement log shows that node ran a pod of NS.
3. Otherwise the namespace of the first pod placed for the workload (by one of its
   recommendations) owns it; that owner is stored the first time an agent's upload or run needs
   it, so that the placement log's pruning never reopens the workload.
A workload with none of these (no operator named an owner, no pod was placed for it) is a name
still being profiled: any agent may upload its bundles, as a profiling Job does with the chart's
shared token. An operator who wants a name kept from the start names its owner with its first
bundle.

What an agent may do with an owned workload:
- a bundle: only with a token that names a node which ran a pod of the owner (an identical bundle
  included: its upload could make a stored, non-live copy the live one);
- a verification run: only of a pod of the owner, placed for the workload, on the token's own
  node. A token that names no node reports no run at all: it cannot show where the pod ran.
A token names a node when it is a tmc token made for it, or the agent pod's service-account
token, whose node the Kubernetes API server names (`api.node_identity`).
An operator may do anything, whatever the owner.
"""

from __future__ import annotations

import re

from sqlalchemy.orm import Session

from api import repositories as repo
from api.auth import Caller, Role
from api.errors import ApiError, InvalidInput
from store.orm import Workload

# A Kubernetes namespace's name (an RFC 1123 label).
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_NAMESPACE = re.compile(NAMESPACE_PATTERN)


def _refused(detail: str) -> ApiError:
    return ApiError(403, "Forbidden", detail)


def check_namespace(namespace: str) -> str:
    if not _NAMESPACE.fullmatch(namespace):
        raise InvalidInput(
            f"owner {namespace[:80]!r} is not a namespace name (lower-case letters, digits and"
            " '-', at most 63, starting and ending with a letter or digit)"
        )
    return namespace


def owner_of(session: Session, workload: Workload, *, store: bool = False) -> str | None:
    """The workload's owner: the one stored, else the namespace of its first placed pod (stored
    now when `store`), else None."""
    if workload.owner is not None:
        return workload.owner
    first = repo.first_placed_namespace(session, workload.id)
    if first is not None and store:
        repo.set_workload_owner(session, workload, first)
    return first


def check_upload(
    session: Session, caller: Caller, workload: Workload | None, name: str, declared: str | None
) -> str | None:
    """Raise unless `caller` may upload a bundle of the workload `name` (None: not created yet),
    declaring `declared` its owner. Returns the owner to store on the workload, if any."""
    if declared is not None:
        check_namespace(declared)
    if caller.role is Role.operator:
        return declared
    owner = None if workload is None else owner_of(session, workload, store=True)
    claimed = owner if owner is not None else declared
    if claimed is None:
        return None  # a name nobody owns yet
    if caller.node is None:
        raise _refused(
            f"workload {name!r} belongs to namespace {claimed!r} and this agent token names no"
            " node: only the agent of a node that ran that namespace's pods (with its pod's"
            " projected service-account token, or a token made with `tmc token create --role"
            " agent --node NAME`) or an operator may upload its bundles"
        )
    if owner is not None and declared is not None and declared != owner:
        raise _refused(f"workload {name!r} belongs to namespace {owner!r}, not {declared!r}")
    if not repo.node_ran_namespace(session, caller.node, claimed):
        raise _refused(
            f"workload {name!r} belongs to namespace {claimed!r}, and node {caller.node} ran"
            " none of its pods: only the agent of a node that did, or an operator, may upload"
            " its bundles"
        )
    return declared if owner is None else None


def check_reporter(caller: Caller) -> None:
    """Raise unless `caller` may report verification runs at all: an operator, or an agent whose
    token names the node it speaks for."""
    if caller.role is not Role.operator and caller.node is None:
        raise _refused(
            "this agent token names no node, so it cannot show where the pod ran: runs are"
            " reported by the agent of the pod's node, with its pod's projected service-account"
            " token (the chart's agents) or a token made by `tmc token create --role agent"
            " --node NAME`"
        )


def check_pod_owner(session: Session, workload: Workload, namespace: str) -> None:
    """Raise unless a pod of `namespace` (placed for the workload) speaks for the workload."""
    owner = owner_of(session, workload, store=True)
    if owner != namespace:
        raise _refused(
            f"workload {workload.name!r} belongs to namespace {owner!r}; a pod of namespace"
            f" {namespace!r} does not speak for it"
        )
