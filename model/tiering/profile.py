"""What the node agent records for dynamic tiering, as it crosses the wire (format
`tmc.tiering/v1`, carried in the profile bundle's optional `tiering` field or sent on its own).

- The reference runs' times with everything in the fast tier and everything in the slow tier, and
  the LLC misses of one run: the amortised cost of a miss served from the slow tier.
- The hotness curves, from PEBS-like samples cut into windows: the share of misses that go to the
  hottest x % of pages within a window (what a perfect mover could keep fast), over the whole run
  (what a static placement could keep fast), and how much of the hottest x % changes from one
  window to the next (turnover: what a mover has to chase).
- Per structure, a histogram of page reuse (misses between consecutive samples of a page).
- The page manager, its knobs and migration period as they are now, and its counters in a run at
  the current fast-tier size (promotions, demotions, promotion failures).
"""

from __future__ import annotations

import itertools
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

TIERING_SCHEMA: Literal["tmc.tiering/v1"] = "tmc.tiering/v1"
PageManagerKind = Literal["hemem", "memtis", "tpp", "hmsdk", "tmc-sim"]
KnobName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_]*$")]
Share = Annotated[float, Field(ge=0.0, le=1.0)]
# The bundle's tag syntax (model.bundle.Tag), restated here: the bundle imports this module.
Tag = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:/()\[\]<>-]+$")]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class PageManagerState(_Wire):
    kind: PageManagerKind
    version: str = Field(default="unversioned", max_length=128)
    knobs: dict[KnobName, Annotated[float, Field(ge=0.0, le=1e15)]] = Field(max_length=64)
    migration_period_seconds: float = Field(ge=1e-4, le=86_400.0)


class ManagerCounters(_Wire):
    """The page manager's counters over one run at `fast_bytes` of fast memory."""

    fast_bytes: int = Field(ge=0, le=1 << 50)
    wall_seconds: float = Field(gt=0.0, le=1e9)
    promotions: int = Field(ge=0, le=1 << 50)
    demotions: int = Field(ge=0, le=1 << 50)
    promotion_failures: int = Field(ge=0, le=1 << 50)
    migrated_bytes: int = Field(ge=0, le=1 << 62)


class ReuseBin(_Wire):
    # Two samples of one page are at least one miss apart: a centre under one miss is no reuse.
    reuse_misses: float = Field(ge=1.0, le=1e18, description="bin centre: misses between reuses")
    count: int = Field(ge=0, le=1 << 50)


class StructureReuse(_Wire):
    tag: Tag
    size_bytes: int = Field(gt=0, le=1 << 50)
    miss_share: Share
    write_share: Share
    reuse: list[ReuseBin] = Field(max_length=128)


class HotnessCurves(_Wire):
    """Curves over the share of pages, hottest first; index i is `page_shares[i]`."""

    page_shares: list[Share] = Field(min_length=2, max_length=1001)
    window_miss_share: list[Share] = Field(min_length=2, max_length=1001)
    run_miss_share: list[Share] = Field(min_length=2, max_length=1001)
    turnover: list[Share] = Field(min_length=2, max_length=1001)

    @model_validator(mode="after")
    def _shape(self) -> HotnessCurves:
        n = len(self.page_shares)
        for name in ("window_miss_share", "run_miss_share", "turnover"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} points, page_shares {n}")
        if any(b <= a for a, b in itertools.pairwise(self.page_shares)):
            raise ValueError("page_shares must be strictly increasing")
        if self.page_shares[-1] != 1.0:
            raise ValueError("page_shares must end at 1.0 (every page)")
        for name in ("window_miss_share", "run_miss_share"):
            curve = getattr(self, name)
            if any(b < a - 1e-9 for a, b in itertools.pairwise(curve)):
                raise ValueError(f"{name} must not fall: it is cumulative")
        return self


class TieringProfile(_Wire):
    schema_version: Literal["tmc.tiering/v1"] = TIERING_SCHEMA
    footprint_bytes: int = Field(gt=0, le=1 << 50)
    page_bytes: int = Field(gt=0, le=1 << 40, description="the unit the page manager moves")
    # At least one miss: the rate of misses divides the reuse into seconds.
    llc_misses: float = Field(ge=1.0, le=1e18, description="of one whole run")
    threads: int = Field(default=1, ge=1, le=4096)
    wall_seconds_fast: float = Field(ge=1e-3, le=1e9, description="everything in the fast tier")
    wall_seconds_slow: float = Field(ge=1e-3, le=1e9, description="everything in the slow tier")
    slow_write_bandwidth_bytes_per_second: float | None = Field(default=None, gt=0.0, le=1e13)
    fast_write_bandwidth_bytes_per_second: float | None = Field(default=None, gt=0.0, le=1e13)
    sampling_period: int = Field(ge=1, le=10**9, description="misses per sample while profiling")
    window_seconds: float = Field(ge=1e-4, le=86_400.0)
    hotness: HotnessCurves
    structures: list[StructureReuse] = Field(min_length=1, max_length=4096)
    page_manager: PageManagerState
    counters: ManagerCounters | None = None

    @model_validator(mode="after")
    def _physical(self) -> TieringProfile:
        if self.page_bytes > self.footprint_bytes:
            raise ValueError("page_bytes exceeds footprint_bytes")
        if self.wall_seconds_slow < self.wall_seconds_fast * 0.5:
            raise ValueError("wall_seconds_slow is under half wall_seconds_fast: not one workload")
        if self.window_seconds > self.wall_seconds_fast:
            raise ValueError("window_seconds exceeds the run (wall_seconds_fast)")
        total = sum(s.size_bytes for s in self.structures)
        if total != self.footprint_bytes:
            raise ValueError(
                f"structure sizes add up to {total}, footprint is {self.footprint_bytes}"
            )
        if self.counters is not None and self.counters.fast_bytes > self.footprint_bytes:
            raise ValueError("counters.fast_bytes exceeds footprint_bytes")
        return self

    @property
    def pages(self) -> int:
        return max(1, self.footprint_bytes // self.page_bytes)

    @property
    def misses_per_second(self) -> float:
        return self.llc_misses / self.wall_seconds_fast
