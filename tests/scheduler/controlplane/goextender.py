"""tmc-extender (scheduler/plugin/cmd/tmc-extender: the placement engine behind kube-scheduler's
extender protocol, built next to tmc-scheduler by scheduler/plugin/build.sh) as a process of the
loopback cluster, with the extender's service-account identity and the chart's mutual TLS."""

from __future__ import annotations

import subprocess
import urllib.request

from tests.scheduler.controlplane import PLACEMENT_SEAL_KEY, ControlPlane
from tests.scheduler.controlplane.cluster import probe_tls
from tests.scheduler.controlplane.plugin import engine_binary
from tests.services import free_port, wait_until


class GoExtenderProcess:
    def __init__(
        self,
        cp: ControlPlane,
        name: str = "tmc-extender",
        *,
        user: str = "extender",
        extra_args: tuple[str, ...] = (),
    ) -> None:
        """`user`: whose service-account identity it runs as (the chart runs it in the scheduler's
        pod, as the scheduler's); `extra_args`: more flags (the placement lease's)."""
        self.cp = cp
        self.name = name
        self.user = user
        self.extra_args = extra_args
        self.port = free_port()
        self.tls = cp.extender_tls
        self.log = cp.dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/scheduler"

    def start(self, wait: bool = True) -> None:
        self.proc = subprocess.Popen(
            [
                engine_binary("tmc-extender"),
                f"--kubeconfig={self.cp.kubeconfig(self.user)}",
                f"--listen=127.0.0.1:{self.port}",
                f"--tls-cert-file={self.tls / 'tls.crt'}",
                f"--tls-key-file={self.tls / 'tls.key'}",
                f"--client-ca-file={self.tls / 'ca.crt'}",
                "--client-names=tmc-scheduler",
                # Sealed placements, as the chart runs it by default.
                f"--placement-seal-keys={self.cp.placement_seal_keys}",
                f"--placement-seal-signing-key={PLACEMENT_SEAL_KEY}",
                *self.extra_args,
            ],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 60) -> None:
        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"tmc-extender exited: {self.log.read_text()[-2000:]}")
            url = f"https://127.0.0.1:{self.port}/readyz"
            with urllib.request.urlopen(url, timeout=1, context=probe_tls(self.tls)) as r:
                return bool(r.status == 200)

        wait_until(ready, timeout, "tmc-extender")

    def metrics(self) -> str:
        """/metrics, open to probes as the chart's ServiceMonitor reads it."""
        url = f"https://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=5, context=probe_tls(self.tls)) as r:
            return str(r.read().decode())

    def kill(self) -> None:
        """SIGKILL: a crash, no graceful shutdown."""
        if self.proc is not None:
            self.proc.kill()
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
