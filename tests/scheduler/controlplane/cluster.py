# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""The whole placement path on loopback, every hop a real process: the control plane, the chart's
RBAC and KubeSchedulerConfiguration for the stock kube-scheduler calling tmc-extender (beside
each of several kube-scheduler replicas with leader election, as the chart runs them), and per
fake node the chart's no-NRI pair, the node agent (`tmc-agent serve`) and the node's applier
(`tmc-nri reconcile`), on a fake host tree (sysfs, resctrl, cgroup v2: the only fakes, for
hardware this machine lacks).

Used by tests/scheduler/test_e2e.py and bench/scheduler_e2e.py.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import helm_python as helm
import psycopg
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import utils as k8s_utils
from sqlalchemy.orm import Session, sessionmaker

from api.settings import Settings
from model.node_contract import (
    GROUP,
    RECOMMENDATION_PLURAL,
    RECOMMENDATION_VERSION,
    Placement,
    PlacementSealKeys,
    StructurePlan,
    tiered_pod_labels,
)
from model.node_contract import NodeCapacity as ContractCapacity
from model.resources import GIB
from store.db import make_engine, make_session_factory
from tests.agent import fakehost
from tests.node.runtime.harness import build_plugin
from tests.scheduler.conftest import upload_example
from tests.scheduler.controlplane import (
    NAMESPACE,
    RELEASE,
    SERVICE_ACCOUNTS,
    ControlPlane,
    issue_extender_certificates,
)
from tests.services import PostgresServer, free_port, wait_until

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "tmc"
EXAMPLE_POD = ROOT / "deploy" / "examples" / "tiered-pod.yaml"
AGENT = Path(sys.executable).parent / "tmc-agent"
HOST_KIND = "e2e-optane"


def api_client(cp: ControlPlane, user: str = "admin") -> k8s.ApiClient:
    cfg = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(cp.kubeconfig(user)), client_configuration=cfg)
    return k8s.ApiClient(cfg)


def api_server_metrics(cp: ControlPlane) -> str:
    """kube-apiserver's own /metrics text, read as the cluster's administrator."""
    context = ssl.create_default_context(cafile=str(cp.dir / "ca.crt"))
    request = urllib.request.Request(
        f"{cp.server}/metrics", headers={"Authorization": f"Bearer {cp.admin_token}"}
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        text: str = response.read().decode()
    return text


def core(cp: ControlPlane, user: str = "admin") -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client(cp, user))


def plan_of(cp: ControlPlane, placement: Placement) -> list[StructurePlan]:
    """The per-structure plan a placement gives its pod: its own, or (tmc.placement/v3) the
    plan of the published recommendation it names, at the generation it names (the spec's, or
    one the status keeps), sized to the
    placement's tiers (`sized_plan`: the test's own arithmetic, to check the node's)."""
    if placement.plan_from is None:
        return list(placement.plan)
    objects = k8s.CustomObjectsApi(api_client(cp))
    obj: dict[str, Any] = objects.get_cluster_custom_object(  # type: ignore[assignment]
        GROUP, RECOMMENDATION_VERSION, RECOMMENDATION_PLURAL, placement.plan_from.recommendation
    )
    # The engine names the object it read: one deleted and made again under the name has another.
    assert placement.plan_from.uid == obj["metadata"]["uid"], (placement.plan_from, obj["metadata"])
    generation = placement.plan_from.generation
    if obj["metadata"]["generation"] == generation:
        return sized_plan(obj["spec"], placement)
    # Published again since: the status keeps the latest generations' plans.
    kept = [
        p for p in (obj.get("status") or {}).get("plans") or [] if p["generation"] == generation
    ]
    assert kept, (generation, obj["metadata"]["generation"], obj.get("status"))
    return sized_plan(kept[0], placement)


def sized_plan(spec: dict[str, Any], placement: Placement) -> list[StructurePlan]:
    """A published recommendation's plan (its spec, or a generation's plan its status keeps) at
    a placement's tiers: each structure's
    bytes in a tier times the tier's size over the recommendation's, rounded down."""
    conf = placement.configuration

    def sized(part: int, to: int, of: int) -> int:
        return 0 if of <= 0 or part <= 0 or to <= 0 else min(part, of) * to // of

    return [
        StructurePlan(
            tag=s["tag"],
            fast_bytes=sized(s["fast_bytes"], conf.dram_bytes, spec.get("dram_bytes", 0)),
            slow_bytes=sized(s["slow_bytes"], conf.slow_bytes, spec.get("slow_bytes", 0)),
        )
        for s in spec.get("plan", [])
    ]


