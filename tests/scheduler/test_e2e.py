# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""End to end with a real control plane: etcd, kube-apiserver and kube-scheduler (the chart's own
KubeSchedulerConfiguration), the extender as its own process (`python -m scheduler`) on a real
PostgreSQL ledger, fake tiered nodes. Skipped, with the reason, where the control plane cannot be
built (build.sh needs the Go module proxy once; its cache is kept in ~/.cache/tmc-k8s)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import psycopg
import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from sqlalchemy.orm import Session, sessionmaker

from model.resources import GIB
from tests.scheduler.conftest import ROOT, upload_example
from tests.scheduler.controlplane import ControlPlane, Unavailable
from tests.services import PostgresServer, free_port, wait_until

pytestmark = pytest.mark.slow
CHART = ROOT / "deploy" / "helm" / "tmc"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    try:
        cp = ControlPlane()
    except Unavailable as exc:
        pytest.skip(f"no real control plane here: {exc}")
    cp.start()
    yield cp
    cp.close()


def core(cp: ControlPlane) -> k8s.CoreV1Api:
    cfg = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(cp.kubeconfig("admin")), client_configuration=cfg)
    return k8s.CoreV1Api(k8s.ApiClient(cfg))


def fake_node(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "tmc.dev/host-kind": "e2e"},
            "annotations": annotations,
        },
        "status": {
            "capacity": {"cpu": "12", "memory": "24Gi", "pods": "110"},
            "allocatable": {"cpu": "12", "memory": "24Gi", "pods": "110"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                },
            ],
        },
    }


NODES = {
    "local-1": {
        "tmc.dev/dram-bytes": str(24 * GIB),
        "tmc.dev/slow-bytes": str(128 * GIB),
        "tmc.dev/llc-ways": "48",
    },
    "pooled-1": {
        "tmc.dev/dram-bytes": str(24 * GIB),
        "tmc.dev/llc-ways": "48",
        "tmc.dev/slow-pool": "rack-e2e",
        "tmc.dev/slow-pool-bytes": str(256 * GIB),
    },
    "dram-only": {"tmc.dev/dram-bytes": str(24 * GIB), "tmc.dev/llc-ways": "48"},
    "small-llc": {
        "tmc.dev/dram-bytes": str(24 * GIB),
        "tmc.dev/slow-bytes": str(128 * GIB),
        "tmc.dev/llc-ways": "8",
    },
}


def add_nodes(api: k8s.CoreV1Api) -> None:
    for name, ann in NODES.items():
        api.create_node(fake_node(name, ann))
        # No node-lifecycle controller here to lift the admission plugin's not-ready taint.
        api.patch_node(name, {"spec": {"taints": None}})


def pod(name: str, workload: str | None) -> dict[str, Any]:
    ann = {"tmc.dev/workload": workload} if workload else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": ann},
        "spec": {
            "schedulerName": "tmc-scheduler",
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "tmc.dev/tiered": "1"},
                        "limits": {"tmc.dev/tiered": "1"},
                    },
                }
            ],
        },
    }


class ExtenderProcess:
    def __init__(self, cp: ControlPlane, database_url: str) -> None:
        self.port = free_port()
        self.env = {
            **os.environ,
            "TMC_DATABASE_URL": database_url,
            "TMC_KUBECONFIG": str(cp.kubeconfig("admin")),
            "TMC_EXTENDER_HOST": "127.0.0.1",
            "TMC_EXTENDER_PORT": str(self.port),
            "TMC_RESYNC_SECONDS": "3600",
        }
        self.log = cp.dir / "extender.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler"],
            cwd=ROOT,
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        wait_until(
            lambda: (
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1).status
                == 200
            ),
            30,
            "extender",
        )

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None


