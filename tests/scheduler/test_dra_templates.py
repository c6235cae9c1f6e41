# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,no-untyped-call,union-attr"
"""tmc-dra-publisher's ResourceClaimTemplates on a real kube-apiserver v1.36.3, run as the
chart's dra-publisher service account with the chart's RBAC and command line for tenant
namespaces (dra.enabled, admission.tenantNamespaceLabels): each tenant namespace gets, per
published TieredRecommendation that has a configuration, a template named as the
recommendation whose claim is `tmc-dra-slices --claim` of it and its alternatives (pkg/dra's
ClaimSpec); a change of the recommendation's ways replaces it (a template's spec cannot be
updated), a namespace that stops being a tenant's loses it, and a deleted recommendation's go
(the publisher deletes them: no garbage collector runs here). A fallback gets none, an
unlabelled namespace none, and a template the publisher did not make, whatever its name, is
never touched."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from model.node_contract import Alternative, Recommendation
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane.plugin import install_crd
from tests.scheduler.test_dra_claims import claim_spec
from tests.scheduler.test_dra_objects import (
    publishing_plane,
    start_stock_scheduler,
)
from tests.scheduler.test_dra_publisher import Cluster
from tests.services import wait_until

pytestmark = pytest.mark.slow

GIB = 2**30
TENANT = {"tmc.dev/tenant": "yes"}
RESOURCE = ("resource.k8s.io", "v1")
TMC = ("tmc.dev", "v1alpha1", "tieredrecommendations")


class Templates(Cluster):
    def __init__(self, cp: ControlPlane, slices_command: Path) -> None:
        super().__init__(cp, slices_command, {"admission": {"tenantNamespaceLabels": TENANT}})
        install_crd(cp)

    def namespace(self, name: str, labels: dict[str, str]) -> None:
        self.core.create_namespace({"metadata": {"name": name, "labels": labels}})

    def templates(self, namespace: str) -> dict[str, dict[str, Any]]:
        listed = cast(
            dict[str, Any],
            self.objects.list_namespaced_custom_object(
                *RESOURCE, namespace, "resourceclaimtemplates"
            ),
        )
        return {t["metadata"]["name"]: t for t in listed["items"]}

    def template(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": "/".join(RESOURCE),
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": spec},
        }
        return cast(
            dict[str, Any],
            self.objects.create_namespaced_custom_object(
                *RESOURCE, namespace, "resourceclaimtemplates", body
            ),
        )

    def publish(self, recommendation: Recommendation) -> str:
        body = recommendation.to_object()
        self.objects.create_cluster_custom_object(*TMC, body)
        return cast(str, body["metadata"]["name"])

    def templates_reconciled(self) -> int:
        return self.log.read_text(errors="replace").count("templates reconciled")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Templates]:
    with publishing_plane(tmp_path_factory, "dra-templates") as (cp, slices_command):
        made = Templates(cp, slices_command)
        yield made
        made.stop()


def graph500(ways: int) -> Recommendation:
    return Recommendation(
        workload="graph500",
        objective="cheapest",
        dram_bytes=5 * GIB,
        slow_bytes=3 * GIB,
        llc_ways=ways,
        slow_ratio=0.375,
    )


def test_each_tenant_namespace_keeps_a_template_per_published_recommendation(
    plane: Templates,
) -> None:
    def claim(ways: int) -> dict[str, Any]:
        alternative = {"llc_ways": ways, "dram_bytes": 5 * GIB, "slow_bytes": 3 * GIB}
        return claim_spec(plane.slices_command, [alternative])

    plane.namespace("tenant-a", TENANT)
    plane.namespace("tenant-b", TENANT)
    plane.namespace("plain", {})
    name = plane.publish(graph500(12))
    fallback = plane.publish(
        Recommendation(workload="stream", objective="cheapest", fallback="no profile")
    )
    # Algorithm 1's other candidates within T, after the pick: the claim offers both, in order.
    wider = Alternative(llc_ways=20, slow_ratio=0.25, dram_bytes=6 * GIB, slow_bytes=2 * GIB)
    offering = plane.publish(
        graph500(12).model_copy(update={"objective": "slo:5%", "alternatives": [wider]})
    )
    # Templates that are not the publisher's: one under the recommendation's own name in
    # tenant-b, labelled by someone else, and another in tenant-a.
    theirs = plane.template("tenant-b", name, claim(4))
    other = plane.template("tenant-a", "gpu", claim(4))
    plane.start()

    # Appear: tenant-a's template is ClaimSpec of the recommendation, labelled and owned;
    # tenant-b's name is taken and left alone (logged); nothing in plain, nothing for a fallback.
    def spec_in(ns: str, of: str = name) -> dict[str, Any] | None:
        t = plane.templates(ns).get(of)
        return None if t is None else cast(dict[str, Any], t["spec"]["spec"])

    wait_until(lambda: spec_in("tenant-a") == claim(12), 60, "tenant-a's template at 12 ways")
    made = plane.templates("tenant-a")[name]
    assert made["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "tmc-dra-publisher"}
    assert made["metadata"]["annotations"] == {
        "tmc.dev/workload": "graph500",
        "tmc.dev/objective": "cheapest",
    }
    published = cast(dict[str, Any], plane.objects.get_cluster_custom_object(*TMC, name))
    uid = published["metadata"]["uid"]
    owners = made["metadata"]["ownerReferences"]
    assert [(o["apiVersion"], o["kind"], o["name"], o["uid"]) for o in owners] == [
        ("tmc.dev/v1alpha1", "TieredRecommendation", name, uid)
    ]
    wait_until(
        lambda: "not tmc-dra-publisher's" in plane.log.read_text(errors="replace"),
        30,
        "the taken name logged",
    )
    assert plane.templates("plain") == {}
    assert fallback not in plane.templates("tenant-a")
    both = claim_spec(
        plane.slices_command,
        [
            {"llc_ways": 12, "dram_bytes": 5 * GIB, "slow_bytes": 3 * GIB},
            {"llc_ways": 20, "dram_bytes": 6 * GIB, "slow_bytes": 2 * GIB},
        ],
    )
    wait_until(
        lambda: spec_in("tenant-a", offering) == both,
        60,
        "the template offering the recommendation and its alternative",
    )

    # The ways change: the template is replaced (a new object, the new claim).
    plane.objects.patch_cluster_custom_object(*TMC, name, {"spec": {"llc_ways": 16}})
    wait_until(lambda: spec_in("tenant-a") == claim(16), 60, "tenant-a's template at 16 ways")
    assert plane.templates("tenant-a")[name]["metadata"]["uid"] != made["metadata"]["uid"]

    # A namespace labelled a tenant's gets the template; unlabelled, it loses it.
    plane.namespace("tenant-c", TENANT)
    wait_until(lambda: spec_in("tenant-c") == claim(16), 60, "tenant-c's template")
    plane.core.patch_namespace("tenant-c", {"metadata": {"labels": {"tmc.dev/tenant": None}}})
    wait_until(lambda: plane.templates("tenant-c") == {}, 60, "tenant-c's template gone")

    # Deleted: the recommendation's templates go with it.
    plane.objects.delete_cluster_custom_object(*TMC, name)
    wait_until(lambda: name not in plane.templates("tenant-a"), 60, "the templates deleted")

    # The templates that were not the publisher's were never touched.
    for ns, before in (("tenant-b", theirs), ("tenant-a", other)):
        now = plane.templates(ns)[before["metadata"]["name"]]
        assert now["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert plane.proc is not None and plane.proc.poll() is None
    assert plane.templates_reconciled() > 0


def test_a_pod_naming_its_template_is_placed_by_the_stock_scheduler(plane: Templates) -> None:
    """The DRA door end to end, on the stock control plane: a tiered node's slices from the
    publisher, the chart's DeviceClasses, the template the publisher keeps for a recommendation,
    the resource-claim controller making the pod's claim from it, and the stock kube-scheduler
    allocating that claim and binding the pod: the recommendation's ways, as a count of the
    node's way device, and its DRAM and slow memory, by the byte, on the node's own devices."""
    if plane.proc is None:
        plane.start()
    node = "node-t"
    plane.node(
        node,
        {
            "tmc.dev/dram-bytes": str(24 * GIB),
            "tmc.dev/slow-bytes": str(128 * GIB),
            "tmc.dev/llc-ways": "48",
        },
        "optane-48",
    )
    wait_until(
        lambda: any(s["spec"].get("nodeName") == node for s in plane.slices().values()),
        60,
        "the node's slices",
    )
    # The chart's DeviceClasses are installed with the publisher's objects (Cluster).
    start_stock_scheduler(plane.cp)
    plane.cp.start_controller_manager(("resourceclaim-controller",))

    ns = "tenant-d"
    plane.namespace(ns, TENANT)
    c.ensure_default_account(plane.core, ns)
    name = plane.publish(graph500(12))
    wait_until(lambda: name in plane.templates(ns), 60, "the template in tenant-d")
    plane.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "graph500-0"},
            "spec": {
                "automountServiceAccountToken": False,
                "resourceClaims": [{"name": "tiers", "resourceClaimTemplateName": name}],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example.com/graph500:3.0.0",
                        "resources": {"claims": [{"name": "tiers"}]},
                    }
                ],
            },
        },
    )

    def bound() -> bool:
        return plane.core.read_namespaced_pod("graph500-0", ns).spec.node_name == node

    wait_until(bound, 90, "the pod bound through its claim")
    pod = plane.core.read_namespaced_pod("graph500-0", ns)
    statuses = pod.status.resource_claim_statuses or []
    claim_name = statuses[0].resource_claim_name
    claim = cast(
        dict[str, Any],
        plane.objects.get_namespaced_custom_object(*RESOURCE, ns, "resourceclaims", claim_name),
    )
    results = {r["request"]: r for r in claim["status"]["allocation"]["devices"]["results"]}
    assert set(results) == {"ways/c0", "dram/c0", "slow/c0"}
    assert {r["pool"] for r in results.values()} == {node}
    assert (results["ways/c0"]["device"], results["ways/c0"]["consumedCapacity"]) == (
        "ways",
        {"ways": "12"},
    )
    assert results["dram/c0"]["consumedCapacity"] == {"bytes": "5Gi"}
    assert (results["slow/c0"]["device"], results["slow/c0"]["consumedCapacity"]) == (
        "slow",
        {"bytes": "3Gi"},
    )
