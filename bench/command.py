"""`tmc bench`: the Typer command. Heavy imports (the simulator, matplotlib, BO) happen only
when it runs, so that `tmc` starts fast and installs without the `sim` extra."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_OUT = Path("docs/reports")


def bench(
    quick: Annotated[
        bool,
        typer.Option("--quick", help="Seconds, for CI: 4 short workloads, 1 mix, 300 arrivals."),
    ] = False,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for the JSON, markdown and PNG files.")
    ] = DEFAULT_OUT,
    part: Annotated[
        str, typer.Option("--part", help="all, evaluation, or regimes (the regime map only).")
    ] = "all",
    reduced: Annotated[
        bool, typer.Option("--reduced", help="Regime map: the ten committed regimes, one seed.")
    ] = False,
    cache: Annotated[
        Path | None,
        typer.Option(
            "--cache",
            help="Folder of per-workload studies kept between runs (keyed by workload, host,"
            " seeds and code); off by default.",
        ),
    ] = None,
) -> None:
    """Reproduce the paper's evaluation (§4) against the simulator: per-workload cost and search
    cost, compact cluster size per mix and architecture; writes evaluation[-quick].{json,md,png},
    and the regime map of where packing pays in regimes/."""
    from rich.console import Console  # noqa: PLC0415

    from bench.evaluation import FULL, QUICK, progress_bar, run_benchmark  # noqa: PLC0415

    if part not in ("all", "evaluation", "regimes"):
        raise typer.BadParameter("expected all, evaluation or regimes", param_hint="--part")
    if part in ("all", "regimes"):
        from bench.regimes import FULL_MAP, QUICK_MAP, REDUCED_MAP, run_map  # noqa: PLC0415

        chosen = QUICK_MAP if quick else REDUCED_MAP if reduced else FULL_MAP
        regimes = run_map(chosen, out, Console().print, cache)
        Console().print(f"regime map: {regimes['duration_seconds']['total']:.0f} s")
        if part == "regimes":
            return
    settings = QUICK if quick else FULL
    with progress_bar() as progress:
        results = run_benchmark(settings, out, progress, cache)
    s = results["summary"]
    Console().print(
        f"tmc cost vs ES {100 * s['tmc_cost_vs_es']:+.1f} %, BO {100 * s['bo_cost_vs_es']:+.1f} %; "
        f"runs ES/tmc {s['search_es_over_tmc']:.1f}x, BO/tmc {s['search_bo_over_tmc']:.1f}x; "
        f"{results['duration_seconds']['total']:.0f} s; report in {out}"
    )
