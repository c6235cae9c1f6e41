"""`tmc verify record|list|delete`: verification runs, the measured runs of a workload in a
configuration that correct its recommendations, over the service's HTTP API.

A recommendation for a cost objective names the run it wants next (`verification` in
`tmc get decisions ID`); a run made outside the cluster is recorded here with an operator's token
(the agent records the runs of the pods tmc placed by itself). The server and token options are
those of `tmc get`.
"""

from __future__ import annotations

import urllib.parse
from typing import Annotated, Any

import typer

from cli.common import fail, tmc_command
from cli.get import DEFAULT_SERVER, Api, OutputOpt, ServerOpt, TimeoutOpt, TokenOpt, emit
from cli.render import OutputFormat, print_rows, seconds, when

verify_app = typer.Typer(
    help="Record, list and delete a workload's verification runs (measured runs that correct "
    "its recommendations).",
    no_args_is_help=True,
)

WorkloadArg = Annotated[str, typer.Argument(metavar="WORKLOAD", help="The workload's name or id.")]


def runs_path(workload: str) -> str:
    return f"/v1/workloads/{urllib.parse.quote(workload, safe='')}/verification-runs"


def run_row(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": run["run_id"],
        "slow_ratio": f"{run['slow_ratio']:.2f}",
        "llc_ways": run["llc_ways"],
        "time": seconds(run["seconds"]),
        "recorded": when(run["created_at"]),
    }


@verify_app.command("record")
def record_cmd(
    workload: WorkloadArg,
    run_id: Annotated[
        str,
        typer.Option(
            help="Your id for the run (a pod's uid, a job's name): recording it again is a no-op."
        ),
    ],
    slow_ratio: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of the memory that was slow (0-1).")
    ],
    llc_ways: Annotated[int, typer.Option(min=1, max=64, help="LLC ways the run had.")],
    run_seconds: Annotated[
        float,
        typer.Option(
            "--seconds",
            help="Time of the whole run, above 0, on the profile's clock: the wall time for a"
            " hardware profile; for a trace-backend profile the host model's time, which"
            " `tmc-agent replay` prints (the real program's wall time is another clock).",
        ),
    ],
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
    output: OutputOpt = OutputFormat.table,
) -> None:
    """Record a measured run of WORKLOAD (an operator's token; an agent records its pods' runs)."""
    if not run_seconds > 0:
        fail(f"--seconds {run_seconds:g}: a run's wall time must be above 0 seconds")
    body = {
        "run_id": run_id,
        "slow_ratio": slow_ratio,
        "llc_ways": llc_ways,
        "seconds": run_seconds,
    }
    api = Api(server=server, token=token, timeout=timeout)
    status, stored = api.exchange("POST", runs_path(workload), {}, body)
    if emit(stored, output):
        return
    what = "recorded" if status == 201 else "already recorded with these values, unchanged:"
    typer.echo(
        f"{what} run {stored['run_id']} of {stored['workload']}: slow ratio "
        f"{stored['slow_ratio']:.2f}, {stored['llc_ways']} LLC ways, "
        f"{seconds(stored['seconds'])} ({when(stored['created_at'])})"
    )


@verify_app.command("list")
def list_cmd(
    workload: WorkloadArg,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
    output: OutputOpt = OutputFormat.table,
) -> None:
    """The runs WORKLOAD's recommendations are corrected with now (its live profile's), oldest
    first."""
    runs = Api(server=server, token=token, timeout=timeout).get(runs_path(workload))
    if emit(runs, output):
        return
    if not runs:
        tmc = tmc_command()
        typer.echo(
            f"No verification runs of {workload} yet: a decision for a cost objective names the "
            f"run to make next (`{tmc} get decisions ID`); record one with `{tmc} verify record "
            f"{workload} --run-id ID --slow-ratio R --llc-ways W --seconds S`.",
            err=True,
        )
        return
    cols = ["run_id", "slow_ratio", "llc_ways", "time", "recorded"]
    print_rows([run_row(r) for r in runs], cols, output, title="Verification runs")


@verify_app.command("delete")
def delete_cmd(
    workload: WorkloadArg,
    run_id: Annotated[str, typer.Argument(metavar="RUN-ID", help="The run's id.")],
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Delete a run (an operator's token): it no longer corrects WORKLOAD's recommendations."""
    path = runs_path(workload) + "/" + urllib.parse.quote(run_id, safe="")
    Api(server=server, token=token, timeout=timeout).exchange("DELETE", path, {}, None)
    typer.echo(f"deleted run {run_id} of {workload}")
