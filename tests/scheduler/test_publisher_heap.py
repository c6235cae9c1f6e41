"""The publisher's heap after start-up: what start-up made is left out of later collections,
and the collector still runs for everything made after."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from scheduler.publisher import freeze_start_up_heap


@pytest.fixture
def thawed() -> Iterator[None]:
    # The freeze is for the publisher's whole life; the test process gets its heap back.
    yield
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_start_up_objects_are_frozen_and_later_cycles_still_collected(thawed: None) -> None:
    made_at_start = Node()
    frozen_before = gc.get_freeze_count()
    freeze_start_up_heap()
    assert gc.isenabled()
    assert gc.get_freeze_count() > frozen_before
    # What start-up made is in the permanent generation: no collection walks it.
    assert not any(o is made_at_start for o in gc.get_objects())
    # A cycle made after start-up (a pod's event, say) is still freed by the collector.
    later = Node()
    gone = weakref.ref(later)
    del later
    gc.collect()
    assert gone() is None
