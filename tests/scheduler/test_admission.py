# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call,index"
"""Who may write what tmc reads, asked of a real kube-apiserver with the chart's RBAC and its
ValidatingAdmissionPolicies (deploy/helm/tmc/templates/admission.yaml): a tenant whose role lets
it create, patch and delete pods in its own namespace (and, to show that admission and not RBAC
stops it, post Bindings and update pod status as its own scheduler would), tmc's scheduler and
extender, a node agent, and an operator (a service account of a namespace whose group the chart
names). Every token is the API server's own: static tokens for tmc's components (as the control
plane's other tests), TokenRequest tokens for the tenant and the operator, and tokens bound to an
agent's pod on its node (as the kubelet projects them) for the node rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from model.node_contract import (
    PLACEMENT_SEAL_ANNOTATION,
    TIERED_POD_LABEL,
    TIERED_POD_LABEL_VALUE,
    PlacementSealKeys,
    tiered_pod_labels,
)
from scheduler.feeder import Feeder
from scheduler.kube import KubeCluster, api_client
from scheduler.tenants import selector_text
from tests.scheduler.controlplane import PLACEMENT_SEAL_KEY, ControlPlane, Unavailable, unavailable
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as tmc_plugin
from tests.services import wait_until

pytestmark = pytest.mark.slow

TENANT_NS = "tenant-a"
OPERATOR_NS = "tmc-ops"
PINNED_NS = "pinned-benchmarks"  # the chart's operatorNamespaces: pinning allowed there
# A namespace the operator has not made one of tmc's (under TENANT_LABELS): its pods cost the
# policies nothing, and tmc trusts no placement written there.
OUTSIDE_NS = "other-tenant"
# admission.tenantNamespaceLabels of the plane's second run: the whole suite again with the
# policies limited to the namespaces labelled so (TENANT_NS, PINNED_NS, OPERATOR_NS).
TENANT_LABELS = {"tmc.dev/tenant": "yes"}
ADMISSION_VALUES: dict[str, Any] = {
    "admission": {
        "operatorGroups": [f"system:serviceaccounts:{OPERATOR_NS}"],
        "operatorNamespaces": [PINNED_NS],
    }
}
# What tmc's Binding carries (scheduler/plugin/pkg/tmc PlacementAnnotations): the placement as
# compact JSON and its mask. The policy compares strings; it never parses them.
PLACEMENT = {
    "tmc.dev/placement": json.dumps({"schema": "tmc.dev/placement/v1", "llc_mask": "0xf0"}),
    "tmc.dev/llc-mask": "0xf0",
}
# A tenant's pinned ask for every way and all of a node's DRAM.
GREEDY = json.dumps({"configuration": {"llc_ways": 8, "dram_bytes": 24 * 2**30, "slow_bytes": 0}})


def token_client(cp: ControlPlane, token: str) -> k8s.CoreV1Api:
    cfg = k8s.Configuration()
    cfg.host = cp.server
    cfg.ssl_ca_cert = str(cp.dir / "ca.crt")
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return k8s.CoreV1Api(k8s.ApiClient(cfg))


def request_token(
    admin: k8s.CoreV1Api, namespace: str, account: str, bound_pod: k8s.V1Pod | None = None
) -> str:
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if bound_pod is not None:
        spec["boundObjectRef"] = {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": bound_pod.metadata.name,
            "uid": bound_pod.metadata.uid,
        }
    made = admin.create_namespaced_service_account_token(account, namespace, {"spec": spec})
    return str(made.status.token)


class Plane:
    def __init__(self, cp: ControlPlane, tenant_labels: dict[str, str] | None = None) -> None:
        self.cp = cp
        self.tenant_labels = dict(tenant_labels or {})
        self.admin = c.core(cp)
        self.client = c.api_client(cp)
        self.scheduler = c.core(cp, "scheduler")
        self.extender = c.core(cp, "extender")
        self.agent = c.core(cp, "agent")
        self.tenant = self._tenant()
        self.operator = self._operator()

    def namespace(self, name: str) -> None:
        """A namespace as the test needs it: a tenant namespace (labelled) when the plane runs
        with tenant namespaces and it is one of them."""
        labels = self.tenant_labels if name in (TENANT_NS, PINNED_NS, OPERATOR_NS) else {}
        self.admin.create_namespace({"metadata": {"name": name, "labels": labels}})
        c.ensure_default_account(self.admin, name)

    def _tenant(self) -> k8s.CoreV1Api:
        for ns in (TENANT_NS, PINNED_NS, OUTSIDE_NS):
            self.namespace(ns)
        for ns in (TENANT_NS, PINNED_NS, OUTSIDE_NS):
            self.admin.create_namespaced_service_account(ns, {"metadata": {"name": "tenant"}})
            rbac = k8s.RbacAuthorizationV1Api(self.client)
            rbac.create_namespaced_role(
                ns,
                {
                    "metadata": {"name": "tenant"},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "resources": ["pods"],
                            "verbs": ["get", "list", "create", "update", "patch", "delete"],
                        },
                        {
                            "apiGroups": [""],
                            "resources": ["pods/ephemeralcontainers", "pods/resize"],
                            "verbs": ["patch"],
                        },
                        {
                            "apiGroups": ["apps"],
                            "resources": ["replicasets"],
                            "verbs": ["get", "create", "delete"],
                        },
                        # Beyond a tenant's usual rights: what its own scheduler would hold.
                        {
                            "apiGroups": [""],
                            "resources": ["pods/binding", "bindings"],
                            "verbs": ["create"],
                        },
                        {
                            "apiGroups": [""],
                            "resources": ["pods/status"],
                            "verbs": ["update", "patch"],
                        },
                    ],
                },
            )
            rbac.create_namespaced_role_binding(
                ns,
                {
                    "metadata": {"name": "tenant"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": "tenant",
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}],
                },
            )
        return token_client(self.cp, request_token(self.admin, TENANT_NS, "tenant"))

    def tenant_in(self, ns: str) -> k8s.CoreV1Api:
        return token_client(self.cp, request_token(self.admin, ns, "tenant"))

    def _operator(self) -> k8s.CoreV1Api:
        self.namespace(OPERATOR_NS)
        self.admin.create_namespaced_service_account(OPERATOR_NS, {"metadata": {"name": "ops"}})
        rbac = k8s.RbacAuthorizationV1Api(self.client)
        rbac.create_cluster_role(
            {
                "metadata": {"name": "tmc-test-operator"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["pods"],
                        "verbs": ["get", "list", "create", "patch", "delete"],
                    }
                ],
            }
        )
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": "tmc-test-operator"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "tmc-test-operator",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "ops", "namespace": OPERATOR_NS}],
            }
        )
        return token_client(self.cp, request_token(self.admin, OPERATOR_NS, "ops"))


# Set by `test_without_the_policies_every_forgery_gets_through` for the run of this module it
# starts: the chart installed without its admission policies (RBAC as ever).
WITHOUT_POLICIES = os.environ.get("TMC_TEST_ADMISSION_POLICIES") == "off"


def chart_values(tenant_labels: dict[str, str]) -> dict[str, Any]:
    """ADMISSION_VALUES, limited to tenant namespaces when labels are given, and without the
    policies in the run that shows they are what refuses."""
    admission = dict(ADMISSION_VALUES["admission"])
    if tenant_labels:
        admission["tenantNamespaceLabels"] = dict(tenant_labels)
    if WITHOUT_POLICIES:
        admission["enabled"] = False
    return {**ADMISSION_VALUES, "admission": admission}


def running_plane(tenant_labels: dict[str, str]) -> Iterator[Plane]:
    """The control plane with the chart's RBAC and policies (limited to tenant namespaces when
    labels are given), two nodes and the accounts, once every policy is enforced."""
    try:
        cp = ControlPlane()
    except Unavailable as exc:
        unavailable(exc)
    try:
        cp.start()
        admin = c.core(cp)
        c.install_rbac(cp, chart_values(tenant_labels))
        for name in ("node-a", "node-b"):
            c.register_node(admin, c.node_object(name))
        p = Plane(cp, tenant_labels)
        if WITHOUT_POLICIES:
            # The chart without its policies: every forgery below must then get through (each
            # test fails), which shows that the policies, not RBAC, refuse them.
            yield p
            return
        # A policy is enforced once the API server has compiled it, each on its own: wait for
        # the first refusal of each policy the nodes' tests ask about too.
        wait_until(
            lambda: (
                refused(
                    lambda: p.tenant.create_namespaced_pod(
                        TENANT_NS, pod("probe", annotations=PLACEMENT)
                    )
                )
                is not None
            ),
            30,
            "the pod-placement policy enforced",
        )
        node_a = token_client(cp, c.node_bound_token(cp, "node-a"))
        probe = {"metadata": {"annotations": {"tmc.dev/llc-ways": "1"}}}
        wait_until(
            lambda: refused(partial(node_a.patch_node, "node-b", probe)) is not None,
            30,
            "the agent-own-node policy enforced",
        )
        # A report in "default" (the only namespace a node may write Events in) in another
        # node's name.
        forged = {
            "metadata": {"generateName": "probe-", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "node-b"},
            "reason": "Probe",
            "message": "probe",
            "type": "Normal",
            "source": {"component": "tmc-nri", "host": "node-b"},
        }
        wait_until(
            lambda: refused(partial(node_a.create_namespaced_event, "default", forged)) is not None,
            30,
            "the agent-own-events policy enforced",
        )
        yield p
    finally:
        cp.close()


# Every test of the module runs twice: with the chart's default (the policies judge pods in every
# namespace) and with tenant namespaces (the policies judge the labelled namespaces' pods only,
# where every forgery below is tried): the selector must leave none of them through.
@pytest.fixture(
    scope="module",
    params=[{}] if WITHOUT_POLICIES else [{}, TENANT_LABELS],
    ids=["every-namespace"] if WITHOUT_POLICIES else ["every-namespace", "tenant-namespaces"],
)
def plane(request: pytest.FixtureRequest) -> Iterator[Plane]:
    yield from running_plane(request.param)


# The label that makes a pod one of tmc's: the policies judge only pods carrying it.
TIERED = tiered_pod_labels()


def pod(
    name: str,
    annotations: dict[str, str] | None = None,
    node: str | None = None,
    *,
    tiered: bool = True,
) -> dict[str, Any]:
    """A tenant's pod for tmc's scheduler: one of tmc's (labelled) unless `tiered` is False."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": dict(TIERED if tiered else {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "schedulerName": "tmc-scheduler",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    if node is not None:
        body["spec"]["nodeName"] = node
    return body


