"""`python -m api.workers` against real processes on PostgreSQL: connections opened together are
spread over the workers (uvicorn's shared socket gives them mostly to one), a worker that dies is
replaced, SIGTERM stops them all, and a port that is taken is a one-line error."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from api.settings import Settings
from tests.services import ROOT, free_port, listening_children, uvicorn_server, wait_until


class Supervised(NamedTuple):
    proc: subprocess.Popen[bytes]
    base: str
    port: int


def pid_of_connection(client: httpx.Client, base: str) -> int:
    """The pid of the worker holding this keep-alive connection (from its /metrics)."""
    for line in client.get(f"{base}/metrics", timeout=10).text.splitlines():
        if line.startswith("tmc_worker_pid "):
            return int(float(line.split()[1]))
    raise AssertionError("no tmc_worker_pid in /metrics")


def pids_of_connections(base: str, connections: int) -> list[int]:
    """Open `connections` keep-alive connections at once, as a load generator does."""
    clients = [httpx.Client() for _ in range(connections)]
    try:
        with ThreadPoolExecutor(connections) as pool:
            return list(pool.map(lambda c: pid_of_connection(c, base), clients))
    finally:
        for c in clients:
            c.close()


@pytest.fixture
def env(settings: Settings) -> dict[str, str]:
    return {"TMC_ENVIRONMENT": "test", "TMC_DATABASE_URL": settings.database_url}


@pytest.fixture
def spread_server(env: dict[str, str]) -> Iterator[str]:
    with uvicorn_server(env, workers=2, spread="reuseport") as base:
        yield base


def test_connections_opened_together_reach_every_worker(spread_server: str) -> None:
    # 24 connections: the kernel's hash sends them all to one of two sockets with odds 2^-23.
    pids = pids_of_connections(spread_server, 24)
    assert len(set(pids)) == 2, pids
    assert min(pids.count(p) for p in set(pids)) >= 4, pids  # not 20:4; odds of failing ~1e-4


def test_a_long_lived_connection_is_handed_out_afresh(env: dict[str, str]) -> None:
    # A connection is closed after TMC_REQUESTS_PER_CONNECTION responses, the last one saying
    # so: the client's next connection is spread by the kernel again. Two long-lived clients
    # over two workers then share them, whatever the first hash said.
    limited = {**env, "TMC_REQUESTS_PER_CONNECTION": "5"}
    with uvicorn_server(limited, workers=2, spread="reuseport") as base:
        with httpx.Client() as client:
            answers = [client.get(f"{base}/healthz") for _ in range(12)]
            said_close = [
                i for i, r in enumerate(answers) if r.headers.get("connection") == "close"
            ]
            assert said_close == [4, 9], said_close
            pids = {pid_of_connection(client, base) for _ in range(60)}
        assert len(pids) == 2, "twelve fresh connections all hashed to one worker (odds 2^-11)"


@contextlib.contextmanager
def supervisor(command: list[str], cwd: Path, env: dict[str, str]) -> Iterator[Supervised]:
    """Two workers under `command` on a free port, up once /healthz answers; killed on exit if
    the test did not stop them."""
    port = free_port()
    proc = subprocess.Popen(
        [*command, "--port", str(port), "--workers", "2"],
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{base}/healthz").status_code == 200, 60, command[-1])
        # /healthz answers from the first worker up; connections opened before the second
        # listens would all go to the first (a loaded machine made that happen).
        wait_until(lambda: listening_children(proc.pid, port) == 2, 60, "both workers listening")
        yield Supervised(proc, base, port)
    finally:
        if proc.poll() is None:
            proc.terminate()  # the supervisor stops its workers
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def test_a_dead_worker_is_replaced(env: dict[str, str]) -> None:
    with supervisor([sys.executable, "-m", "api.workers"], ROOT, env) as (proc, base, port):
        first = set(pids_of_connections(base, 24))
        assert len(first) == 2
        victim = min(first)
        os.kill(victim, signal.SIGKILL)

        def replaced() -> bool:
            try:
                now = set(pids_of_connections(base, 24))
            except httpx.HTTPError:
                return False
            return len(now) == 2 and victim not in now

        wait_until(replaced, 30, "a new worker")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    # Every worker is gone with the supervisor: nothing listens on the port any more (the
    # probe allows the closed connections' TIME_WAIT, not a listener).
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))


def start_workers(port: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m api.workers` on `port`, for a test that expects it to refuse and exit."""
    return subprocess.run(
        [sys.executable, "-m", "api.workers", "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_taken_port_is_a_one_line_error(env: dict[str, str]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        started = time.monotonic()
        result = start_workers(port, env)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--port" in result.stderr
    assert time.monotonic() - started < 30


def test_tmc_serve_with_workers_spreads_connections(env: dict[str, str], tmp_path: Path) -> None:
    """`tmc serve --workers 2` runs the same supervisor: both workers answer connections opened
    together, and SIGTERM stops them all."""
    tmc = str(Path(sys.executable).with_name("tmc"))
    with supervisor([tmc, "serve"], tmp_path, env) as (proc, base, _port):
        assert len(set(pids_of_connections(base, 24))) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_a_second_instance_cannot_join_a_running_ones_port(
    env: dict[str, str], tmp_path: Path
) -> None:
    # Another instance on the same port and another database: once, it started silently and the
    # kernel split the connections between both (tokens of one unknown to the other: 401s).
    other = {**env, "TMC_DATABASE_URL": f"sqlite:///{tmp_path / 'other.db'}"}
    with supervisor([sys.executable, "-m", "api.workers"], ROOT, env) as (proc, base, port):
        second = start_workers(port, other)
        assert second.returncode == 1, second.stderr
        assert f"cannot listen on 127.0.0.1:{port}" in second.stderr
        assert len(set(pids_of_connections(base, 24))) == 2  # still only the first's workers
        assert proc.poll() is None


def test_a_stranger_sharing_the_port_is_refused(env: dict[str, str]) -> None:
    # A program of the same user that listens with SO_REUSEPORT: binding alone cannot see it.
    with socket.socket() as stranger:
        stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        stranger.bind(("127.0.0.1", 0))
        stranger.listen(1)
        port = stranger.getsockname()[1]
        result = start_workers(port, env)
    assert result.returncode == 1, result.stderr
    assert "another server already listens there" in result.stderr


def test_workers_die_with_a_killed_supervisor(env: dict[str, str]) -> None:
    # A supervisor killed outright (SIGKILL: no chance to stop its workers) must not leave them
    # serving the port.
    with supervisor([sys.executable, "-m", "api.workers"], ROOT, env) as (proc, base, _port):
        workers = set(pids_of_connections(base, 24))
        assert len(workers) == 2
        proc.kill()
        proc.wait(10)

        def gone() -> bool:
            return not any(os.path.exists(f"/proc/{pid}") for pid in workers)

        wait_until(gone, 30, "the workers to exit")
