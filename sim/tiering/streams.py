"""Time-varying page-access streams for the dynamic-tiering mode.

A workload's memory is cut into `pages` equal regions (a region stands for a run of huge pages, the
unit a page manager tracks and moves). Time is cut into `ticks` of equally many LLC misses. Each
phase says, for the ticks it covers, where the misses go: a Zipf-ranked hot set that may move, a
streaming sweep, a sequential write-heavy initialisation, cyclic strided sweeps, a uniform warm
background. A stream is drawn once per seed (multinomial per tick), so every page-manager setting
replays the very same accesses (common random numbers) and settings compare without trace noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, model_validator

from model.resources import GIB


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class HotSpot(_Spec):
    """Zipf-ranked popularity over `fraction` of a region; the window moves by `shift` of the
    region every `every_ticks` ticks (a drifting hot set: new keys, a graph frontier)."""

    kind: Literal["hotspot"] = "hotspot"
    share: float = Field(gt=0.0, le=1.0, description="of the phase's misses")
    start: float = Field(default=0.0, ge=0.0, lt=1.0)
    span: float = Field(default=1.0, gt=0.0, le=1.0, description="region, as a share of pages")
    fraction: float = Field(gt=0.0, le=1.0, description="hot window, as a share of the region")
    exponent: float = Field(default=1.0, ge=0.0, le=3.0)
    shift: float = Field(default=0.0, ge=0.0, le=1.0)
    every_ticks: int = Field(default=1, ge=1)
    write_fraction: float = Field(default=0.1, ge=0.0, le=1.0)


class Sweep(_Spec):
    """A sequential sweep over a region: each tick touches the next `window` of it (streaming
    when the region is swept once, cyclic reuse when it is swept again and again)."""

    kind: Literal["sweep"] = "sweep"
    share: float = Field(gt=0.0, le=1.0)
    start: float = Field(default=0.0, ge=0.0, lt=1.0)
    span: float = Field(gt=0.0, le=1.0)
    sweep_ticks: int = Field(ge=1, description="ticks one pass over the region takes")
    write_fraction: float = Field(default=0.0, ge=0.0, le=1.0)


class Uniform(_Spec):
    kind: Literal["uniform"] = "uniform"
    share: float = Field(gt=0.0, le=1.0)
    start: float = Field(default=0.0, ge=0.0, lt=1.0)
    span: float = Field(default=1.0, gt=0.0, le=1.0)
    write_fraction: float = Field(default=0.05, ge=0.0, le=1.0)


Pattern = Annotated[HotSpot | Sweep | Uniform, Field(discriminator="kind")]


class Phase(_Spec):
    ticks: int = Field(ge=1, le=100_000)
    patterns: list[Pattern] = Field(min_length=1, max_length=16)

    @model_validator(mode="after")
    def _shares(self) -> Phase:
        total = sum(p.share for p in self.patterns)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"pattern shares add up to {total}, not 1")
        return self


class Structure(_Spec):
    tag: str = Field(min_length=1, max_length=128)
    start: float = Field(ge=0.0, lt=1.0)
    span: float = Field(gt=0.0, le=1.0)


class TieringWorkload(_Spec):
    """A workload as the dynamic-tiering mode sees it: pages, phases, and the core's speed."""

    name: str = Field(min_length=1, max_length=128)
    footprint_bytes: int = Field(gt=0, le=1 << 44)
    pages: int = Field(default=512, ge=16, le=1 << 16)
    misses: float = Field(gt=0, description="LLC misses of one whole run")
    misses_per_tick_drawn: int = Field(
        default=2048, ge=64, le=1 << 20, description="stream events drawn per tick"
    )
    threads: int = Field(default=8, ge=1, le=4096)
    mlp: float = Field(default=4.0, gt=0, le=64, description="misses in flight per thread")
    compute_ns_per_miss: float = Field(
        default=20.0, ge=0, le=1e6, description="core work between misses, per thread"
    )
    phases: list[Phase] = Field(min_length=1, max_length=64)
    structures: list[Structure] = Field(min_length=1, max_length=64)

    @property
    def ticks(self) -> int:
        return sum(p.ticks for p in self.phases)

    @property
    def page_bytes(self) -> int:
        return self.footprint_bytes // self.pages

    @property
    def misses_per_tick(self) -> float:
        return self.misses / self.ticks