def refused(call: Callable[[], object]) -> str | None:
    """The admission policy's refusal of `call`, or None when the API server admitted it. Any
    other error (RBAC's among them) is raised: a test must not pass on the wrong refusal."""
    try:
        call()
    except k8s.ApiException as exc:
        if "ValidatingAdmissionPolicy" in (exc.body or ""):
            return str(json.loads(exc.body)["message"])
        raise
    return None


def bind(plane: Plane, binder: k8s.CoreV1Api, name: str, annotations: dict[str, str]) -> None:
    """A Binding of the tenant's pod `name` to node-a carrying `annotations`, written by
    `binder` (tmc's scheduler or extender), as the engine writes one."""
    uid = plane.tenant.read_namespaced_pod(name, TENANT_NS).metadata.uid
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": TENANT_NS, "uid": uid, "annotations": annotations},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
    }
    binder.create_namespaced_pod_binding(name, TENANT_NS, body, _preload_content=False)


def placed_pod(
    plane: Plane, name: str, placer: str = "scheduler", body: dict[str, Any] | None = None
) -> None:
    """A tenant's pod (`body`, else a plain one) that tmc's scheduler (or, on the extender
    path, tmc-extender) has bound with its placement."""
    plane.tenant.create_namespaced_pod(TENANT_NS, body or pod(name))
    bind(plane, plane.scheduler if placer == "scheduler" else plane.extender, name, PLACEMENT)
    got = plane.admin.read_namespaced_pod(name, TENANT_NS)
    assert got.spec.node_name == "node-a"
    assert got.metadata.annotations["tmc.dev/llc-mask"] == "0xf0"


# --- the scheduler's placement ------------------------------------------------------------------


def test_tmc_scheduler_binds_with_its_placement(plane: Plane) -> None:
    placed_pod(plane, "placed")


def test_tmc_extender_binds_with_its_placement(plane: Plane) -> None:
    placed_pod(plane, "by-extender", placer="extender")


@pytest.mark.parametrize(
    "forged",
    [
        # After binding, its placement onto a neighbour's ways.
        {"tmc.dev/llc-mask": "0xf"},
        # A placement no reader can parse (the agent would delete the pod's resctrl group).
        {"tmc.dev/placement": '{"schema":"x"}'},
        # DRAM moved into "slow" on paper (the scheduler's cache would free the DRAM).
        {
            "tmc.dev/placement": json.dumps(
                {"schema": "tmc.dev/placement/v1", "slow_bytes": 20 * 2**30}
            )
        },
        # The placement removed (the pod would run unconfined while counted).
        {"tmc.dev/placement": None, "tmc.dev/llc-mask": None},
    ],
    ids=["neighbours-ways", "bad-schema", "dram-to-slow", "removed"],
)
def test_a_tenant_cannot_rewrite_its_placement_after_binding(
    plane: Plane, forged: dict[str, str | None], request: pytest.FixtureRequest
) -> None:
    name = "rewrite-" + request.node.callspec.id
    placed_pod(plane, name)
    why = refused(
        lambda: plane.tenant.patch_namespaced_pod(
            name, TENANT_NS, {"metadata": {"annotations": forged}}
        )
    )
    assert why is not None and "only tmc's scheduler may write a pod's placement" in why, why
    # ... nor through the status subresource, which keeps metadata changes.
    why = refused(
        lambda: plane.tenant.patch_namespaced_pod_status(
            name, TENANT_NS, {"metadata": {"annotations": forged}}
        )
    )
    assert why is not None, "pods/status wrote a placement"
    got = plane.admin.read_namespaced_pod(name, TENANT_NS).metadata.annotations
    assert {k: got.get(k) for k in PLACEMENT} == PLACEMENT