def render_chart(values: dict[str, Any]) -> dict[str, str]:
    with helm.Chart.load(str(CHART)) as chart:
        rendered: dict[str, str] = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    return rendered


def install_rbac(cp: ControlPlane, values: dict[str, Any] | None = None) -> None:
    """The chart's service accounts, roles and bindings, and its admission policies (who may
    write a pod's placement), as `helm install` would create them."""
    client = api_client(cp)
    with_ns = k8s.CoreV1Api(client)
    with_ns.create_namespace({"metadata": {"name": NAMESPACE}})
    rendered = render_chart(values or {})
    for template in ("rbac.yaml", "admission.yaml"):
        for doc in yaml.safe_load_all(rendered[f"tmc/templates/{template}"]):
            if doc:
                k8s_utils.create_from_dict(client, doc, namespace=NAMESPACE)


def scheduler_config(cp: ControlPlane, extender_url: str, **extra: Any) -> Path:
    """The chart's KubeSchedulerConfiguration (mutual TLS on, as by default), for loopback."""
    values = {
        "scheduler": {
            "placement": "extender",
            "extenderURL": extender_url,
            "kubeconfig": str(cp.kubeconfig("scheduler")),
            "leaderElect": False,
            "extenderTLSDir": str(cp.extender_tls),
            **extra,
        }
    }
    rendered = render_chart(values)
    config_map = next(
        d
        for d in yaml.safe_load_all(rendered["tmc/templates/scheduler.yaml"])
        if d and d["kind"] == "ConfigMap"
    )
    text = config_map["data"]["scheduler-config.yaml"]
    path = cp.dir / f"scheduler-config-{abs(hash((extender_url, repr(extra))))}.yaml"
    path.write_text(text)
    return path


def stock_scheduler_config(cp: ControlPlane) -> Path:
    """The stock kube-scheduler on its default profile (DynamicResources on), as the admin, no
    leader election: the cluster's own default scheduler."""
    path = cp.dir / "default-scheduler.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(cp.kubeconfig("admin"))},
                "leaderElection": {"leaderElect": False},
            }
        )
    )
    return path


def with_short_lease(config: Path) -> Path:
    """The configuration with leader-election timings short enough for a test (the defaults
    wait 15 s for a dead leader's lease to expire)."""
    cfg = yaml.safe_load(config.read_text())
    cfg["leaderElection"].update(
        {"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"}
    )
    path = config.with_name(config.stem + "-short-lease.yaml")
    path.write_text(yaml.safe_dump(cfg))
    return path


def start_scheduler_replica(cp: ControlPlane, config: Path, name: str) -> None:
    """Another kube-scheduler process beside the control plane's own (`start_scheduler`), as a
    second replica of the chart's scheduler Deployment: same identity, its own log and port."""
    cp.stop_process(name)
    cp._spawn(
        name,
        [
            str(cp.bin / "kube-scheduler"),
            f"--config={config}",
            f"--authentication-kubeconfig={cp.kubeconfig('scheduler')}",
            f"--authorization-kubeconfig={cp.kubeconfig('scheduler')}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--v=2",
        ],
    )
    wait_until(
        lambda: (
            "attempting to acquire leader lease" in cp.log(name)
            or "Starting Kubernetes Scheduler" in cp.log(name)
        ),
        60,
        name,
    )


def leads(cp: ControlPlane, name: str) -> bool:
    """Whether the kube-scheduler process `name` has acquired the leader lease."""
    return "successfully acquired lease" in cp.log(name).lower()


# --- nodes --------------------------------------------------------------------------------------


