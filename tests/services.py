"""Private PostgreSQL, Redis and Celery worker processes for the integration tests.

The tests start their own servers on free ports instead of using the machine's: they must be free
to stop and restart them (fault tests) without disturbing anything else.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import redis

ROOT = Path(__file__).resolve().parents[1]


# Listening ports come from below the kernel's ephemeral range (32768-60999 by default): a port
# the kernel hands out for bind(0) is one it may also give an outgoing connection (kube-apiserver's
# to etcd, a client's to PostgreSQL) between the probe and the server's own bind, and the server
# then fails to start. Ports handed out once are not handed out again in this process.
_LISTEN_PORTS = range(20000, 32768)
_handed_out: set[int] = set()


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port nothing listens on, outside the ephemeral range, not handed out before."""
    floor = _ephemeral_floor()
    ports = [p for p in _LISTEN_PORTS if p < floor and p not in _handed_out]
    for port in random.sample(ports, k=min(len(ports), 200)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free listening port below the ephemeral range")


def wait_until(check: object, timeout: float, what: str) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready after {timeout} s")


class PostgresServer:
    """A throwaway cluster: initdb in a temporary folder, trust auth, fsync off."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
        if not bins:
            raise RuntimeError("PostgreSQL is not installed (./dev test installs it)")
        self.bin = Path(bins[-1])
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="tmc-pg-"))
        self.data = self.dir / "data"
        self._as_root = os.geteuid() == 0
        if self._as_root:  # PostgreSQL refuses to run as root
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE tmc")

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, cwd=self.dir)

    def dsn(self, database: str = "tmc") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/tmc"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.dir / "log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        wait_until(client.ping, 10, "redis")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def close(self) -> None:
        self.stop()


def postgres_and_redis() -> tuple[PostgresServer, RedisServer]:
    """A PostgreSQL cluster and a Redis server, both started, or neither left running: a Redis
    that fails to start (not installed, no port) stops the cluster started before it."""
    postgres = PostgresServer()
    try:
        return postgres, RedisServer()
    except BaseException:
        postgres.close()
        raise


class CeleryWorker:
    """`celery -A api.tasks worker` as a real process, configured through TMC_* variables."""

    def __init__(self, env: dict[str, str], name: str = "w1") -> None:
        self.env = {**os.environ, **env}
        self.name = name
        self.log = Path(tempfile.mkstemp(prefix=f"tmc-celery-{name}-", suffix=".log")[1])
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "api.tasks",
                "worker",
                "--loglevel=INFO",
                "--concurrency=1",
                "--pool=prefork",
                "-n",
                f"{self.name}@%h",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(lambda: "ready." in self.log.read_text(), 60, "celery worker")

    def output(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        """SIGKILL the whole process group: a crash, not a shutdown."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc = None


def listening_children(parent: int, port: int) -> int:
    """How many of `parent`'s child processes hold a socket listening on `port` (read from
    /proc): a server whose workers each bind their own socket answers /healthz from the first
    worker up, while the others may still be starting."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return 0
    count = 0
    for child in children:
        with contextlib.suppress(OSError):
            fds = Path(f"/proc/{child}/fd").iterdir()
            if any(os.readlink(fd) in inodes for fd in fds):
                count += 1
    return count


@contextlib.contextmanager
def uvicorn_server(
    env: dict[str, str], workers: int = 1, spread: str = "shared", source: Path = ROOT
) -> Iterator[str]:
    """The API in its own process(es); yields the base URL once /healthz answers, and stops it
    on exit. `spread`: "shared" is `uvicorn --workers` (one listening socket for all workers),
    "reuseport" is `python -m api.workers` (a socket per worker, the kernel spreads connections).
    `source`: the source tree to run (another release's, for a comparison in the same run)."""
    port = free_port()
    quiet = ["--port", str(port), "--workers", str(workers), "--log-level", "warning"]
    if spread == "reuseport":
        command = [sys.executable, "-m", "api.workers", *quiet, "--no-access-log"]
    else:
        command = [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory"]
        command += [*quiet, "--no-access-log"]
    run_env = {**os.environ, **env}
    if source != ROOT:  # its packages first on the path, ahead of this tree's installed ones
        run_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(command, cwd=source, env=run_env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{base}/healthz").status_code == 200, 60, "uvicorn")
        if spread == "reuseport":
            wait_until(
                lambda: listening_children(proc.pid, port) == workers, 60, "every worker listening"
            )
        yield base
    finally:
        proc.terminate()
        proc.wait(20)
