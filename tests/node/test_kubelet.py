# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call,index"
"""The whole node path with a real kubelet: a pod bound in a real kube-apiserver, run by the
kubelet (v1.36.3, built from the Go module proxy) through containerd's CRI, adjusted by tmc-nri
over NRI, started by runc. The kubelet runs on this machine's cgroup v1 hierarchy with
`failCgroupV1: false` (1.36 refuses cgroup v1 otherwise) and no swap check; no CNI is installed,
so the node stays NotReady (NetworkPluginNotReady) and the pods use the host's network, which
the kubelet runs regardless."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from model import node_contract as contract
from tests.node.conftest import Node, PluginFactory
from tests.node.runtime import harness
from tests.node.test_runtime import placed
from tests.scheduler.controlplane import ControlPlane, Unavailable, unavailable
from tests.scheduler.controlplane import cluster as c
from tests.services import free_port

pytestmark = pytest.mark.slow  # a real containerd and kubelet, built once per machine

NODE = "node-a"


class Kubelet:
    def __init__(self, cp: ControlPlane, node: Node, base: Path) -> None:
        self.base = base
        self.logs = base / "pod-logs"
        self.log = base / "kubelet.log"
        base.mkdir(parents=True, exist_ok=True)
        # The test node's disk is the host's, shared with everything else on the machine: with
        # the kubelet's default eviction thresholds a host disk over 85 % full refuses every pod
        # (DiskPressure), so disk eviction is off, as kind's nodes have it.
        (base / "kubelet.yaml").write_text(
            f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{node.runtime.sock}
authentication: {{anonymous: {{enabled: true}}, webhook: {{enabled: false}}}}
authorization: {{mode: AlwaysAllow}}
address: 127.0.0.1
port: {free_port()}
readOnlyPort: 0
healthzPort: 0
enforceNodeAllocatable: []
resolvConf: ""
podLogsDir: {self.logs}
evictionHard: {{nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%"}}
"""
        )
        self.proc = subprocess.Popen(
            [
                str(node.runtime.bin / "kubelet"),
                f"--kubeconfig={cp.kubeconfig('admin')}",
                f"--config={base / 'kubelet.yaml'}",
                f"--root-dir={base / 'root'}",
                f"--hostname-override={NODE}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # The kubelet bind-mounts its root directory onto itself, and made the kubepods cgroups.
        subprocess.run(["umount", str(self.base / "root")], capture_output=True, check=False)
        harness.remove_empty_cgroups("kubepods")

    def container_log(self, pod: k8s.V1Pod, container: str) -> str:
        """What the container wrote, from the kubelet's CRI log file (`<time> stdout F <line>`)."""
        path = self.logs / f"default_{pod.metadata.name}_{pod.metadata.uid}" / container / "0.log"
        return "\n".join(line.split(" ", 3)[3] for line in path.read_text().splitlines())


@pytest.fixture(scope="module")
def cluster(
    node: Node, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ControlPlane, Kubelet]]:
    try:
        cp = ControlPlane()
    except Unavailable as exc:
        unavailable(exc)
    kubelet: Kubelet | None = None
    try:
        cp.start()
        api = c.core(cp)
        api.create_namespaced_service_account("default", {"metadata": {"name": "default"}})
        kubelet = Kubelet(cp, node, tmp_path_factory.mktemp("kubelet"))
        deadline = time.monotonic() + 90
        while True:
            assert kubelet.proc.poll() is None, kubelet.log.read_text()[-3000:]
            try:
                api.read_node(NODE)
                break
            except k8s.ApiException:
                assert time.monotonic() < deadline, kubelet.log.read_text()[-3000:]
                time.sleep(0.5)
        yield cp, kubelet
    finally:
        if kubelet is not None:
            kubelet.stop()
        node.runtime.remove_pods()
        cp.close()


def bound_pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A pod as tmc's scheduler leaves it: one of tmc's (labelled), bound to the node, its
    placement annotated."""
    return {
        "metadata": {
            "name": name,
            "labels": contract.tiered_pod_labels(),
            "annotations": annotations,
        },
        "spec": {
            "nodeName": NODE,
            "hostNetwork": True,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "probe",
                    "image": harness.IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/probe"],
                }
            ],
        },
    }


def wait_pod(api: k8s.CoreV1Api, name: str, done: Any, seconds: float = 90) -> k8s.V1Pod:
    deadline = time.monotonic() + seconds
    while True:
        pod = api.read_namespaced_pod(name, "default")
        if done(pod):
            return pod
        assert time.monotonic() < deadline, pod.status
        time.sleep(0.5)


def test_a_placed_pod_runs_in_its_configuration_from_its_first_instruction(
    cluster: tuple[ControlPlane, Kubelet], node: Node, start_plugin: PluginFactory
) -> None:
    cp, kubelet = cluster
    plugin = start_plugin(kubeconfig=str(cp.kubeconfig("admin")))
    api = c.core(cp)
    api.create_namespaced_pod("default", bound_pod("bfs", placed("0xc", 2, 192 << 20)))
    pod = wait_pod(api, "bfs", lambda p: p.status.phase in ("Succeeded", "Failed"))
    assert pod.status.phase == "Succeeded", pod.status
    seen = kubelet.container_log(pod, "probe").splitlines()
    plan_file = node.plans / f"{pod.metadata.uid}.plan"
    assert "env-TMC_PLAN /run/tmc/plan" in seen
    assert "env-LD_PRELOAD /run/tmc/libtmcalloc.so" in seen
    assert [s.removeprefix("plan ") for s in seen if s.startswith("plan ")] == (
        plan_file.read_text().splitlines()
    )
    assert "status Mems_allowed_list:\t0" in seen
    assert f"memory-limit-v1 {192 << 20}" in seen
    assert "shim-mapped 1" in seen
    record = json.loads((node.plans / "applied" / str(pod.metadata.uid) / "probe.json").read_text())
    assert record["started"] is True and record["llc_mask"] == "0xc"
    # What this node could not apply (no resctrl here) is reported about the node, naming the
    # pod (the publisher's relay puts it on the pod: tests/node/test_node_admission.py).
    deadline = time.monotonic() + 20
    while not (
        events := [
            e
            for e in api.list_namespaced_event(
                "default", field_selector=f"involvedObject.name={NODE},reason=TmcNotApplied"
            ).items
            if e.related is not None and e.related.uid == pod.metadata.uid
        ]
    ):
        assert time.monotonic() < deadline, plugin.log.read_text()[-2000:]
        time.sleep(0.2)
    assert events[0].source.host == NODE and events[0].involved_object.kind == "Node"
    assert "no L3 CAT through resctrl" in (events[0].message or "")


def test_a_verification_run_that_cannot_be_applied_never_starts(
    cluster: tuple[ControlPlane, Kubelet], node: Node, start_plugin: PluginFactory
) -> None:
    cp, _ = cluster
    start_plugin()
    api = c.core(cp)
    ann = {**placed("0x3", 2, 64 << 20), contract.VERIFICATION_RUN_ANNOTATION: "true"}
    api.create_namespaced_pod("default", bound_pod("verify", ann))

    def refused(p: k8s.V1Pod) -> bool:
        statuses = p.status.container_statuses or []
        return (
            bool(statuses)
            and statuses[0].state.waiting is not None
            and bool(statuses[0].state.waiting.message)
        )

    pod = wait_pod(api, "verify", refused)
    waiting = pod.status.container_statuses[0].state.waiting
    assert waiting.reason == "CreateContainerError"
    message = waiting.message or ""
    assert "verification run whose configuration cannot be applied does not start" in message
    assert pod.status.container_statuses[0].state.running is None
    assert not (node.plans / "applied" / str(pod.metadata.uid)).exists()
