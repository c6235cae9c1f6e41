# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,no-untyped-call,union-attr,index,misc"
"""The DRA door under faults, on a real kube-apiserver v1.36.3 with the stock kube-scheduler and
kube-controller-manager's resource-claim controller, tmc's slices for two 48-way nodes
(`tmc-dra-slices`) and the chart's DeviceClasses and admission policies (`dra.enabled`):

- claims made from a ResourceClaimTemplate are freed when their pods go: the controller
  deallocates a gone pod's claim, and a pod that waited for its ways is placed in them;
- a restarted scheduler allocates nothing twice: what is allocated lives in the claims' status,
  and the new process reads it before it places anything;
- a tenant cannot write an allocation of tmc's devices: with its claims' status alone the API
  server refuses (an allocation takes update on resourceclaims/binding), and with that too, as a
  scheduler of its own would hold, the chart's dra-allocation policy does; without the policy the
  same write is stored (the control)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client as k8s

from tests.scheduler.controlplane import RELEASE, Unavailable, unavailable
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.test_admission import request_token
from tests.scheduler.test_dra_objects import (
    GROUP,
    TENANT,
    VERSION,
    Plane,
    allocating,
    build_slices_command,
    claim,
    one_at_a_time,
    settle,
    start_stock_scheduler,
    started,
)
from tests.services import wait_until

pytestmark = pytest.mark.slow

WAYS_PER_NODE = 48
POLICY_BINDING = f"{RELEASE}-tmc-dra-allocation"
ROLES = "rbac.authorization.k8s.io"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    try:
        command = build_slices_command(tmp_path_factory.mktemp("dra-faults"))
    except Unavailable as exc:
        unavailable(exc)
    cp = started()
    try:
        # The chart's policies, the allocators being this plane's scheduler and controller
        # (both run as the admin here).
        made = allocating(
            cp, command, {"dra": {"enabled": True}, "admission": {"draAllocators": ["tmc-admin"]}}
        )
        cp.start_controller_manager(("resourceclaim-controller",))
        made.api.create_namespaced_custom_object(
            GROUP,
            VERSION,
            TENANT,
            "resourceclaimtemplates",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "half-the-ways"},
                "spec": {"spec": claim("unused", ways=24)["spec"]},
            },
        )
        yield made
    finally:
        cp.close()


def pod_from_template(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": False,
            "resourceClaims": [{"name": "tiers", "resourceClaimTemplateName": "half-the-ways"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/graph500:3.0.0",
                    "resources": {"claims": [{"name": "tiers"}]},
                }
            ],
        },
    }


def claims(plane: Plane) -> dict[str, dict[str, Any]]:
    listed = plane.api.list_namespaced_custom_object(GROUP, VERSION, TENANT, "resourceclaims")
    return {x["metadata"]["name"]: x for x in cast(dict[str, Any], listed)["items"]}


def ways_held(plane: Plane) -> dict[str, int]:
    """The ways every allocated claim holds, per node, as the API server stores them."""
    held: dict[str, int] = {}
    for x in claims(plane).values():
        allocation = x.get("status", {}).get("allocation")
        for r in allocation["devices"]["results"] if allocation else ():
            if r["device"] == "ways":
                held[r["pool"]] = held.get(r["pool"], 0) + int(r["consumedCapacity"]["ways"])
    return held


def test_claims_are_freed_when_their_pods_go(plane: Plane) -> None:
    """Four pods of 24 ways fill both nodes; a fifth waits. One placed pod is deleted: the
    resource-claim controller deallocates its claim, and the fifth is placed in the ways it
    held."""
    api = c.core(plane.cp)
    names = [f"half-{i}" for i in range(5)]
    one_at_a_time(plane, [(None, pod_from_template(n)) for n in names])
    on = settle(plane, names, 4)
    assert ways_held(plane) == {"node-a": WAYS_PER_NODE, "node-b": WAYS_PER_NODE}
    waiting = next(n for n in names if n not in on)
    gone = sorted(on)[0]
    gone_claim = api.read_namespaced_pod(gone, TENANT).status.resource_claim_statuses[0]
    api.delete_namespaced_pod(gone, TENANT, grace_period_seconds=0)

    def freed() -> bool:
        # The controller deallocates a gone pod's claim at once; the garbage collector (not
        # run here) deletes the object later.
        left = claims(plane).get(gone_claim.resource_claim_name)
        return left is None or left.get("status", {}).get("allocation") is None

    wait_until(freed, 60, "the gone pod's claim freed")
    left = [n for n in names if n != gone]
    now = settle(plane, left, 4)
    assert now[waiting] == on[gone]
    assert ways_held(plane) == {"node-a": WAYS_PER_NODE, "node-b": WAYS_PER_NODE}


def test_a_restarted_scheduler_allocates_nothing_twice(plane: Plane) -> None:
    """With both nodes' ways held, the stock scheduler is restarted and two more pods come: the
    new process reads the allocations from the claims and places neither, until a pod goes."""
    api = c.core(plane.cp)
    start_stock_scheduler(plane.cp)  # stops the running one first
    before = {n: str(p.spec.node_name) for n, p in bound(api).items()}
    assert len(before) == 4
    late = ["late-0", "late-1"]
    one_at_a_time(plane, [(None, pod_from_template(n)) for n in late])
    settle(plane, [*before, *late], 4)
    assert ways_held(plane) == {"node-a": WAYS_PER_NODE, "node-b": WAYS_PER_NODE}
    assert {n: str(p.spec.node_name) for n, p in bound(api).items()} == before
    api.delete_namespaced_pod(sorted(before)[0], TENANT, grace_period_seconds=0)
    settle(plane, [*sorted(before)[1:], *late], 4)
    assert ways_held(plane) == {"node-a": WAYS_PER_NODE, "node-b": WAYS_PER_NODE}


def bound(api: k8s.CoreV1Api) -> dict[str, Any]:
    return {p.metadata.name: p for p in api.list_namespaced_pod(TENANT).items if p.spec.node_name}


def tenant_objects(plane: Plane) -> k8s.CustomObjectsApi:
    """A tenant's service account that may write its claims and their status (as its own
    controller might), through its own token."""
    admin = c.core(plane.cp)
    admin.create_namespaced_service_account(TENANT, {"metadata": {"name": "tenant"}})
    rbac = k8s.RbacAuthorizationV1Api(c.api_client(plane.cp))
    subject = {"kind": "ServiceAccount", "name": "tenant", "namespace": TENANT}
    rbac.create_namespaced_role(
        TENANT,
        {
            "metadata": {"name": "tenant-claims"},
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": ["resourceclaims", "resourceclaims/status"],
                    "verbs": ["get", "list", "create", "update", "patch"],
                }
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        TENANT,
        {
            "metadata": {"name": "tenant-claims"},
            "roleRef": {"apiGroup": ROLES, "kind": "Role", "name": "tenant-claims"},
            "subjects": [subject],
        },
    )
    cfg = k8s.Configuration()
    cfg.host = plane.cp.server
    cfg.ssl_ca_cert = str(plane.cp.dir / "ca.crt")
    cfg.api_key = {"authorization": f"Bearer {request_token(admin, TENANT, 'tenant')}"}
    return k8s.CustomObjectsApi(k8s.ApiClient(cfg))


def grant_binding(plane: Plane) -> None:
    """What a scheduler of the tenant's own would hold: the API server's own check on writing an
    allocation (update of resourceclaims/binding, asked at the cluster scope)."""
    rbac = k8s.RbacAuthorizationV1Api(c.api_client(plane.cp))
    rbac.create_cluster_role(
        {
            "metadata": {"name": "tenant-claim-binding"},
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": ["resourceclaims/binding"],
                    "verbs": ["update"],
                }
            ],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "tenant-claim-binding"},
            "roleRef": {"apiGroup": ROLES, "kind": "ClusterRole", "name": "tenant-claim-binding"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": TENANT}],
        }
    )


def write_status(tenant: k8s.CustomObjectsApi, body: dict[str, Any]) -> None:
    tenant.replace_namespaced_custom_object_status(
        GROUP, VERSION, TENANT, "resourceclaims", body["metadata"]["name"], body
    )


def test_a_tenant_cannot_write_an_allocation_of_tmcs_devices(plane: Plane) -> None:
    """The tenant copies a real allocation (the scheduler's, of a placed pod's claim) onto a
    claim of its own that no pod uses. With its claims' status alone, the API server's own check
    refuses (writing an allocation takes update on resourceclaims/binding); given that too, as
    a scheduler of its own would hold, the chart's dra-allocation policy refuses. The policy's
    binding removed, the same write is stored: the tenant would hold ways and memory no
    scheduler gave it, and which the scheduler then counts as taken."""
    tenant = tenant_objects(plane)
    placed = next(
        x for x in claims(plane).values() if x.get("status", {}).get("allocation") is not None
    )
    allocation = copy.deepcopy(placed["status"]["allocation"])
    for r in allocation["devices"]["results"]:
        r["request"] = "ways"
    own = tenant.create_namespaced_custom_object(
        GROUP, VERSION, TENANT, "resourceclaims", claim("forged", ways=24)
    )
    own = cast(dict[str, Any], own)
    own["status"] = {"allocation": allocation}
    with pytest.raises(k8s.ApiException) as refused:
        write_status(tenant, own)
    assert refused.value.status == 422 and "resourceclaims/binding" in str(refused.value.body)

    grant_binding(plane)

    def refused_by_policy() -> bool:
        try:
            write_status(tenant, own)
        except k8s.ApiException as exc:
            if exc.status == 403 and "only the scheduler allocates" in str(exc.body):
                return True
            if exc.status == 422:
                return False  # the new role not yet seen by the authorizer
            raise
        raise AssertionError("the forged allocation was stored under the policy")

    wait_until(refused_by_policy, 30, "the tenant's write refused by the policy")
    assert "allocation" not in claims(plane)["forged"].get("status", {})

    admission = k8s.AdmissionregistrationV1Api(c.api_client(plane.cp))
    saved = admission.read_validating_admission_policy_binding(POLICY_BINDING)
    admission.delete_validating_admission_policy_binding(POLICY_BINDING)
    try:

        def stored() -> bool:
            try:
                write_status(tenant, own)
            except k8s.ApiException as exc:
                if exc.status == 403:
                    return False  # the binding's removal not yet seen
                raise
            return True

        wait_until(stored, 30, "the forged allocation stored without the policy")
        got = claims(plane)["forged"]["status"]["allocation"]["devices"]["results"]
        assert {r["driver"] for r in got} == {"tmc.dev"}
    finally:
        admission.create_validating_admission_policy_binding(
            {
                "metadata": {"name": POLICY_BINDING, "labels": saved.metadata.labels},
                "spec": {"policyName": saved.spec.policy_name, "validationActions": ["Deny"]},
            }
        )
