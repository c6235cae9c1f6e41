"""Garbage collection for tmc's long-lived processes (the API's workers, the publisher).

Both hold a large heap made at start-up and kept (the modules, the kubernetes client's classes)
and allocate many short-lived objects per request or per watch event. CPython's defaults start a
young collection every 700 allocations, and every full collection walks the whole heap: tens of
milliseconds in an API worker, about 0.15 s in the publisher here. So what start-up made is
frozen out of later collections, young collections run less often, and each pause is timed.
This module imports no web framework: the publisher's process uses it too.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Annotated

from prometheus_client import CollectorRegistry, Histogram
from pydantic import Field

# Allocations between two young collections (CPython's default is 700): with start-up's objects
# frozen, a larger first generation means fewer pauses, and not longer ones. 0 keeps the
# interpreter's thresholds. The API's and the publisher's settings both read it
# (TMC_GC_GEN0_THRESHOLD).
DEFAULT_GEN0_THRESHOLD = 10_000
Gen0Threshold = Annotated[int, Field(ge=0, le=1_000_000)]

GC_PAUSE_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)


def tune_collection(registry: CollectorRegistry, gen0_threshold: int) -> Callable[[], None]:
    """Collection for a long-lived server, called once its start-up is done: what start-up
    allocated is frozen out of every later collection (frozen objects are still freed when their
    count drops; only a cycle among them stays, so at most what start-up made is ever held),
    young collections run every `gen0_threshold` allocations, and each pause is timed into
    tmc_gc_pause_seconds on `registry`. Returns what undoes it, for a process that outlives the
    server (tests)."""
    pauses = Histogram(
        "tmc_gc_pause_seconds",
        "Garbage-collection pauses in this process",
        ["generation"],
        buckets=GC_PAUSE_BUCKETS,
        registry=registry,
    )
    # Each generation's series made here, not in the callback: `labels` takes the histogram's
    # lock, which a scrape holds while it copies the series, and a collection can start inside
    # that copy, on the scraping thread itself. The callback only observes.
    by_generation = [pauses.labels(str(g)) for g in range(3)]
    started = 0.0

    def observe(phase: str, info: dict[str, int]) -> None:
        nonlocal started
        # The collector holds the GIL from start to stop: one pause is never interleaved.
        if phase == "start":
            started = time.perf_counter()
        else:
            by_generation[info["generation"]].observe(time.perf_counter() - started)

    previous = gc.get_threshold()
    if gen0_threshold:
        gc.set_threshold(gen0_threshold, previous[1], previous[2])
    gc.collect()
    gc.freeze()
    gc.callbacks.append(observe)

    def undo() -> None:
        gc.callbacks.remove(observe)
        gc.unfreeze()
        gc.set_threshold(*previous)

    return undo
