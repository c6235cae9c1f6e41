"""Time per recommendation for one fitted workload, over the paper's 77-point grid and an
11 x 48-way host grid (528 points). Pure compute: the fit is done once, as the service caches it.

    python -m bench.recommend_latency [--quick] [--repeat 2000] [--profile examples/graph500.json]
                                      [--json PATH]

Prints median, p99 and mean per call for each grid, for the end-to-end `recommend` (prediction,
pricing, Algorithm 1 and the explanation objects), for prediction + pricing alone, and for
`choose` alone on a kept shortlist (the same question under another utilization, as the service
answers it).
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench.harness import Latency, Result, arguments, timed_ms
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


def summary(figures: Latency) -> str:
    return (
        f"median {figures.p50:.3f} ms  p99 {figures.p99:.3f} ms"
        f"  mean {figures.mean:.3f} ms  (n={figures.n})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, repeat=2000, repeat_help="calls timed per figure")
    parser.add_argument("--profile", type=Path, default=Path("examples/graph500.json"))
    parser.add_argument("--quick", action="store_true", help="few repetitions: a smoke run for CI")
    args = parser.parse_args(argv)
    repeats = 50 if args.quick else args.repeat

    bundle = parse_bundle(args.profile.read_bytes())
    predictor = Predictor(fit(bundle))
    machine = machine_of_host(bundle.host)
    utilization = Utilization(cpu=0.6, dram=0.8, slow=0.2, llc=0.5)
    result = Result(
        "recommend_latency",
        {
            "workload": bundle.workload.name,
            "structures": len(bundle.structures),
            "calls": repeats,
            "python": f"{platform.python_implementation()} {platform.python_version()}",
        },
    )

    def measure(row: str, what: str, call: Callable[[], object]) -> Latency:
        # Warm caches and numpy's dispatch before timing.
        samples = timed_ms(call, repeats, warm=min(50, repeats))
        return result.latency(row, samples, what=what)

    print(f"# recommendation latency: {bundle.workload.name}, {len(bundle.structures)} structures")
    print(f"# {platform.python_implementation()} {platform.python_version()}, {platform.machine()}")
    for grid in (paper_grid(), host_grid(48)):
        full = partial(recommend, predictor, machine=machine, utilization=utilization, grid=grid)
        core = partial(price_grid, predictor, DEFAULT_PRICE_PROFILE, grid, machine)
        target = TARGETS_MS.get(grid.name)
        row = f"{grid.name} ({grid.size} points), {bundle.workload.name}"
        if target is not None:
            result.figure(row, "target ms", target)
        print(
            f"{grid.name:>11} ({grid.size} points) recommend: "
            f"{summary(measure(row, 'recommend', full))}  target <= {target} ms"
        )
        print(
            f"{grid.name:>11} ({grid.size} points) predict+price only: "
            f"{summary(measure(row, 'predict+price', core))}"
        )
        # The service keeps a question's shortlist: under another utilization only `choose` runs.
        short = shortlist(predictor, machine=machine, grid=grid)
        moved = Utilization(cpu=0.3, dram=0.5, slow=0.6, llc=0.2)
        again = partial(choose, short, moved)
        print(
            f"{grid.name:>11} ({grid.size} points) shortlist kept, choose only:"
            f" {summary(measure(row, 'choose', again))}"
        )
    result.write(args.json)


if __name__ == "__main__":
    main()