def node_object(name: str, cpus: int = 12, memory: str = "256Gi") -> dict[str, Any]:
    """A Node as a kubelet registers it: Ready, no tmc annotations (its agent publishes those).
    `memory` is what the kernel has, slow tiers onlined as memory included (the ceiling of what
    its agent may publish); pods are given 24Gi of it, as the tests' in-tree fit expects."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": str(cpus), "memory": memory, "pods": "110"},
            "allocatable": {"cpu": str(cpus), "memory": "24Gi", "pods": "110"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def register_node(api: k8s.CoreV1Api, body: dict[str, Any]) -> None:
    api.create_node(body)
    # No node-lifecycle controller here to lift the admission plugin's not-ready taint.
    api.patch_node(body["metadata"]["name"], {"spec": {"taints": None}})


def tiered_host(root: Path, *, ways: int, dram_gib: int, slow_gib: int) -> None:
    """A Cascade Lake-like host: 12 CPUs and DRAM on node 0, Optane (CPU-less) on node 1 when
    slow_gib > 0, `ways` LLC ways with CAT through resctrl, cgroup v2."""
    w = fakehost.write
    online = "0-1" if slow_gib else "0"
    w(root / "sys/devices/system/node/online", online + "\n")
    fakehost.node(root, 0, "0-11", dram_gib * 2**20)
    if slow_gib:
        fakehost.node(root, 1, "", slow_gib * 2**20)
        fakehost.tiers(root, {4: "0", 22: "1"})
        w(root / "sys/bus/nd/devices/region0/target_node", "1\n")
    else:
        fakehost.tiers(root, {4: "0"})
    fakehost.llc(root, ways, "36608K")
    fakehost.resctrl(root, mask=f"{(1 << ways) - 1:x}")
    w(root / "sys/bus/event_source/devices/cpu/caps/pmu_name", "skylake\n")
    w(root / "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
    mounts = fakehost.UNIFIED_MOUNTS + "resctrl /sys/fs/resctrl resctrl rw 0 0\n"
    one_cpu = fakehost.XEON_CPUINFO.split("\n\n")[0]
    cpuinfo = "".join(
        one_cpu.replace("processor\t: 0", f"processor\t: {i}") + "\n\n" for i in range(12)
    )
    fakehost.proc(root, cpuinfo, mounts, 1, True)


def agent_pod(api: k8s.CoreV1Api, node: str) -> Any:
    """The agent DaemonSet's pod on `node`, as the API server holds it (no kubelet runs it: its
    process is FakeNode's); made once per node."""
    name = f"{SERVICE_ACCOUNTS['agent']}-{node}"
    try:
        return api.read_namespaced_pod(name, NAMESPACE)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise
    body = {
        "metadata": {"name": name, "labels": {"app.kubernetes.io/component": "agent"}},
        "spec": {
            "nodeName": node,
            "serviceAccountName": SERVICE_ACCOUNTS["agent"],
            "automountServiceAccountToken": False,
            "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    return api.create_namespaced_pod(NAMESPACE, body)


def node_bound_token(cp: ControlPlane, node: str, pod: Any | None = None) -> str:
    """A token of the agents' service account bound to the agent's pod on `node` (by default),
    as the kubelet's projected volume requests it: the API server puts the node's name in it,
    which the chart's admission policy compares with the node an agent writes."""
    api = core(cp)
    bound = pod if pod is not None else agent_pod(api, node)
    spec = {
        "expirationSeconds": 4 * 3600,
        "boundObjectRef": {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": bound.metadata.name,
            "uid": bound.metadata.uid,
        },
    }
    made = api.create_namespaced_service_account_token(
        SERVICE_ACCOUNTS["agent"], NAMESPACE, {"spec": spec}
    )
    return str(made.status.token)


def node_bound_account_dir(cp: ControlPlane, node: str) -> Path:
    """What the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount in the agent's
    pod on `node`."""
    d = cp.dir / f"sa-agent-{node}"
    d.mkdir(exist_ok=True)
    (d / "token").write_text(node_bound_token(cp, node))
    (d / "ca.crt").write_bytes((cp.dir / "ca.crt").read_bytes())
    (d / "namespace").write_text(NAMESPACE)
    return d


def tmc_nri(cp: ControlPlane) -> Path:
    """The tmc-nri binary (node/nri/build.sh), built once per control plane."""
    built = cp.dir / "bin" / "tmc-nri"
    return built if built.exists() else build_plugin(built.parent)


def agent_kubeconfig(cp: ControlPlane, node: str) -> Path:
    """A kubeconfig with the agents' service-account token bound to the agent pod on `node`:
    tmc-nri reconcile reads the node's pods with what the chart's agent role allows."""
    path = cp.dir / f"agent-{node}.kubeconfig"
    cluster = {
        "server": f"https://127.0.0.1:{cp.api_port}",
        "certificate-authority": str(cp.dir / "ca.crt"),
    }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": "agent", "user": {"token": node_bound_token(cp, node)}}],
        "contexts": [{"name": "agent", "context": {"cluster": "e2e", "user": "agent"}}],
        "current-context": "agent",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class FakeNode:
    """A node object in the API server plus its agent and tmc-nri reconcile processes on a fake
    host tree."""

    def __init__(
        self,
        cp: ControlPlane,
        name: str,
        *,
        ways: int = 48,
        dram_gib: int = 24,
        slow_gib: int = 128,
        pool: tuple[str, int] | None = None,
    ) -> None:
        self.cp = cp
        self.name = name
        self.root = cp.dir / "hosts" / name
        self.plans = self.root / "var/lib/tmc/plans"
        # A pooled node sees its share of the rack pool as a CPU-less NUMA node, as a local tier.
        tiered_host(self.root, ways=ways, dram_gib=dram_gib, slow_gib=slow_gib)
        self.pool = pool
        self.proc: subprocess.Popen[bytes] | None = None
        self.applier: subprocess.Popen[bytes] | None = None
        self.log = cp.dir / f"agent-{name}.log"
        self.applier_log = cp.dir / f"reconcile-{name}.log"

    @property
    def resctrl(self) -> Path:
        return self.root / "sys/fs/resctrl"

    @property
    def pool_annotations(self) -> dict[str, str]:
        """The node's rack pool as the operator annotates it (membership is not the agent's)."""
        if self.pool is None:
            return {}
        return {"tmc.dev/slow-pool": self.pool[0], "tmc.dev/slow-pool-bytes": str(self.pool[1])}

    def start_agent(self, extra_env: dict[str, str] | None = None) -> None:
        env = {
            **os.environ,
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.cp.api_port),
            "TMC_AGENT_SERVICEACCOUNT_DIR": str(node_bound_account_dir(self.cp, self.name)),
            "TMC_AGENT_NODE_NAME": self.name,
            "TMC_AGENT_SYS": str(self.root / "sys"),
            "TMC_AGENT_PROC": str(self.root / "proc"),
            "TMC_AGENT_PLAN_DIR": str(self.plans),
            "TMC_AGENT_INTERVAL": "0.5",
            "TMC_AGENT_HOST_KIND": HOST_KIND,
            **(extra_env or {}),
        }
        if self.pool is not None:
            env["TMC_AGENT_SLOW_POOL"], env["TMC_AGENT_SLOW_POOL_BYTES"] = (
                self.pool[0],
                str(self.pool[1]),
            )
        self.proc = subprocess.Popen(
            [str(AGENT), "serve"], env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT
        )
        self.start_applier()

    def start_applier(self) -> None:
        """tmc-nri reconcile, as the chart runs it beside the agent on a runtime without NRI."""
        args = {
            "--interval": "0.2s",
            "--node": self.name,
            "--kubeconfig": str(agent_kubeconfig(self.cp, self.name)),
            "--sys": str(self.root / "sys"),
            "--resctrl": str(self.resctrl),
            "--cgroup-root": str(self.root / "sys/fs/cgroup"),
            "--plan-dir": str(self.plans),
            # Sealed placements, as the chart runs it by default.
            "--placement-seal-keys": str(self.cp.placement_seal_keys),
        }
        self.applier = subprocess.Popen(
            [str(tmc_nri(self.cp)), "reconcile", *(x for kv in args.items() for x in kv)],
            env={k: v for k, v in os.environ.items() if not k.startswith("TMC_NRI_")},
            stdout=self.applier_log.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def stop_agent(self) -> None:
        """Stops the agent and the node's applier beside it (the DaemonSet's pod going)."""
        for proc in (self.proc, self.applier):
            if proc is not None:
                proc.terminate()
                proc.wait(10)
        self.proc = self.applier = None

    def kubelet_starts(self, uid: str, threads: list[int]) -> Path:
        """What the kubelet does when it starts the pod: its cgroup (systemd driver layout)."""
        cg = (
            self.root
            / "sys/fs/cgroup/kubepods.slice"
            / f"kubepods-pod{uid.replace('-', '_')}.slice"
        )
        cg.mkdir(parents=True, exist_ok=True)
        (cg / "memory.max").write_text("max\n")
        (cg / "cpuset.mems").write_text("\n")
        (cg / "cgroup.procs").write_text("".join(f"{t}\n" for t in threads))
        (cg / "cgroup.threads").write_text("".join(f"{t}\n" for t in threads))
        return cg


# --- the extender --------------------------------------------------------------------------------


def probe_tls(tls: Path) -> ssl.SSLContext:
    """A probe's view: it checks the extender's certificate and presents none of its own."""
    return ssl.create_default_context(cafile=str(tls / "ca.crt"))


def scheduler_tls(tls: Path) -> ssl.SSLContext:
    """What kube-scheduler presents: the client certificate the extender asks for."""
    ctx = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    ctx.load_cert_chain(str(tls / "client.crt"), str(tls / "client.key"))
    return ctx


def use_ecdsa_extender_certificates(cp: ControlPlane) -> None:
    """Replace the extender's serving and the scheduler's client certificate by P-256 ones from
    the same CA, as the chart makes them. kube-scheduler keeps only two idle connections to an
    extender, so a burst opens new ones all the time, each a TLS handshake on the scheduling
    path; with ECDSA keys a handshake costs a fraction of an RSA-2048 one."""
    issue_extender_certificates(cp.extender_tls, ["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])


class ComponentProcess:
    """A tmc process of the cluster half (`python -m MODULE`), run from the repository with the
    environment its Deployment gives it; its output goes to `log`."""

    def __init__(self, log: Path, env: dict[str, str]) -> None:
        self.log = log
        self.env = {**os.environ, **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=ROOT,
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        """SIGKILL: a crash, no graceful shutdown."""
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


class RoundRobinService:
    """A Kubernetes Service in front of extender replicas, as kube-proxy would spread them, but
    per request (not per connection) so that a filter and its bind usually land on different
    replicas: the hard case for a shared ledger."""

    def __init__(self, backends: list[int], tls: Path) -> None:
        self.backends = backends
        client = scheduler_tls(tls)
        self.calls = [0] * len(backends)
        self._next = 0
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with service._lock:
                    i = service._next % len(service.backends)
                    service._next += 1
                    service.calls[i] += 1
                conn = http.client.HTTPSConnection(
                    "127.0.0.1", service.backends[i], timeout=30, context=client
                )
                try:
                    conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    data, status = resp.read(), resp.status
                except OSError:
                    data, status = b'{"Error":"tmc: replica unreachable"}', 503
                finally:
                    conn.close()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        serving.load_cert_chain(str(tls / "tls.crt"), str(tls / "tls.key"))
        serving.load_verify_locations(str(tls / "ca.crt"))
        serving.verify_mode = ssl.CERT_REQUIRED
        self.server.socket = serving.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/scheduler"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- pods and the ledger ------------------------------------------------------------------------


def example_pod(name: str | None = None, **annotations: str) -> dict[str, Any]:
    """deploy/examples/tiered-pod.yaml, optionally renamed and re-annotated."""
    body: dict[str, Any] = yaml.safe_load(EXAMPLE_POD.read_text())
    if name is not None:
        body["metadata"]["name"] = name
    body["metadata"]["annotations"].update(annotations)
    return body


def opted_in_pod(
    name: str, workload: str | None, *, cpu: str = "1", memory: str = "1Gi"
) -> dict[str, Any]:
    ann = {"tmc.dev/workload": workload} if workload else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": tiered_pod_labels(),
            "annotations": ann,
        },
        "spec": {
            "schedulerName": "tmc-scheduler",
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": cpu, "memory": memory, "tmc.dev/tiered": "1"},
                        "limits": {"tmc.dev/tiered": "1"},
                    },
                }
            ],
        },
    }


