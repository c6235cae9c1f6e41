"""Worker processes for the benchmarks' independent jobs.

Every benchmark that spreads its jobs over processes goes through here, so that a worker that
dies (killed by the kernel, crashed in native code) fails the benchmark with
`BrokenProcessPool` at once. A `multiprocessing.Pool` would wait for the lost job for ever, and a
test running the benchmark would hang until CI's own timeout.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Literal

# "fork" lets workers inherit what the parent prepared (module-level job context); "spawn" starts
# clean interpreters, for jobs whose libraries must not be forked after they started threads.
StartMethod = Literal["fork", "spawn"]


def pool_map(
    fn: Callable[[Any], Any],
    jobs: Sequence[Any],
    processes: int,
    start: StartMethod = "fork",
) -> list[Any]:
    """`fn` over `jobs` in `processes` workers (in this process when 1), results in order."""
    if processes <= 1:
        return [fn(j) for j in jobs]
    with _workers(processes, start) as pool:
        return list(pool.map(fn, jobs))


def pool_unordered(
    fn: Callable[[Any], Any],
    jobs: Sequence[Any],
    processes: int,
    start: StartMethod = "fork",
) -> Iterator[Any]:
    """`fn` over `jobs` in `processes` workers (in this process when 1), results as they come."""
    if processes <= 1:
        yield from (fn(j) for j in jobs)
        return
    with _workers(processes, start) as pool:
        for done in as_completed([pool.submit(fn, j) for j in jobs]):
            yield done.result()


def _workers(processes: int, start: StartMethod) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context(start))
