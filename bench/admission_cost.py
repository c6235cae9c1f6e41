# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""What tmc's pod admission policies cost the API server for a pod that is not tmc's, and for
one that is: the CPU kube-apiserver spends per pod, on a real control plane (etcd and
kube-apiserver from tests/scheduler/controlplane).

    python -m bench.admission_cost [--repeat 3] [--pods 100] [--json PATH]

Five arms, interleaved round by round (their order rotating) so that drift in the machine's
load hits them alike:
  none      the chart's RBAC, none of its admission policies
  every     the chart's policies as by default (every namespace, sealed placements): the
            measured pods lack tmc's label (tmc.dev/tiered=true), and no policy judges a Binding
  unsealed  the same with placementSeal off: the binding-placement policy matches every
            Binding, so the measured pods' Bindings are
  tenants   the chart's policies with admission.tenantNamespaceLabels set: the measured
            namespace is not labelled, so none of its pods' writes is matched
  tiered    the chart's policies as by default, the measured pods labelled as tmc's: every
            write of theirs is judged (what a tmc pod costs)
A round makes N pods in the measured namespace (never a tenant namespace), each created, bound
(pods/binding), its status patched and deleted, as the scheduler and a kubelet would; its cost
is kube-apiserver's user and system CPU over the round (/proc/<pid>/stat) divided by N, and the
CEL evaluations tmc's policies cost it (the API server's own counts of their match-condition
evaluations and of the policies' checks, over the round) divided by N. Prints the median per arm,
the ratios to `none` measured in the same run, and the load average before and after
(`--repeat`, also `--rounds`: rounds per arm).
"""

from __future__ import annotations

import statistics
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import Result, arguments, load_line, process_cpu_seconds
from model.node_contract import tiered_pod_labels
from tests.scheduler.controlplane import RELEASE, ControlPlane
from tests.scheduler.controlplane import cluster as c
from tests.services import wait_until

TENANT_NS = "bench-tenant"  # labelled: one of tmc's under the tenants arm
OTHER_NS = "bench-other"  # never labelled: the pods measured
LABELS = {"tmc.dev/tenant": "yes"}
FORGED = {"tmc.dev/placement": "{}", "tmc.dev/llc-mask": "0x1"}
ARMS = ("none", "every", "unsealed", "tenants", "tiered")
# Each arm's chart values.
ARM_VALUES: dict[str, dict[str, Any]] = {
    "every": {},
    "unsealed": {"placementSeal": {"enabled": False}},
    "tenants": {"admission": {"tenantNamespaceLabels": LABELS}},
    "tiered": {},
}
TIERED = tiered_pod_labels()


def api_cpu_seconds(cp: ControlPlane) -> float:
    """kube-apiserver's user + system CPU so far."""
    return process_cpu_seconds(cp.procs["kube-apiserver"].pid)


def policies(values: dict[str, Any]) -> list[dict[str, Any]]:
    rendered = c.render_chart(values)["tmc/templates/admission.yaml"]
    return [d for d in yaml.safe_load_all(rendered) if d]


def cel_evaluations(cp: ControlPlane) -> float:
    """How many times so far the API server evaluated CEL for tmc's policies: their match
    conditions (apiserver_admission_match_condition_evaluation_seconds, kind policy) and their
    checks of the requests those let through (apiserver_validating_admission_policy_check)."""
    total = 0.0
    for family in text_string_to_metric_families(c.api_server_metrics(cp)):
        for s in family.samples:
            if (
                family.name == "apiserver_admission_match_condition_evaluation_seconds"
                and s.name.endswith("_count")
                and s.labels.get("kind") == "policy"
                and s.labels.get("name", "").startswith(RELEASE)
            ) or (
                family.name == "apiserver_validating_admission_policy_check"
                and s.name.endswith("_total")
                and s.labels.get("policy", "").startswith(RELEASE)
            ):
                total += s.value
    return total


def probe_refused(api: k8s.CoreV1Api, ns: str) -> bool:
    """Whether a placement written on one of tmc's pods in ns is refused now (the probe pod is
    removed either way)."""
    body = pod("probe", FORGED, tiered=True)
    try:
        api.create_namespaced_pod(ns, body)
    except k8s.ApiException as exc:
        if exc.status in (400, 403, 422):
            return True
        raise
    remove_probe(api, ns, "probe")
    return False


def remove_probe(api: k8s.CoreV1Api, ns: str, name: str) -> None:
    """Delete a probe pod and wait until it is gone, so that the next probe can take its name."""
    api.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    wait_until(
        lambda: not api.list_namespaced_pod(ns, field_selector=f"metadata.name={name}").items,
        30,
        f"{name} gone",
    )


def probe_binding_refused(api: k8s.CoreV1Api, ns: str) -> bool:
    """Whether a Binding carrying a placement is refused now (the binding-placement policy; the
    probe pod is removed either way)."""
    made = api.create_namespaced_pod(ns, pod("probe-bound"))
    try:
        api.create_namespaced_pod_binding(
            "probe-bound",
            ns,
            {
                "metadata": {
                    "name": "probe-bound",
                    "uid": made.metadata.uid,
                    "annotations": FORGED,
                },
                "target": {"kind": "Node", "name": "node-a"},
            },
            _preload_content=False,
        )
        refused = False
    except k8s.ApiException as exc:
        if exc.status not in (400, 403, 422):
            raise
        refused = True
    remove_probe(api, ns, "probe-bound")
    return refused


