"""Bundles built from known parameters, so tests can check what the fit recovers.

The counters are generated with the model's own equation on purpose: these tests check the
algebra and the plumbing. Whether the equation describes real machines is the simulator's question.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from model.resources import GIB, MIB

GHZ = 2.5e9


@dataclass
class Shape:
    """A workload described by the quantities the model should recover."""

    name: str = "synthetic"
    # tag -> (size in MiB, share of misses at fastmin ways, share at fastmax ways)
    structures: dict[str, tuple[float, float, float]] = field(
        default_factory=lambda: {
            "hot": (256, 0.50, 0.60),
            "warm": (512, 0.30, 0.30),
            "cold": (1024, 0.20, 0.10),
        }
    )
    cpi_cache: float = 0.6
    p_dram: float = 80.0
    p_slow: float = 120.0
    curve: Sequence[tuple[int, float]] = (
        (1, 0.020),
        (2, 0.016),
        (4, 0.011),
        (12, 0.008),
        (20, 0.0072),
        (28, 0.0070),
    )
    w_min: int = 1
    w_max: int = 28
    instructions: int = 2_000_000_000
    vcpus: int = 4
    sampling_interval: int = 10007
    stall_counters: bool = True
    slow_kind: str = "optane"


def mar_at(shape: Shape, ways: int) -> float:
    return dict(shape.curve)[ways]


def make_bundle(shape: Shape | None = None, **overrides: Any) -> dict[str, Any]:
    s = shape or Shape()
    for key, value in overrides.items():
        setattr(s, key, value)
    mar_min, mar_max = mar_at(s, s.w_min), mar_at(s, s.w_max)

    def run(name: str, ratio: float, ways: int, mar: float, slow_mar: float, col: int):
        cpi = s.cpi_cache + mar * s.p_dram + slow_mar * s.p_slow
        misses = round(mar * s.instructions)
        cycles = round(cpi * s.instructions)
        stall = round((mar * s.p_dram + slow_mar * s.p_slow) * s.instructions)
        samples = {
            tag: round(parts[col] * misses / s.sampling_interval)
            for tag, parts in s.structures.items()
        }
        out: dict[str, Any] = {
            "name": name,
            "configuration": {"slow_ratio": ratio, "llc_ways": ways},
            "instructions": s.instructions,
            "cycles": cycles,
            "llc_misses": misses,
            "wall_seconds": cycles / GHZ / s.vcpus,
            "samples": samples,
        }
        if s.stall_counters:
            out["stall_cycles_l3_miss"] = stall
        return out

    sizes = {tag: int(parts[0] * MIB) for tag, parts in s.structures.items()}
    return {
        "schema_version": "tmc.profile/v1",
        "workload": {"name": s.name, "input_label": "test", "version": "1"},
        "host": {
            "host_kind": "sim-xeon-48w-optane",
            "cpu_model": "simulated 12-core",
            "cpu_frequency_hz": GHZ,
            "cores": 12,
            "llc_ways": 48,
            "llc_size_bytes": 12 * MIB,
            "min_llc_ways": 1,
            "fast_tier": {"kind": "dram", "latency_ns": 100.0, "capacity_bytes": 24 * GIB},
            "slow_tier": {"kind": s.slow_kind, "latency_ns": 300.0, "capacity_bytes": 128 * GIB},
        },
        "vcpus": s.vcpus,
        "sampling_interval": s.sampling_interval,
        "footprint_bytes": sum(sizes.values()),
        "structures": [{"tag": t, "size_bytes": b} for t, b in sizes.items()],
        "runs": [
            run("fastmax", 0.0, s.w_max, mar_max, 0.0, 2),
            run("fastmin", 0.0, s.w_min, mar_min, 0.0, 1),
            run("slowmax", 1.0, s.w_max, mar_max, mar_max, 2),
        ],
        "miss_curve": [{"llc_ways": w, "misses_per_instruction": m} for w, m in s.curve],
    }
