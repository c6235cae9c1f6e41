"""`tmc-agent`: the node agent's command line (discover, profile, upload, serve, shim)."""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated, Literal, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from model.bundle import MAX_PROFILE_RUNS, MAX_VCPUS, ProfileBundle, parse_bundle
from model.errors import TmcError
from model.tiering.profile import PageManagerState
from tmc_agent import serve as serve_mod
from tmc_agent import shim, upload
from tmc_agent.discover import discover as run_discover
from tmc_agent.hostpaths import HostPaths
from tmc_agent.profile_runs import DEFAULT_OBJECTIVES, DEFAULT_PROFILE_RUNS, objectives_of
from tmc_agent.settings import AgentSettings, SettingsError, read_token

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False
)
console = Console(stderr=True)
USER_ERROR = 2  # bad input or a node that cannot do what was asked: the message names the fix


def version_text() -> str:
    try:
        return f"tmc-agent {metadata.version('tmc')}"
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "tmc-agent (not installed)"


def _version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _group(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    """tmc's node agent: preflight, profiling, the allocator shim."""


def fail(message: str, fix: str, code: int = USER_ERROR) -> NoReturn:
    """One line on stderr: what went wrong and what to do about it; no traceback."""
    console.print(f"[red]error:[/red] {message.strip()} [dim]-[/dim] fix: {fix}", soft_wrap=True)
    raise typer.Exit(code)


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


@dataclass(frozen=True)
class ProfileOutcome:
    """A profile and what the bundle cannot carry: the program's exit status and how it ran."""

    bundle: ProfileBundle
    returncode: int
    backend: str
    target_exe: str | None


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
    target_exe: Annotated[
        str | None,
        typer.Option(
            help="the executable whose allocations count (default: the command's own; name the "
            "real program when the command is a wrapper script)"
        ),
    ] = None,
    dependent_fraction: Annotated[
        float, typer.Option(help="trace: share of LLC loads treated as pointer chasing")
    ] = 0.0,
    out: Annotated[Path | None, typer.Option(help="write the bundle here")] = None,
    run_info: Annotated[
        Path | None,
        typer.Option(help="write the run's metadata (exit status, command) here [<out>.run.json]"),
    ] = None,
    upload_url: Annotated[
        str | None,
        typer.Option("--upload", envvar="TMC_AGENT_SERVICE_URL", help="service base URL"),
    ] = None,
    token: Annotated[str | None, typer.Option(envvar="TMC_TOKEN", help="agent token")] = None,
    spool_dir: Annotated[Path | None, typer.Option("--spool", help="spool directory")] = None,
    workdir: Annotated[Path | None, typer.Option(help="keep traces and logs here")] = None,
    tiering: Annotated[
        bool,
        typer.Option(
            "--tiering",
            help="also record a tiering profile (page samples per window, reuse, page manager)",
        ),
    ] = False,
    page_manager: Annotated[
        str,
        typer.Option(
            help="--tiering: the page manager the profile is for (auto: the kernel's tiering if "
            "it runs, else HeMem-like defaults; hemem; tpp)"
        ),
    ] = "auto",
    tiering_page_bytes: Annotated[
        int, typer.Option(help="--tiering: the unit the page manager moves (4096 or 2097152)")
    ] = 4096,
    runs: Annotated[
        int | None,
        typer.Option(
            help="up to N runs beyond the three reference runs, each where the model asks for one"
            f" (0-{MAX_PROFILE_RUNS}; default {DEFAULT_PROFILE_RUNS})",
        ),
    ] = None,
    runs_for: Annotated[
        list[str] | None,
        typer.Option(
            "--runs-for",
            help="the objectives those runs serve, in turn (repeat; default: "
            + ", ".join(DEFAULT_OBJECTIVES)
            + ")",
        ),
    ] = None,
    vcpus: Annotated[
        int | None,
        typer.Option(
            help="hardware: the vCPUs the program stands for (its VM's or pod's; default: the"
            " CPUs its all-DRAM run kept busy)",
        ),
    ] = None,
) -> None:
    """Profile a workload: the three reference runs (and up to --runs more where the model asks
    for them), a checked bundle, optionally uploaded."""
    if not command:
        fail("no program given", "put the program and its arguments after --")
    if backend not in ("auto", "hardware", "trace", "sim"):
        fail(f"unknown backend {backend!r}", "use --backend auto, hardware, trace or sim")
    if backend in ("auto", "trace", "sim") and host not in ("optane", "cxl_local", "cxl_pool"):
        fail(f"unknown simulated host {host!r}", "--host optane, cxl_local or cxl_pool")
    if tiering and page_manager not in ("auto", "hemem", "tpp"):
        fail(f"unknown page manager {page_manager!r}", "--page-manager auto, hemem or tpp")
    if tiering and tiering_page_bytes not in (4096, 2 << 20):
        fail("--tiering-page-bytes must be 4096 or 2097152", "base or huge pages")
    if not 0.0 <= dependent_fraction <= 1.0:
        fail("--dependent-fraction must be between 0 and 1", "e.g. --dependent-fraction 0.3")
    if upload_url is not None:
        token = token or agent_token()
        if not token:
            fail(
                "--upload needs a token",
                "pass --token, or set TMC_TOKEN, TMC_AGENT_TOKEN or TMC_AGENT_TOKEN_FILE",
            )
    chosen = backend
    if backend == "auto":
        chosen = run_discover(HostPaths.from_env()).backend()
        console.print(f"backend auto: [bold]{chosen}[/bold]")
    if runs is not None and not 0 <= runs <= MAX_PROFILE_RUNS:
        fail(f"--runs {runs}: between 0 and {MAX_PROFILE_RUNS}", "e.g. --runs 2")
    extra_runs = DEFAULT_PROFILE_RUNS if runs is None else runs
    try:
        run_objectives = tuple(str(o) for o in objectives_of(runs_for or DEFAULT_OBJECTIVES))
    except ValueError as exc:
        fail(f"--runs-for: {exc}", "e.g. --runs-for slo:5% --runs-for least-dram:5%")
    if vcpus is not None and not 1 <= vcpus <= MAX_VCPUS:
        fail(f"--vcpus {vcpus}: between 1 and {MAX_VCPUS}", "e.g. --vcpus 4")
    if vcpus is not None and chosen != "hardware":
        fail(
            f"--vcpus is recorded by the hardware backend (not {chosen}: a traced or simulated"
            " program runs on one simulated core)",
            "give the vCPUs it is deployed with when recommending: tmc recommend --vcpus N",
        )
    if tiering and chosen not in ("trace", "hardware"):
        fail(
            f"--tiering is recorded by the trace and hardware backends (not {chosen})",
            "profile a real program with --backend trace --tiering",
        )
    manager = None
    if tiering:
        from tmc_agent import tiering_collect  # noqa: PLC0415

        manager = tiering_collect.page_manager(HostPaths.from_env(), page_manager)
    workload_name = name or Path(command[0]).name.replace("_", "-")
    target: Path | None = None
    if chosen != "sim":
        try:
            target = shim.target_executable(target_exe or command[0])
        except shim.ShimError as exc:
            fail(str(exc), "check the command after -- (a path, or a program on PATH)")
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        steps = RichSteps(progress)
        outcome = _run_backend(
            chosen,
            command,
            workload_name,
            input_label,
            version,
            host,
            auto_tag,
            target,
            dependent_fraction,
            workdir,
            steps,
            TieringChoice(tiering, tiering_page_bytes, manager),
            ExtraRuns(extra_runs, run_objectives),
            vcpus,
        )
    bundle = outcome.bundle
    text = bundle.model_dump_json(indent=2)
    if out is not None:
        run_info = run_info or out.with_name(out.stem + ".run.json")
    if outcome.returncode != 0:
        kept = f"recorded in {run_info}" if run_info else "pass --run-info FILE to record it"
        console.print(
            f"[yellow]warning:[/yellow] {command[0]} exited with status {outcome.returncode}; "
            f"the profile stands (programs such as grep end non-zero by design); {kept}",
            soft_wrap=True,
        )
    if out is not None:
        out.write_text(text + "\n")
        console.print(f"bundle written to {out}")
    elif upload_url is None:
        typer.echo(text)
    if run_info is not None:
        run_info.write_text(json.dumps(run_metadata(outcome, command), indent=2) + "\n")
        console.print(f"run metadata written to {run_info}")
    _summary(bundle)
    if upload_url is not None:
        assert token is not None
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