@dataclass(frozen=True)
class Stream:
    """LLC misses per tick and page (already scaled from drawn events to real misses)."""

    workload: TieringWorkload
    reads: NDArray[np.float64]  # [tick, page]
    writes: NDArray[np.float64]  # [tick, page]
    first_touch: NDArray[np.int64]  # pages in the order the program first touches them
    structure_of_page: NDArray[np.int64]
    seed: int
    # One uniform draw per tick, page and kind, fixed with the stream: the sampler inverts it, so
    # every knob setting sees the same luck (common random numbers) and compares without noise.
    luck_reads: NDArray[np.float64]
    luck_writes: NDArray[np.float64]
    # Sampled counts per sampling period, computed once (they depend on nothing else).
    sampled: dict[float, tuple[NDArray[np.float64], NDArray[np.float64]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    # Other values that depend on the stream alone (per host), computed once.
    memo: dict[str, float] = field(default_factory=dict, repr=False, compare=False)

    @property
    def misses(self) -> NDArray[np.float64]:
        return self.reads + self.writes


def _region(pattern_start: float, span: float, pages: int) -> tuple[int, int]:
    lo = round(pattern_start * pages)
    n = max(1, round(span * pages))
    return lo, min(n, pages - lo)


def _probabilities(
    pattern: HotSpot | Sweep | Uniform, tick_in_phase: int, pages: int, perm: NDArray[np.int64]
) -> NDArray[np.float64]:
    p = np.zeros(pages)
    lo, n = _region(pattern.start, pattern.span, pages)
    if isinstance(pattern, Uniform):
        p[lo : lo + n] = 1.0 / n
    elif isinstance(pattern, Sweep):
        window = max(1, int(np.ceil(n / pattern.sweep_ticks)))
        pos = (tick_in_phase % pattern.sweep_ticks) * window
        idx = lo + (np.arange(pos, pos + window) % n)
        p[idx] = 1.0 / window
    else:
        hot = max(1, round(pattern.fraction * n))
        offset = round(pattern.shift * n) * (tick_in_phase // pattern.every_ticks)
        ranks = np.arange(1, hot + 1, dtype=np.float64) ** -pattern.exponent
        # Popularity ranks are scattered within the window by a fixed permutation.
        members = lo + (offset + np.argsort(perm[:hot])) % n
        p[members] += ranks / ranks.sum()
    return p * pattern.share


def draw_stream(workload: TieringWorkload, seed: int) -> Stream:
    """Draw one run's accesses. The same seed gives the same stream."""
    rng = np.random.default_rng(seed)
    n, ticks = workload.pages, workload.ticks
    reads = np.zeros((ticks, n))
    writes = np.zeros((ticks, n))
    scale = workload.misses_per_tick / workload.misses_per_tick_drawn
    perms = [rng.permutation(n) for _ in workload.phases]
    t = 0
    first_seen = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    for phase, perm in zip(workload.phases, perms, strict=True):
        for k in range(phase.ticks):
            p = np.zeros(n)
            wfrac = np.zeros(n)
            for pattern in phase.patterns:
                q = _probabilities(pattern, k, n, perm)
                p += q
                wfrac += q * pattern.write_fraction
            total = p.sum()
            p /= total
            wshare = np.divide(wfrac / total, p, out=np.zeros(n), where=p > 0)
            events = rng.multinomial(workload.misses_per_tick_drawn, p).astype(np.float64)
            w = rng.binomial(events.astype(np.int64), np.clip(wshare, 0.0, 1.0))
            writes[t] = w * scale
            reads[t] = (events - w) * scale
            touched = (events > 0) & (first_seen == np.iinfo(np.int64).max)
            # Within a tick, pages are first touched in address order (allocation order).
            first_seen[touched] = t * n + np.flatnonzero(touched)
            t += 1
    # Pages never touched are allocated last, in address order.
    order = np.argsort(first_seen, kind="stable")
    owner = np.full(n, -1, dtype=np.int64)
    for i, s in enumerate(workload.structures):
        lo, m = _region(s.start, s.span, n)
        owner[lo : lo + m] = i
    luck = np.random.default_rng([seed, 1]).random((2, ticks, n))
    return Stream(workload, reads, writes, order.astype(np.int64), owner, seed, luck[0], luck[1])


# The study's workloads: shaped after the behaviours the tiering papers single out.
def _gib(x: float) -> int:
    return int(x * GIB)


def _load(ticks: int) -> Phase:
    """Start-up: every page is allocated and written once, in address order."""
    return Phase(
        ticks=ticks, patterns=[Sweep(share=1.0, span=1.0, sweep_ticks=ticks, write_fraction=0.8)]
    )


def moving_hot() -> TieringWorkload:
    """A key-value store whose hot keys drift (new keys arrive, old ones cool)."""
    return TieringWorkload(
        name="moving-hot",
        footprint_bytes=_gib(8),
        misses=3.0e9,
        mlp=3.0,
        compute_ns_per_miss=40.0,
        phases=[
            _load(24),
            Phase(
                ticks=456,
                patterns=[
                    HotSpot(
                        share=0.85,
                        span=0.75,
                        fraction=0.12,
                        exponent=0.8,
                        shift=0.02,
                        every_ticks=12,
                    ),
                    Uniform(share=0.15, span=0.75),
                ],
            ),
        ],
        structures=[
            Structure(tag="table", start=0.0, span=0.75),
            Structure(tag="log", start=0.75, span=0.25),
        ],
    )


def init_then_lookup() -> TieringWorkload:
    """A B-tree: a write-heavy build over every page, then read-only skewed lookups."""
    return TieringWorkload(
        name="init-lookup",
        footprint_bytes=_gib(8),
        misses=3.0e9,
        mlp=2.0,
        compute_ns_per_miss=60.0,
        phases=[
            Phase(
                ticks=96, patterns=[Sweep(share=1.0, span=1.0, sweep_ticks=96, write_fraction=0.7)]
            ),
            Phase(
                ticks=384,
                patterns=[
                    HotSpot(share=0.9, span=0.8, fraction=0.5, exponent=1.1, write_fraction=0.0),
                    Uniform(share=0.1, span=0.8, write_fraction=0.0),
                ],
            ),
        ],
        structures=[
            Structure(tag="inner", start=0.0, span=0.8),
            Structure(tag="leaves", start=0.8, span=0.2),
        ],
    )


def stream_beside_hot() -> TieringWorkload:
    """PageRank-like: a small hot vertex array beside edges streamed once per iteration."""
    return TieringWorkload(
        name="stream-hot",
        footprint_bytes=_gib(8),
        misses=4.0e9,
        mlp=6.0,
        compute_ns_per_miss=15.0,
        phases=[
            _load(24),
            Phase(
                ticks=456,
                patterns=[
                    HotSpot(share=0.45, start=0.0, span=0.1, fraction=1.0, exponent=0.6),
                    Sweep(share=0.55, start=0.1, span=0.75, sweep_ticks=152),
                ],
            ),
        ],
        structures=[
            Structure(tag="vertices", start=0.0, span=0.1),
            Structure(tag="edges", start=0.1, span=0.75),
            Structure(tag="build", start=0.85, span=0.15),
        ],
    )


def strided_reuse() -> TieringWorkload:
    """Back-propagation-like: layers swept again and again (a clear reuse period) and a hot set."""
    return TieringWorkload(
        name="strided",
        footprint_bytes=_gib(8),
        misses=3.0e9,
        mlp=4.0,
        compute_ns_per_miss=30.0,
        phases=[
            _load(24),
            Phase(
                ticks=456,
                patterns=[
                    Sweep(share=0.6, start=0.0, span=0.3, sweep_ticks=24, write_fraction=0.3),
                    HotSpot(share=0.25, start=0.3, span=0.1, fraction=1.0, exponent=0.5),
                    Uniform(share=0.15, start=0.4, span=0.3),
                ],
            ),
        ],
        structures=[
            Structure(tag="layers", start=0.0, span=0.3),
            Structure(tag="weights", start=0.3, span=0.1),
            Structure(tag="inputs", start=0.4, span=0.3),
            Structure(tag="checkpoints", start=0.7, span=0.3),
        ],
    )


def warm_background() -> TieringWorkload:
    """XSBench-like: a few very hot pages, the rest randomly and evenly warm."""
    return TieringWorkload(
        name="warm-background",
        footprint_bytes=_gib(8),
        misses=3.0e9,
        mlp=5.0,
        compute_ns_per_miss=25.0,
        phases=[
            _load(24),
            Phase(
                ticks=456,
                patterns=[
                    HotSpot(share=0.4, start=0.0, span=0.05, fraction=1.0, exponent=0.3),
                    Uniform(share=0.6, start=0.05, span=0.8),
                ],
            ),
        ],
        structures=[
            Structure(tag="grid", start=0.0, span=0.05),
            Structure(tag="nuclides", start=0.05, span=0.8),
            Structure(tag="tallies", start=0.85, span=0.15),
        ],
    )


STUDY_WORKLOADS = {
    w().name: w
    for w in (moving_hot, init_then_lookup, stream_beside_hot, strided_reuse, warm_background)
}
