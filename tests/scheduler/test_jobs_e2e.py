# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""The operator's two Jobs end to end, as Jobs: deploy/examples/profile-job.yaml and
deploy/examples/verify-job.yaml created on a real control plane (etcd, kube-apiserver,
kube-controller-manager's Job controller, kube-scheduler for the profiling Job, tmc-scheduler
with the recommendation publisher for the verification Job), run on a kwok node whose pods'
commands really run on this machine (controlplane/kwok.py), with tmc's node agent on that node's
fake host tree and the real service (uvicorn) on a real PostgreSQL.

- The profiling Job's container runs `tmc-agent profile` (valgrind's trace of the example hash
  join, copied by the init container out of a stand-in "workload image"), which uploads the
  bundle with the agent token from the Job's Secret volume; the Job controller marks the Job
  Complete, and the service then recommends for the workload from that profile.
- The verification Job's pod is placed by tmc-scheduler from graph500's recommendation, runs the
  example BFS (graph500's stand-in) with the shim preloaded from its image reading the plan the
  node agent wrote for the pod, succeeds, and the node agent reports its run time to the
  service, which lists it among graph500's verification runs.

What the manifests change here, and why: the profiling Job's node selector names this test's
host kind, its backend is `trace` (the fake host tree claims a PMU this machine lacks), and its
service URL is the test's; the verification Job runs the BFS at a smaller scale (22 -> 19) so the
run takes about a second, and sets the shim's log file. Where the control plane cannot be built the tests skip with the
reason, except in CI (CI=true), where that is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client as k8s
from tmc_agent import examples, shim

from model.bundle import parse_bundle
from model.node_contract import Placement
from tests.fixtures.database import empty_tables
from tests.scheduler.controlplane import ControlPlane, kwok
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.controlplane import plugin as p
from tests.services import PostgresServer, uvicorn_server, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROFILE_JOB = ROOT / "deploy" / "examples" / "profile-job.yaml"
VERIFY_JOB = ROOT / "deploy" / "examples" / "verify-job.yaml"
BIN = Path(sys.executable).parent
NODE = "kwok-1"
# The images the Jobs name, as folders of the files their commands read from them.
HASHJOIN_IMAGE = "registry.example.com/hashjoin:1.4.0"
GRAPH500_IMAGE = "registry.example.com/graph500:3.0.0"
JOB_TIMEOUT = 240  # seconds; the profiling Job takes ~8 s here, the verification Job ~3 s


def manifest(path: Path) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return dict(doc)


def tmc(database_url: str, *args: str) -> str:
    env = {**os.environ, "TMC_DATABASE_URL": database_url}
    done = subprocess.run(
        [str(BIN / "tmc"), *args], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    cp = p.start_plugin_plane(legacy_watches=True)
    try:
        # The Job controller, and what every namespace gets from the controller manager: its
        # default service account and the cluster's CA (kube-root-ca.crt, for the pods' token).
        cp.start_controller_manager(
            (
                "job-controller",
                "serviceaccount-controller",
                "root-ca-certificate-publisher-controller",
            )
        )
        kwok.start_kwok(cp)
        yield cp
    finally:
        cp.close()


class Stack(c.PlacementStack):
    """One kwok node with its agent reporting to the service, the plugin's placement path, the
    cluster's own kube-scheduler, and the pod runner."""

    process_logs = (
        "publisher",
        "tmc-scheduler",
        "kube-scheduler",
        "kube-controller-manager",
        "kwok",
    )
    node_annotations = (kwok.NODE_ANNOTATION,)

    def __init__(self, cp: ControlPlane, pg: PostgresServer, service: str) -> None:
        super().__init__(cp, pg)
        self.nodes = [c.FakeNode(cp, NODE)]
        self.service = service
        self.agent_token = tmc(pg.url, "token", "create", "--role", "agent", "--name", NODE,
                               "--node", NODE)  # fmt: skip
        self.operator = tmc(pg.url, "token", "create", "--role", "operator", "--name", "ops")
        self.publisher = p.PublisherProcess(cp, pg.url)
        self.images = images(cp.dir / "images")
        self.runner = kwok.PodRunner(
            c.core(cp),  # its own client: the runner's threads share it, not the test's
            {n.name: n.root for n in self.nodes},
            self.images,
            cp.dir / "pods",
            before_start=self.kubelet_starts,
        )

    def kubelet_starts(self, pod: k8s.V1Pod) -> None:
        """Before the containers: the pod's cgroup, as the kubelet makes it; and for a pod tmc
        placed, its plan file from tmc-nri reconcile. A kubelet does not wait for it (a
        container that starts first runs without its plan: docs/agent.md, Limitations); the test
        does, so that the run the agent reports is the placed one, which the shim's log shows."""
        node = next(n for n in self.nodes if n.name == pod.spec.node_name)
        uid = str(pod.metadata.uid)
        node.kubelet_starts(uid, threads=[])
        if Placement.from_annotations(pod.metadata.annotations) is not None:
            plan = node.plans / f"{uid}.plan"
            wait_until(plan.exists, 30, f"the agent's plan for {pod.metadata.name}")

    def agent_env(self, node: c.FakeNode) -> dict[str, str]:
        return {"TMC_AGENT_SERVICE_URL": self.service, "TMC_AGENT_TOKEN": self.agent_token}

    def logs(self) -> str:
        pods = sorted((self.cp.dir / "pods").glob("*/logs/*.log"))
        ran = "\n".join(f"--- {f} ---\n{f.read_text(errors='replace')[-3000:]}" for f in pods)
        return f"{super().logs()}\n{ran}"


def images(where: Path) -> dict[str, Path]:
    """The workloads' images: the example hash join where the profiling Job's init container
    copies it from; the example BFS as graph500's program, with the allocator shim built in."""
    hashjoin = where / "hashjoin"
    examples.build_example("hashjoin", hashjoin / "opt" / "hashjoin")
    graph500 = where / "graph500"
    bfs = examples.build_example("bfs", where / "build")
    (graph500 / "opt" / "graph500").mkdir(parents=True)
    bfs.rename(graph500 / "opt" / "graph500" / "graph500_reference_bfs")
    (graph500 / "opt" / "tmc").mkdir(parents=True)
    built = shim.build(where / "shim", targets=("all",))
    (graph500 / "opt" / "tmc" / "libtmcalloc.so").write_bytes(built.library.read_bytes())
    return {HASHJOIN_IMAGE: hashjoin, GRAPH500_IMAGE: graph500}


@pytest.fixture(scope="module")
def stack(plane: ControlPlane, postgres: PostgresServer) -> Iterator[Stack]:
    empty_tables(postgres.dsn())
    env = {"TMC_DATABASE_URL": postgres.url, "TMC_ENVIRONMENT": "test"}
    with uvicorn_server(env) as service:
        s = Stack(plane, postgres, service)
        try:  # what started is stopped, also when a later step fails
            s.start_nodes()
            s.publisher.start()
            s.publisher.wait_ready()
            p.start_plugin_scheduler(plane)
            plane.start_scheduler(c.stock_scheduler_config(plane))
            s.runner.start()
            yield s
        finally:
            s.runner.stop()
            s.stop_nodes()
            s.publisher.stop()
            for name in ("tmc-scheduler", "kube-scheduler"):
                plane.stop_process(name)


def finished(stack: Stack, namespace: str, job: str) -> k8s.V1Job:
    """The Job once the Job controller has marked it Complete or Failed."""
    batch = k8s.BatchV1Api(c.api_client(stack.cp))
    seen: dict[str, k8s.V1Job] = {}

    def done() -> bool:
        current = batch.read_namespaced_job(job, namespace)
        seen["job"] = current
        return any(
            cond.type in ("Complete", "Failed") and cond.status == "True"
            for cond in current.status.conditions or []
        )

    try:
        wait_until(done, JOB_TIMEOUT, f"Job {namespace}/{job} finished")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: {seen.get('job')}\n{stack.logs()}") from exc
    return seen["job"]


def conditions(job: k8s.V1Job) -> set[str]:
    return {cond.type for cond in job.status.conditions or [] if cond.status == "True"}


def only_pod(stack: Stack, namespace: str, job: str) -> k8s.V1Pod:
    """The Job's one pod: a second one is a retry, after a failure the logs show."""
    pods = stack.api.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
    phases = [(pod.metadata.name, pod.status.phase) for pod in pods]
    assert len(pods) == 1, f"{phases}\n{stack.logs()}"
    return pods[0]


def create_job(stack: Stack, namespace: str, body: dict[str, Any]) -> None:
    k8s.BatchV1Api(c.api_client(stack.cp)).create_namespaced_job(namespace, body)


def test_the_profiling_job_completes_and_the_service_recommends_from_its_profile(
    stack: Stack,
) -> None:
    job = manifest(PROFILE_JOB)
    namespace = job["metadata"]["namespace"]
    spec = job["spec"]["template"]["spec"]
    spec["nodeSelector"] = {"tmc.dev/host-kind": c.HOST_KIND}
    (container,) = spec["containers"]
    command = container["command"]
    command[command.index("--backend=auto")] = "--backend=trace"
    for entry in container["env"]:
        if entry["name"] == "TMC_AGENT_SERVICE_URL":
            entry["value"] = stack.service
    c.new_namespace(stack.api, namespace)
    # The chart's agent token Secret, as `helm install` creates it in the release's namespace.
    (token,) = [v for v in spec["volumes"] if v["name"] == "token"]
    stack.api.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": token["secret"]["secretName"]},
            "stringData": {"token": tmc(stack.pg.url, "token", "create", "--role", "agent")},
        },
    )
    create_job(stack, namespace, job)

    done = finished(stack, namespace, job["metadata"]["name"])
    pod = only_pod(stack, namespace, job["metadata"]["name"])
    run = stack.runner.run_of(namespace, pod.metadata.name)
    assert run is not None and run.done.wait(10) and run.error is None, run
    assert conditions(done) >= {"Complete"}, f"{done.status}\n{stack.logs()}"
    assert done.status.succeeded == 1 and pod.status.phase == "Succeeded"
    assert pod.spec.node_name == NODE
    assert [(r.name, r.exit_code) for r in run.containers] == [("workload", 0), ("profile", 0)]
    output = run.containers[-1].log.read_text()
    assert "uploaded: HTTP 201" in output, output[-3000:]
    # What the Job leaves on the node's hostPath volumes: the bundle and its run, no spool.
    (node,) = stack.nodes
    kept = node.root / "var/lib/tmc/profiles"
    bundle = parse_bundle((kept / "hashjoin.json").read_text())
    assert (bundle.workload.name, bundle.workload.input_label) == (
        "hashjoin",
        "40k-build-120k-probe",
    )
    assert json.loads((kept / "hashjoin.run.json").read_text())["exit_status"] == 0
    assert not list((node.root / "var/lib/tmc/spool").glob("*.json"))

    operator = {"Authorization": f"Bearer {stack.operator}"}
    answer = httpx.post(
        f"{stack.service}/recommend", headers=operator, json={"workload": "hashjoin"}, timeout=120
    )
    assert answer.status_code == 200, answer.text
    placed = {s["tag"] for s in answer.json()["recommendation"]["placement"]}
    assert {"hash_buckets", "probe_relation"} <= placed