# Every kind of write a client can send, to the pod or to its status: adding tmc's annotations to
# a pod that carries none of them, and removing a placement from a placed pod.
WRITES = ["strategic-merge", "merge", "json", "apply", "replace"]
CONTENT_TYPES = {
    "strategic-merge": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


def write_annotations(
    api: k8s.CoreV1Api, how: str, status: bool, name: str, ann: dict[str, str | None]
) -> None:
    """Set (a value) or remove (None) annotations of a tenant's pod, as `how` writes them."""
    if how == "replace":
        current = api.read_namespaced_pod(name, TENANT_NS)
        kept = dict(current.metadata.annotations or {})
        for key, value in ann.items():
            if value is None:
                kept.pop(key, None)
            else:
                kept[key] = value
        current.metadata.annotations = kept
        replace = api.replace_namespaced_pod_status if status else api.replace_namespaced_pod
        replace(name, TENANT_NS, current)
        return
    patch = api.patch_namespaced_pod_status if status else api.patch_namespaced_pod
    options: dict[str, Any] = {"_content_type": CONTENT_TYPES[how]}
    if how == "json":
        removed = [k for k, v in ann.items() if v is None]
        body: Any = [
            {"op": "remove", "path": "/metadata/annotations/" + k.replace("/", "~1")}
            for k in removed
        ] or [{"op": "add", "path": "/metadata/annotations", "value": ann}]
    elif how == "apply":
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": ann}}
        options["field_manager"] = "tenant"
        options["force"] = True
    else:
        body = {"metadata": {"annotations": ann}}
    patch(name, TENANT_NS, body, **options)


@pytest.mark.parametrize("status", [False, True], ids=["pod", "status"])
@pytest.mark.parametrize("how", WRITES)
def test_a_tenant_cannot_add_tmcs_annotations_by_any_kind_of_write(
    plane: Plane, how: str, status: bool
) -> None:
    name = f"add-{how}-{'status' if status else 'pod'}"
    plane.tenant.create_namespaced_pod(TENANT_NS, pod(name))
    why = refused(partial(write_annotations, plane.tenant, how, status, name, dict(PLACEMENT)))
    assert why is not None and "only tmc's scheduler may write a pod's placement" in why, why
    pin: dict[str, str | None] = {"tmc.dev/recommendation": GREEDY}
    why = refused(partial(write_annotations, plane.tenant, how, status, name, pin))
    assert why is not None and "only an operator may pin a recommendation" in why, why
    got = plane.admin.read_namespaced_pod(name, TENANT_NS).metadata.annotations or {}
    assert not [k for k in got if k in PLACEMENT or k == "tmc.dev/recommendation"], got


@pytest.mark.parametrize("status", [False, True], ids=["pod", "status"])
@pytest.mark.parametrize("how", [w for w in WRITES if w != "apply"])
def test_a_tenant_cannot_remove_a_placement_by_any_kind_of_write(
    plane: Plane, how: str, status: bool
) -> None:
    """(A server-side apply removes only what its own manager set: never the scheduler's.)"""
    name = f"remove-{how}-{'status' if status else 'pod'}"
    placed_pod(plane, name)
    removed: dict[str, str | None] = {"tmc.dev/placement": None}
    why = refused(partial(write_annotations, plane.tenant, how, status, name, removed))
    assert why is not None and "only tmc's scheduler may write a pod's placement" in why, why
    got = plane.admin.read_namespaced_pod(name, TENANT_NS).metadata.annotations
    assert {k: got.get(k) for k in PLACEMENT} == PLACEMENT


@pytest.mark.parametrize("status", [False, True], ids=["pod", "status"])
def test_a_tenant_cannot_strip_or_change_its_placements_seal(plane: Plane, status: bool) -> None:
    """The seal is guarded with the placement: a tenant that removed it, or wrote another, would
    have its pod's placement count for nothing (and, were the count dropped, free room its
    containers still use)."""
    name = f"sealed-{'status' if status else 'pod'}"
    sealed = {**PLACEMENT, PLACEMENT_SEAL_ANNOTATION: "v1:k1:" + "A" * 43}
    plane.tenant.create_namespaced_pod(TENANT_NS, pod(name))
    bind(plane, plane.scheduler, name, sealed)
    for change in ({PLACEMENT_SEAL_ANNOTATION: None}, {PLACEMENT_SEAL_ANNOTATION: "v1:k1:B"}):
        why = refused(partial(write_annotations, plane.tenant, "merge", status, name, change))
        assert why is not None and "only tmc's scheduler may write a pod's placement" in why, why
    got = plane.admin.read_namespaced_pod(name, TENANT_NS).metadata.annotations
    assert got.get(PLACEMENT_SEAL_ANNOTATION) == sealed[PLACEMENT_SEAL_ANNOTATION]


def test_a_controllers_pod_template_cannot_carry_a_placement(plane: Plane) -> None:
    """A tenant's ReplicaSet (a Deployment's, say) whose template carries a placement: the
    controller creates the pods, and its creates are refused like the tenant's own."""
    plane.cp.start_controller_manager(("replicaset-controller",))
    apps = k8s.AppsV1Api(plane.tenant.api_client)
    labels = {"app": "forged-template"}
    template = {
        "metadata": {"labels": {**labels, **TIERED}, "annotations": dict(PLACEMENT)},
        "spec": pod("unused")["spec"],
    }
    apps.create_namespaced_replica_set(
        TENANT_NS,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "forged-template"},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
        },
    )
    admin_apps = k8s.AppsV1Api(plane.client)

    def failure() -> str | None:
        got = admin_apps.read_namespaced_replica_set_status("forged-template", TENANT_NS)
        return next(
            (x.message for x in got.status.conditions or [] if x.type == "ReplicaFailure"), None
        )

    def made() -> list[str]:
        pods = plane.admin.list_namespaced_pod(TENANT_NS, label_selector="app=forged-template")
        return [str(x.metadata.name) for x in pods.items]

    # Until the controller's create is refused, or (without the policies) a pod is made.
    wait_until(lambda: failure() is not None or made(), 60, "the controller's create judged")
    assert made() == [], made()
    assert "only tmc's scheduler may write a pod's placement" in str(failure())
    apps.delete_namespaced_replica_set("forged-template", TENANT_NS)


def test_the_subresources_left_unmatched_keep_the_pods_metadata(plane: Plane) -> None:
    """The policy does not match pods/ephemeralcontainers nor pods/resize (every match costs
    the API server a conversion of the pod): that is safe only while the API server keeps the
    old metadata on those writes whatever the request says. Checked on this API server."""
    body = pod("subresources", node="node-b")
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    plane.tenant.create_namespaced_pod(TENANT_NS, body)
    plane.tenant.patch_namespaced_pod_ephemeralcontainers(
        "subresources",
        TENANT_NS,
        {
            "metadata": {"annotations": PLACEMENT},
            "spec": {
                "ephemeralContainers": [{"name": "debug", "image": "registry.k8s.io/pause:3.10"}]
            },
        },
    )
    plane.tenant.patch_namespaced_pod_resize(
        "subresources",
        TENANT_NS,
        {
            "metadata": {"annotations": PLACEMENT},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "200m"}}}]},
        },
    )
    got = plane.admin.read_namespaced_pod("subresources", TENANT_NS)
    assert [c.name for c in got.spec.ephemeral_containers or []] == ["debug"]
    assert got.spec.containers[0].resources.requests["cpu"] == "200m"
    assert not [k for k in got.metadata.annotations or {} if k in PLACEMENT], got.metadata


