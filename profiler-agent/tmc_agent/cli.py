"""`tmc-agent`: the node agent's command line (discover, profile, upload, serve, shim)."""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from model.bundle import ProfileBundle
from tmc_agent import serve as serve_mod
from tmc_agent import shim, upload
from tmc_agent.discover import discover as run_discover
from tmc_agent.hostpaths import HostPaths

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console(stderr=True)


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
    out = Console()
    out.print(
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
    out.print(table)
    out.print(f"profile --backend auto would use: [bold]{report.backend()}[/bold]")


class RichSteps:
    """The backends' steps as Rich progress bars."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def begin(self, label: str, total: float | None = None) -> int:
        return int(self.progress.add_task(label, total=total))

    def advance(self, step: int, amount: float = 1.0) -> None:
        self.progress.advance(step, amount)  # type: ignore[arg-type]

    def done(self, step: int) -> None:
        task = self.progress.tasks[step] if step < len(self.progress.tasks) else None
        if task is not None and task.total is not None:
            self.progress.update(step, completed=task.total)  # type: ignore[arg-type]


Backend = Literal["auto", "hardware", "trace", "sim"]


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def profile(
    command: Annotated[list[str], typer.Argument(help="-- the program and its arguments")],
    backend: Annotated[str, typer.Option(help="auto | hardware | trace | sim")] = "auto",
    name: Annotated[str | None, typer.Option(help="workload name (default: program name)")] = None,
    input_label: Annotated[str, typer.Option(help="which input this run used")] = "default",
    version: Annotated[str, typer.Option(help="the workload's version")] = "unversioned",
    host: Annotated[
        str, typer.Option(help="trace/sim: simulated host model (optane|cxl_local|cxl_pool)")
    ] = "optane",
    auto_tag: Annotated[bool, typer.Option(help="also tag plain mallocs by call site")] = False,
    dependent_fraction: Annotated[
        float, typer.Option(help="trace: share of LLC loads treated as pointer chasing")
    ] = 0.0,
    out: Annotated[Path | None, typer.Option(help="write the bundle here")] = None,
    upload_url: Annotated[str | None, typer.Option("--upload", help="service base URL")] = None,
    token: Annotated[str | None, typer.Option(envvar="TMC_TOKEN", help="agent token")] = None,
    spool_dir: Annotated[Path | None, typer.Option("--spool", help="spool directory")] = None,
    workdir: Annotated[Path | None, typer.Option(help="keep traces and logs here")] = None,
) -> None:
    """Profile a workload: the three reference runs, a checked bundle, optionally uploaded."""
    if not command:
        raise typer.BadParameter("give the command after --")
    chosen = backend
    if backend == "auto":
        chosen = run_discover(HostPaths.from_env()).backend()
        console.print(f"backend auto: [bold]{chosen}[/bold]")
    workload_name = name or Path(command[0]).name.replace("_", "-")
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        steps = RichSteps(progress)
        bundle = _run_backend(
            chosen,
            command,
            workload_name,
            input_label,
            version,
            host,
            auto_tag,
            dependent_fraction,
            workdir,
            steps,
        )
    text = bundle.model_dump_json(indent=2)
    if out is not None:
        out.write_text(text + "\n")
        console.print(f"bundle written to {out}")
    elif upload_url is None:
        typer.echo(text)
    _summary(bundle)
    if upload_url is not None:
        if not token:
            raise typer.BadParameter("--upload needs --token (or TMC_TOKEN)")
        path = upload.spool(bundle, spool_dir or upload.default_spool())
        result = upload.upload_file(path, upload_url, token)
        if result.acknowledged:
            console.print(
                f"uploaded: HTTP {result.status}, profile {upload.profile_id(result)}"
                f" ({result.attempts} attempt(s))"
            )
        else:
            console.print(
                f"[red]not acknowledged[/red] (HTTP {result.status}): kept in {path}\n"
                f"{result.body[:500]}"
            )
            raise typer.Exit(1)


def _run_backend(
    chosen: str,
    command: list[str],
    name: str,
    input_label: str,
    version: str,
    host: str,
    auto_tag: bool,
    dependent_fraction: float,
    workdir: Path | None,
    steps: RichSteps,
) -> ProfileBundle:
    if chosen == "sim":
        # Backends load on demand: trace and sim need the simulator (numba), hardware does not.
        from tmc_agent.backends import simulated  # noqa: PLC0415

        return simulated.profile(command[0], host)
    if chosen == "trace":
        # Backends load on demand: trace and sim need the simulator (numba), hardware does not.
        from tmc_agent.backends import trace  # noqa: PLC0415

        opts = trace.TraceOptions(
            name=name,
            input_label=input_label,
            version=version,
            host=host,
            auto_tag=auto_tag,
            dependent_fraction=dependent_fraction,
        )
        if workdir is not None:
            return trace.profile(command, opts, workdir, steps=steps)
        with tempfile.TemporaryDirectory(prefix="tmc-trace-") as tmp:
            return trace.profile(command, opts, Path(tmp), steps=steps)
    if chosen == "hardware":
        # Backends load on demand: trace and sim need the simulator (numba), hardware does not.
        from tmc_agent.backends import hardware  # noqa: PLC0415

        report = run_discover(HostPaths.from_env())
        return hardware.profile(
            command, hardware.HardwareOptions(name=name, input_label=input_label), report, steps
        )
    raise typer.BadParameter(f"unknown backend {chosen!r}")


def _summary(bundle: ProfileBundle) -> None:
    table = Table(title=f"{bundle.workload.name} on {bundle.host.host_kind}")
    table.add_column("run")
    table.add_column("ways")
    table.add_column("slow")
    table.add_column("instructions", justify="right")
    table.add_column("CPI", justify="right")
    table.add_column("LLC MPKI", justify="right")
    for r in bundle.runs:
        table.add_row(
            r.name,
            str(r.configuration.llc_ways),
            f"{r.configuration.slow_ratio:.0%}",
            f"{r.instructions:,}",
            f"{r.cycles / r.instructions:.2f}",
            f"{1000 * r.llc_misses / r.instructions:.2f}",
        )
    console.print(table)


@app.command("upload")
def upload_cmd(
    url: Annotated[str, typer.Option("--url", help="service base URL")],
    token: Annotated[str, typer.Option(envvar="TMC_TOKEN", help="agent token")],
    spool_dir: Annotated[Path | None, typer.Option("--spool", help="spool directory")] = None,
) -> None:
    """Upload every spooled bundle the service has not acknowledged yet."""
    results = upload.flush(spool_dir or upload.default_spool(), url, token)
    for r in results:
        console.print(f"{r.path.name}: HTTP {r.status} after {r.attempts} attempt(s)")
    if any(not r.acknowledged for r in results):
        raise typer.Exit(1)


@app.command()
def serve(
    node: Annotated[
        str | None, typer.Option(envvar="TMC_AGENT_NODE_NAME", help="this node's name")
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="publish, one pass, then exit")] = False,
    interval: Annotated[
        float | None, typer.Option(help="seconds between passes (TMC_AGENT_INTERVAL)")
    ] = None,
) -> None:
    """DaemonSet mode: publish the node's tiered capacity, apply the placements bound here."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = serve_mod.ServeConfig.from_env(node)
    except ValueError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    if interval is not None:
        config = dataclasses.replace(config, interval_seconds=interval)
    serve_mod.in_cluster_agent(config).run(once=once)


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


def main() -> None:
    app()