def online_nodes() -> set[int]:
    """This machine's online NUMA nodes (`/sys/devices/system/node/online`, e.g. "0-1,3"), as
    the shim reads them."""
    text = Path("/sys/devices/system/node/online").read_text().strip()
    nodes: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        nodes.update(range(int(lo), int(hi or lo) + 1))
    return nodes


def test_the_verification_job_is_placed_by_tmc_and_its_run_is_recorded(stack: Stack) -> None:
    job = manifest(VERIFY_JOB)
    namespace = job["metadata"]["namespace"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    container["command"] = [container["command"][0], "19", "16"]
    # The shim's log (its own variable), to see that the program read the pod's plan.
    container["env"].append({"name": "TMC_REGION_LOG", "value": "/tmp/regions.log"})
    c.ensure_default_account(stack.api, namespace)
    create_job(stack, namespace, job)

    done = finished(stack, namespace, job["metadata"]["name"])
    pod = only_pod(stack, namespace, job["metadata"]["name"])
    assert conditions(done) >= {"Complete"}, f"{done.status}\n{stack.logs()}"
    assert pod.status.phase == "Succeeded" and pod.spec.node_name == NODE
    placement = Placement.from_annotations(pod.metadata.annotations)
    assert placement is not None and placement.fallback is None, stack.logs()
    assert placement.workload == "graph500" and placement.node == NODE
    run = stack.runner.run_of(namespace, pod.metadata.name)
    assert run is not None and run.done.wait(10) and run.error is None, run
    assert [(r.name, r.exit_code) for r in run.containers] == [("bfs", 0)]
    assert "bfs:" in run.containers[0].log.read_text()
    # The environment as the kubelet resolves it: the shim from the image (LD_PRELOAD) read the
    # plan tmc-nri reconcile wrote for this pod (TMC_PLAN, from the pod's uid). tmc-nri's rule:
    # a placement with no slow bytes names the DRAM node as both tiers. The pod asks for one CPU
    # and is priced with it, so its placement may well hold slow memory: on a test machine
    # without that node the shim then says so and binds nothing.
    regions = (run.containers[0].log.parent.parent / "tmp" / "regions.log").read_text()
    slow_node = 1 if placement.configuration.slow_bytes else 0
    said = "binding" if slow_node in online_nodes() else "fallback: slow node not online"
    assert f"# plan fast_node 0 slow_node {slow_node} {said}" in regions, regions[:2000]

    # The node agent reports the succeeded pod's run; the service lists it.
    operator = {"Authorization": f"Bearer {stack.operator}"}
    url = f"{stack.service}/v1/workloads/graph500/verification-runs"
    runs: list[dict[str, Any]] = []

    def recorded() -> bool:
        answer = httpx.get(url, headers=operator, timeout=10)
        runs[:] = [r for r in answer.json() if r["run_id"] == pod.metadata.uid]
        return bool(runs)

    try:
        wait_until(recorded, 60, "the verification run recorded")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{stack.logs()}") from exc
    (recorded_run,) = runs
    conf = placement.configuration
    assert recorded_run["llc_ways"] == conf.llc_ways
    assert recorded_run["slow_ratio"] == pytest.approx(conf.slow_ratio)
    (status,) = pod.status.container_statuses or []
    ended = status.state.terminated
    assert ended is not None and ended.exit_code == 0
    assert ended.finished_at is not None and ended.started_at is not None
    span = ended.finished_at - ended.started_at
    assert recorded_run["seconds"] == pytest.approx(span.total_seconds())
    assert recorded_run["seconds"] >= 1


def test_a_container_that_fails_fails_its_job(stack: Stack) -> None:
    """The other outcome on the same path: the container's real exit status (3) reaches the
    pod's container status, the pod fails, and the Job controller fails the Job."""
    namespace = "default"
    c.ensure_default_account(stack.api, namespace)
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "exits-3"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"tmc.dev/host-kind": c.HOST_KIND},
                    "containers": [
                        {
                            "name": "sh",
                            "image": "debian:bookworm",
                            "command": ["sh", "-c", "exit 3"],
                        }
                    ],
                }
            },
        },
    }
    create_job(stack, namespace, body)

    done = finished(stack, namespace, "exits-3")
    assert "Failed" in conditions(done) and "Complete" not in conditions(done), done.status
    pod = only_pod(stack, namespace, "exits-3")
    assert pod.status.phase == "Failed"
    (status,) = pod.status.container_statuses or []
    ended = status.state.terminated
    assert ended is not None and (ended.exit_code, ended.reason) == (3, "Error")
