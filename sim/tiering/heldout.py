"""Workload shapes held out from the advisor's making: none of the model's constants was chosen
on them. The judges (`manager.py`, `tpp.py`) run them to check the advice on what it has not
seen. Each mirrors a behaviour the tiering papers describe, in a combination the study's five
workloads (`streams.STUDY_WORKLOADS`) do not have.
"""

from __future__ import annotations

from model.resources import GIB
from sim.tiering.streams import HotSpot, Phase, Structure, Sweep, TieringWorkload, Uniform


def _load(ticks: int) -> Phase:
    return Phase(
        ticks=ticks, patterns=[Sweep(share=1.0, span=1.0, sweep_ticks=ticks, write_fraction=0.8)]
    )


def _workload(
    name: str, phases: list[Phase], structures: list[Structure], **kw: float
) -> TieringWorkload:
    return TieringWorkload(
        name=name,
        footprint_bytes=8 * GIB,
        misses=float(kw.pop("misses", 3.0e9)),
        phases=phases,
        structures=structures,
        **kw,
    )


def phase_jump() -> TieringWorkload:
    """A hot set that jumps to another region between phases (a query mix that changes)."""
    hot = [
        Phase(
            ticks=152,
            patterns=[
                HotSpot(share=0.8, start=start, span=0.25, fraction=0.4, exponent=1.0),
                Uniform(share=0.2, span=1.0),
            ],
        )
        for start in (0.0, 0.5, 0.25)
    ]
    return _workload(
        "phase-jump",
        [_load(24), *hot],
        [
            Structure(tag="index", start=0.0, span=0.75),
            Structure(tag="rest", start=0.75, span=0.25),
        ],
        mlp=4.0,
        compute_ns_per_miss=30.0,
    )


def steep_skew() -> TieringWorkload:
    """A very skewed key space over most of memory (a cache with a long cold tail)."""
    return _workload(
        "steep-skew",
        [
            _load(24),
            Phase(
                ticks=456,
                patterns=[
                    HotSpot(share=0.95, span=0.9, fraction=1.0, exponent=1.4, write_fraction=0.05),
                    Uniform(share=0.05, start=0.9, span=0.1),
                ],
            ),
        ],
        [Structure(tag="cache", start=0.0, span=0.9), Structure(tag="meta", start=0.9, span=0.1)],
        mlp=3.0,
        compute_ns_per_miss=50.0,
    )


def scan_and_probe() -> TieringWorkload:
    """A hot index probed while a large table is scanned again and again (an analytic join)."""
    return _workload(
        "scan-probe",
        [
            _load(24),
            Phase(
                ticks=456,
                patterns=[
                    Sweep(share=0.5, start=0.1, span=0.6, sweep_ticks=40),
                    HotSpot(share=0.5, start=0.0, span=0.1, fraction=1.0, exponent=0.7),
                ],
            ),
        ],
        [
            Structure(tag="index", start=0.0, span=0.1),
            Structure(tag="table", start=0.1, span=0.6),
            Structure(tag="spill", start=0.7, span=0.3),
        ],
        mlp=6.0,
        compute_ns_per_miss=15.0,
        misses=4.0e9,
    )


def write_drift() -> TieringWorkload:
    """A write-heavy hot set drifting slowly (an append-mostly log-structured store)."""
    return _workload(
        "write-drift",
        [
            _load(24),
            Phase(
                ticks=456,
                patterns=[
                    HotSpot(
                        share=0.7,
                        span=0.8,
                        fraction=0.15,
                        exponent=0.6,
                        shift=0.01,
                        every_ticks=24,
                        write_fraction=0.5,
                    ),
                    Uniform(share=0.3, span=0.8, write_fraction=0.2),
                ],
            ),
        ],
        [Structure(tag="store", start=0.0, span=0.8), Structure(tag="wal", start=0.8, span=0.2)],
        mlp=2.0,
        compute_ns_per_miss=40.0,
    )


def sparse_hot() -> TieringWorkload:
    """A few very hot pages and a large, barely touched remainder (a sparse solver's state)."""
    return _workload(
        "sparse-hot",
        [
            _load(24),
            Phase(
                ticks=456,
                patterns=[
                    HotSpot(share=0.85, start=0.0, span=0.03, fraction=1.0, exponent=0.4),
                    Uniform(share=0.15, start=0.03, span=0.97),
                ],
            ),
        ],
        [
            Structure(tag="state", start=0.0, span=0.03),
            Structure(tag="matrix", start=0.03, span=0.97),
        ],
        mlp=5.0,
        compute_ns_per_miss=20.0,
    )


def fast_frontier() -> TieringWorkload:
    """A graph frontier: a hot window that moves quickly over the vertex data."""
    return _workload(
        "fast-frontier",
        [
            _load(24),
            Phase(
                ticks=456,
                patterns=[
                    HotSpot(
                        share=0.6, span=0.6, fraction=0.1, exponent=0.5, shift=0.05, every_ticks=6
                    ),
                    Uniform(share=0.4, start=0.6, span=0.4),
                ],
            ),
        ],
        [
            Structure(tag="vertices", start=0.0, span=0.6),
            Structure(tag="edges", start=0.6, span=0.4),
        ],
        mlp=4.0,
        compute_ns_per_miss=25.0,
    )


def two_heats() -> TieringWorkload:
    """Two hot sets of different heat in different structures, and a warm middle."""
    return _workload(
        "two-heats",
        [
            _load(24),
            Phase(
                ticks=456,
                patterns=[
                    HotSpot(share=0.5, start=0.0, span=0.08, fraction=1.0, exponent=0.3),
                    HotSpot(share=0.3, start=0.3, span=0.2, fraction=1.0, exponent=0.9),
                    Uniform(share=0.2, start=0.08, span=0.6),
                ],
            ),
        ],
        [
            Structure(tag="hot", start=0.0, span=0.08),
            Structure(tag="warm", start=0.08, span=0.6),
            Structure(tag="cold", start=0.68, span=0.32),
        ],
        mlp=4.0,
        compute_ns_per_miss=30.0,
    )


HELD_OUT_WORKLOADS = {
    w().name: w
    for w in (
        phase_jump,
        steep_skew,
        scan_and_probe,
        write_drift,
        sparse_hot,
        fast_frontier,
        two_heats,
    )
}
