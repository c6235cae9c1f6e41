# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""Nodes whose pods really run, without a kubelet: kwok for the pods' status, and a runner that
runs their containers' commands on this machine.

kwok (sigs.k8s.io/kwok, built by build.sh into the cache) manages the nodes annotated
`kwok.x-k8s.io/node: fake` and writes their pods' status through Stages (kwok-stages.yaml). It
runs nothing. The other half of a kubelet is `PodRunner`: it polls the pods bound to those
nodes, and for each new one

1. annotates `runner.kwok.tmc.dev/started-at` (kwok's Stage makes the pod Running);
2. resolves the pod as a kubelet would (tests/agent/podspec.py): emptyDir volumes as folders,
   hostPath volumes under the node's fake host root (where its tmc agent reads and writes),
   Secret volumes written out from the API server, each "image" a folder the test names (the
   files a command reads from its image; everything else, tmc's commands included, is this
   machine's, in the project's virtualenv), the env's values, $(VAR) references and downward-API
   fields;
3. runs the init containers, then the containers, one after another, each with a deadline
   (killed at it, exit status 137 as for SIGKILL);
4. annotates each container's exit status and times (`exit-code.<container>`, `started-at.*`,
   `finished-at.*`) and the pod's outcome (`phase`: Succeeded when every container exited 0, else
   Failed), in one patch; kwok's Stage turns them into the terminated container statuses and the
   phase, which the Job controller (kube-controller-manager) and tmc's node agent read as they
   would a kubelet's.