def test_a_tenants_unrelated_update_of_a_placed_pod_passes(plane: Plane) -> None:
    placed_pod(plane, "relabelled")
    plane.tenant.patch_namespaced_pod(
        "relabelled",
        TENANT_NS,
        {"metadata": {"labels": {"tier": "web"}, "annotations": {"team": "a"}}},
    )
    got = plane.admin.read_namespaced_pod("relabelled", TENANT_NS).metadata
    assert got.labels["tier"] == "web" and got.annotations["tmc.dev/llc-mask"] == "0xf0"
    plane.tenant.delete_namespaced_pod("relabelled", TENANT_NS, grace_period_seconds=0)


def judged_no_further(plane: Plane) -> dict[tuple[str, str], float]:
    """Requests each of tmc's policies let through at its match conditions, by policy and
    operation: the API server's count of match-condition evaluations that ended false (an
    evaluation that errs is refused under failurePolicy Fail, so none is counted here)."""
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(c.api_server_metrics(plane.cp)):
        if family.name != "apiserver_admission_match_condition_evaluation_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_count") and sample.labels.get("kind") == "policy":
                counts[sample.labels["name"], sample.labels["operation"]] = sample.value
    return counts


def test_writes_that_cannot_touch_a_placement_end_at_the_match_conditions(plane: Plane) -> None:
    """What a tmc pod's ordinary life asks of the API server: its create and a status write that
    leaves the metadata alone end at the policies' match conditions, one conversion each, not the
    three a judged request costs; its Bindings (kube-scheduler's without annotations, tmc's own
    with the sealed placement) are matched by no policy at all. A forgery is still judged (and
    refused), and not counted here."""
    before = judged_no_further(plane)
    plane.tenant.create_namespaced_pod(TENANT_NS, pod("plain-life"))
    uid = plane.tenant.read_namespaced_pod("plain-life", TENANT_NS).metadata.uid
    plain_binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "plain-life", "namespace": TENANT_NS, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-b"},
    }
    plane.tenant.create_namespaced_pod_binding(
        "plain-life", TENANT_NS, plain_binding, _preload_content=False
    )
    placed_pod(plane, "placed-life")
    status = {"status": {"conditions": [{"type": "PodReadyToStartContainers", "status": "True"}]}}
    plane.tenant.patch_namespaced_pod_status("placed-life", TENANT_NS, status)
    after = judged_no_further(plane)

    def passed(policy: str, operation: str) -> float:
        """How many more requests the policy named `<release>-<policy>` let through early."""
        return sum(
            n - before.get((name, op), 0.0)
            for (name, op), n in after.items()
            if name.endswith("-" + policy) and op == operation
        )

    # Two creates (placed_pod makes one), a status write; no Binding reaches a policy.
    assert passed("pod-placement", "CREATE") == 2, (before, after)
    assert passed("pod-placement", "UPDATE") == 1, (before, after)
    assert passed("binding-placement", "CREATE") == 0, (before, after)
    # A forgery through the same status write is judged: refused, and not let through early.
    forged = {"metadata": {"annotations": {"tmc.dev/llc-mask": "0xf"}}}
    why = refused(
        lambda: plane.tenant.patch_namespaced_pod_status("placed-life", TENANT_NS, forged)
    )
    assert why is not None and "only tmc's scheduler may write a pod's placement" in why, why
    assert judged_no_further(plane) == after


def test_a_tenant_cannot_create_a_pod_with_a_placement(plane: Plane) -> None:
    """On a node by spec.nodeName, not opted in, with a forged placement: refused at create."""
    body = pod(
        "forged", annotations={**PLACEMENT, "tmc.dev/llc-mask": "0xffffffffffff"}, node="node-a"
    )
    why = refused(lambda: plane.tenant.create_namespaced_pod(TENANT_NS, body))
    assert why is not None and "tmc.dev/placement, tmc.dev/llc-mask" in why, why
    # Unbound, for tmc's scheduler to find, just as much.
    why = refused(lambda: plane.tenant.create_namespaced_pod(TENANT_NS, pod("forged-2", PLACEMENT)))
    assert why is not None


def test_a_tenants_own_scheduler_binds_but_its_placement_holds_nothing(plane: Plane) -> None:
    """A Binding's annotations are copied onto its pod. A tenant that runs its own scheduler
    (pods/binding create) binds its pods, tmc's or not, and the API server admits every Binding:
    no policy judges the cluster's Bindings, so other tenants' pods pay nothing for them. What a
    tenant's Binding writes is still no placement: it carries no seal made with tmc's key, or
    one made for another pod, so it holds nothing (the publisher's feeder counts none of them,
    as tmc's engine and tmc-nri do not: seal_test.go in the scheduler plugin, and the node
    plugin's tests), where the sealed placement of tmc's scheduler's Binding counts. The run
    without the policies turns the seal off too (the feeder is given no keys): there the
    tenant's placements count, a forgery that gets through."""
    keys = PlacementSealKeys.from_directory(plane.cp.placement_seal_keys, PLACEMENT_SEAL_KEY)
    trusted = None if WITHOUT_POLICIES else keys
    cluster = KubeCluster(api_client(str(plane.cp.kubeconfig("admin"))))

    def counted() -> int:
        feeder = Feeder(
            cluster, None, tenant_selector=selector_text(plane.tenant_labels), seal_keys=trusted
        )
        feeder.sync()
        return feeder.figures().bound_pods

    def binding(name: str, ann: dict[str, str]) -> dict[str, Any]:
        uid = plane.tenant.read_namespaced_pod(name, TENANT_NS).metadata.uid
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": TENANT_NS, "uid": uid, "annotations": ann},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
        }

    before = counted()
    # tmc's scheduler binds a pod with its sealed placement.
    plane.tenant.create_namespaced_pod(TENANT_NS, pod("tmc-bound"))
    uid = plane.tenant.read_namespaced_pod("tmc-bound", TENANT_NS).metadata.uid
    sealed = real_placement("node-a", "0x3", 2)
    sealed[PLACEMENT_SEAL_ANNOTATION] = keys.seal(uid, sealed)
    plane.scheduler.create_namespaced_pod_binding(
        "tmc-bound", TENANT_NS, binding("tmc-bound", sealed), _preload_content=False
    )
    assert counted() == before + 1
    # The tenant binds: pods/<name>/binding as client-go posts it, the older
    # namespaces/<ns>/bindings, a copy of tmc's sealed placement, and a pod without tmc's label.
    unsealed = real_placement("node-a", "0xff", 8)
    forged = {  # name: (its annotations, tmc's pod, through the older bindings resource)
        "self-bound": (unsealed, True, False),
        "self-bound-old": (unsealed, True, True),
        "self-bound-copy": (sealed, True, False),
        "plain-self-bound": (unsealed, False, False),
    }
    for name, (ann, tiered, older) in forged.items():
        plane.tenant.create_namespaced_pod(TENANT_NS, pod(name, tiered=tiered))
        body = binding(name, ann)
        if older:
            plane.tenant.create_namespaced_binding(TENANT_NS, body, _preload_content=False)
        else:
            plane.tenant.create_namespaced_pod_binding(
                name, TENANT_NS, body, _preload_content=False
            )
        got = plane.admin.read_namespaced_pod(name, TENANT_NS)
        assert got.spec.node_name == "node-a"
        assert {k: got.metadata.annotations.get(k) for k in ann} == ann
    assert counted() == before + 1, "a tenant's Binding wrote a placement that counts"
    for name in ("tmc-bound", *forged):
        plane.admin.delete_namespaced_pod(name, TENANT_NS, grace_period_seconds=0)