def agent_token() -> str | None:
    """The agent's bearer token: TMC_AGENT_TOKEN_FILE (a mounted Secret) or TMC_AGENT_TOKEN."""
    try:
        return read_token(os.environ)
    except SettingsError as exc:
        fail(str(exc), "point TMC_AGENT_TOKEN_FILE at the mounted token file")


def run_metadata(outcome: ProfileOutcome, command: list[str]) -> dict[str, object]:
    """What the bundle has no field for: how the program ran."""
    b = outcome.bundle
    return {
        "schema": "tmc.agent-run/v1",
        "workload": b.workload.model_dump(),
        "command": command,
        "target_exe": outcome.target_exe,
        "backend": outcome.backend,
        "exit_status": outcome.returncode,
        "agent": version_text(),
    }


@dataclass(frozen=True)
class ExtraRuns:
    """Runs beyond the reference runs (tmc_agent.profile_runs): how many at most, for what."""

    budget: int = 0
    objectives: tuple[str, ...] = DEFAULT_OBJECTIVES


@dataclass(frozen=True)
class TieringChoice:
    record: bool = False
    page_bytes: int = 4096
    manager: PageManagerState | None = None


def _run_backend(
    chosen: str,
    command: list[str],
    name: str,
    input_label: str,
    version: str,
    host: str,
    auto_tag: bool,
    target: Path | None,
    dependent_fraction: float,
    workdir: Path | None,
    steps: RichSteps,
    tiering: TieringChoice | None = None,
    extra: ExtraRuns | None = None,
    vcpus: int | None = None,
) -> ProfileOutcome:
    tiering = tiering or TieringChoice()
    extra = extra or ExtraRuns()
    target_text = str(target) if target is not None else None
    if chosen == "sim":
        # Backends load on demand: trace and sim need the simulator (numba), hardware does not.
        from tmc_agent.backends import simulated  # noqa: PLC0415

        try:
            bundle = simulated.profile(
                command[0], host, runs=extra.budget, objectives=extra.objectives
            )
        except (KeyError, ValueError) as exc:
            fail(f"sim: {exc}", "name one of the simulator's workloads (see sim/) or --host")
        return ProfileOutcome(bundle, 0, chosen, None)
    if chosen == "trace":
        # Backends load on demand: trace and sim need the simulator (numba), hardware does not.
        from tmc_agent import lackey, tiering_collect  # noqa: PLC0415
        from tmc_agent.backends import trace  # noqa: PLC0415

        opts = trace.TraceOptions(
            name=name,
            input_label=input_label,
            version=version,
            host=host,
            auto_tag=auto_tag,
            dependent_fraction=dependent_fraction,
            target_exe=target,
            tiering=tiering.record,
            tiering_page_bytes=tiering.page_bytes,
            page_manager=tiering.manager,
            runs=extra.budget,
            run_objectives=extra.objectives,
        )
        try:
            if workdir is not None:
                res = trace.profile_run(command, opts, workdir, steps=steps)
            else:
                with tempfile.TemporaryDirectory(prefix="tmc-trace-") as tmp:
                    res = trace.profile_run(command, opts, Path(tmp), steps=steps)
        except lackey.TooSmall as exc:
            status = f" (it exited with status {exc.returncode})" if exc.returncode else ""
            fail(
                f"{command[0]}: {exc}{status}",
                "profile a run that does real work: a larger input, or the real command",
            )
        except (lackey.TraceError, shim.ShimError) as exc:
            fail(f"trace: {exc}", _trace_fix(str(exc)))
        except tiering_collect.TieringCollectError as exc:
            fail(f"tiering: {exc}", "profile a run that touches more memory, or drop --tiering")
        except ValueError as exc:
            fail(str(exc), "--host optane, cxl_local or cxl_pool")
        return ProfileOutcome(res.bundle, res.returncode, chosen, target_text)
    if chosen == "hardware":
        # Backends load on demand: trace and sim need the simulator (numba), hardware does not.
        from tmc_agent.backends import hardware  # noqa: PLC0415

        report = run_discover(HostPaths.from_env())
        result = hardware.HardwareResult()
        try:
            bundle = hardware.profile(
                command,
                hardware.HardwareOptions(
                    name=name,
                    input_label=input_label,
                    target_exe=target,
                    tiering=tiering.record,
                    tiering_page_bytes=tiering.page_bytes,
                    page_manager=tiering.manager,
                    runs=extra.budget,
                    run_objectives=extra.objectives,
                    vcpus=vcpus,
                ),
                report,
                steps,
                result=result,
            )
        except hardware.HardwareError as exc:
            missing = [c.area for c in report.checks if c.status != "works"]
            fix = (
                f"`tmc-agent discover` shows how to enable {', '.join(missing)}; "
                "without them use --backend trace"
                if missing
                else "see `tmc-agent discover`"
            )
            fail(f"hardware: {exc}", fix)
        except shim.ShimError as exc:
            fail(str(exc), "install make and gcc (the shim is built on the node)")
        if result.runs_stopped is not None:
            console.print(
                "[yellow]warning:[/yellow] the runs beyond the reference runs stopped early"
                f" ({escape(result.runs_stopped[-300:])}); the bundle carries those measured"
                " before",
                soft_wrap=True,
            )
        return ProfileOutcome(bundle, result.returncode, chosen, target_text)
    fail(f"unknown backend {chosen!r}", "use --backend auto, hardware, trace or sim")


