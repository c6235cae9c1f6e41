"""Time per recommendation for one fitted workload, over the paper's 77-point grid and an
11 x 48-way host grid (528 points). Pure compute: the fit is done once, as the service caches it.

    python -m bench.recommend_latency [--quick] [--profile examples/graph500.json]

Prints median, p99 and mean per call for each grid, for the end-to-end `recommend` (prediction,
pricing, Algorithm 1 and the explanation objects), for prediction + pricing alone, and for
`choose` alone on a kept shortlist (the same question under another utilization, as the service
answers it).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from model import (
    Predictor,
    Utilization,
    fit,
    host_grid,
    machine_of_host,
    paper_grid,
    parse_bundle,
    recommend,
)
from model.pricing import DEFAULT_PRICE_PROFILE
from model.recommend import choose, price_grid, shortlist

TARGETS_MS = {"paper-77": 1.0, "host-11x48": 5.0}


def measure(call: Callable[[], object], repeats: int) -> list[float]:
    for _ in range(min(50, repeats)):  # warm caches and numpy's dispatch
        call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return (
        f"median {statistics.median(ordered):.3f} ms  p99 {p99:.3f} ms"
        f"  mean {statistics.fmean(ordered):.3f} ms  (n={len(ordered)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, default=Path("examples/graph500.json"))
    parser.add_argument("--quick", action="store_true", help="few repetitions: a smoke run for CI")
    args = parser.parse_args()
    repeats = 50 if args.quick else 2000

    bundle = parse_bundle(args.profile.read_bytes())
    predictor = Predictor(fit(bundle))
    machine = machine_of_host(bundle.host)
    utilization = Utilization(cpu=0.6, dram=0.8, slow=0.2, llc=0.5)
    print(f"# recommendation latency: {bundle.workload.name}, {len(bundle.structures)} structures")
    print(f"# {platform.python_implementation()} {platform.python_version()}, {platform.machine()}")
    for grid in (paper_grid(), host_grid(48)):
        full = partial(recommend, predictor, machine=machine, utilization=utilization, grid=grid)
        core = partial(price_grid, predictor, DEFAULT_PRICE_PROFILE, grid, machine)
        target = TARGETS_MS.get(grid.name)
        full_samples = measure(full, repeats)
        print(
            f"{grid.name:>11} ({grid.size} points) recommend: {summary(full_samples)}"
            f"  target <= {target} ms"
        )
        print(
            f"{grid.name:>11} ({grid.size} points) predict+price only: {summary(measure(core, repeats))}"
        )
        # The service keeps a question's shortlist: under another utilization only `choose` runs.
        short = shortlist(predictor, machine=machine, grid=grid)
        moved = Utilization(cpu=0.3, dram=0.5, slow=0.6, llc=0.2)
        again = partial(choose, short, moved)
        print(
            f"{grid.name:>11} ({grid.size} points) shortlist kept, choose only:"
            f" {summary(measure(again, repeats))}"
        )


if __name__ == "__main__":
    main()
