# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""The plugin's placement path on loopback, every hop a real process: tmc-scheduler
(kube-scheduler with the TmcPlacement plugin, built by scheduler/plugin/build.sh next to the
control plane) on the chart's plugin configuration and RBAC, the recommendation publisher
(`python -m scheduler.publisher`) on a real PostgreSQL, and the node agents of cluster.py.

Used by tests/scheduler/test_plugin_e2e.py and bench/scheduler_e2e.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from model.node_contract import (
    GROUP,
    RECOMMENDATION_PLURAL,
    RECOMMENDATION_VERSION,
    NodeCapacity,
    Placement,
)
from tests.scheduler.controlplane import NAMESPACE, ControlPlane, Unavailable
from tests.scheduler.controlplane.cluster import ROOT, api_client, render_chart
from tests.services import wait_until

CRD = ROOT / "deploy" / "helm" / "tmc" / "crds" / "tieredrecommendations.yaml"
SCHEDULER_BINARY = "tmc-scheduler"


PLUGIN_BUILD = ROOT / "scheduler" / "plugin" / "build.sh"


def build_scheduler() -> None:
    """tmc-scheduler from this checkout, always: the binary in the shared cache may come from
    another one, and go build relinks nothing when it is current (about a second)."""
    built = subprocess.run(["bash", str(PLUGIN_BUILD)], check=False, capture_output=True, text=True)
    if built.returncode != 0:
        raise Unavailable(f"tmc-scheduler did not build: {built.stderr[-2000:]}")


def plugin_values(cp: ControlPlane, **extra: Any) -> dict[str, Any]:
    return {
        "scheduler": {"placement": "plugin"},
        "plugin": {
            "kubeconfig": str(cp.kubeconfig("scheduler")),
            "leaderElect": False,
            **extra,
        },
    }


def install_plugin(cp: ControlPlane) -> None:
    """The CRD (the chart's crds/) and the plugin's and publisher's RBAC from the chart, as
    `helm install` creates them; the base RBAC (cluster.install_rbac) must be in first."""
    client = api_client(cp)
    k8s_utils.create_from_dict(client, yaml.safe_load(CRD.read_text()))
    ext = k8s.ApiextensionsV1Api(client)

    def established() -> bool:
        crd = ext.read_custom_resource_definition(f"{RECOMMENDATION_PLURAL}.{GROUP}")
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    wait_until(established, 30, "the TieredRecommendation CRD established")
    rendered = render_chart(plugin_values(cp))["tmc/templates/plugin.yaml"]
    for doc in yaml.safe_load_all(rendered):
        if doc and doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            k8s_utils.create_from_dict(client, doc, namespace=NAMESPACE)


def plugin_config(cp: ControlPlane, name: str = "tmc-scheduler", **extra: Any) -> Path:
    """The chart's tmc-scheduler configuration, pointed at the test's kubeconfig."""
    rendered = render_chart(plugin_values(cp, **extra))["tmc/templates/plugin.yaml"]
    config_map = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ConfigMap")
    path = cp.dir / f"plugin-config-{name}.yaml"
    path.write_text(config_map["data"]["scheduler-config.yaml"])
    return path


def start_plugin_scheduler(cp: ControlPlane, name: str = "tmc-scheduler", **extra: Any) -> None:
    cp.start_scheduler(plugin_config(cp, name, **extra), binary=SCHEDULER_BINARY, name=name)


class PublisherProcess:
    """`python -m scheduler.publisher` with the publisher's own service-account identity."""

    def __init__(self, cp: ControlPlane, database_url: str, *, refresh_seconds: float = 3600):
        self.env = {
            **os.environ,
            "TMC_DATABASE_URL": database_url,
            "TMC_KUBECONFIG": str(cp.kubeconfig("publisher")),
            "TMC_RESYNC_SECONDS": "3600",
            "TMC_PUBLISHER_REFRESH_SECONDS": str(refresh_seconds),
        }
        self.log = cp.dir / "publisher.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler.publisher"],
            cwd=ROOT,
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 60) -> None:
        """Until it publishes and the ledger mirror is in step: its first sync is done, its
        watches run and the mirror's first full write is over."""

        def ready() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"the publisher exited: {self.log.read_text()[-2000:]}")
            return "the ledger mirror is in step" in self.log.read_text(errors="replace")

        wait_until(ready, timeout, "the publisher")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.proc = None