def create_pods(api: k8s.CoreV1Api, bodies: list[dict[str, Any]], namespace: str) -> None:
    for body in bodies:
        body["metadata"]["namespace"] = namespace
        api.create_namespaced_pod(namespace, body)


def bound_pods(
    api: k8s.CoreV1Api, names: list[str], namespace: str, timeout: float = 90
) -> dict[str, Any]:
    pods: dict[str, Any] = {}

    def all_bound() -> bool:
        listed = {p.metadata.name: p for p in api.list_namespaced_pod(namespace).items}
        for name in names:
            p = listed.get(name)
            if p is None or not p.spec.node_name:
                return False
            pods[name] = p
        return True

    try:
        wait_until(all_bound, timeout, f"{len(names)} pods bound in {namespace}")
    except TimeoutError as exc:
        unbound = [n for n in names if n not in pods]
        events = [
            f"{e.involved_object.name}: {e.reason}: {e.message}"
            for e in api.list_namespaced_event(namespace).items
            if e.involved_object.name in unbound
        ]
        raise TimeoutError(f"{exc}; unbound {unbound}; events: {events[-10:]}") from exc
    return pods


# kube-scheduler's longest wait before it retries a pod that failed (podMaxBackoffSeconds, whose
# default the test configurations keep). While a new leader takes the placement lease over (the
# tests' leases last 4-5 s), its binds are refused and the pods back off: the longest quiet spell
# of a burst that is still being placed is the takeover plus that backoff.
SCHEDULER_MAX_BACKOFF_SECONDS = 10.0
TEST_PLACEMENT_LEASE_SECONDS = 5.0


