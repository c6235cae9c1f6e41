"""The benchmarks' worker pools: results complete and in order, and a dead worker fails the
benchmark at once instead of leaving it waiting for the lost job."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool

import pytest

from bench.pools import StartMethod, pool_map, pool_unordered


def square(x: int) -> int:
    return x * x


def dies_on_three(x: int) -> int:
    if x == 3:
        os._exit(9)  # as the kernel's OOM killer would leave it: no exception, no result
    return x


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_results_complete_and_in_order(start: StartMethod) -> None:
    jobs = list(range(20))
    assert pool_map(square, jobs, 2, start=start) == [x * x for x in jobs]
    assert sorted(pool_unordered(square, jobs, 2, start=start)) == [x * x for x in jobs]


def test_one_process_runs_here() -> None:
    assert pool_map(lambda _: os.getpid(), [0, 1], 1) == [os.getpid()] * 2


def within(seconds: float, fn: Callable[[], object]) -> BaseException | None:
    """What `fn` raised, run in a daemon thread: a hang fails the test instead of the suite."""
    raised: list[BaseException | None] = []

    def call() -> None:
        try:
            fn()
            raised.append(None)
        except BaseException as e:
            raised.append(e)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert raised, f"still waiting after {seconds} s"
    return raised[0]


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_dead_worker_fails_the_map(start: StartMethod) -> None:
    jobs = list(range(8))
    assert isinstance(
        within(120, lambda: pool_map(dies_on_three, jobs, 2, start)), BrokenProcessPool
    )
    assert isinstance(
        within(120, lambda: list(pool_unordered(dies_on_three, jobs, 2, start))), BrokenProcessPool
    )