def install(cp: ControlPlane, arm: str) -> None:
    """Put in the arm's policies, and wait until the API server enforces exactly those (the
    tiered arm's are every arm's)."""
    client = c.api_client(cp)
    admission = k8s.AdmissionregistrationV1Api(client)
    for b in admission.list_validating_admission_policy_binding().items:
        if b.metadata.name.startswith(RELEASE):
            admission.delete_validating_admission_policy_binding(b.metadata.name)
    for p in admission.list_validating_admission_policy().items:
        if p.metadata.name.startswith(RELEASE):
            admission.delete_validating_admission_policy(p.metadata.name)
    if arm != "none":
        for doc in policies(ARM_VALUES[arm]):
            k8s_utils.create_from_dict(client, doc)
    api = c.core(cp)
    want_tenant, want_other = arm != "none", arm in ("every", "unsealed", "tiered")
    # Each policy is loaded on its own: the binding policy's arm waits for it as well.
    wait_until(
        lambda: (
            probe_refused(api, TENANT_NS) == want_tenant
            and probe_refused(api, OTHER_NS) == want_other
            and probe_binding_refused(api, OTHER_NS) == (arm == "unsealed")
        ),
        60,
        f"the {arm} arm's policies enforced",
    )


def pod(
    name: str, annotations: dict[str, str] | None = None, tiered: bool = False
) -> dict[str, Any]:
    """A pod, labelled as tmc's when `tiered` (a tenant's other pods are not)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": dict(TIERED if tiered else {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }


def one_round(
    cp: ControlPlane, api: k8s.CoreV1Api, n: int, tag: str, tiered: bool = False
) -> tuple[float, float]:
    """N pods (tmc's when `tiered`) created, bound, status-patched and deleted:
    kube-apiserver's CPU ms per pod, and the CEL evaluations of tmc's policies per pod."""
    evaluated = cel_evaluations(cp)
    before = api_cpu_seconds(cp)
    for i in range(n):
        name = f"{tag}-{i}"
        made = api.create_namespaced_pod(OTHER_NS, pod(name, tiered=tiered))
        api.create_namespaced_pod_binding(
            name,
            OTHER_NS,
            {
                "metadata": {"name": name, "uid": made.metadata.uid},
                "target": {"kind": "Node", "name": "node-a"},
            },
            _preload_content=False,
        )
        api.patch_namespaced_pod_status(
            name, OTHER_NS, {"status": {"phase": "Running", "podIP": "10.0.0.1"}}
        )
        api.delete_namespaced_pod(name, OTHER_NS, grace_period_seconds=0)
    ms = (api_cpu_seconds(cp) - before) * 1000 / n
    return ms, (cel_evaluations(cp) - evaluated) / n


def main(argv: list[str] | None = None) -> None:
    parser = arguments(
        __doc__,
        repeat=3,
        repeat_help="rounds per arm",
        repeat_aliases=("--rounds",),
        repeat_bounds=(1, 50),
    )
    parser.add_argument("--pods", type=int, default=100, help="pods per round")
    args = parser.parse_args(argv)
    if not 1 <= args.pods <= 10000:
        parser.error("--pods must be in 1..10000")
    result = Result("admission_cost", {"rounds": args.repeat, "pods": args.pods})
    cp = ControlPlane()
    try:
        cp.start()
        c.install_rbac(cp, {"admission": {"enabled": False}})
        api = c.core(cp)
        c.register_node(api, c.node_object("node-a"))
        api.create_namespace({"metadata": {"name": TENANT_NS, "labels": LABELS}})
        api.create_namespace({"metadata": {"name": OTHER_NS}})
        for ns in (TENANT_NS, OTHER_NS):
            c.ensure_default_account(api, ns)
        one_round(cp, api, min(args.pods, 20), "warm")
        samples: dict[str, list[float]] = {arm: [] for arm in ARMS}
        evaluations: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for r in range(args.repeat):
            order = ARMS[r % len(ARMS) :] + ARMS[: r % len(ARMS)]
            for arm in order:
                install(cp, arm)
                ms, cel = one_round(cp, api, args.pods, f"r{r}-{arm}", tiered=arm == "tiered")
                samples[arm].append(ms)
                evaluations[arm].append(cel)
                print(f"round {r} {arm:8s} {ms:6.3f} ms/pod  {cel:5.2f} CEL/pod", flush=True)
    finally:
        cp.close()
    print(
        f"\nkube-apiserver CPU per pod (create, bind, status patch, delete; tmc's pod under "
        f"tiered, another pod elsewhere), "
        f"{args.repeat} rounds x {args.pods} pods:"
    )
    for arm in ARMS:
        result.figure(arm, "median ms/pod", statistics.median(samples[arm]), 3)
        result.figure(arm, "CEL evaluations/pod", statistics.median(evaluations[arm]), 2)
    for arm in ARMS:
        med = result.figures[arm]["median ms/pod"]
        rel = result.compare(arm, "median ms/pod", "none", label="ratio to none")
        cel = statistics.median(evaluations[arm])
        print(
            f"  {arm:8s} median {med:6.3f} ms/pod   ratio to none {rel:5.2f}   "
            f"CEL evaluations {cel:4.2f}/pod"
        )
    print(load_line(result.write(args.json)))


if __name__ == "__main__":
    main()
