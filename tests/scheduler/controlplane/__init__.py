"""A real Kubernetes control plane on loopback for the scheduler's end-to-end tests: Debian's
etcd, kube-apiserver, kube-scheduler and, for the Job tests, kube-controller-manager and kwok,
built from Go modules by build.sh (cached outside the repo). No kubelet: nodes are API objects;
their pods are only scheduled, except on kwok's nodes, where kwok.py runs them."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from ssl import create_default_context
from typing import NoReturn

import pytest

from tests.services import free_port, wait_until

HERE = Path(__file__).resolve().parent
# The chart installed as release RELEASE in NAMESPACE: its service accounts, by component.
RELEASE = "e2e"
NAMESPACE = "tmc-system"
# The chart's placementSeal.signingKey by default.
PLACEMENT_SEAL_KEY = "k1"
SERVICE_ACCOUNTS = {
    "scheduler": f"{RELEASE}-tmc-scheduler",
    "extender": f"{RELEASE}-tmc-extender",
    "agent": f"{RELEASE}-tmc-agent",
    "publisher": f"{RELEASE}-tmc-publisher",
    "dra-publisher": f"{RELEASE}-tmc-dra-publisher",
}


class Unavailable(RuntimeError):
    """The control plane cannot run on this machine (no binaries and no way to build them)."""


def unavailable(exc: Unavailable) -> NoReturn:
    """A test needing the control plane where it cannot run: skipped with the reason (under CI
    the skip fails the run, as every skip does: tests/fixtures/no_skips_in_ci.py)."""
    pytest.skip(f"no real control plane here: {exc}")


def binaries() -> Path:
    """The folder with kube-apiserver, kube-scheduler, kube-controller-manager and kwok:
    $TMC_K8S_BIN, or build.sh's cache."""
    given = os.environ.get("TMC_K8S_BIN")
    if given:
        return Path(given)
    done = subprocess.run(
        ["bash", str(HERE / "build.sh")], check=False, capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-3:])
        raise Unavailable(f"cannot build the control plane (build.sh): {tail}")
    return Path(done.stdout.strip().splitlines()[-1])


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def issue_extender_certificates(tls: Path, key: list[str]) -> None:
    """The extender's serving certificate (CN tmc-extender) and the scheduler's client one (CN
    tmc-scheduler), signed by the CA one folder up; `key` is openssl's -newkey argument and its
    options (RSA or EC)."""
    for cn, name in (("tmc-extender", "tls"), ("tmc-scheduler", "client")):
        openssl("req", "-newkey", *key, "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={cn}", cwd=tls)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "../ca.crt", "-CAkey", "../ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", "../san.ext", "-out", f"{name}.crt",
                cwd=tls)  # fmt: skip