def wait_burst_settled(api: k8s.CoreV1Api, namespace: str, timeout: float = 240) -> int:
    """Waits until a burst is placed as far as it fits and returns how many pods are bound: the
    count has not changed for longer than a takeover and the longest backoff together (with
    margin), so no retried pod can still be on its way."""
    quiet = 1.5 * (SCHEDULER_MAX_BACKOFF_SECONDS + TEST_PLACEMENT_LEASE_SECONDS)
    last = (-1, time.monotonic())

    def settled() -> bool:
        nonlocal last
        count = len([p for p in api.list_namespaced_pod(namespace).items if p.spec.node_name])
        now = time.monotonic()
        if count != last[0]:
            last = (count, now)
            return False
        return count > 0 and now - last[1] >= quiet

    wait_until(settled, timeout, f"the burst in {namespace} placed as far as it fits")
    return last[0]


def reservations(dsn: str) -> dict[str, dict[str, Any]]:
    """The ledger's rows by pod name."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT pod_name, namespace, pod_uid, node_name, vcpus, dram_bytes, slow_bytes,"
            " slow_from_pool, llc_mask FROM reservations"
        ).fetchall()
    keys = ("pod_name", "namespace", "uid", "node", "vcpus", "dram", "slow", "pooled", "mask")
    return {f"{r[1]}/{r[0]}": dict(zip(keys, r, strict=True)) for r in rows}


def capacity_of(dsn: str) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    with psycopg.connect(dsn) as conn:
        nodes = conn.execute(
            "SELECT name, cpus, dram_bytes, slow_bytes, llc_ways, pool_name FROM nodes"
        ).fetchall()
        pools: dict[str, int] = {
            str(r[0]): int(r[1])
            for r in conn.execute("SELECT name, slow_bytes FROM rack_pools").fetchall()
        }
    keys = ("name", "cpus", "dram", "slow", "ways", "pool")
    return {n[0]: dict(zip(keys, n, strict=True)) for n in nodes}, pools


def overcommitted(dsn: str) -> list[str]:
    """Every way in which the ledger holds more than a node or pool has: [] when none."""
    nodes, pools = capacity_of(dsn)
    return _overcommitted(reservations(dsn), nodes, pools)


def placements(api: k8s.CoreV1Api) -> dict[str, dict[str, Any]]:
    """What every live bound pod holds by its placement annotation (the truth), keyed
    namespace/name, in the shape of `reservations`."""
    out: dict[str, dict[str, Any]] = {}
    for pod in api.list_pod_for_all_namespaces().items:
        if not pod.spec.node_name or str(pod.status.phase) in ("Succeeded", "Failed"):
            continue
        p = Placement.from_annotations(pod.metadata.annotations)
        if p is None:
            continue
        out[f"{pod.metadata.namespace}/{pod.metadata.name}"] = {
            "pod_name": pod.metadata.name,
            "namespace": pod.metadata.namespace,
            "uid": pod.metadata.uid,
            "node": pod.spec.node_name,
            "placed_on": p.node,
            "vcpus": p.configuration.vcpus,
            "dram": p.configuration.dram_bytes,
            "slow": p.configuration.slow_bytes,
            "pooled": p.slow_from_pool,
            "mask": p.llc_mask_bits,
        }
    return out


def published_capacity(api: k8s.CoreV1Api) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """Each tmc node's capacity and each rack pool's size, as the nodes publish them."""
    nodes: dict[str, dict[str, Any]] = {}
    pools: dict[str, int] = {}
    for node in api.list_node().items:
        cap = ContractCapacity.from_metadata(node.metadata.labels, node.metadata.annotations)
        if cap is None:
            continue
        allocatable: dict[str, str] = node.status.allocatable or {}
        cpus = cap.cpus if cap.cpus is not None else int(allocatable["cpu"])
        name = str(node.metadata.name)
        nodes[name] = {
            "name": name,
            "cpus": cpus,
            "dram": cap.dram_bytes,
            "slow": cap.slow_bytes,
            "ways": cap.llc_ways,
            "pool": cap.slow_pool,
        }
        if cap.slow_pool is not None and cap.slow_pool_bytes is not None:
            pools[cap.slow_pool] = cap.slow_pool_bytes
    return nodes, pools


def overcommitted_on_the_api_server(api: k8s.CoreV1Api) -> list[str]:
    """Every way in which the bound pods' placements together exceed what the nodes and pools
    publish: [] when none."""
    held = placements(api)
    problems = [
        f"{key}: bound to {r['node']}, placed on {r['placed_on']}"
        for key, r in held.items()
        if r["node"] != r["placed_on"]
    ]
    return problems + _overcommitted(held, *published_capacity(api))


def _overcommitted(
    held: dict[str, dict[str, Any]], nodes: dict[str, dict[str, Any]], pools: dict[str, int]
) -> list[str]:
    problems: list[str] = []
    per: dict[str, dict[str, int]] = {}
    pool_used: dict[str, int] = {}
    for key, r in held.items():
        n = per.setdefault(r["node"], {"cpus": 0, "dram": 0, "slow": 0, "mask": 0})
        if n["mask"] & int(r["mask"]):
            problems.append(f"{key}: LLC ways {int(r['mask']):#x} overlap on {r['node']}")
        n["mask"] |= int(r["mask"])
        n["cpus"] += r["vcpus"]
        n["dram"] += r["dram"]
        if r["pooled"]:
            pool = nodes[r["node"]]["pool"]
            pool_used[pool] = pool_used.get(pool, 0) + r["slow"]
        else:
            n["slow"] += r["slow"]
    for name, used in per.items():
        cap = nodes[name]
        for what in ("cpus", "dram", "slow"):
            if used[what] > cap[what]:
                problems.append(f"{name}: {what} {used[what]} > {cap[what]}")
        if used["mask"] >> cap["ways"]:
            problems.append(f"{name}: mask {used['mask']:#x} beyond {cap['ways']} ways")
    for pool, drawn in pool_used.items():
        if drawn > pools[pool]:
            problems.append(f"pool {pool}: {drawn} > {pools[pool]}")
    return problems


def default_nodes(cp: ControlPlane) -> list[FakeNode]:
    """local-1 (Optane-like local slow tier), pooled-1 (rack pool), dram-only, small-llc."""
    return [
        FakeNode(cp, "local-1"),
        FakeNode(cp, "pooled-1", pool=("rack-e2e", 256 * GIB)),
        FakeNode(cp, "dram-only", slow_gib=0),
        FakeNode(cp, "small-llc", ways=8),
    ]


def wait_published(api: k8s.CoreV1Api, names: list[str], timeout: float = 60) -> None:
    def published() -> bool:
        for name in names:
            ann = api.read_node(name).metadata.annotations or {}
            if "tmc.dev/llc-ways" not in ann:
                return False
        return True

    wait_until(published, timeout, f"agents publishing {names}")


def delete_all_pods(api: k8s.CoreV1Api, namespace: str) -> None:
    api.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_until(lambda: not api.list_namespaced_pod(namespace).items, 60, "pods deleted")


def new_namespace(api: k8s.CoreV1Api, name: str) -> str:
    api.create_namespace({"metadata": {"name": name}})
    # The ServiceAccount admission plugin wants the namespace's default account.
    wait_until(lambda: _has_default_sa(api, name) or _make_default_sa(api, name), 20, "default SA")
    return name


def ensure_default_account(api: k8s.CoreV1Api, ns: str) -> None:
    """The namespace's `default` service account, which the controller-manager (absent here)
    would make and the ServiceAccount admission plugin wants for every pod."""
    wait_until(lambda: _has_default_sa(api, ns) or _make_default_sa(api, ns), 20, "default SA")


def _has_default_sa(api: k8s.CoreV1Api, ns: str) -> bool:
    return any(
        sa.metadata.name == "default" for sa in api.list_namespaced_service_account(ns).items
    )


def _make_default_sa(api: k8s.CoreV1Api, ns: str) -> bool:
    api.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    return True


class PlacementStack:
    """One test module's running cluster half: its nodes (each with its agent), graph500's
    profile in PostgreSQL, and the placement path's processes, named in `process_logs` for the
    logs a failing test shows."""

    process_logs: tuple[str, ...] = ()
    # What the nodes carry besides a kubelet's registration (kwok's annotation on nodes whose
    # pods run, kwok.py).
    node_annotations: tuple[tuple[str, str], ...] = ()

    def __init__(self, cp: ControlPlane, pg: PostgresServer) -> None:
        self.cp = cp
        self.pg = pg
        self.api = core(cp)
        self.nodes = default_nodes(cp)
        self.sessions: sessionmaker[Session] = make_session_factory(
            make_engine(Settings(environment="test", database_url=pg.url))
        )

    @property
    def dsn(self) -> str:
        return self.pg.dsn()

    def logs(self) -> str:
        names = [
            *self.process_logs,
            *(f"{what}-{n.name}" for n in self.nodes for what in ("agent", "reconcile")),
        ]
        return dump_logs(self.cp, names)

    def agent_env(self, node: FakeNode) -> dict[str, str]:
        """The environment a node's agent gets beyond FakeNode's (e.g. the service to report
        verification runs to)."""
        return {}

    def start_nodes(self) -> None:
        """Register the nodes, start their agents, wait for their capacity, upload graph500."""
        for node in self.nodes:
            body = node_object(node.name)
            body["metadata"]["annotations"] = {
                **dict(self.node_annotations),
                **node.pool_annotations,
            }
            register_node(self.api, body)
            node.start_agent(self.agent_env(node))
        wait_published(self.api, [n.name for n in self.nodes])
        upload_example(self.sessions, "graph500")

    def stop_nodes(self) -> None:
        for node in self.nodes:
            node.stop_agent()


def dump_logs(cp: ControlPlane, names: list[str]) -> str:
    out = []
    for name in names:
        path = cp.dir / f"{name}.log"
        if path.exists():
            out.append(f"--- {name} ---\n{path.read_text(errors='replace')[-6000:]}")
    return "\n".join(out)


# Each pod's memory request, for `check_given_their_requests`: two sizes of one workload.
SIZED_PODS = {"sized-8g": 8 * GIB, "sized-2g": 2 * GIB}


def sized_pods() -> list[dict[str, Any]]:
    """graph500's pods requesting 8 GiB and 2 GiB: its profile traced 4480 MiB."""
    return [
        opted_in_pod(name, "graph500", memory=f"{size // GIB}Gi")
        for name, size in SIZED_PODS.items()
    ]