# --- tmc's label: only its pods are judged, and the label is guarded with their placement ------


def patch_of(api: k8s.CoreV1Api, status: bool) -> Callable[..., object]:
    return api.patch_namespaced_pod_status if status else api.patch_namespaced_pod


@pytest.mark.parametrize("status", [False, True], ids=["pod", "status"])
def test_labelling_a_pod_that_carries_tmcs_annotations_is_writing_them(
    plane: Plane, status: bool
) -> None:
    """A pod created without tmc's label may carry anything (it is not matched, and no reader
    trusts a placement there); labelling it makes what it carries tmc's, so the label's write
    is refused as a write of the placement, or of the pin, would be."""
    where = "status" if status else "pod"
    patch = patch_of(plane.tenant, status)
    plane.tenant.create_namespaced_pod(
        TENANT_NS, pod(f"label-placed-{where}", PLACEMENT, node="node-b", tiered=False)
    )
    plane.tenant.create_namespaced_pod(
        TENANT_NS, pod(f"label-pinned-{where}", {"tmc.dev/recommendation": GREEDY}, tiered=False)
    )
    labelled = {"metadata": {"labels": TIERED}}
    why = refused(partial(patch, f"label-placed-{where}", TENANT_NS, labelled))
    assert why is not None and "only tmc's scheduler may write a pod's placement" in why, why
    why = refused(partial(patch, f"label-pinned-{where}", TENANT_NS, labelled))
    assert why is not None and "only an operator may pin a recommendation" in why, why
    for name in (f"label-placed-{where}", f"label-pinned-{where}"):
        got = plane.admin.read_namespaced_pod(name, TENANT_NS).metadata.labels or {}
        assert TIERED_POD_LABEL not in got, (name, got)
        plane.admin.delete_namespaced_pod(name, TENANT_NS, grace_period_seconds=0)


@pytest.mark.parametrize("status", [False, True], ids=["pod", "status"])
def test_unlabelling_a_placed_pod_is_removing_its_placement(plane: Plane, status: bool) -> None:
    """Dropping the label (or changing its value) takes the placement out of every reader's
    sight, as removing it would: refused for whoever may not remove it."""
    name = f"unlabel-{'status' if status else 'pod'}"
    placed_pod(plane, name)
    patch = patch_of(plane.tenant, status)
    for label in (None, "false"):
        change = {"metadata": {"labels": {TIERED_POD_LABEL: label}}}
        why = refused(partial(patch, name, TENANT_NS, change))
        assert why is not None and "only tmc's scheduler may write a pod's placement" in why, why
    got = plane.admin.read_namespaced_pod(name, TENANT_NS).metadata
    assert got.labels[TIERED_POD_LABEL] == TIERED_POD_LABEL_VALUE
    assert {k: got.annotations.get(k) for k in PLACEMENT} == PLACEMENT


def test_a_placement_on_a_pod_without_the_label_is_admitted_and_holds_nothing(
    plane: Plane,
) -> None:
    """A pod without tmc's label is not matched: created bound with a placement naming every
    way of node-a, rewritten, removed and written again, all admitted (that is the saving). So
    the publisher's feeder counts it nowhere, where it counts the placement tmc's scheduler
    binds a labelled pod with."""
    cluster = KubeCluster(api_client(str(plane.cp.kubeconfig("admin"))))

    def counted() -> int:
        feeder = Feeder(cluster, None, tenant_selector=selector_text(plane.tenant_labels))
        feeder.sync()
        return feeder.figures().bound_pods

    before = counted()
    forged = real_placement("node-a", "0xff", 8)
    plane.tenant.create_namespaced_pod(
        TENANT_NS, pod("plain-forged", forged, node="node-a", tiered=False)
    )
    removed: dict[str, str | None] = dict.fromkeys(forged)
    for ann in (removed, forged):
        assert (
            refused(partial(write_annotations, plane.tenant, "merge", False, "plain-forged", ann))
            is None
        )
    got = plane.admin.read_namespaced_pod("plain-forged", TENANT_NS)
    assert got.spec.node_name == "node-a" and got.metadata.annotations == forged
    assert counted() == before
    # The same placement, tmc's scheduler's Binding of a labelled pod: counted.
    plane.tenant.create_namespaced_pod(TENANT_NS, pod("tiered-placed"))
    bind(plane, plane.scheduler, "tiered-placed", real_placement("node-a", "0x3", 2))
    assert counted() == before + 1
    for name in ("plain-forged", "tiered-placed"):
        plane.admin.delete_namespaced_pod(name, TENANT_NS, grace_period_seconds=0)


# --- pinned recommendations ---------------------------------------------------------------------


def test_a_tenant_cannot_pin_a_recommendation(plane: Plane) -> None:
    ann = {"tmc.dev/recommendation": GREEDY, "tmc.dev/workload": "w"}
    why = refused(lambda: plane.tenant.create_namespaced_pod(TENANT_NS, pod("greedy", ann)))
    assert why is not None and "only an operator may pin a recommendation" in why, why
    plane.tenant.create_namespaced_pod(TENANT_NS, pod("greedy-later", {"tmc.dev/workload": "w"}))
    why = refused(
        lambda: plane.tenant.patch_namespaced_pod(
            "greedy-later", TENANT_NS, {"metadata": {"annotations": ann}}
        )
    )
    assert why is not None


def test_an_operator_pins_a_recommendation_and_a_tenant_keeps_it(plane: Plane) -> None:
    ann = {"tmc.dev/recommendation": GREEDY}
    plane.operator.create_namespaced_pod(TENANT_NS, pod("pinned", ann))
    # The tenant may still update its pod (the pin unchanged), and delete it.
    plane.tenant.patch_namespaced_pod("pinned", TENANT_NS, {"metadata": {"labels": {"a": "b"}}})
    why = refused(
        lambda: plane.tenant.patch_namespaced_pod(
            "pinned", TENANT_NS, {"metadata": {"annotations": {"tmc.dev/recommendation": None}}}
        )
    )
    assert why is not None
    plane.operator.patch_namespaced_pod(
        "pinned", TENANT_NS, {"metadata": {"annotations": {"tmc.dev/recommendation": None}}}
    )
    plane.tenant.delete_namespaced_pod("pinned", TENANT_NS, grace_period_seconds=0)


