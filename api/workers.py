"""The API in several processes, each with its own listening socket on the same port.

uvicorn's `--workers` shares one listening socket between its processes, and the first process
to wake accepts every connection waiting (asyncio accepts in a loop): ten keep-alive clients that
connect together land 8:2 or 9:1, and one process runs at most of a core while the other idles.
Here each process binds the port with SO_REUSEPORT, so the kernel hands every new connection to
one of the sockets by a hash of its addresses: spread evenly on average, whoever is busy.

    python -m api.workers [--host 127.0.0.1] [--port 8000] [--workers 2]

The supervisor restarts a process that dies, stops them all on SIGTERM or SIGINT (each finishes
its requests, as uvicorn does on SIGTERM), and gives up if processes keep dying at start-up.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from multiprocessing.process import BaseProcess
from types import FrameType

import uvicorn

log = logging.getLogger("tmc.api.workers")

APP = "api.app:create_app"
BACKLOG = 2048
STOP_GRACE_SECONDS = 20.0
# A process that dies within this long of its start counts as a failed start; this many in a
# row and the supervisor stops (a bad setting would otherwise restart forever).
QUICK_DEATH_SECONDS = 5.0
MAX_QUICK_DEATHS = 5


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port that shares the port with the other workers' sockets."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def check_port(host: str, port: int) -> None:
    """Raise OSError if anything serves host:port already. SO_REUSEPORT lets any process of the
    same user join a port's group, so binding alone cannot tell: a connection is tried too (a
    listener answers it), and the bind probe (never listening, so never handed a connection)
    catches a holder that does not share the port."""
    target = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    try:
        with socket.create_connection((target, port), timeout=0.5):
            pass
    except OSError:
        pass  # nobody listens: as it should be
    else:
        raise OSError(errno.EADDRINUSE, "another server already listens there")
    reuseport_socket(host, port).close()


def claim_port(host: str, port: int) -> socket.socket:
    """The supervisor's claim on host:port, held for as long as it runs: a name in Linux's
    abstract socket namespace, which only one process can bind and the kernel frees when that
    process ends. A second supervisor for the same port (and the same network namespace) fails
    here before any of its workers joins the port, even when the first is still starting."""
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(f"\0tmc-api:{host}:{port}")
    except OSError as exc:
        claim.close()
        raise OSError(errno.EADDRINUSE, "another tmc API supervisor serves this port") from exc
    check_port(host, port)
    return claim


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def _die_with(supervisor: int) -> None:
    """A worker never outlives its supervisor (killed with SIGKILL, say): it would keep serving
    the port with nobody to stop it. Linux sends it SIGTERM when the supervisor dies, and uvicorn
    finishes its requests and exits."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the supervisor's shutdown still stops it
        return
    if os.getppid() != supervisor:  # it died before the request took effect
        os._exit(0)


def _serve(host: str, port: int, log_level: str, access_log: bool, supervisor: int) -> None:
    _die_with(supervisor)
    sock = reuseport_socket(host, port)
    sock.listen(BACKLOG)
    config = uvicorn.Config(
        APP, factory=True, log_level=log_level, access_log=access_log, backlog=BACKLOG
    )
    uvicorn.Server(config).run(sockets=[sock])


class Supervisor:
    def __init__(
        self, host: str, port: int, workers: int, log_level: str = "info", access_log: bool = True
    ) -> None:
        self.args = (host, port, log_level, access_log)
        self.workers = workers
        self.context = multiprocessing.get_context("spawn")  # no state inherited from the parent
        self.processes: list[tuple[BaseProcess, float]] = []
        self.stopping = False

    def _start(self) -> tuple[BaseProcess, float]:
        process = self.context.Process(
            target=_serve, args=(*self.args, os.getpid()), name="tmc-api-worker"
        )
        process.start()
        return process, time.monotonic()

    def _stop(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        self.processes = [self._start() for _ in range(self.workers)]
        quick_deaths = 0
        while not self.stopping:
            time.sleep(0.2)
            for k, (process, started) in enumerate(self.processes):
                if process.is_alive() or self.stopping:
                    continue
                lived = time.monotonic() - started
                quick_deaths = quick_deaths + 1 if lived < QUICK_DEATH_SECONDS else 0
                log.warning(
                    "worker %s exited (%s) after %.1f s", process.pid, process.exitcode, lived
                )
                if quick_deaths >= MAX_QUICK_DEATHS:
                    log.error("workers keep dying at start-up; stopping")
                    self.stopping = True
                    break
                self.processes[k] = self._start()
        return self._shutdown(failed=quick_deaths >= MAX_QUICK_DEATHS)

    def _shutdown(self, failed: bool) -> int:
        for process, _ in self.processes:
            if process.is_alive() and process.pid is not None:
                process.terminate()  # SIGTERM: uvicorn finishes the requests in flight
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for process, _ in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(5)
        return 1 if failed else 0


def serve(
    host: str, port: int, workers: int, log_level: str = "info", access_log: bool = True
) -> int:
    """Run `workers` API processes on host:port until SIGTERM/SIGINT; the exit status."""
    with claim_port(host, port):
        return Supervisor(host, port, workers, log_level, access_log).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=2, choices=range(1, 65), metavar="1..64")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--no-access-log", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    try:
        claim = claim_port(args.host, args.port)
    except OSError as exc:
        sys.exit(f"tmc: cannot listen on {args.host}:{args.port}: {exc.strerror}; choose --port")
    with claim:
        supervisor = Supervisor(
            args.host, args.port, args.workers, args.log_level, not args.no_access_log
        )
        sys.exit(supervisor.run())


if __name__ == "__main__":
    main()