def check_told_below_their_profile(api: k8s.CoreV1Api, ns: str, reporter: str) -> None:
    """The 2 GiB pod, below the 4480 MiB its profile traced, is told what it was given (a
    Warning from the placing component, sizes as quantities); the 8 GiB pod is told nothing."""

    def told(name: str) -> list[Any]:
        return api.list_namespaced_event(
            ns, field_selector=f"involvedObject.name={name},reason=MemoryBelowProfile"
        ).items

    wait_until(lambda: told("sized-2g"), 30, "the 2 GiB pod told it is below its profile")
    (event,) = told("sized-2g")
    assert event.type == "Warning" and event.reporting_component == reporter, event
    assert event.message.startswith(
        "the pod requests 2Gi of memory, less than the 4480Mi its recommendation for workload"
    ), event.message
    assert told("sized-8g") == []


def check_given_their_requests(cp: ControlPlane, dsn: str, bound: dict[str, Any]) -> None:
    """Each pod's placement gives it its own memory request, split by the recommended ratio as
    the model splits a footprint (DRAM rounded half to even), its plan within each tier; the
    decision it names was priced at a pod's request (the publisher's size for the pair: the
    median request of the pods naming it when it was decided, which may be another test's).
    Each placement is sealed for its own pod with the cluster's key, as the chart runs the
    engine: the seal verifies."""
    keys = PlacementSealKeys.from_directory(cp.placement_seal_keys)
    for name, size in SIZED_PODS.items():
        placement = Placement.from_annotations(bound[name].metadata.annotations)
        assert placement is not None and placement.fallback is None, name
        keys.verify(bound[name].metadata.uid, bound[name].metadata.annotations)
        conf = placement.configuration
        assert conf.dram_bytes + conf.slow_bytes == size, (name, conf)
        assert conf.dram_bytes == round((1.0 - conf.slow_ratio) * size), (name, conf)
        plan = plan_of(cp, placement)
        assert sum(s.fast_bytes for s in plan) <= conf.dram_bytes
        assert sum(s.slow_bytes for s in plan) <= conf.slow_bytes
        assert plan, name
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT result FROM recommendations WHERE id = %s",
                (placement.recommendation_id,),
            ).fetchone()
        assert row is not None
        result = row[0] if isinstance(row[0], dict) else json.loads(row[0])
        assert result["sized_from"] == "request", result.get("sized_from")
        assert result["memory_bytes"] > 0, result["memory_bytes"]