def test_pins_are_allowed_in_the_operators_namespaces(plane: Plane) -> None:
    """operatorNamespaces: pods a controller creates from an operator's pinned template."""
    tenant = plane.tenant_in(PINNED_NS)
    tenant.create_namespaced_pod(PINNED_NS, pod("bench", {"tmc.dev/recommendation": GREEDY}))
    # A pin there is not a placement: that stays the scheduler's.
    why = refused(lambda: tenant.create_namespaced_pod(PINNED_NS, pod("bench-2", PLACEMENT)))
    assert why is not None


def test_an_agent_writes_no_pod_annotations(plane: Plane) -> None:
    """The agent only lists pods (RBAC): it can neither forge nor pin."""
    plane.tenant.create_namespaced_pod(TENANT_NS, pod("agent-target"))
    with pytest.raises(k8s.ApiException) as exc:
        plane.agent.patch_namespaced_pod(
            "agent-target", TENANT_NS, {"metadata": {"annotations": PLACEMENT}}
        )
    assert exc.value.status == 403


# --- nodes: an agent writes only its own -------------------------------------------------------


def test_an_agent_writes_its_own_nodes_capacity(plane: Plane) -> None:
    agent = token_client(plane.cp, c.node_bound_token(plane.cp, "node-a"))
    agent.patch_node("node-a", {"metadata": {"annotations": {"tmc.dev/dram-bytes": "1024"}}})
    got = plane.admin.read_node("node-a").metadata.annotations
    assert got["tmc.dev/dram-bytes"] == "1024"


def test_one_nodes_agent_cannot_rewrite_another_nodes_capacity(plane: Plane) -> None:
    plane.admin.patch_node("node-b", {"metadata": {"annotations": {"tmc.dev/dram-bytes": "8"}}})
    agent = token_client(plane.cp, c.node_bound_token(plane.cp, "node-a"))
    forged = {"metadata": {"annotations": {"tmc.dev/dram-bytes": str(4 * 2**50)}}}
    why = refused(lambda: agent.patch_node("node-b", forged))
    assert why is not None and "bound to node-a, not to node-b" in why, why
    assert plane.admin.read_node("node-b").metadata.annotations["tmc.dev/dram-bytes"] == "8"


def test_an_agent_token_bound_to_no_node_writes_no_node(plane: Plane) -> None:
    """The agents' service account without a node in its token (a static token, or one bound
    to no pod) is refused everywhere, as NodeRestriction refuses a kubelet without a node."""
    forged = {"metadata": {"annotations": {"tmc.dev/llc-ways": "48"}}}
    why = refused(lambda: plane.agent.patch_node("node-a", forged))
    assert why is not None and "bound to no node" in why, why


def test_an_agent_changes_only_tmc_keys_on_its_node(plane: Plane) -> None:
    agent = token_client(plane.cp, c.node_bound_token(plane.cp, "node-a"))
    for patch in (
        {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}},
        {"metadata": {"annotations": {"other.example/x": "1"}}},
        {"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}},
    ):
        why = refused(partial(agent.patch_node, "node-a", patch))
        assert why is not None and "only the tmc.dev/ labels and annotations" in why, (patch, why)
    agent.patch_node("node-a", {"metadata": {"labels": {"tmc.dev/host-kind": "k"}}})


def test_a_nodes_rack_pool_is_the_operators(plane: Plane) -> None:
    """A node's own token cannot join its node to a rack pool (and draw on another rack's slow
    memory), claim a pool size, change or leave the pool the operator set; the operator can, and
    the agent still publishes the rest of its capacity beside it."""
    agent = token_client(plane.cp, c.node_bound_token(plane.cp, "node-a"))
    for claimed in (
        {"tmc.dev/slow-pool": "rack-other"},
        {"tmc.dev/slow-pool-bytes": "1"},
    ):
        why = refused(partial(agent.patch_node, "node-a", {"metadata": {"annotations": claimed}}))
        assert why is not None and "rack pool" in why and "operator" in why, (claimed, why)
    plane.admin.patch_node("node-a", {"metadata": {"annotations": {"tmc.dev/slow-pool": "rack-a"}}})
    changes: tuple[dict[str, str | None], ...] = (
        {"tmc.dev/slow-pool": "rack-b"},
        {"tmc.dev/slow-pool": None},
    )
    for change in changes:
        why = refused(partial(agent.patch_node, "node-a", {"metadata": {"annotations": change}}))
        assert why is not None and "rack pool" in why, (change, why)
    agent.patch_node("node-a", {"metadata": {"annotations": {"tmc.dev/llc-ways": "11"}}})
    got = plane.admin.read_node("node-a").metadata.annotations
    assert got["tmc.dev/slow-pool"] == "rack-a" and got["tmc.dev/llc-ways"] == "11"
    plane.admin.patch_node("node-a", {"metadata": {"annotations": {"tmc.dev/slow-pool": None}}})


# --- the runtime's required plugins -------------------------------------------------------------

# What tmc's Binding carries where nodes run tmc-nri (scheduler/plugin/pkg/tmc, Engine.Bind): NRI's
# pod-scoped key and each container's own, which the runtime reads first.
REQUIRED = {
    "required-plugins.noderesource.dev/pod": '["tmc"]',
    "required-plugins.noderesource.dev/container.c": '["tmc"]',
}


def guarded_pod(plane: Plane, name: str, annotations: dict[str, str] | None = None) -> None:
    """A tenant's pod (created with `annotations`) that tmc's scheduler bound as it does where
    nodes run tmc-nri."""
    plane.tenant.create_namespaced_pod(TENANT_NS, pod(name, annotations))
    bind(plane, plane.scheduler, name, {**PLACEMENT, **REQUIRED})


@pytest.mark.parametrize("status", [False, True], ids=["pod", "status"])
@pytest.mark.parametrize(
    "forged",
    [
        # The container's own key, read before the pod's: an empty list switches the guard off.
        {"required-plugins.noderesource.dev/container.c": "[]"},
        # One for a container the pod does not have yet (an ephemeral one it adds later).
        {"required-plugins.noderesource.dev/container.debug": "[]"},
        # The pod-scoped key removed, or changed.
        {"required-plugins.noderesource.dev/pod": None},
        {"required-plugins.noderesource.dev/pod": '["other"]'},
    ],
    ids=["container-emptied", "container-added", "pod-removed", "pod-changed"],
)
def test_a_tenant_cannot_switch_off_a_placed_pods_required_plugins(
    plane: Plane, forged: dict[str, str | None], status: bool, request: pytest.FixtureRequest
) -> None:
    name = "guard-" + request.node.callspec.id
    guarded_pod(plane, name)
    why = refused(partial(write_annotations, plane.tenant, "merge", status, name, forged))
    assert why is not None and "required plugins of a placed pod" in why, why
    got = plane.admin.read_namespaced_pod(name, TENANT_NS).metadata.annotations
    assert {k: v for k, v in got.items() if k.startswith("required-plugins.")} == REQUIRED


