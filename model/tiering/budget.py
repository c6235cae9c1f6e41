"""A CPU-time budget for one advice request: the work of an answer is bounded, and the answer says
where it stopped short.

The advisor's costly parts (the knob prior over the grid, the Gaussian process's length-scale
search) check the budget between steps and fall back to cheaper answers once it is spent; the
advice carries the budget, the CPU time used and what was cut.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict


class BudgetReport(BaseModel):
    model_config = ConfigDict(frozen=True)
    cpu_seconds_allowed: float
    cpu_seconds_used: float
    exhausted: bool
    cut: list[str]


@dataclass
class Budget:
    """CPU seconds of this process (thread CPU time: other requests' work does not count)."""

    seconds: float
    start: float = field(default_factory=time.thread_time)
    cut: list[str] = field(default_factory=list)

    def used(self) -> float:
        return time.thread_time() - self.start

    def spent(self) -> bool:
        return self.used() >= self.seconds

    def note(self, what: str) -> None:
        if what not in self.cut:
            self.cut.append(what)

    def report(self) -> BudgetReport:
        return BudgetReport(
            cpu_seconds_allowed=self.seconds,
            cpu_seconds_used=round(self.used(), 4),
            exhausted=bool(self.cut),
            cut=list(self.cut),
        )


def unlimited() -> Budget:
    return Budget(float("inf"))
