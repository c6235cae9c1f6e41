"""A real container runtime for the node tests: containerd (built from the Go module proxy by
`build.sh`) with Debian's runc, NRI enabled on a private socket, the tmc-nri plugin registered
over it, and containers created through the CRI API with crictl, as the kubelet creates them.

Everything lives under one temporary directory: containerd's root, state and sockets, the plan
directory, the shim directory. The test image is built here from the host's own files (a static
pause program and a dynamically linked probe with the C library it needs), packed as an OCI image
layout by deploy/image/oci.py and imported with ctr."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.node_contract import tiered_pod_labels
from tests.services import free_port

# The labels the kubelet passes for one of tmc's pods (tmc-nri trusts a placement only there).
TIERED_LABELS = tiered_pod_labels()

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
IMAGE = "tmc.test/node-probe:1"
RUNC = "/usr/sbin/runc"


class RuntimeFailure(AssertionError):
    """The runtime or a CRI call failed; the message has its output."""


def build_runtime() -> Path:
    """containerd, its runc shim, ctr and crictl (cached in ~/.cache/tmc-node)."""
    done = subprocess.run(
        ["bash", str(HERE / "build.sh")], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeFailure(f"building containerd failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def build_plugin(out: Path) -> Path:
    done = subprocess.run(
        ["bash", str(ROOT / "node" / "nri" / "build.sh"), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeFailure(f"building tmc-nri failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def _libraries(binary: Path) -> list[Path]:
    """The shared objects a program loads, and the dynamic loader, as ldd names them."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    libs: list[Path] = []
    for line in out.splitlines():
        for word in line.split():
            if word.startswith("/") and Path(word).exists():
                libs.append(Path(word))
    return libs


