"""`tmc-agent`: the node agent's command line (discover, profile, shim)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tmc_agent import shim
from tmc_agent.discover import discover as run_discover
from tmc_agent.hostpaths import HostPaths

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()


@app.callback()
def _group() -> None:
    """tmc's node agent: preflight, profiling, the allocator shim."""


_STYLE = {"works": "green", "degraded": "yellow", "missing": "red"}


@app.command()
def discover(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable report")] = False,
) -> None:
    """Preflight report: NUMA tiers, resctrl/CAT, PMU and perf, cgroup v2, tools."""
    report = run_discover(HostPaths.from_env())
    if as_json:
        typer.echo(json.dumps(report.as_json(), indent=2))
        return
    console.print(
        f"[bold]{report.cpu_model}[/bold], {report.cpus} CPUs, LLC "
        f"{(report.llc_size_bytes or 0) >> 20} MiB / {report.llc_ways} ways"
    )
    table = Table(show_lines=False)
    table.add_column("area")
    table.add_column("status")
    table.add_column("detail")
    table.add_column("how to fix")
    for c in report.checks:
        table.add_row(c.area, f"[{_STYLE[c.status]}]{c.status}[/]", c.detail, c.fix)
    console.print(table)
    console.print(f"profile --backend auto would use: [bold]{report.backend()}[/bold]")


def main() -> None:
    app()


shim_app = typer.Typer(no_args_is_help=True, help="The tagging allocator shim (alloc/).")
app.add_typer(shim_app, name="shim")


@shim_app.command("build")
def shim_build(
    out: Annotated[str | None, typer.Option(help="build directory")] = None,
) -> None:
    """Build libtmcalloc.so and its tools with the machine's compiler; print the library path."""
    built = shim.build(Path(out) if out else None)
    typer.echo(str(built.library))


@shim_app.command("bench")
def shim_bench(
    ops: Annotated[int, typer.Option(help="malloc+free pairs per run")] = 5_000_000,
    repeats: Annotated[int, typer.Option(help="runs of each, best taken")] = 3,
) -> None:
    """The shim's malloc overhead against glibc, measured now, alternating runs."""
    r = shim.benchmark(shim.build(), ops, repeats)
    typer.echo(f"glibc malloc:                 {r.glibc_ns:7.2f} ns per malloc+free")
    typer.echo(f"shim, pass-through (no tags): {r.passthrough_ns:7.2f} ns per malloc+free")
    typer.echo(f"shim, every malloc tagged:    {r.shim_ns:7.2f} ns per malloc+free")
    typer.echo(
        f"ratio tagged/glibc {r.ratio:.2f}, pass-through/glibc {r.passthrough_ns / r.glibc_ns:.2f}"
    )
