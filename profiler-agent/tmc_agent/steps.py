"""Progress of a profile, reported by the backends and drawn by the CLI (Rich) or ignored."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Steps(Protocol):
    def begin(self, label: str, total: float | None = None) -> int: ...
    def advance(self, step: int, amount: float = 1.0) -> None: ...
    def done(self, step: int) -> None: ...


class NoSteps:
    def begin(self, label: str, total: float | None = None) -> int:
        return 0

    def advance(self, step: int, amount: float = 1.0) -> None:
        pass

    def done(self, step: int) -> None:
        pass


@contextmanager
def step(steps: Steps, label: str, total: float | None = None) -> Iterator[int]:
    handle = steps.begin(label, total)
    try:
        yield handle
    finally:
        steps.done(handle)