def build_image(work: Path) -> Path:
    """The probe image as a tar of its OCI layout (what `ctr images import` reads)."""
    rootfs = work / "rootfs"
    for d in ("bin", "etc", "proc", "sys", "dev", "tmp", "run"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["gcc", "-static", "-O2", "-o", str(rootfs / "pause"), str(HERE / "pause.c")], check=True
    )
    probe = rootfs / "bin" / "probe"
    subprocess.run(["gcc", "-O2", "-o", str(probe), str(HERE / "probe.c")], check=True)
    for lib in [*_libraries(probe), *_libraries(Path("/bin/true"))]:
        dest = rootfs / lib.relative_to("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib.resolve(), dest)
    # The shim links libpthread/libdl on older C libraries; with glibc 2.34+ they are in libc.
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/probe\n")
    tar = work / "rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(rootfs, arcname=".", filter=_owned_by_root)
    layout = work / "layout"
    subprocess.run(
        [
            "python3",
            str(ROOT / "deploy" / "image" / "oci.py"),
            str(tar),
            str(layout),
            "--ref",
            "1",
            "--created",
            "1700000000",
            "--user",
            "0",
            "--workdir",
            "/",
            "--cmd",
            "/pause",
        ],
        check=True,
        capture_output=True,
    )
    packed = work / "layout.tar"
    with tarfile.open(packed, "w") as t:
        t.add(layout, arcname=".")
    return packed


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


@dataclass
class Plugin:
    """One tmc-nri process."""

    binary: Path
    socket: Path
    plans: Path
    shim_dir: Path
    sys_root: str = "/sys"
    resctrl: str = ""
    node: str = "node-a"
    kubeconfig: str = "none"  # events to an API server; "none": logged only
    dra_checkpoint: str = ""  # tmc-dra-node's checkpoint, read for containers naming a claim
    seal_keys: str = ""  # the placement seal's key directory ("": sealing off)
    log: Path = field(default_factory=lambda: Path("/dev/null"))
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                "--node",
                self.node,
                "--socket",
                str(self.socket),
                "--plan-dir",
                str(self.plans),
                "--shim-dir",
                str(self.shim_dir),
                "--sys",
                self.sys_root,
                "--resctrl",
                self.resctrl,
                "--metrics",
                f"127.0.0.1:{self.port}",
                "--kubeconfig",
                self.kubeconfig,
                "--dra-checkpoint",
                self.dra_checkpoint,
                "--placement-seal-keys",
                self.seal_keys,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc, 10)
        self.proc = None

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("tmc_nri_"):
                key, value = line.rsplit(" ", 1)
                out[key] = float(value)
        return out

    def events(self) -> list[dict[str, Any]]:
        """The events the plugin reported (its log; the API server gets the same ones)."""
        out = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{") and '"tmc node event"' in line:
                out.append(json.loads(line))
        return out


class Containerd:
    """containerd with NRI on a private socket, CRI on a private endpoint."""

    def __init__(self, bin_dir: Path, base: Path) -> None:
        self.bin = bin_dir
        self.base = base
        self.sock = base / "containerd.sock"
        self.nri_sock = base / "nri.sock"
        # CDI specs a DRA node plugin writes for the containers of a prepared claim.
        self.cdi = base / "cdi"
        self.log = base / "containerd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        # Each pod sandbox's labels by uid, for its containers' CreateContainer.
        self.labels: dict[str, dict[str, str]] = {}
        (base / "nri-conf").mkdir(parents=True, exist_ok=True)
        (base / "nri-plugins").mkdir(parents=True, exist_ok=True)
        self.cdi.mkdir(parents=True, exist_ok=True)
        # restrict_oom_score_adj: the kubelet asks for -998 for sandboxes; a runtime without
        # CAP_SYS_RESOURCE (this machine's root has not got it) may only raise its score.
        (base / "config.toml").write_text(
            f"""version = 3
root = "{base}/root"
state = "{base}/state"
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{self.nri_sock}"
  plugin_config_path = "{base}/nri-conf"
  plugin_path = "{base}/nri-plugins"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "2s"
  # Checks a pod's required-plugins annotation (docs/install.md, as the nodes are set up).
  [plugins."io.containerd.nri.v1.nri".default_validator]
    enable = true
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{IMAGE}"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["{self.cdi}"]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        SystemdCgroup = false
"""
        )

    def start(self) -> None:
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ.get('PATH', '')}"}
        self.proc = subprocess.Popen(
            [str(self.bin / "containerd"), "--config", str(self.base / "config.toml")],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeFailure(f"containerd exited:\n{self.log.read_text()[-3000:]}")
            if self.sock.exists() and self.nri_sock.exists():
                done = self.crictl("version", check=False)
                if done.returncode == 0:
                    return
            time.sleep(0.1)
        raise RuntimeFailure(f"containerd did not start:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc, 20)
        self.proc = None

    def ctr(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin / "ctr"), "-a", str(self.sock), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeFailure(f"ctr {' '.join(args)}: {done.stderr[-2000:]}")
        return done.stdout

    def crictl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        endpoint = f"unix://{self.sock}"
        done = subprocess.run(
            [
                str(self.bin / "crictl"),
                "--runtime-endpoint",
                endpoint,
                "--image-endpoint",
                endpoint,
                "--timeout",
                "30s",
                *args,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeFailure(f"crictl {' '.join(args)}: {done.stderr[-2000:]}")
        return done

    # -- CRI, as the kubelet calls it ---------------------------------------------------------------

    def run_pod(
        self,
        name: str,
        uid: str,
        annotations: dict[str, str],
        labels: dict[str, str] | None = None,
    ) -> str:
        """RunPodSandbox with the pod's annotations and labels (tmc's label unless `labels`),
        as the kubelet passes them (host network: the tests need no CNI)."""
        self.labels[uid] = dict(TIERED_LABELS if labels is None else labels)
        config = self.base / f"pod-{uid}.json"
        config.write_text(
            json.dumps(pod_config(name, uid, annotations, self.base, self.labels[uid]))
        )
        return self.crictl("runp", str(config)).stdout.strip()

    def create(
        self,
        pod_id: str,
        pod_name: str,
        uid: str,
        annotations: dict[str, str],
        container: str,
        cpuset: str = "",
        check: bool = True,
        memory_limit: int = 0,
    ) -> subprocess.CompletedProcess[str]:
        """CreateContainer as the kubelet asks it: `memory_limit` is the container's own limit
        in bytes (0: none), passed as the kubelet passes a container's limits."""
        ctr_config = self.base / f"ctr-{uid}-{container}.json"
        ctr: dict[str, Any] = {
            "metadata": {"name": container},
            "image": {"image": IMAGE},
            "command": ["/bin/probe"],
            "log_path": f"{container}.log",
        }
        resources: dict[str, Any] = {}
        if cpuset:
            resources["cpuset_cpus"] = cpuset
        if memory_limit:
            resources["memory_limit_in_bytes"] = memory_limit
        if resources:
            ctr["linux"] = {"resources": resources}
        ctr_config.write_text(json.dumps(ctr))
        pod_path = self.base / f"pod-{uid}.json"
        labels = self.labels.get(uid, TIERED_LABELS)
        pod_path.write_text(json.dumps(pod_config(pod_name, uid, annotations, self.base, labels)))
        return self.crictl("create", pod_id, str(ctr_config), str(pod_path), check=check)

    def spec(self, container_id: str) -> dict[str, Any]:
        """The runtime spec containerd made for the container (after NRI adjusted it)."""
        info = json.loads(self.crictl("inspect", container_id).stdout)
        spec: dict[str, Any] = info["info"]["runtimeSpec"]
        return spec

    def run_to_end(self, container_id: str) -> str:
        self.crictl("start", container_id)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = json.loads(self.crictl("inspect", container_id).stdout)["status"]["state"]
            if state == "CONTAINER_EXITED":
                return self.crictl("logs", container_id).stdout
            time.sleep(0.1)
        raise RuntimeFailure(f"container {container_id} did not finish")

    def remove_pods(self) -> None:
        for pod in self.crictl("pods", "-q").stdout.split():
            self.crictl("stopp", pod, check=False)
            self.crictl("rmp", pod, check=False)


def terminate(proc: subprocess.Popen[bytes], seconds: float) -> None:
    """SIGTERM a process still running, then SIGKILL it if it has not exited within `seconds`."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def remove_empty_cgroups(name: str, root: Path = Path("/sys/fs/cgroup")) -> None:
    """Remove the cgroup trees `name` left under each hierarchy (a kubelet's `kubepods`, the CRI
    containers' `k8s.io`) once nothing runs in them: directories, deepest first (the kernel
    removes a cgroup's control files with it; one still in use stays)."""
    for top in root.glob(f"*/{name}"):
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def pod_config(
    name: str, uid: str, annotations: dict[str, str], base: Path, labels: dict[str, str]
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid, "attempt": 0},
        "labels": labels,
        "annotations": annotations,
        "log_directory": str(base / "logs" / uid),
        "linux": {"security_context": {"namespace_options": {"network": 2}}},
    }
