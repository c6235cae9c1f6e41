"""Plans (OR-Tools, seconds of CPU and up to gigabytes of memory) run in child processes, never in
the API's threads, so that `/healthz` and `/recommend` answer at their usual speed while plans
run.

Each plan is one child forked from a forkserver that has the planners imported: a fork costs
milliseconds, and a child is the unit the service can bound and stop. At most `max_running`
children run at once (the rest wait their turn, at most `max_waiting` of them; beyond, 503 with
Retry-After). A child runs at a lower CPU priority, with its data segment limited to what it had
at start plus `memory_bytes`. It is killed when the client goes away, or when it outlives the
plan's own time limit by a margin (a plan bounds its own stages; this is the backstop).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import resource
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from api.errors import ApiError
from model import TmcError
from model.bundle import ProfileBundle
from model.static_vs_dynamic import with_static_plan
from model.tiering import TieringProfile, TieringRequest, advise

log = logging.getLogger("tmc.planning")

PlanJob = Callable[..., dict[str, Any]]
# How long a child may outlive its plan's own time limit (start-up, building models, encoding).
OVERRUN_SECONDS = 5.0
POLL_SECONDS = 0.02
LOWER_PRIORITY = 10  # nice increment of a plan's child process


class ClientGone(Exception):
    """The client closed the connection; its plan was stopped."""


class PlanRunner:
    def __init__(
        self,
        max_running: int,
        max_waiting: int,
        memory_bytes: int,
        observe: Callable[[str], None] = lambda _: None,
    ) -> None:
        self._observe = observe  # called with each plan's outcome (tmc_plans_total)
        self._max_running = max_running
        self._max_waiting = max_waiting
        self._memory_bytes = memory_bytes
        self._slots: asyncio.Semaphore | None = None
        self._pending = 0  # plans running or waiting for a slot
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(
            ["model.planning_requests", "ledger.rebalance", "model.tiering"]
        )

    async def run(
        self, job: PlanJob, args: tuple[Any, ...], time_limit_seconds: float, request: Request
    ) -> dict[str, Any]:
        if self._slots is None:  # made on the event loop that will wait on it
            self._slots = asyncio.Semaphore(self._max_running)
        if self._pending >= self._max_running + self._max_waiting:
            self._observe("refused")
            raise ApiError(
                503,
                "Service unavailable",
                f"{self._pending} plans are running or waiting already; retry in a few seconds",
            )
        self._pending += 1
        try:
            async with self._slots:
                return await self._run_child(job, args, time_limit_seconds, request)
        finally:
            self._pending -= 1

    async def _run_child(
        self, job: PlanJob, args: tuple[Any, ...], time_limit_seconds: float, request: Request
    ) -> dict[str, Any]:
        if await request.is_disconnected():
            raise ClientGone
        receive, send = self._context.Pipe(duplex=False)
        child = self._context.Process(
            target=_child, args=(job, args, send, self._memory_bytes), daemon=True
        )
        # Starting talks to the forkserver (and starts it, the first time: seconds of imports):
        # never on the event loop, which keeps answering other requests meanwhile.
        await run_in_threadpool(child.start)
        send.close()
        give_up = time.monotonic() + time_limit_seconds + OVERRUN_SECONDS
        try:
            while not receive.poll():
                if not child.is_alive() and not receive.poll():
                    # Killed by the kernel or aborted by the solver: in practice, out of memory.
                    self._observe("crashed")
                    mib = self._memory_bytes >> 20
                    raise ApiError(
                        413,
                        "Plan too large",
                        f"the plan's process ended without an answer (exit {child.exitcode}):"
                        f" it may need more than {mib} MiB; plan fewer nodes, pods or VMs",
                    )
                if await request.is_disconnected():
                    self._stop(child, "client_left")
                    raise ClientGone
                if time.monotonic() > give_up:
                    self._stop(child, "overran")
                    raise ApiError(
                        503,
                        "Service unavailable",
                        f"the plan did not finish within {time_limit_seconds:g} s; retry later",
                    )
                await asyncio.sleep(POLL_SECONDS)
            outcome = receive.recv()
            self._observe("answered" if outcome[0] == "ok" else "refused_by_planner")
        finally:
            receive.close()
            await run_in_threadpool(_reap, child)
        return _answer(outcome)

    def _stop(self, child: multiprocessing.process.BaseProcess, why: str) -> None:
        log.info("stopping plan process %s: %s", child.pid, why)
        self._observe(why)
        child.kill()


def tiering_advice(
    profile: TieringProfile, request: TieringRequest, bundle: ProfileBundle | None = None
) -> dict[str, Any]:
    """Dynamic-tiering advice as a plan job: its own process, at a lower priority, so that a
    burst of advice at its bounds (seconds of CPU each) cannot starve `/healthz`. With the
    workload's stored bundle, the static plan's answer is set beside it."""
    advice = with_static_plan(advise(profile, request), bundle)
    answer: dict[str, Any] = advice.model_dump(mode="json")
    return answer


def _reap(child: multiprocessing.process.BaseProcess) -> None:
    child.join(1.0)
    if child.is_alive():
        child.kill()
        child.join()


def _answer(outcome: tuple[Any, ...]) -> dict[str, Any]:
    kind = outcome[0]
    if kind == "ok":
        result: dict[str, Any] = outcome[1]
        return result
    _, status, title, detail, problems = outcome
    extra = {"errors": [{"field": f, "message": m} for f, m in problems]} if problems else {}
    raise ApiError(status, title, detail, **extra)


def _child(job: PlanJob, args: tuple[Any, ...], send: Connection, memory_bytes: int) -> None:
    """In the plan's own process: lower priority, bounded memory, one answer through the pipe."""
    os.nice(LOWER_PRIORITY)
    _limit_memory(memory_bytes)
    try:
        send.send(("ok", job(*args)))
    except TmcError as exc:
        problems = [(p.field, p.message) for p in getattr(exc, "problems", [])]
        send.send(("error", exc.status, exc.title, str(exc), problems))
    except MemoryError:
        mib = memory_bytes >> 20
        detail = f"the plan needs more than {mib} MiB: plan fewer nodes, pods or VMs at once"
        send.send(("error", 413, "Plan too large", detail, []))
    finally:
        send.close()


def _limit_memory(memory_bytes: int) -> None:
    """The data segment (heap and anonymous mappings) may grow by `memory_bytes` from here."""
    try:
        with open("/proc/self/status") as status:
            now = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData"))
    except (OSError, StopIteration, ValueError):
        return  # no /proc: the plan runs unbounded rather than not at all
    limit = now + memory_bytes
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
