# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""`./dev cluster up --placement dra`, as docs/install.md's section 7 runs it: the chart installed
with `dra.enabled` and tenant namespaces on the real control plane, tmc-dra-publisher as its
service account, kube-controller-manager's resource-claim controller and the stock
kube-scheduler; a newcomer's steps to a pod placed through the DRA door (the profile uploaded,
the namespace labelled, deploy/examples/tiered-pod-dra.yaml applied), its claim allocated as the
published recommendation's configuration on the node the pod is bound to; `status` names the
door's processes and `down` stops them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client as k8s

from tests.scheduler.controlplane import RELEASE
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import devcluster as dc
from tests.scheduler.test_install import account_may
from tests.services import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FULL = f"{RELEASE}-tmc"
EXAMPLE = ROOT / "deploy" / "examples" / "tiered-pod-dra.yaml"


@pytest.fixture(scope="module")
def dra_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dc.State, Path]]:
    state_path = tmp_path_factory.mktemp("cluster") / "state.json"
    for state in dc.up_for_tests(state_path, "dra"):
        yield state, state_path


def logs(state: dc.State) -> str:
    return "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
        for p in Path(state.dir).glob("*.log")
    )


def test_the_guide_gives_the_dra_doors_steps() -> None:
    guide = (ROOT / "docs" / "install.md").read_text()
    assert "./dev cluster up --placement dra" in guide
    for step in dc.next_steps("dra").splitlines()[4:]:
        assert step.strip() in guide, step


def test_the_node_plugin_may_read_the_claims_it_prepares_and_no_more(
    dra_cluster: tuple[dc.State, Path],
) -> None:
    """tmc-dra-node runs as the agents' service account (the node DaemonSet's): the real
    authorizer lets it get a ResourceClaim, which the kubelet plugin helper reads before each
    prepare, and nothing else of DRA, nor the agent more than it had."""
    state, _ = dra_cluster
    client = dc.admin_client(state.kubeconfig)

    def allowed(verb: str, resource: str, sub: str = "") -> bool:
        group = ".resource.k8s.io" if resource.startswith("resource") else ""
        return account_may(client, f"{FULL}-agent", verb, resource + group, sub)

    assert allowed("get", "resourceclaims")
    for verb, resource, sub in [
        ("list", "resourceclaims", ""),
        ("watch", "resourceclaims", ""),
        ("update", "resourceclaims", ""),
        ("patch", "resourceclaims", "status"),
        ("update", "resourceclaims", "binding"),
        ("create", "resourceslices", ""),
        ("get", "resourceclaimtemplates", ""),
        ("get", "pods", ""),
        ("get", "secrets", ""),
    ]:
        assert not allowed(verb, resource, sub), (verb, resource, sub)


def test_the_dra_door_places_the_example_pod(dra_cluster: tuple[dc.State, Path]) -> None:
    state, state_path = dra_cluster
    assert state.placement == "dra"
    needed = {"kube-scheduler", "kube-controller-manager", "tmc-dra-publisher", "publisher"}
    assert needed <= set(state.pids)
    assert dc.not_running(state, needed) == [], dc.status_lines(state)
    assert "DRA devices" in dc.describe(state)

    client = dc.admin_client(state.kubeconfig)
    core = k8s.CoreV1Api(client)
    objects = k8s.CustomObjectsApi(client)
    # The newcomer's steps: the profile uploaded with the agents' token, the namespace made a
    # tenant's, the example pod applied as written.
    upload = dc.upload_example_profile(state, core)
    assert upload.status_code in (200, 201), upload.text
    core.patch_namespace("default", {"metadata": {"labels": dc.DRA_TENANT_LABELS}})
    body = yaml.safe_load(EXAMPLE.read_text())
    core.create_namespaced_pod("default", body)
    name = body["metadata"]["name"]
    try:
        pods = c.bound_pods(core, [name], "default", timeout=120)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{logs(state)}") from exc
    pod = pods[name]
    node = pod.spec.node_name
    assert "tmc.dev/placement" not in (pod.metadata.annotations or {})

    # The template the pod names is the published recommendation's, and the claim made from
    # it holds that configuration, on the node the pod is bound to.
    template = body["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    rec = cast(
        dict[str, Any],
        objects.get_cluster_custom_object("tmc.dev", "v1alpha1", "tieredrecommendations", template),
    )["spec"]
    assert rec["workload"] == "graph500" and rec["objective"] == "slo:5%"
    claim_name = pod.status.resource_claim_statuses[0].resource_claim_name
    claim = cast(
        dict[str, Any],
        objects.get_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims", claim_name
        ),
    )
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["pool"] for r in results if not r["pool"].startswith("rack-pool/")} == {node}
    chosen = {r["request"].split("/")[1] for r in results}
    assert len(chosen) == 1, results  # one alternative, taken whole
    by_kind = {r["request"].split("/")[0]: r for r in results}
    assert "ways" in by_kind and "dram" in by_kind, results

    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    pids = dict(state.pids)
    dc.down(state_path)
    wait_until(lambda: not [p for p in pids.values() if dc.running(p)], 30, "every process stopped")