class ControlPlane:
    def __init__(
        self, *, legacy_watches: bool = False, feature_gates: dict[str, bool] | None = None
    ) -> None:
        """`legacy_watches`: the API server serves a watch from resourceVersion 0 as a plain
        watch, not as a watch-list stream (its WatchList gate off). Debian's etcd 3.4 lacks the
        progress notifications such a stream needs, so the API server fails it; client-go's
        informers then fall back to a list, but kwok's watches (which start at 0) only retry
        with a growing back-off, and see a pod's change seconds late. `feature_gates`: the API
        server's gates set otherwise than by default."""
        self.legacy_watches = legacy_watches
        self.feature_gates = dict(feature_gates or {})
        if legacy_watches:
            self.feature_gates["WatchList"] = False
        self.bin = binaries()
        etcd = shutil.which("etcd")
        if etcd is None:
            raise Unavailable("etcd is not installed (Debian's etcd-server; ./dev installs it)")
        self.etcd_bin = etcd
        self.dir = Path(tempfile.mkdtemp(prefix="tmc-k8s-"))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # Each scheduler's secure port (its /healthz, /metrics and /debug/pprof), by name.
        self.secure_ports: dict[str, int] = {}
        self.api_port = free_port()
        self.admin_token = "admin-" + os.urandom(12).hex()
        # Every component gets the identity it has in a cluster: the chart's service accounts,
        # whose RBAC (rendered from the chart) the test applies. Static tokens stand in for the
        # projected service-account tokens a kubelet would mount.
        self.tokens = {user: f"{user}-{os.urandom(12).hex()}" for user in SERVICE_ACCOUNTS}

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def kubeconfig(self, user: str) -> Path:
        return self.dir / f"{user}.kubeconfig"

    @property
    def extender_tls(self) -> Path:
        """ca.crt, tls.crt/tls.key (the extender's) and client.crt/client.key (the scheduler's)."""
        return self.dir / "extender-tls"

    @property
    def placement_seal_keys(self) -> Path:
        """The keys that seal placements, laid out as the chart's Secret is mounted: one file,
        named by the signing key's id (PLACEMENT_SEAL_KEY), holding a random key."""
        d = self.dir / "placement-seal"
        if not d.exists():
            d.mkdir()
            (d / PLACEMENT_SEAL_KEY).write_text(secrets.token_urlsafe(48))
        return d

    def service_account_dir(self, user: str) -> Path:
        """What a kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount."""
        d = self.dir / f"sa-{user}"
        d.mkdir(exist_ok=True)
        (d / "token").write_text(self.tokens[user])
        (d / "ca.crt").write_bytes((self.dir / "ca.crt").read_bytes())
        (d / "namespace").write_text(NAMESPACE)
        return d

    def _pki(self) -> None:
        d = self.dir
        openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=tmc-test-ca",
            cwd=d,
        )
        (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "apiserver.key",
            "-out",
            "apiserver.csr",
            "-subj",
            "/CN=kube-apiserver",
            cwd=d,
        )
        openssl(
            "x509",
            "-req",
            "-in",
            "apiserver.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "apiserver.crt",
            cwd=d,
        )
        # A front-proxy CA quiets the scheduler's delegated authentication (it wants one).
        openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "proxy-ca.key",
            "-out",
            "proxy-ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=tmc-proxy-ca",
            cwd=d,
        )
        # The extender's mutual TLS, as the chart's Secret holds it: a serving certificate for
        # 127.0.0.1 and the scheduler's client certificate (CN tmc-scheduler), one CA.
        tls = d / "extender-tls"
        tls.mkdir()
        issue_extender_certificates(tls, ["rsa:2048"])
        (tls / "ca.crt").write_bytes((d / "ca.crt").read_bytes())
        openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
        openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
        lines = [f'{self.admin_token},tmc-admin,uid-admin,"system:masters"']
        for user, token in self.tokens.items():
            sa = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNTS[user]}"
            groups = (
                f"system:serviceaccounts,system:serviceaccounts:{NAMESPACE},system:authenticated"
            )
            lines.append(f'{token},{sa},uid-{user},"{groups}"')
        (d / "tokens.csv").write_text("\n".join(lines) + "\n")
        for user, token in (("admin", self.admin_token), *self.tokens.items()):
            self.kubeconfig(user).write_text(
                "apiVersion: v1\nkind: Config\n"
                f"clusters: [{{name: t, cluster: {{server: '{self.server}', "
                f"certificate-authority: '{d / 'ca.crt'}'}}}}]\n"
                f"users: [{{name: u, user: {{token: '{token}'}}}}]\n"
                "contexts: [{name: t, context: {cluster: t, user: u}}]\ncurrent-context: t\n"
            )

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.dir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )

    def _ready(self, url: str, token: str | None = None) -> bool:
        req = urllib.request.Request(url)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        ctx = create_default_context(cafile=str(self.dir / "ca.crt"))
        with urllib.request.urlopen(
            req, timeout=2, context=ctx if url.startswith("https") else None
        ) as r:
            return bool(r.status == 200)

    def _wait_serving(self, name: str, ready: Callable[[], bool], timeout: float) -> None:
        """Wait for `name` to answer `ready`; a process that exits first fails at once, with the
        end of its log (a port taken, a flag refused), instead of at the timeout."""

        def serving() -> bool:
            if self.procs[name].poll() is not None:
                raise RuntimeError(
                    f"{name} exited ({self.procs[name].returncode}):\n{self.log(name)[-3000:]}"
                )
            return ready()

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if serving():
                    return
            except RuntimeError:
                raise
            except Exception:  # not answering yet
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{name} not ready after {timeout} s:\n{self.log(name)[-3000:]}")

    def start(self) -> None:
        started = time.monotonic()
        self._pki()
        client, peer = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                self.etcd_bin,
                "--name",
                "t",
                "--data-dir",
                str(self.dir / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"t=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
            ],
        )
        self._wait_serving("etcd", lambda: self._ready(f"http://127.0.0.1:{client}/health"), 30)
        d = self.dir
        self._spawn(
            "kube-apiserver",
            [
                str(self.bin / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{client}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                "--advertise-address=127.0.0.1",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--client-ca-file={d / 'ca.crt'}",
                f"--requestheader-client-ca-file={d / 'proxy-ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--token-auth-file={d / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                # As kubeadm and managed clusters set it: the node agent's DaemonSet is
                # privileged (resctrl, cgroups), which the API server's default refuses.
                "--allow-privileged=true",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                # The apiserver advertises 127.0.0.1, which the endpoint reconciler rejects.
                "--endpoint-reconciler-type=none",
                *(
                    [
                        "--feature-gates="
                        + ",".join(f"{k}={str(v).lower()}" for k, v in self.feature_gates.items())
                    ]
                    if self.feature_gates
                    else []
                ),
            ],
        )
        self._wait_serving(
            "kube-apiserver", lambda: self._ready(f"{self.server}/readyz", self.admin_token), 90
        )
        self.startup_seconds = time.monotonic() - started

    def start_scheduler(
        self, config: Path, *, binary: str = "kube-scheduler", name: str = "kube-scheduler"
    ) -> None:
        """A scheduler process: kube-scheduler, or `tmc-scheduler` (kube-scheduler with the tmc
        plugin, built into the same folder by scheduler/plugin/build.sh). `name` tells replicas
        apart (their logs and stop_process)."""
        self.stop_process(name)
        port = free_port()
        self.secure_ports[name] = port
        self._spawn(
            name,
            [
                str(self.bin / binary),
                f"--config={config}",
                f"--authentication-kubeconfig={self.kubeconfig('scheduler')}",
                f"--authorization-kubeconfig={self.kubeconfig('scheduler')}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--v=2",
            ],
        )
        wait_until(
            lambda: (
                "Successfully acquired lease" in self.log(name)
                or "Starting Kubernetes Scheduler" in self.log(name)
                or "attempting to acquire leader lease" in self.log(name)
            ),
            60,
            name,
        )

    def start_controller_manager(self, controllers: tuple[str, ...]) -> None:
        """kube-controller-manager running only `controllers` (e.g. job-controller), with the
        admin identity (it stands in for the cluster's own, which is not tmc's to configure).
        Only the named ones: the node-lifecycle controller, for one, would taint nodes that no
        kubelet heartbeats."""
        name = "kube-controller-manager"
        self.stop_process(name)
        admin = self.kubeconfig("admin")
        self._spawn(
            name,
            [
                str(self.bin / name),
                f"--kubeconfig={admin}",
                f"--authentication-kubeconfig={admin}",
                f"--authorization-kubeconfig={admin}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                f"--controllers={','.join(controllers)}",
                # What root-ca-certificate-publisher-controller publishes (kube-root-ca.crt).
                f"--root-ca-file={self.dir / 'ca.crt'}",
                "--v=2",
            ],
        )
        wait_until(
            lambda: all(
                f'"Controller starting..." controller="{c}"' in self.log(name) for c in controllers
            ),
            60,
            name,
        )

    def kill_process(self, name: str) -> None:
        """SIGKILL: a crash, no graceful shutdown (no lease released)."""
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.kill()
            proc.wait(10)

    def log(self, name: str) -> str:
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop_process(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def close(self) -> None:
        for name in [n for n in self.procs if n not in ("kube-apiserver", "etcd")]:
            self.stop_process(name)
        for name in ("kube-apiserver", "etcd"):
            self.stop_process(name)
        shutil.rmtree(self.dir, ignore_errors=True)
