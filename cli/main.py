"""`tmc`: recommendations and fitted models from the command line.

Every failure is one line on stderr and exit status 2; results go to stdout (a table, or JSON).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer.core import TyperGroup
from typer.exceptions import Abort

from cli.common import (
    JsonOpt,
    fail,
    guarded,
    load_bundle,
    load_prices,
    parse_memory,
    settings_problem,
    tmc_command,
)
from cli.get import DEFAULT_SERVER, Api, ServerOpt, TokenOpt
from cli.render import render_model, render_recommendation
from model import (
    DEFAULT_THRESHOLD,
    FittedModel,
    Grid,
    InvalidRequest,
    ProfileBundle,
    Recommendation,
    Utilization,
    fit,
    host_grid,
    machine_of_host,
    paper_grid,
    parse_objective,
    recommend,
)
from model.bundle import MAX_BYTES
from model.recommendation import vcpus_checked


class OneLineErrors(TyperGroup):
    """The root command: a usage error or an unexpected failure ends as one line on stderr, never
    a traceback or a framed panel. Usage errors exit 2 like every other user error; an unexpected
    failure exits 1 and says how to see its traceback (TMC_DEBUG=1)."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as exc:
            typer.echo(exc.ctx.get_help() if exc.ctx else "", err=True)
            sys.exit(exc.exit_code)
        except ClickException as exc:
            where = exc.ctx.command_path if isinstance(exc, UsageError) and exc.ctx else "tmc"
            typer.echo(f"error: {exc.format_message()} (see `{where} --help`)", err=True)
            sys.exit(2 if isinstance(exc, UsageError) else exc.exit_code)
        except Abort:
            typer.echo("error: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            if os.environ.get("TMC_DEBUG"):
                raise
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            typer.echo(
                f"error: unexpected {type(exc).__name__}: {detail} "
                "(run again with TMC_DEBUG=1 for the traceback, and report it)",
                err=True,
            )
            sys.exit(1)
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="tmc",
    help="tmc, the tiered-memory configurator: how much slow memory and how many LLC ways.",
    no_args_is_help=True,
    add_completion=False,
    cls=OneLineErrors,
)
model_app = typer.Typer(help="Inspect the fitted TMC model of a profile.", no_args_is_help=True)
app.add_typer(model_app, name="model")

T = TypeVar("T")


class GridChoice(StrEnum):
    paper = "paper"
    host = "host"


class RecommendOutput(StrEnum):
    table = "table"
    json = "json"


ProfileOpt = Annotated[
    Path, typer.Option("--profile", "-p", help="Profile bundle JSON (tmc.profile/v1).")
]
GridOpt = Annotated[
    GridChoice,
    typer.Option(help="paper: the 77-point grid of §4.1; host: every way count of the host."),
]
PricesOpt = Annotated[
    Path | None, typer.Option("--prices", help="Price profile JSON (default: the paper's method).")
]


def tmc_version() -> str:
    try:
        return metadata.version("tmc")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tmc {tmc_version()}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """tmc, the tiered-memory configurator: how much slow memory and how many LLC ways."""


RESOURCES = ("cpu", "dram", "slow", "llc")


def parse_utilization(spec: str | None) -> tuple[Utilization | None, list[str]]:
    """`cpu=0.7,dram=0.5,slow=0.2,llc=0.4`. A resource left out is taken as idle (0), and is
    returned in the second element so that the output can say so."""
    if spec is None:
        return None, []
    values: dict[str, float] = {}
    for part in spec.split(","):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in RESOURCES:
            raise InvalidRequest(
                "utilization",
                f"{part!r} is not one of cpu=, dram=, slow=, llc= "
                "(e.g. --utilization cpu=0.7,dram=0.5,slow=0.2,llc=0.4)",
            )
        if key in values:
            raise InvalidRequest("utilization", f"{key} is given twice")
        try:
            values[key] = float(raw)
        except ValueError:
            raise InvalidRequest("utilization", f"{key}={raw!r} is not a number") from None
    return Utilization(**values), [r for r in RESOURCES if r not in values]


def deployed_size(memory: str | None, per_vcpu: str | None, vcpus: Callable[[], int]) -> int | None:
    """The memory size to price at, in bytes: `--memory`, or `--memory-per-vcpu` times the
    vCPUs (`--vcpus`, else the profile's: a VM size); None: the profile's traced footprint."""
    if memory is not None and per_vcpu is not None:
        raise InvalidRequest("--memory", "give --memory or --memory-per-vcpu, not both")
    if memory is not None:
        return parse_memory(memory)
    if per_vcpu is None:
        return None
    total = parse_memory(per_vcpu, "--memory-per-vcpu") * vcpus()
    if total > MAX_BYTES:
        raise InvalidRequest(
            "--memory-per-vcpu", f"{per_vcpu} per vCPU is more than 1Pi ({MAX_BYTES} bytes) in all"
        )
    return total


def choose_grid(choice: GridChoice, bundle: ProfileBundle) -> Grid:
    if choice is GridChoice.host:
        return host_grid(bundle.host.llc_ways, bundle.host.min_llc_ways)
    return paper_grid()


