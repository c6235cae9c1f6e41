"""Garbage collection in tmc's long-lived processes (api.collection), beyond what the API's own
tests check of its wiring (tests/api/test_latency.py): what start-up made is left out of later
collections while the collector still frees what is made after, and every generation's pause
series exists from the start (a scrape never makes one inside a collection)."""

from __future__ import annotations

import gc
import weakref

from prometheus_client import CollectorRegistry

from api.collection import tune_collection


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_start_up_is_frozen_and_later_cycles_are_still_collected() -> None:
    made_at_start = Node()
    undo = tune_collection(CollectorRegistry(), 5_000)
    try:
        # What start-up made is in the permanent generation: no collection walks it.
        assert not any(o is made_at_start for o in gc.get_objects())
        later = Node()
        gone = weakref.ref(later)
        del later
        gc.collect()
        assert gone() is None
    finally:
        undo()


def test_every_generations_series_exists_before_its_first_pause() -> None:
    registry = CollectorRegistry()
    gc.disable()  # no collection between the tuning and the scrape
    try:
        undo = tune_collection(registry, 0)
        try:
            counts = {
                g: registry.get_sample_value("tmc_gc_pause_seconds_count", {"generation": g})
                for g in ("0", "1", "2")
            }
        finally:
            undo()
    finally:
        gc.enable()
    # tune_collection's own full collection ran before its callback was installed.
    assert counts == {"0": 0.0, "1": 0.0, "2": 0.0}
