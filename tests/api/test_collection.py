"""Garbage collection in tmc's long-lived processes (api.collection): what start-up made is left
out of later collections, the collector still frees what is made after, and every pause is
timed."""

from __future__ import annotations

import gc
import weakref

from prometheus_client import CollectorRegistry

from api.collection import tune_collection


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_start_up_is_frozen_later_cycles_are_collected_and_pauses_timed() -> None:
    made_at_start = Node()
    registry = CollectorRegistry()
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    undo = tune_collection(registry, 5_000)
    try:
        assert gc.isenabled()
        assert gc.get_threshold() == (5_000, before[1], before[2])
        assert gc.get_freeze_count() > frozen_before
        # What start-up made is in the permanent generation: no collection walks it.
        assert not any(o is made_at_start for o in gc.get_objects())
        # A cycle made after start-up (a request's, a pod event's) is still freed.
        later = Node()
        gone = weakref.ref(later)
        del later
        gc.collect()
        assert gone() is None
        timed = registry.get_sample_value("tmc_gc_pause_seconds_count", {"generation": "2"})
        assert timed is not None and timed >= 1
    finally:
        undo()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen_before