@app.command("recommend")
def recommend_cmd(
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile", "-p", help="Profile bundle JSON (tmc.profile/v1): decided here, offline."
        ),
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            help="A workload the running service knows (tmc get workloads): it decides, against "
            "the live cluster, and logs the decision. Needs --server/--token (operator or "
            "scheduler)."
        ),
    ] = None,
    utilization: Annotated[
        str | None,
        typer.Option(help="Cluster utilization, e.g. cpu=0.7,dram=0.5,slow=0.2,llc=0.4"),
    ] = None,
    objective: Annotated[str, typer.Option(help="cheapest | slo:5% | least-dram:5%")] = "cheapest",
    threshold: Annotated[
        float, typer.Option(help="Algorithm 1's T: accepted cost above the cheapest.")
    ] = DEFAULT_THRESHOLD,
    grid: GridOpt = GridChoice.paper,
    prices: PricesOpt = None,
    memory: Annotated[
        str | None,
        typer.Option(
            "--memory",
            metavar="SIZE",
            help="The memory size the workload runs at (its pod's request, its VM's size), e.g."
            " 4Gi, 512Mi or 4294967296 bytes: priced, fitted and planned at it. Default: the"
            " profile's traced footprint, only the program's shape on a small input.",
        ),
    ] = None,
    memory_per_vcpu: Annotated[
        str | None,
        typer.Option(
            "--memory-per-vcpu",
            metavar="SIZE",
            help="A VM size as memory per vCPU, e.g. 4Gi: --memory is the vCPUs (--vcpus, else"
            " the profile's) times it.",
        ),
    ] = None,
    vcpus_given: Annotated[
        int | None,
        typer.Option(
            "--vcpus",
            metavar="N",
            help="The vCPUs the workload runs with (its pod's CPU request rounded up, its VM's):"
            " priced, fitted and packed with them. Default: the profile's.",
        ),
    ] = None,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    output: Annotated[
        RecommendOutput,
        typer.Option("--output", "-o", help="table | json (json: the same as --json)"),
    ] = RecommendOutput.table,
) -> None:
    """Recommend a configuration for a profiled workload (Algorithm 1): from a bundle file here,
    or from the running service for a workload it knows."""
    if (profile is None) == (workload is None):
        fail(
            "give --profile FILE (decided here) or --workload NAME (asks the service), one of "
            "them (see `tmc recommend --help`)"
        )
    as_json = as_json or output is RecommendOutput.json
    if workload is not None:
        if prices is not None:
            fail("--prices is a file for --profile; the service uses its default price profile")
        given, assumed = guarded(lambda: parse_utilization(utilization))
        api = Api(server=server, token=token, timeout=60.0)

        def vcpus() -> int:
            # The vCPUs of the profile the service decides with, for a VM size per vCPU.
            fitted = api.get(f"/v1/workloads/{urllib.parse.quote(workload, safe='')}/model")
            return int(fitted["model"]["vcpus"])

        deployed = guarded(lambda: vcpus_checked(vcpus_given))
        size = guarded(
            lambda: deployed_size(
                memory, memory_per_vcpu, vcpus if deployed is None else lambda: deployed
            )
        )
        body: dict[str, object] = {
            "workload": workload,
            "objective": objective,
            "threshold": threshold,
            "grid": grid.value,
        }
        if given is not None:
            body["utilization"] = given.model_dump()
        if size is not None:
            body["memory_bytes"] = size
        if deployed is not None:
            body["vcpus"] = deployed
        answer = api.post("/recommend", body)
        if as_json:
            sys.stdout.write(json.dumps(answer, indent=2) + "\n")
            return
        rec = Recommendation.model_validate(answer["recommendation"])
        render_recommendation(Console(), rec, assumed)
        typer.echo(f"decision {answer['id']} ({tmc_command()} get decisions {answer['id']})")
        return
    assert profile is not None

    def run() -> None:
        bundle = load_bundle(profile)
        given, assumed = parse_utilization(utilization)
        deployed = vcpus_checked(vcpus_given)
        size = deployed_size(
            memory, memory_per_vcpu, lambda: bundle.vcpus if deployed is None else deployed
        )
        if assumed:
            typer.echo(
                f"note: utilization of {', '.join(assumed)} not given: taken as 0 (idle)", err=True
            )
        result = recommend(
            fit(bundle),
            memory_bytes=size,
            vcpus=deployed,
            machine=machine_of_host(bundle.host),
            prices=load_prices(prices),
            utilization=given,
            objective=parse_objective(objective),
            threshold=threshold,
            grid=choose_grid(grid, bundle),
        )
        if as_json:
            sys.stdout.write(result.model_dump_json(indent=2) + "\n")
        else:
            render_recommendation(Console(), result, assumed)

    guarded(run)


@model_app.command("show")
def model_show_cmd(
    profile: ProfileOpt,
    grid: GridOpt = GridChoice.paper,
    prices: PricesOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the fitted parameters, diagnostics, and predicted time and cost over the grid."""

    def run() -> None:
        bundle = load_bundle(profile)
        fitted: FittedModel = fit(bundle)
        render_model(
            Console(),
            fitted,
            machine=machine_of_host(bundle.host),
            prices=load_prices(prices),
            grid=choose_grid(grid, bundle),
            as_json=as_json,
        )

    guarded(run)


# The evaluation against the simulator (needs the sim extra when it runs, not to be listed).
from bench.command import bench as _bench  # noqa: E402

app.command("bench")(_bench)

from cli.tiering import tiering_app  # noqa: E402

app.add_typer(tiering_app, name="tiering")

from cli.planner import plan_app  # noqa: E402

app.add_typer(plan_app, name="plan")

from cli.get import get_app  # noqa: E402

app.add_typer(get_app, name="get")

from cli.verify import verify_app  # noqa: E402

app.add_typer(verify_app, name="verify")

# The service's commands need the server extra; a node install (the agent) has only the model.
if importlib.util.find_spec("fastapi") is not None:
    try:
        from cli.server import db_app, server_app, token_app
    except ValidationError as exc:  # the service's modules read TMC_* settings on import
        typer.echo(f"error: {settings_problem(exc)}", err=True)
        sys.exit(2)

    app.registered_commands += server_app.registered_commands
    app.add_typer(token_app, name="token")
    app.add_typer(db_app, name="db")


if __name__ == "__main__":  # pragma: no cover
    app()