def test_a_tenants_required_plugins_set_at_create_are_replaced_by_the_binding(
    plane: Plane,
) -> None:
    """Before its placement a pod's keys are its own (nothing of tmc's is there yet to guard):
    the Binding writes over them, and from then on they are tmc's."""
    emptied = {k: "[]" for k in REQUIRED}
    guarded_pod(plane, "guard-at-create", emptied)
    got = plane.admin.read_namespaced_pod("guard-at-create", TENANT_NS).metadata.annotations
    assert {k: got[k] for k in REQUIRED} == REQUIRED
    why = refused(
        partial(write_annotations, plane.tenant, "merge", False, "guard-at-create", emptied)
    )
    assert why is not None and "required plugins of a placed pod" in why, why
    # A tenant's unrelated write of the placed pod still passes.
    plane.tenant.patch_namespaced_pod(
        "guard-at-create", TENANT_NS, {"metadata": {"annotations": {"team": "a"}}}
    )


def test_a_placed_pods_memory_is_not_raised_in_place(plane: Plane) -> None:
    """pods/resize may lower a placed pod's memory, never raise a request or a limit: its node
    admitted it for the memory tmc placed. An unplaced pod's resize is not tmc's to judge."""

    def with_memory(name: str) -> dict[str, Any]:
        body = pod(name)
        body["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "100m", "memory": "1Gi"},
            "limits": {"memory": "1Gi"},
        }
        return body

    def resize(name: str, requests: dict[str, str], limits: dict[str, str]) -> str | None:
        change = {"name": "c", "resources": {"requests": requests, "limits": limits}}
        return refused(
            partial(
                plane.tenant.patch_namespaced_pod_resize,
                name,
                TENANT_NS,
                {"spec": {"containers": [change]}},
            )
        )

    # A policy is enforced once the API server has compiled it: a probe's resize until refused
    # (without the policies, nothing is to be waited for).
    placed_pod(plane, "resize-probe", body=with_memory("resize-probe"))
    probe = {"cpu": "100m", "memory": "1Gi"}
    if not WITHOUT_POLICIES:
        wait_until(
            lambda: resize("resize-probe", probe, {"memory": "2Gi"}) is not None,
            30,
            "the resize policy enforced",
        )
    placed_pod(plane, "resized", body=with_memory("resized"))
    why = resize("resized", {"cpu": "100m", "memory": "20Gi"}, {"memory": "20Gi"})
    assert why is not None and "may be lowered in place, not raised" in why, why
    assert resize("resized", {"cpu": "100m", "memory": "1Gi"}, {"memory": "2Gi"}) is not None
    assert resize("resized", {"cpu": "200m", "memory": "512Mi"}, {"memory": "512Mi"}) is None
    got = plane.admin.read_namespaced_pod("resized", TENANT_NS).spec.containers[0].resources
    assert got.limits["memory"] == "512Mi"
    # A pod tmc did not place resizes as Kubernetes allows.
    other = pod("unplaced-resize", node="node-b")
    other["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", "memory": "1Gi"},
        "limits": {"memory": "1Gi"},
    }
    plane.tenant.create_namespaced_pod(TENANT_NS, other)
    grown = {"name": "c", "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "2Gi"}}}
    plane.tenant.patch_namespaced_pod_resize(
        "unplaced-resize", TENANT_NS, {"spec": {"containers": [grown]}}
    )


# --- tenant namespaces: outside them nothing is judged, and nothing is trusted ----------------


def real_placement(node: str, mask: str, ways: int) -> dict[str, str]:
    """A placement the engine reads (tmc.placement/v2), as tmc's Binding would carry it."""
    placement: dict[str, Any] = {
        "schema": "tmc.placement/v2",
        "node": node,
        "workload": None,
        "objective": "cheapest",
        "configuration": {
            "vcpus": 1,
            "dram_bytes": 2**30,
            "slow_bytes": 0,
            "slow_ratio": 0.0,
            "llc_ways": ways,
        },
        "llc_mask": mask,
        "slow_from_pool": False,
        "recommendation_id": None,
        "fallback": "test",
        "plan": [],
    }
    return {"tmc.dev/placement": json.dumps(placement), "tmc.dev/llc-mask": mask}


def opted_in(name: str, scheduler: str) -> dict[str, Any]:
    body = pod(name)
    body["spec"]["schedulerName"] = scheduler
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", "memory": "1Gi", "tmc.dev/tiered": "1"},
        "limits": {"memory": "1Gi", "tmc.dev/tiered": "1"},
    }
    return body


