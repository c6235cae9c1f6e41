"""`tmc plan capacity` and `tmc plan rebalance`: the OR-Tools planners from the command line.

Both print a dry-run plan; nothing is changed. The inputs are the API's request bodies
(`POST /v1/planner/...`), or, for capacity, profile bundles with their arrival rates; a
rebalance of the live cluster (`--live`) asks the running service, which reads its ledger.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from cli.common import JsonOpt, fail, guarded, load_bundle
from cli.get import DEFAULT_SERVER, Api, ServerOpt, TokenOpt
from model import fit, machine_of_host, recommend
from model.planning_requests import (
    CapacityIn,
    LiveRebalanceIn,
    RebalanceIn,
    capacity_plan,
    class_from_recommendation,
    rebalance_plan,
)
from model.price_profiles import price_profile

plan_app = typer.Typer(
    help="OR-Tools plans: machines for a workload mix, pod moves that free machines (dry runs).",
    no_args_is_help=True,
)


@plan_app.command("capacity")
def capacity_cmd(
    request: Annotated[
        Path | None, typer.Argument(help="A capacity request JSON (the API's body).")
    ] = None,
    profile: Annotated[
        list[Path] | None,
        typer.Option("--profile", "-p", help="Profile bundle of one class (repeat per class)."),
    ] = None,
    rate: Annotated[
        list[float] | None,
        typer.Option("--rate", help="Arrivals per hour of the class (one per --profile)."),
    ] = None,
    prices: Annotated[str, typer.Option(help="Shipped price profile: gce-n1 | msv2-lsq.")] = (
        "gce-n1"
    ),
    threshold: Annotated[float, typer.Option(help="Algorithm 1's T for each class.")] = 0.025,
    as_json: JsonOpt = False,
) -> None:
    """Which machine kind (Fig. 9's family) and how many machines cost least for a mix."""

    def run() -> None:
        if request is not None:
            body = CapacityIn.model_validate_json(request.read_bytes())
        else:
            if not profile or not rate or len(profile) != len(rate):
                fail("give a request file, or one --rate per --profile")
            unit_prices = price_profile(prices)
            classes = []
            for path, r in zip(profile, rate, strict=True):
                bundle = load_bundle(path)
                rec = recommend(
                    fit(bundle),
                    machine=machine_of_host(bundle.host),
                    prices=unit_prices,
                    threshold=threshold,
                )
                classes.append(class_from_recommendation(bundle.workload.name, r, rec))
            body = CapacityIn(classes=classes, prices=prices)
        out = capacity_plan(body)
        if as_json:
            sys.stdout.write(json.dumps(out, indent=2) + "\n")
            return
        _render_capacity(out)

    guarded(run)


def _render_capacity(out: dict[str, Any]) -> None:
    table = Table(
        title=f"Capacity plan (whole machines, room for the {out['peak_quantile']:g} quantile of"
        f" VMs at once, fill {out['fill']:g}, prices {out['price_profile']})"
    )
    for col in ("kind", "machines", "greedy", "bound", "status", "binds", "USD/h"):
        table.add_column(col)
    for k in sorted(out["kinds"], key=lambda k: (k["total_hour"] is None, k["total_hour"])):
        mark = " *" if k["kind"] == out["best"]["kind"] else ""
        total = "-" if k["total_hour"] is None else f"{k['total_hour']:.2f}"
        table.add_row(
            k["kind"] + mark,
            str(k["machines"]),
            str(k["greedy_machines"]),
            str(k["lower_bound"]),
            k["status"],
            k["binding"],
            total,
        )
    Console().print(table)
    if out["best"]["note"]:
        Console().print(f"{out['best']['kind']}: {out['best']['note']}")


@plan_app.command("rebalance")
def rebalance_cmd(
    cluster: Annotated[
        Path | None,
        typer.Argument(help="A rebalance request JSON (the API's body); omit with --live."),
    ] = None,
    live: Annotated[
        bool, typer.Option("--live", help="Plan the cluster in the running service's ledger.")
    ] = False,
    node: Annotated[
        list[str] | None, typer.Option("--node", help="--live: plan only these nodes.")
    ] = None,
    pin_namespace: Annotated[
        list[str] | None,
        typer.Option("--pin-namespace", help="--live: pods in this namespace never move."),
    ] = None,
    max_moves: Annotated[int | None, typer.Option(min=0, max=5000)] = None,
    time_limit: Annotated[float, typer.Option(min=0.1, max=20.0, help="CP-SAT seconds.")] = 5.0,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Which pods to move where to free machines (CAT runs stay contiguous); a dry run."""

    def run() -> None:
        if live == (cluster is not None):
            fail("give a rebalance request file, or --live for the service's cluster (not both)")
        if cluster is not None:
            body = RebalanceIn.model_validate_json(cluster.read_bytes())
            out = rebalance_plan(body.model_copy(update={"time_limit_seconds": time_limit}))
        else:
            request = LiveRebalanceIn(
                nodes=node or None,
                pinned_namespaces=pin_namespace or [],
                max_moves=max_moves,
                time_limit_seconds=time_limit,
            )
            api = Api(server, token, timeout=time_limit + 30.0)
            out = api.post("/v1/planner/rebalance/live", request.model_dump())
        if as_json:
            sys.stdout.write(json.dumps(out, indent=2) + "\n")
            return
        plan = out["plan"]
        console = Console()
        console.print(
            f"machines in use {plan['nodes_before']} -> {plan['nodes_after']}"
            f" ({plan['status']}); greedy: {out['greedy']['nodes_after']}"
        )
        for m in plan["moves"]:
            console.print(
                f"move {m['pod']}: {m['source']} -> {m['target']}, ways from {m['way_start']}"
            )
        for m in plan["remaps"]:
            console.print(f"re-lay {m['pod']} on {m['source']}: ways from {m['way_start']}")
        if plan["freed"]:
            console.print("freed: " + ", ".join(plan["freed"]))
        for s in out.get("cluster", {}).get("skipped", []):
            console.print(f"left out {s['pod']} on {s['node']}: {s['reason']}")

    guarded(run)
