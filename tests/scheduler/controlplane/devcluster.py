# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""`./dev cluster up|down`: docs/install.md's install, done on this machine's test control plane.

`up` starts etcd, kube-apiserver, a private PostgreSQL, `helm install`s the chart (Helm's Go SDK)
into the real API server, then runs what the chart's pods would run, as local processes with the
chart's service-account identities (there is no kubelet here): the API's init containers
(`tmc db upgrade`, `python -m api.bootstrap` with the tokens read back from the chart's Secrets)
and the API, the recommendation publisher, the placement door the values choose (`--placement`:
tmc-scheduler, kube-scheduler with the tmc plugin built from scheduler/plugin, on the chart's
plugin configuration; or the stock kube-scheduler calling tmc-extender over mutual TLS, on the
chart's extender configuration; or, with `dra`, the stock kube-scheduler placing pods by their
ResourceClaims, with tmc-dra-publisher and kube-controller-manager's resource-claim controller),
and a node agent and tmc-nri reconcile per fake node. It writes a state file naming every process
it started, and returns.
`down` stops exactly those processes (by pid) and removes the state. tests/scheduler/test_install.py
runs the same functions and follows the document's steps to a placed pod.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm
import httpx
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.scheduler.controlplane import (
    NAMESPACE,
    RELEASE,
    ControlPlane,
    Unavailable,
    binaries,
    unavailable,
)
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as plugin_path
from tests.scheduler.controlplane.goextender import GoExtenderProcess
from tests.services import PostgresServer, free_port, wait_until

ROOT = Path(__file__).resolve().parents[3]
# Inside the clone (ignored by git): each clone has its own cluster, and `down` removes only what
# its own `up` made.
DEFAULT_STATE = Path(os.environ.get("TMC_CLUSTER_STATE", str(ROOT / ".tmc-cluster" / "state.json")))
FULLNAME = f"{RELEASE}-tmc"


PLACEMENTS = ("plugin", "extender", "dra")
# The DRA door keeps its ResourceClaimTemplates in tenant namespaces only (docs/install.md): the
# label a namespace carries to be one.
DRA_TENANT_LABELS = {"tmc.dev/tenant": "yes"}
# The user the control plane's admin kubeconfig authenticates as.
ADMIN_USER = "tmc-admin"


def chart_values(pg: PostgresServer, placement: str = "plugin") -> dict[str, Any]:
    """The values of docs/install.md, pointed at this machine's PostgreSQL; no Redis (the API
    runs tasks in-process without it). `placement`: tmc-scheduler with the published
    recommendations (plugin), the stock kube-scheduler with tmc-extender (extender), or the
    stock kube-scheduler allocating tmc's DRA devices (dra: the chart's plugin door, with
    `dra.enabled` and tenant namespaces, whose pods may take either door)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement is one of {', '.join(PLACEMENTS)}, not {placement!r}")
    values: dict[str, Any] = {
        "database": {"url": pg.url},
        "redis": {"url": "redis://127.0.0.1:6379/0"},
        "api": {"replicas": 1},
        "scheduler": {"placement": "plugin" if placement == "dra" else placement},
    }
    if placement == "dra":
        values["dra"] = {"enabled": True}
        values["admission"] = {
            "tenantNamespaceLabels": DRA_TENANT_LABELS,
            # This plane's kube-scheduler and resource-claim controller run as its admin, not
            # as a cluster's own users: they are the ones that allocate and free claims.
            "draAllocators": [ADMIN_USER],
        }
    return values


@dataclass
class State:
    """What `up` started: enough for `down` to stop it and for a reader to use it."""

    dir: str
    kubeconfig: str
    api_url: str
    pg_bin: str
    pg_data: str
    token_dir: str
    values: dict[str, Any] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def placement(self) -> str:
        if self.values.get("dra", {}).get("enabled"):
            return "dra"
        return str(self.values.get("scheduler", {}).get("placement", "plugin"))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> State:
        return cls(**json.loads(path.read_text()))


def helm_config(kubeconfig: str) -> helm.Config:
    return helm.Config(kubeconfig_path=kubeconfig, namespace=NAMESPACE)


def install_chart(kubeconfig: str, values: dict[str, Any]) -> dict[str, Any]:
    """`helm install e2e deploy/helm/tmc -n tmc-system --create-namespace -f values`: real
    objects in the real API server (no --wait: without a kubelet no pod ever runs)."""
    with helm_config(kubeconfig) as cfg, helm.Chart.load(str(c.CHART)) as chart:
        release: dict[str, Any] = cfg.install(
            chart, RELEASE, values, namespace=NAMESPACE, create_namespace=True, timeout=120
        )
    return release


def upgrade_chart(kubeconfig: str, values: dict[str, Any]) -> dict[str, Any]:
    with helm_config(kubeconfig) as cfg, helm.Chart.load(str(c.CHART)) as chart:
        release: dict[str, Any] = cfg.upgrade(
            chart, RELEASE, values, namespace=NAMESPACE, timeout=120
        )
    return release


def secret_value(api: k8s.CoreV1Api, name: str, key: str) -> str:
    """`kubectl -n tmc-system get secret NAME -o jsonpath='{.data.KEY}' | base64 -d`."""
    data = api.read_namespaced_secret(name, NAMESPACE).data or {}
    return base64.b64decode(data[key]).decode()


def mount_secret(api: k8s.CoreV1Api, volume: dict[str, Any], into: Path) -> Path:
    """What the kubelet does for a secret volume: each item's key written as its path."""
    into.mkdir(parents=True, exist_ok=True)
    secret = volume["secret"]
    for item in secret["items"]:
        (into / item["path"]).write_text(secret_value(api, secret["secretName"], item["key"]))
    return into


def admin_client(kubeconfig: str) -> k8s.ApiClient:
    cfg = k8s.Configuration()
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return k8s.ApiClient(cfg)


def api_pod_spec(client: k8s.ApiClient) -> dict[str, Any]:
    """The API Deployment's pod template as the API server stored it."""
    apps = k8s.AppsV1Api(client)
    raw = apps.read_namespaced_deployment(f"{FULLNAME}-api", NAMESPACE, _preload_content=False)
    body = json.loads(raw.data)  # type: ignore[attr-defined]
    spec: dict[str, Any] = body["spec"]["template"]["spec"]
    return spec


def run_init_containers(client: k8s.ApiClient, env: dict[str, str], token_dir: Path) -> None:
    """The API pod's init containers, in order, their commands as the Deployment says, with
    the Secret volumes mounted under token_dir."""
    api = k8s.CoreV1Api(client)
    spec = api_pod_spec(client)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for init in spec["initContainers"]:
        command = list(init["command"])
        for mount in init.get("volumeMounts", []):
            local = mount_secret(api, volumes[mount["name"]], token_dir / mount["name"])
            command = [a.replace(mount["mountPath"], str(local)) for a in command]
        program = shutil.which(command[0], path=str(Path(sys.executable).parent))
        done = subprocess.run(
            [program or command[0], *command[1:]],
            cwd=ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"init container {init['name']} failed: {done.stderr[-2000:]}")


def start_api(cp: ControlPlane, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """The API container's uvicorn, one worker, on a free loopback port."""
    port = free_port()
    log = (cp.dir / "api.log").open("ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "api.app:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: httpx.get(f"{url}/readyz", timeout=2).status_code == 200, 60, "the API")
    return proc, url


def dra_publisher_command(client: k8s.ApiClient, kubeconfig: Path) -> list[str]:
    """tmc-dra-publisher's container command as the chart's Deployment stores it, the binary
    built from this checkout, as its service account."""
    apps = k8s.AppsV1Api(client)
    raw = apps.read_namespaced_deployment(
        f"{FULLNAME}-dra-publisher", NAMESPACE, _preload_content=False
    )
    pod = json.loads(raw.data)["spec"]["template"]["spec"]  # type: ignore[attr-defined]
    command = list(pod["containers"][0]["command"])
    return [
        plugin_path.engine_binary("tmc-dra-publisher"),
        *command[1:],
        f"--kubeconfig={kubeconfig}",
    ]


def start_dra_door(cp: ControlPlane, client: k8s.ApiClient) -> subprocess.Popen[bytes]:
    """The DRA door's parts beside the chart's: tmc-dra-publisher (the nodes' ResourceSlices,
    a ResourceClaimTemplate per recommendation in each tenant namespace), the cluster's own
    resource-claim controller (a pod's claim from its template) and the stock kube-scheduler
    (which allocates claims), as a cluster keeping its stock scheduler runs them."""
    log = (cp.dir / "tmc-dra-publisher.log").open("ab")
    proc = subprocess.Popen(
        dra_publisher_command(client, cp.kubeconfig("dra-publisher")),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    cp.start_controller_manager(("resourceclaim-controller",))
    config = c.stock_scheduler_config(cp)
    cp.start_scheduler(config)
    return proc


def up(state_path: Path = DEFAULT_STATE, placement: str = "plugin") -> State:
    if state_path.exists():
        raise RuntimeError(f"a cluster is up already ({state_path}): ./dev cluster down first")
    cp = ControlPlane()
    started: list[Any] = []
    pg: PostgresServer | None = None
    try:
        cp.start()
        pg = PostgresServer()
        values = chart_values(pg, placement)
        install_chart(str(cp.kubeconfig("admin")), values)
        api = c.core(cp)
        # No controller-manager here: the default namespace's service account is made by hand.
        c.ensure_default_account(api, "default")
        env = {"TMC_DATABASE_URL": pg.url, "TMC_ENVIRONMENT": "production"}
        token_dir = cp.dir / "mounted"
        run_init_containers(c.api_client(cp), env, token_dir)
        api_proc, api_url = start_api(cp, env)
        started.append(api_proc)
        agent_token = token_dir / "agent-token" / "token"
        nodes = c.default_nodes(cp)
        for node in nodes:
            body = c.node_object(node.name)
            # The operator's part of a node: its rack pool (docs/install.md).
            body["metadata"]["annotations"] = node.pool_annotations
            c.register_node(api, body)
            node.start_agent(
                {"TMC_AGENT_SERVICE_URL": api_url, "TMC_AGENT_TOKEN_FILE": str(agent_token)}
            )
            started.append(node.proc)
            started.append(node.applier)  # tmc-nri reconcile, the node's applier
        c.wait_published(api, [n.name for n in nodes])
        # With the DRA door on, as the chart sets it for the publisher (dra.enabled).
        publisher = plugin_path.PublisherProcess(
            cp, pg.url, refresh_seconds=60, dra_claims=placement == "dra"
        )
        publisher.start()
        started.append(publisher.proc)
        publisher.wait_ready()
        plugin_path.build_scheduler()
        dra_publisher: subprocess.Popen[bytes] | None = None
        if placement in ("plugin", "dra"):
            plugin_path.start_plugin_scheduler(cp)
        if placement == "dra":
            dra_publisher = start_dra_door(cp, c.api_client(cp))
            started.append(dra_publisher)
        if placement == "extender":
            # The chart's extender door: tmc-extender as its service account, over mutual TLS
            # with the stock kube-scheduler on the chart's KubeSchedulerConfiguration.
            extender = GoExtenderProcess(cp)
            extender.start()
            started.append(extender.proc)
            cp.start_scheduler(c.scheduler_config(cp, extender.url))
        pids = {name: p.pid for name, p in cp.procs.items()}
        if placement == "extender":
            assert extender.proc is not None
            pids["tmc-extender"] = extender.proc.pid
        if dra_publisher is not None:
            pids["tmc-dra-publisher"] = dra_publisher.pid
        pids["api"] = api_proc.pid
        assert publisher.proc is not None
        pids["publisher"] = publisher.proc.pid
        pids.update({f"agent-{n.name}": n.proc.pid for n in nodes if n.proc is not None})
        pids.update({f"reconcile-{n.name}": n.applier.pid for n in nodes if n.applier is not None})
        state = State(
            dir=str(cp.dir),
            kubeconfig=str(cp.kubeconfig("admin")),
            api_url=api_url,
            pg_bin=str(pg.bin),
            pg_data=str(pg.data),
            token_dir=str(token_dir),
            values=values,
            pids=pids,
        )
        state.save(state_path)
        return state
    except BaseException:
        for proc in started:
            with contextlib.suppress(Exception):
                proc.kill()
        cp.close()
        if pg is not None:
            pg.close()
        raise


def _stop(pid: int, timeout: float = 15) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)  # our child (tests): reap it
            if done:
                return
        except ChildProcessError:
            pass  # started by an earlier `up`: not ours to reap
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


CONTROL_PLANE = (
    "etcd",
    "kube-apiserver",
    "tmc-scheduler",
    "kube-scheduler",
    "kube-controller-manager",
)


def postgres_pid(state: State) -> int | None:
    """The private PostgreSQL's postmaster, from its data folder's postmaster.pid."""
    try:
        first = (Path(state.pg_data) / "postmaster.pid").read_text().splitlines()[0]
        return int(first)
    except (OSError, IndexError, ValueError):
        return None


def alive(pid: int | None) -> bool:
    return pid is not None and Path(f"/proc/{pid}").exists()


def running(pid: int) -> bool:
    """Alive and not a zombie (an exited child of this process not yet reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def not_running(state: State, names: Iterable[str]) -> list[str]:
    """Of `names`, the parts `status` does not show running."""
    lines = status_lines(state)
    return [n for n in names if not any(x.startswith(n) and "running" in x for x in lines)]


def upload_example_profile(state: State, core: k8s.CoreV1Api) -> httpx.Response:
    """docs/install.md's upload step: examples/graph500.json with the agents' token."""
    agent = secret_value(core, f"{FULLNAME}-agent-token", "token")
    return httpx.post(
        f"{state.api_url}/v1/profiles",
        content=(ROOT / "examples" / "graph500.json").read_bytes(),
        headers={"Authorization": f"Bearer {agent}", "Content-Type": "application/json"},
        timeout=30,
    )


def up_for_tests(state_path: Path, placement: str) -> Iterator[State]:
    """A module fixture's body: `up` with this door, skipped (failed in CI) where the control
    plane cannot run, and `down` after the tests unless one of them took it down."""
    try:
        state = up(state_path, placement=placement)
    except Unavailable as exc:
        unavailable(exc)
    yield state
    if state_path.exists():
        down(state_path)


def status_lines(state: State) -> list[str]:
    """Every part `up` started, the control plane and PostgreSQL first, each running or not."""
    # etcd and the API server always; the scheduler of the door in use.
    rows: list[tuple[str, int | None, str]] = [
        (name, state.pids.get(name), "")
        for name in CONTROL_PLANE
        if name in state.pids or name in ("etcd", "kube-apiserver")
    ]
    rows.append(("postgresql", postgres_pid(state), f"data {state.pg_data}"))
    rows += [(name, pid, "") for name, pid in state.pids.items() if name not in CONTROL_PLANE]
    lines = []
    for name, pid, note in rows:
        shown = "pid       -" if pid is None else f"pid {pid:>7}"
        what = "running" if alive(pid) else ("not recorded" if pid is None else "EXITED")
        lines.append(f"{name:24} {shown}  {what}{'  ' + note if note else ''}".rstrip())
    return lines


def down(state_path: Path = DEFAULT_STATE) -> list[str]:
    """Stop everything `up` started, and say what was done, one line each."""
    if not state_path.exists():
        print(f"no cluster is up ({state_path} does not exist)", file=sys.stderr)
        return []
    state = State.load(state_path)
    done: list[str] = []
    order = ["tmc-scheduler", "kube-scheduler", "kube-controller-manager", "tmc-extender"]
    order += ["tmc-dra-publisher", "publisher", "api"]
    order += [n for n in state.pids if n.startswith(("agent", "reconcile"))]
    for name in [*order, "kube-apiserver", "etcd"]:
        if name in state.pids:
            pid = state.pids[name]
            was = "stopped" if alive(pid) else "already exited:"
            _stop(pid)
            done.append(f"{was} {name} (pid {pid})")
    pg_dir = Path(state.pg_data).parent
    pg_pid = postgres_pid(state)
    cmd = [str(Path(state.pg_bin) / "pg_ctl"), "-D", state.pg_data, "-m", "fast", "-w", "stop"]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    stopped = subprocess.run(cmd, capture_output=True, check=False, timeout=60, cwd=pg_dir)
    if stopped.returncode == 0:
        done.append(f"stopped PostgreSQL (pid {pg_pid}, data {state.pg_data})")
    else:
        done.append(f"PostgreSQL was not running (data {state.pg_data})")
    shutil.rmtree(pg_dir, ignore_errors=True)
    shutil.rmtree(state.dir, ignore_errors=True)
    done.append(f"removed {pg_dir} and {state.dir} (logs, kubeconfig, tokens)")
    state_path.unlink()
    done.append(f"removed {state_path}: ./dev cluster up starts a new cluster")
    return done


def next_steps(placement: str = "plugin") -> str:
    """Every step from an installed cluster to a placed pod, in docs/install.md's order (its test
    holds the two to the same commands): without the profile upload, the pod would be placed
    with the fallback (or, through the DRA door, not at all: its template needs a
    recommendation)."""
    steps = [
        f"kubectl -n {NAMESPACE} get deploy,ds,secret",
        f"export TMC_TOKEN=$(kubectl -n {NAMESPACE} get secret {FULLNAME}-bootstrap"
        " -o jsonpath='{.data.operator-token}' | base64 -d)",
        f"AGENT_TOKEN=$(kubectl -n {NAMESPACE} get secret {FULLNAME}-agent-token"
        " -o jsonpath='{.data.token}' | base64 -d)",
        'curl -s -X POST "$TMC_API/v1/profiles" -H "Authorization: Bearer $AGENT_TOKEN" \\\n'
        "    -H 'Content-Type: application/json' --data-binary @examples/graph500.json",
    ]
    if placement == "dra":
        label = ",".join(f"{k}={v}" for k, v in DRA_TENANT_LABELS.items())
        steps += [
            f"kubectl label namespace default {label}",
            "kubectl apply -f deploy/examples/tiered-pod-dra.yaml",
            "kubectl get pod graph500-bfs-dra -o jsonpath='{.spec.nodeName}{\"\\n\"}'",
            "kubectl get resourceclaims"
            " -o jsonpath='{.items[0].status.allocation.devices.results}{\"\\n\"}'",
            "kubectl get tieredrecommendations,resourceclaimtemplates",
        ]
    else:
        steps += [
            "kubectl apply -f deploy/examples/tiered-pod.yaml",
            "kubectl get pod graph500-bfs -o jsonpath='{.spec.nodeName}{\"\\n\"}'",
            "kubectl get tieredrecommendations",
        ]
    steps.append(
        'curl -s "$TMC_API/v1/recommendations?limit=1" -H "Authorization: Bearer $TMC_TOKEN"'
    )
    return "\n".join("  " + step for step in steps)


DOORS = {
    "plugin": "tmc-scheduler (kube-scheduler with tmc's plugin)",
    "extender": "the stock kube-scheduler calling tmc-extender",
    "dra": "the stock kube-scheduler allocating tmc's DRA devices (pods of tenant namespaces"
    " that claim their recommendation's template; tmc-scheduler places the opted-in ones)",
}


def describe(state: State) -> str:
    kubectl = binaries() / "kubectl"
    return f"""tmc is installed (release {RELEASE}, namespace {NAMESPACE}) on a local control plane;
tiered pods are placed by {DOORS[state.placement]}.

  export KUBECONFIG={state.kubeconfig}
  export PATH={kubectl.parent}:$PATH      # kube-apiserver, the schedulers, kubectl
  export TMC_API={state.api_url}

Next steps (docs/install.md, "Try it on this machine"): upload a profile, place a pod with it
{next_steps(state.placement)}
Logs: {state.dir}/*.log      Stop everything: ./dev cluster down
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="./dev cluster",
        description="A local control plane with tmc's chart installed and its processes running"
        " (docs/install.md, 'Try it on this machine').",
    )
    p.add_argument(
        "action",
        choices=["up", "down", "status"],
        help="up: start it and install tmc; down: stop what up started; status: what runs",
    )
    p.add_argument(
        "--placement",
        choices=PLACEMENTS,
        default="plugin",
        help="with up: which door places tiered pods: tmc-scheduler, kube-scheduler with tmc's"
        " plugin (plugin, the chart's default), the stock kube-scheduler calling tmc-extender"
        " (extender, for clusters that keep their scheduler), or the stock kube-scheduler"
        " allocating tmc's DRA devices (dra)",
    )
    p.add_argument(
        "--state",
        type=Path,
        default=DEFAULT_STATE,
        help="the file naming what up started (default: .tmc-cluster/state.json in this clone)",
    )
    args = p.parse_args(argv)
    if args.action == "up":
        print(describe(up(args.state, args.placement)))
    elif args.action == "down":
        for line in down(args.state):
            print(line)
    elif not args.state.exists():
        print(f"no cluster is up ({args.state} does not exist): ./dev cluster up starts one")
        return 1
    else:
        state = State.load(args.state)
        for line in status_lines(state):
            print(line)
        print(describe(state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