def _trace_fix(message: str) -> str:
    if "not found" in message and "valgrind" in message:
        return "apt-get install valgrind (or use --backend hardware on a node with a PMU)"
    if "make" in message or "building" in message:
        return "install make and gcc; tmctrace also needs valgrind's static libraries"
    if "dynamically linked" in message:
        return "profile a dynamically linked build, or tag with tmc_malloc in the program"
    if "time limit" in message:
        return "profile a shorter run (a smaller input)"
    return "see the message; run with --workdir DIR to keep valgrind's output"


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
    t = bundle.tiering
    if t is not None:
        console.print(
            f"tiering: {t.footprint_bytes >> 10:,} KiB in {t.pages:,} pages of {t.page_bytes:,} B,"
            f" {t.llc_misses:,.0f} sampled misses in windows of {t.window_seconds * 1e3:.2f} ms;"
            f" page manager {t.page_manager.kind} ({t.page_manager.version})"
            + ("; counters from /proc/vmstat" if t.counters is not None else "")
        )


@app.command()
def replay(
    workdir: Annotated[
        Path, typer.Option(help="the --workdir of a trace-backend profile (holds llc_stream.npz)")
    ],
    recommendation: Annotated[
        Path | None,
        typer.Option(
            help="a recommendation (tmc recommend --profile BUNDLE -o json): its configuration"
            " and plan"
        ),
    ] = None,
    slow_ratio: Annotated[float | None, typer.Option(help="without --recommendation")] = None,
    llc_ways: Annotated[int | None, typer.Option(help="without --recommendation")] = None,
    host: Annotated[str, typer.Option(help="the --host the profile was taken with")] = "optane",
    name: Annotated[str, typer.Option(help="the workload's name, for the report")] = "workload",
) -> None:
    """A verification run of a traced program: its recorded trace replayed by the host model at
    one configuration, timed on the same clock as the profile's reference runs (which were timed
    the same way). Prints the seconds to give `tmc verify record --seconds`."""
    stream = workdir / "llc_stream.npz"
    if not stream.is_file():
        fail(
            f"{stream} does not exist",
            "profile with --backend trace --workdir DIR first; the trace is kept there",
        )
    placement: list[dict[str, object]] | None = None
    if recommendation is not None:
        try:
            rec = json.loads(recommendation.read_text())
            conf = rec["chosen"]["configuration"]
            slow_ratio, llc_ways = float(conf["slow_ratio"]), int(conf["llc_ways"])
            placement = list(rec["placement"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            fail(
                f"{recommendation}: not a recommendation ({exc})",
                "save one with tmc recommend --profile BUNDLE -o json > rec.json",
            )
    if slow_ratio is None or llc_ways is None:
        fail("no configuration given", "pass --recommendation FILE, or --slow-ratio and --llc-ways")
    if not 0.0 <= slow_ratio <= 1.0:
        fail(f"--slow-ratio {slow_ratio:g} is outside 0..1", "e.g. --slow-ratio 0.5")
    # Loads on demand: replaying needs the simulator (numba), like the trace backend.
    from sim.host import run_many  # noqa: PLC0415
    from sim.placement import PlacementLike, StructurePlan  # noqa: PLC0415
    from tmc_agent.backends import trace  # noqa: PLC0415

    try:
        att = trace.load_attributed(stream)
        prep = trace.prepared_from_attributed(att, trace.TraceOptions(name=name, host=host))
        plan: list[PlacementLike] | None = None
        if placement is not None:
            plan = [
                StructurePlan(
                    tag=str(p["tag"]),
                    size_bytes=int(str(p["size_bytes"])),
                    fast_bytes=int(str(p["fast_bytes"])),
                    slow_bytes=int(str(p["slow_bytes"])),
                )
                for p in placement
            ]
        (run,) = run_many(prep, [(slow_ratio, llc_ways, plan)])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        fail(f"replay: {exc}", "give the work directory and recommendation of the same profile")
    how = "the recommendation's plan" if plan is not None else "the coldest structures slow"
    console.print(
        f"{name}: slow ratio {slow_ratio:g}, {llc_ways} ways, {how}: {run.wall_seconds:.6g} s"
        f" on the host model's clock ({run.cycles:,} cycles)"
    )
    typer.echo(f"{run.wall_seconds:.9g}")


@app.command("upload")
def upload_cmd(
    bundles: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="[BUNDLE]...",
            help="bundle files to upload (e.g. written by profile --out); none: the spool's",
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", "--service", envvar="TMC_AGENT_SERVICE_URL", help="service base URL"),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(envvar="TMC_TOKEN", help="agent token (tmc token create --role agent)"),
    ] = None,
    spool_dir: Annotated[Path | None, typer.Option("--spool", help="spool directory")] = None,
) -> None:
    """Upload bundle files, or every spooled bundle the service has not acknowledged yet.

    A file is checked first, then spooled and uploaded: if the service cannot be reached, it
    stays in the spool for the next `tmc-agent upload`."""
    if not url:
        fail("no service URL", "pass --url or set TMC_AGENT_SERVICE_URL")
    token = token or agent_token()
    if not token:
        fail(
            "no agent token",
            "pass --token, or set TMC_AGENT_TOKEN_FILE or TMC_AGENT_TOKEN; an operator mints one "
            "with `tmc token create --role agent`",
        )
    spool = spool_dir or upload.default_spool()
    if bundles:
        paths = [upload.spool(read_bundle(path), spool) for path in bundles]
        results = [upload.upload_file(path, url, token) for path in paths]
        for given, r in zip(bundles, results, strict=True):
            profile = upload.profile_id(r)
            if r.acknowledged:
                console.print(
                    f"{given}: HTTP {r.status}, profile {profile} ({r.attempts} attempt(s))",
                    soft_wrap=True,
                )
            else:
                console.print(
                    f"{given}: [red]not acknowledged[/red] (HTTP {r.status}), kept in {r.path}: "
                    f"{r.body[:300]}",
                    soft_wrap=True,
                )
    else:
        results = upload.flush(spool, url, token)
        for r in results:
            console.print(f"{r.path.name}: HTTP {r.status} after {r.attempts} attempt(s)")
    if any(not r.acknowledged for r in results):
        raise typer.Exit(1)


def read_bundle(path: Path) -> ProfileBundle:
    """A bundle file, checked as the service will check it; a bad one is one line naming it."""
    try:
        text = path.read_text()
    except OSError as exc:
        fail(f"{path}: {exc.strerror or exc}", "give the path of a bundle file (profile --out)")
    try:
        return parse_bundle(text)
    except (ValidationError, TmcError) as exc:
        detail = str(exc).strip().splitlines()
        fail(
            f"{path} is not a tmc.profile/v1 bundle: {detail[0] if detail else exc}",
            "upload the file `tmc-agent profile --out FILE` wrote",
        )


@app.command()
def serve(
    node: Annotated[
        str | None, typer.Option(envvar="TMC_AGENT_NODE_NAME", help="this node's name")
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="publish, one pass, then exit")] = False,
    interval: Annotated[
        float | None, typer.Option(help="seconds between passes (TMC_AGENT_INTERVAL)")
    ] = None,
    service: Annotated[
        str | None,
        typer.Option(help="tmc's service for spooled profiles (TMC_AGENT_SERVICE_URL)"),
    ] = None,
) -> None:
    """DaemonSet mode: publish the node's tiered capacity, upload spooled profiles, report
    verification runs (tmc-nri, beside the agent, applies the placements)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = AgentSettings.from_env(
            node_name=node, interval_seconds=interval, service_url=service
        )
    except SettingsError as exc:
        fail(str(exc), "see `tmc-agent serve --help` and docs/agent.md for the settings")
    try:
        agent = serve_mod.in_cluster_agent(config)
    except RuntimeError as exc:
        fail(
            str(exc),
            "run in a pod, or set KUBERNETES_SERVICE_HOST and TMC_AGENT_SERVICEACCOUNT_DIR",
        )
    agent.run(once=once)


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
    """Every failure is one line; TMC_AGENT_DEBUG=1 shows the traceback of an unexpected one."""
    try:
        app()
    except Exception as exc:
        if os.environ.get("TMC_AGENT_DEBUG"):
            raise
        console.print(
            f"[red]error:[/red] {type(exc).__name__}: {exc} [dim]-[/dim] fix: rerun with "
            "TMC_AGENT_DEBUG=1 for the traceback and report it",
            soft_wrap=True,
        )
        sys.exit(1)