def test_outside_tenant_namespaces_a_placement_is_unchecked_and_ignored(plane: Plane) -> None:
    """With tenant namespaces, a pod of another namespace may carry any placement (the policy is
    not evaluated there: that is the saving), so tmc-scheduler counts none of them: a node whose
    every way a forged placement there names (and one on a tenant's pod without tmc's label)
    still takes a tenant's pod, and a pod opting in from there is refused. With the chart's default (every namespace judged), the same forgery
    in that namespace is refused."""
    outside = plane.tenant_in(OUTSIDE_NS)
    forged = real_placement("node-t", "0xf", 4)
    if not plane.tenant_labels:
        why = refused(
            lambda: outside.create_namespaced_pod(
                OUTSIDE_NS, pod("forged-bound", forged, node="node-t")
            )
        )
        assert why is not None and "only tmc's scheduler may write" in why, why
        return
    # Created already bound with every way of node-t, then a second one bound by the tenant's
    # own Binding: both admitted, as written.
    outside.create_namespaced_pod(OUTSIDE_NS, pod("forged-bound", forged, node="node-t"))
    outside.create_namespaced_pod(OUTSIDE_NS, pod("forged-binding"))
    uid = outside.read_namespaced_pod("forged-binding", OUTSIDE_NS).metadata.uid
    outside.create_namespaced_pod_binding(
        "forged-binding",
        OUTSIDE_NS,
        {
            "metadata": {"name": "forged-binding", "uid": uid, "annotations": forged},
            "target": {"kind": "Node", "name": "node-t"},
        },
        _preload_content=False,
    )
    for name in ("forged-bound", "forged-binding"):
        seen = plane.admin.read_namespaced_pod(name, OUTSIDE_NS)
        assert seen.spec.node_name == "node-t" and seen.metadata.annotations == forged, name
    # The same write in a tenant namespace is refused, by the same chart.
    why = refused(lambda: plane.tenant.create_namespaced_pod(TENANT_NS, pod("in-tenant", forged)))
    assert why is not None and "only tmc's scheduler may write a pod's placement" in why, why

    # tmc-scheduler on the chart's configuration with the same selector, as its own scheduler
    # name (the module's other pods are not its to bind), on a node of 4 ways.
    node = c.node_object("node-t", cpus=8)
    node["metadata"]["annotations"] = {
        "tmc.dev/cpus": "8",
        "tmc.dev/dram-bytes": str(16 * 2**30),
        "tmc.dev/slow-bytes": "0",
        "tmc.dev/llc-ways": "4",
    }
    c.register_node(plane.admin, node)
    # A tenant's pod without tmc's label, bound to node-t with every way of it: admitted (it is
    # not matched), and nothing to the engine, whose room on node-t stays free.
    plane.tenant.create_namespaced_pod(
        TENANT_NS, pod("plain-on-node-t", forged, node="node-t", tiered=False)
    )
    tmc_plugin.install_plugin(plane.cp, chart_values(plane.tenant_labels))
    name = "tmc-tenant-scheduler"
    values = {
        **chart_values(plane.tenant_labels),
        **tmc_plugin.plugin_values(plane.cp, schedulerName=name, recommendationWaitSeconds=0),
    }
    rendered = c.render_chart(values)["tmc/templates/plugin.yaml"]
    config_map = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ConfigMap")
    config = plane.cp.dir / "tenant-scheduler.yaml"
    config.write_text(config_map["data"]["scheduler-config.yaml"])
    plane.cp.start_scheduler(config, binary=tmc_plugin.engine_binary("tmc-scheduler"), name=name)
    try:
        plane.admin.create_namespaced_pod(TENANT_NS, opted_in("tenants-pod", name))
        plane.admin.create_namespaced_pod(OUTSIDE_NS, opted_in("outsiders-pod", name))

        def placed_on_node_t() -> bool:
            got = plane.admin.read_namespaced_pod("tenants-pod", TENANT_NS)
            return got.spec.node_name == "node-t"

        wait_until(placed_on_node_t, 60, "the tenant's pod placed on node-t")
        ann = plane.admin.read_namespaced_pod("tenants-pod", TENANT_NS).metadata.annotations
        assert json.loads(ann["tmc.dev/placement"])["configuration"]["llc_ways"] == 4

        def refusal() -> str:
            got = plane.admin.read_namespaced_pod("outsiders-pod", OUTSIDE_NS)
            for cond in got.status.conditions or []:
                if cond.type == "PodScheduled" and cond.status == "False":
                    return str(cond.message or "")
            return ""

        wait_until(lambda: "not one of tmc's tenant namespaces" in refusal(), 60, "the refusal")
        assert plane.admin.read_namespaced_pod("outsiders-pod", OUTSIDE_NS).spec.node_name is None
    finally:
        plane.cp.stop_process(name)
    publisher_counts_tenant_namespaces_only(plane)


def publisher_counts_tenant_namespaces_only(plane: Plane) -> None:
    """The publisher's feeder, with the chart's publisher identity and RBAC and the same
    selector, counts the tenant's bound pod and not the forged placements outside; when the
    operator labels that namespace its watch (a label-selector watch of namespaces) sees it join
    and the placements there count, and when the label goes they no longer do."""
    cluster = KubeCluster(api_client(str(plane.cp.kubeconfig("publisher"))))
    selector = selector_text(plane.tenant_labels)
    feeder = Feeder(cluster, None, tenant_selector=selector, watch_timeout_seconds=20)
    feeder.sync()
    assert feeder.figures().bound_pods == 1  # tenants-pod (not plain-on-node-t: no label)
    feeder.start()
    unlabel = {"metadata": {"labels": dict.fromkeys(plane.tenant_labels)}}
    try:
        plane.admin.patch_namespace(OUTSIDE_NS, {"metadata": {"labels": plane.tenant_labels}})
        wait_until(lambda: feeder.figures().bound_pods == 3, 30, "the joined namespace counted")
        plane.admin.patch_namespace(OUTSIDE_NS, unlabel)
        wait_until(lambda: feeder.figures().bound_pods == 1, 30, "the namespace's pods released")
    finally:
        feeder.stop()
        plane.admin.patch_namespace(OUTSIDE_NS, unlabel)


# Every test that tries a forgery of what tmc reads: each must fail on the chart without its
# admission policies (the refusal it expects is the policies', not RBAC's). The bypasses are
# among them: controllers' pod templates, Bindings, patches of every kind, pods created bound.
FORGERIES = (
    "test_a_tenant_cannot_rewrite_its_placement_after_binding",
    "test_a_tenant_cannot_add_tmcs_annotations_by_any_kind_of_write",
    "test_a_tenant_cannot_remove_a_placement_by_any_kind_of_write",
    "test_a_controllers_pod_template_cannot_carry_a_placement",
    "test_a_tenant_cannot_create_a_pod_with_a_placement",
    "test_a_tenants_own_scheduler_binds_but_its_placement_holds_nothing",
    "test_a_tenant_cannot_strip_or_change_its_placements_seal",
    "test_labelling_a_pod_that_carries_tmcs_annotations_is_writing_them",
    "test_unlabelling_a_placed_pod_is_removing_its_placement",
    "test_a_tenant_cannot_pin_a_recommendation",
    "test_one_nodes_agent_cannot_rewrite_another_nodes_capacity",
    "test_an_agent_token_bound_to_no_node_writes_no_node",
    "test_an_agent_changes_only_tmc_keys_on_its_node",
    "test_a_nodes_rack_pool_is_the_operators",
    "test_a_tenant_cannot_switch_off_a_placed_pods_required_plugins",
    "test_a_placed_pods_memory_is_not_raised_in_place",
)


def test_without_the_policies_every_forgery_gets_through(tmp_path: Path) -> None:
    """This module's forgery tests run again, by pytest, on a control plane whose chart has no
    admission policies: every one of them must fail. A forgery test that passed there would be
    refused by something else (RBAC) or would not test a forgery at all."""
    if WITHOUT_POLICIES:
        pytest.fail("the run without the policies selects the forgery tests only")
    report = tmp_path / "report.xml"
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            __file__,
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            " or ".join(FORGERIES),
            f"--junitxml={report}",
        ],
        env={**os.environ, "TMC_TEST_ADMISSION_POLICIES": "off"},
        check=False,  # its tests are to fail: the report says how each ended
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert report.exists(), ran.stdout[-3000:] + ran.stderr[-3000:]
    cases = {case.get("name"): case for case in ET.parse(report).getroot().iter("testcase")}
    if cases and all(case.find("skipped") is not None for case in cases.values()):
        unavailable(Unavailable("the run without the policies found no control plane"))
    seen = {str(name).split("[")[0] for name in cases}
    assert seen == set(FORGERIES), sorted(set(FORGERIES) ^ seen)
    # Each failed on an assertion of its own: a forgery admitted. An error in a fixture or a
    # probe's timeout would prove nothing.
    not_refused = sorted(str(n) for n, case in cases.items() if not failed_on_assertion(case))
    assert not_refused == [], ran.stdout[-3000:]


def failed_on_assertion(case: ET.Element) -> bool:
    """Whether a junit test case failed, and on an AssertionError (pytest's report of a failure
    ends with the place and the exception's type)."""
    failure = case.find("failure")
    lines = (failure.text or "").strip().splitlines() if failure is not None else []
    return bool(lines) and lines[-1].endswith(": AssertionError")