Times are at the second, as a kubelet reports them; the runner rounds a container's start down
and its finish up, so that the interval holds the whole run (a run under a second is 1 s, not
0 s). Each pod runs in its own thread, so a long one does not hold up the others; every wait has
a deadline, and `stop` ends the polling and kills what still runs.
"""

from __future__ import annotations

import base64
import logging
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from tests.agent.podspec import Pod, Unsupported
from tests.scheduler.controlplane import ControlPlane
from tests.services import free_port, wait_until

log = logging.getLogger("tests.kwok")

HERE = Path(__file__).resolve().parent
STAGES = HERE / "kwok-stages.yaml"
NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
PREFIX = "runner.kwok.tmc.dev/"
VENV_BIN = Path(sys.executable).parent
KILLED = 137  # a container killed at its deadline, as by SIGKILL


def start_kwok(cp: ControlPlane) -> None:
    """The kwok controller on the admin identity (it stands in for the nodes' kubelets),
    managing the annotated nodes with kwok-stages.yaml; its server on a free loopback port."""
    if not cp.legacy_watches:
        raise ValueError("kwok needs ControlPlane(legacy_watches=True)")
    key, value = NODE_ANNOTATION
    cp.stop_process("kwok")
    cp._spawn(
        "kwok",
        [
            str(cp.bin / "kwok"),
            f"--kubeconfig={cp.kubeconfig('admin')}",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            f"--config={STAGES}",
            f"--server-address=127.0.0.1:{free_port()}",
            # No node leases: nothing here (no node-lifecycle controller) reads them.
            "--node-lease-duration-seconds=0",
        ],
    )
    wait_until(lambda: '"msg":"Watch nodes"' in cp.log("kwok"), 30, "kwok")


def stamp(when: float, *, up: bool) -> str:
    """RFC 3339 at the second, as the API server keeps container times."""
    second = math.ceil(when) if up else math.floor(when)
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ContainerRun:
    name: str
    argv: list[str]
    exit_code: int
    started: float
    finished: float
    log: Path


@dataclass
class PodRun:
    """What the runner did with one pod: its containers' runs, in order, and any refusal."""

    key: str
    containers: list[ContainerRun] = field(default_factory=list)
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def phase(self) -> str:
        ok = self.error is None and all(c.exit_code == 0 for c in self.containers)
        return "Succeeded" if ok and self.containers else "Failed"


class PodRunner:
    """Runs the containers of pods bound to `nodes` (node name -> its fake host root, where
    hostPath volumes live). `images` maps an image name to a folder of its files; `work` holds
    each pod's own volumes and the containers' logs."""

    def __init__(
        self,
        api: k8s.CoreV1Api,
        nodes: dict[str, Path],
        images: dict[str, Path],
        work: Path,
        *,
        container_timeout: float = 300,
        poll_seconds: float = 0.2,
        before_start: Callable[[k8s.V1Pod], None] | None = None,
    ) -> None:
        """`before_start(pod)`: what else happens on the node before the pod's containers start
        (a test's stand-in for the kubelet's cgroup, say); it may raise to fail the pod."""
        self.api = api
        self.before_start = before_start
        self.nodes = nodes
        self.images = images
        self.work = work
        self.container_timeout = container_timeout
        self.poll_seconds = poll_seconds
        self.runs: dict[str, PodRun] = {}  # pod uid -> its run
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        thread = threading.Thread(target=self._poll, name="pod-runner", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout: float = 20) -> None:
        self._stop.set()
        with self._lock:
            for proc in self._procs:
                proc.kill()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def run_of(self, namespace: str, name: str) -> PodRun | None:
        with self._lock:
            return next((r for r in self.runs.values() if r.key == f"{namespace}/{name}"), None)

    # --- the loop -------------------------------------------------------------------------------

    def _poll(self) -> None:
        while not self._stop.is_set():
            for node in self.nodes:
                try:
                    pods = self.api.list_pod_for_all_namespaces(
                        field_selector=f"spec.nodeName={node}", _request_timeout=10
                    ).items
                except Exception:  # the API server restarting: the next poll retries
                    log.exception("listing the pods of %s failed", node)
                    continue
                for pod in pods:
                    self._maybe_start(pod)
            self._stop.wait(self.poll_seconds)

    def _maybe_start(self, pod: k8s.V1Pod) -> None:
        meta = pod.metadata
        if meta.deletion_timestamp is not None or pod.status.phase != "Pending":
            return
        uid = str(meta.uid)
        with self._lock:
            if uid in self.runs:
                return
            run = self.runs[uid] = PodRun(f"{meta.namespace}/{meta.name}")
        thread = threading.Thread(target=self._run, args=(pod, run), daemon=True)
        thread.start()
        self._threads.append(thread)

    def _annotate(self, pod: k8s.V1Pod, annotations: dict[str, str]) -> None:
        meta = pod.metadata
        body = {"metadata": {"uid": meta.uid, "annotations": annotations}}
        self.api.patch_namespaced_pod(meta.name, meta.namespace, body, _request_timeout=10)

    def _run(self, pod: k8s.V1Pod, run: PodRun) -> None:
        try:
            self._annotate(pod, {PREFIX + "started-at": stamp(time.time(), up=False)})
            spec = self.api.api_client.sanitize_for_serialization(pod.spec)
            podspec = self._resolve(pod, spec)
            if self.before_start is not None:
                self.before_start(pod)
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                result = self._run_container(pod, podspec, container)
                run.containers.append(result)
                if result.exit_code != 0 or self._stop.is_set():
                    break
        except Exception as exc:  # whatever it is, the pod fails with it rather than hangs
            run.error = f"{type(exc).__name__}: {exc}"
            log.warning("pod %s cannot run: %s", run.key, run.error)
        finally:
            out = {PREFIX + "phase": run.phase}
            for c in run.containers:
                out[f"{PREFIX}exit-code.{c.name}"] = str(c.exit_code)
                out[f"{PREFIX}started-at.{c.name}"] = stamp(c.started, up=False)
                out[f"{PREFIX}finished-at.{c.name}"] = stamp(c.finished, up=True)
            try:
                self._annotate(pod, out)
            except Exception:  # the pod deleted meanwhile: nothing to report to
                log.exception("pod %s: its outcome was not recorded", run.key)
            run.done.set()

    # --- what a kubelet does with a pod ---------------------------------------------------------

    def _resolve(self, pod: k8s.V1Pod, spec: dict[str, Any]) -> Pod:
        """The pod's volumes where they are on this machine."""
        meta = pod.metadata
        root = self.work / f"{meta.namespace}_{meta.name}"
        host = self.nodes[str(pod.spec.node_name)]
        places: dict[str, Path] = {}
        for volume in spec.get("volumes", []):
            name = volume["name"]
            if "hostPath" in volume:
                places[name] = host / volume["hostPath"]["path"].lstrip("/")
                places[name].mkdir(parents=True, exist_ok=True)
            elif "secret" in volume or "projected" in volume:
                places[name] = root / "secrets" / name
                if "secret" in volume:
                    self._project(pod, {"secret": volume["secret"]}, places[name])
                for source in volume.get("projected", {}).get("sources", []):
                    self._project(pod, source, places[name])
            elif "emptyDir" not in volume:
                raise Unsupported(f"volume {name}: only emptyDir, hostPath, secret, projected")
        return Pod(spec, root, volumes=places, images=self.images)

    def _project(self, pod: k8s.V1Pod, source: dict[str, Any], to: Path) -> None:
        """One source of a secret or projected volume written into `to`, as the kubelet does:
        a Secret's or ConfigMap's keys, the downward API's fields, a service-account token from
        the TokenRequest API bound to the pod (what the ServiceAccount admission plugin mounts
        into every pod that does not opt out)."""
        meta = pod.metadata
        files: dict[str, bytes] = {}
        if "secret" in source:
            secret = self.api.read_namespaced_secret(source["secret"]["secretName"], meta.namespace)
            data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
            files = self._items(source["secret"], data)
        elif "configMap" in source:
            config = self.api.read_namespaced_config_map(
                source["configMap"]["name"], meta.namespace
            )
            text = {k: v.encode() for k, v in (config.data or {}).items()}
            files = self._items(source["configMap"], text)
        elif "downwardAPI" in source:
            fields = {"metadata.namespace": meta.namespace, "metadata.name": meta.name}
            for item in source["downwardAPI"]["items"]:
                files[item["path"]] = str(fields[item["fieldRef"]["fieldPath"]]).encode()
        elif "serviceAccountToken" in source:
            wanted = source["serviceAccountToken"]
            bound = {"kind": "Pod", "apiVersion": "v1", "name": meta.name, "uid": meta.uid}
            spec: dict[str, Any] = {
                "expirationSeconds": wanted.get("expirationSeconds", 3600),
                "boundObjectRef": bound,
            }
            if wanted.get("audience"):
                spec["audiences"] = [wanted["audience"]]
            issued = self.api.create_namespaced_service_account_token(
                pod.spec.service_account_name or "default", meta.namespace, {"spec": spec}
            )
            files[wanted["path"]] = str(issued.status.token).encode()
        else:
            raise Unsupported(f"volume source {sorted(source)}")
        for relative, content in files.items():
            path = to / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)

    @staticmethod
    def _items(source: dict[str, Any], data: dict[str, bytes]) -> dict[str, bytes]:
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        return {item["path"]: data[item["key"]] for item in items}

    def _run_container(self, pod: k8s.V1Pod, podspec: Pod, c: dict[str, Any]) -> ContainerRun:
        meta = pod.metadata
        fields = {
            "metadata.uid": meta.uid,
            "metadata.name": meta.name,
            "metadata.namespace": meta.namespace,
            "spec.nodeName": pod.spec.node_name,
        }
        env = podspec.environment(c, fields)
        argv = podspec.argv(c, env)
        env = {k: podspec.host_path(c, v) for k, v in env.items()}
        path = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
        program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=path)
        if program is None:
            raise Unsupported(f"container {c['name']}: {argv[0]} is not on this machine")
        log_path = podspec.root / "logs" / f"{c['name']}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.time()
        with log_path.open("wb") as out:
            proc = subprocess.Popen(
                [program, *argv[1:]],
                env={**os.environ, "PATH": path, **env},
                cwd=podspec.root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            with self._lock:
                self._procs.add(proc)
            try:
                code = proc.wait(self.container_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                code = KILLED
            finally:
                with self._lock:
                    self._procs.discard(proc)
        finished = time.time()
        if code < 0:  # killed by a signal: the shell's and the kubelet's 128 + signal
            code = 128 - code
        return ContainerRun(c["name"], argv, code, started, finished, log_path)