def scheduler_config(cp: ControlPlane, extender_port: int) -> Path:
    """The chart's KubeSchedulerConfiguration, rendered for loopback."""
    values = {
        "scheduler": {
            "extenderURL": f"http://127.0.0.1:{extender_port}/scheduler",
            "kubeconfig": str(cp.kubeconfig("scheduler")),
            "leaderElect": False,
        }
    }
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values, name="e2e", namespace="default")
    config_map = next(
        d
        for d in yaml.safe_load_all(rendered["tmc/templates/scheduler.yaml"])
        if d and d["kind"] == "ConfigMap"
    )
    path = cp.dir / "scheduler-config.yaml"
    path.write_text(config_map["data"]["scheduler-config.yaml"])
    return path


def reservations(dsn: str) -> dict[str, tuple[str, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT pod_name, node_name, llc_mask FROM reservations").fetchall()
    return {r[0]: (r[1], int(r[2])) for r in rows}


def assert_disjoint(held: dict[str, tuple[str, int]]) -> None:
    per_node: dict[str, int] = {}
    for node, mask in held.values():
        assert per_node.get(node, 0) & mask == 0, f"overlapping LLC masks on {node}"
        per_node[node] = per_node.get(node, 0) | mask


def bound(api: k8s.CoreV1Api, names: list[str], timeout: float = 60) -> dict[str, Any]:
    pods: dict[str, Any] = {}

    def all_bound() -> bool:
        for name in names:
            p = api.read_namespaced_pod(name, "default")
            if not p.spec.node_name:
                return False
            pods[name] = p
        return True

    wait_until(all_bound, timeout, f"pods {names} bound")
    return pods


def test_pods_are_placed_released_and_reconciled(
    plane: ControlPlane, postgres: PostgresServer, sessions: sessionmaker[Session]
) -> None:
    api = core(plane)
    api.create_namespaced_service_account("default", {"metadata": {"name": "default"}})
    add_nodes(api)
    upload_example(sessions, "graph500")
    ext = ExtenderProcess(plane, postgres.url)
    ext.start()
    plane.start_scheduler(scheduler_config(plane, ext.port))

    names = [f"g{i}" for i in range(6)] + ["unprofiled", "anonymous"]
    for i, name in enumerate(names):
        api.create_namespaced_pod(
            "default",
            pod(name, "graph500" if i < 6 else ("nope" if name == "unprofiled" else None)),
        )
    pods = bound(api, names)
    held = reservations(postgres.dsn())
    assert set(held) == set(names)
    assert_disjoint(held)
    for name, p in pods.items():
        placement = json.loads(p.metadata.annotations["tmc.dev/placement"])
        assert placement["node"] == p.spec.node_name == held[name][0]
        assert int(placement["llc_mask"], 16) == held[name][1]
        assert (placement["fallback"] is None) == name.startswith("g")
        if placement["configuration"]["slow_bytes"] > 0:
            assert p.spec.node_name != "dram-only"

    # a deleted pod releases its reservation
    api.delete_namespaced_pod("g0", "default", grace_period_seconds=0)
    wait_until(lambda: "g0" not in reservations(postgres.dsn()), 20, "release of g0")

    # restart mid-run: a pod deleted while the extender is down, and a reservation the ledger
    # lost, are both put right when it starts again
    ext.kill()
    api.delete_namespaced_pod("g1", "default", grace_period_seconds=0)
    with psycopg.connect(postgres.dsn(), autocommit=True) as conn:
        conn.execute("DELETE FROM reservations WHERE pod_name = 'g2'")
    ext.start()
    after = reservations(postgres.dsn())
    assert "g1" not in after  # no leak
    assert after.get("g2") == held["g2"]  # restored from the pod's annotation: no double booking
    for i in range(6, 10):
        api.create_namespaced_pod("default", pod(f"g{i}", "graph500"))
    bound(api, [f"g{i}" for i in range(6, 10)])
    final = reservations(postgres.dsn())
    assert_disjoint(final)
    assert set(final) == {"g2", "g3", "g4", "g5", "unprofiled", "anonymous", "g6", "g7", "g8", "g9"}
    ext.kill()
