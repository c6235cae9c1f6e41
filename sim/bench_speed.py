"""How long the ground truth takes: Table 5's six workloads x the paper's 77 configurations.

    python -m sim.bench_speed [--host optane|cxl_local|cxl_pool] [--seed N]

Prints the time to load (or compile) the kernels, then per workload the time for its trace,
stack pass and 77 timed configurations, and the total. Target: at most 60 s on the project's
2-core machine.
"""

from __future__ import annotations

import argparse
import os
import time

import numba

from model.grid import PAPER_LLC_WAYS, PAPER_SLOW_RATIOS
from sim.catalog import table5
from sim.host import ground_truth_grid
from sim.machine import PRESETS
from sim.workload import Workload

TARGET_SECONDS = 60.0


def _warm_kernels() -> float:
    """Load (or compile, the first time on a machine) the kernels on a tiny trace."""
    tiny = Workload.model_validate(
        {
            "name": "warmup",
            "vcpus": 1,
            "instructions": 1_000_000,
            "cpi_core": 1.0,
            "trace_accesses": 2_000,
            "warmup_accesses": 0,
            "structures": [{"tag": "a", "size_mib": 1, "apki": 10, "pattern": {"kind": "uniform"}}],
        }
    )
    start = time.perf_counter()
    ground_truth_grid(tiny, PRESETS["optane"](), (0.0, 1.0), (1, 2))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", choices=sorted(PRESETS), default="optane")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    host = PRESETS[args.host]()
    print(f"kernels loaded in {_warm_kernels():.1f} s (numba threads: {_threads()})")
    total = 0.0
    configs = len(PAPER_SLOW_RATIOS) * len(PAPER_LLC_WAYS)
    for w in table5():
        start = time.perf_counter()
        ground_truth_grid(w, host, PAPER_SLOW_RATIOS, PAPER_LLC_WAYS, seed=args.seed)
        took = time.perf_counter() - start
        total += took
        accesses = w.trace_accesses + w.warmup_accesses
        print(
            f"  {w.name:<12} {configs} configurations, {accesses / 1e6:.1f} M accesses: {took:5.1f} s"
        )
    verdict = "within" if total <= TARGET_SECONDS else "OVER"
    print(
        f"ground truth, 6 workloads x {configs} configurations on {args.host}: {total:.1f} s"
        f" ({verdict} the {TARGET_SECONDS:.0f} s target)"
    )


def _threads() -> str:
    return str(numba.get_num_threads()) + (
        f" of {os.cpu_count()} CPUs" if os.cpu_count() is not None else ""
    )


if __name__ == "__main__":
    main()