def recommendations(cp: ControlPlane) -> dict[tuple[str, str], dict[str, Any]]:
    """The published TieredRecommendation specs by (workload, objective)."""
    api = k8s.CustomObjectsApi(api_client(cp))
    found: dict[str, Any] = api.list_cluster_custom_object(  # type: ignore[assignment]
        GROUP, RECOMMENDATION_VERSION, RECOMMENDATION_PLURAL
    )
    return {
        (o["spec"]["workload"], o["spec"]["objective"]): o["spec"] for o in found.get("items", [])
    }


def placements(api: k8s.CoreV1Api) -> dict[str, Placement]:
    """Every bound pod's placement, by namespace/name, read from the API server."""
    out: dict[str, Placement] = {}
    for pod in api.list_pod_for_all_namespaces().items:
        placement = Placement.from_annotations(pod.metadata.annotations)
        if pod.spec.node_name and placement is not None:
            out[f"{pod.metadata.namespace}/{pod.metadata.name}"] = placement
    return out


def overcommitted_by_placements(api: k8s.CoreV1Api) -> list[str]:
    """What the bound pods' placements hold beyond their nodes' published capacity, with the API
    server as the only source: CPUs, DRAM, node-local and pooled slow memory, overlapping or
    out-of-range LLC masks, and placements naming another node than the pod's binding."""
    problems: list[str] = []
    nodes: dict[str, NodeCapacity] = {}
    cpus: dict[str, int] = {}
    for node in api.list_node().items:
        cap = NodeCapacity.from_metadata(node.metadata.labels, node.metadata.annotations)
        if cap is not None:
            nodes[str(node.metadata.name)] = cap
            allocatable: dict[str, str] = node.status.allocatable or {}
            cpus[str(node.metadata.name)] = cap.cpus or int(allocatable.get("cpu", "1"))
    used: dict[str, dict[str, int]] = {}
    pools: dict[str, int] = {}
    for pod in api.list_pod_for_all_namespaces().items:
        placement = Placement.from_annotations(pod.metadata.annotations)
        if placement is None or not pod.spec.node_name:
            continue
        if placement.node != pod.spec.node_name:
            problems.append(
                f"{pod.metadata.name}: placed on {placement.node}, bound to {pod.spec.node_name}"
            )
        u = used.setdefault(placement.node, {"vcpus": 0, "dram": 0, "slow": 0, "mask": 0})
        c = placement.configuration
        u["vcpus"] += c.vcpus
        u["dram"] += c.dram_bytes
        cap = nodes[placement.node]
        if placement.slow_from_pool:
            assert cap.slow_pool is not None
            pools[cap.slow_pool] = pools.get(cap.slow_pool, 0) + c.slow_bytes
        else:
            u["slow"] += c.slow_bytes
        if u["mask"] & placement.llc_mask_bits:
            problems.append(
                f"{pod.metadata.name}: LLC mask {placement.llc_mask} overlaps on {placement.node}"
            )
        u["mask"] |= placement.llc_mask_bits
    for name, u in used.items():
        cap = nodes[name]
        for what, have in (
            ("vcpus", cpus[name]),
            ("dram", cap.dram_bytes),
            ("slow", cap.slow_bytes),
        ):
            if u[what] > have:
                problems.append(f"{name}: {what} {u[what]} > {have}")
        if u["mask"] >> cap.llc_ways:
            problems.append(f"{name}: mask {u['mask']:#x} beyond {cap.llc_ways} ways")
    pool_size = {
        cap.slow_pool: cap.slow_pool_bytes for cap in nodes.values() if cap.slow_pool is not None
    }
    for pool, drawn in pools.items():
        size = pool_size.get(pool)
        if size is not None and drawn > size:
            problems.append(f"pool {pool}: {drawn} > {size}")
    return problems
