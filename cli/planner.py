"""`tmc plan capacity`, `shadow-prices` and `rebalance`: the OR-Tools planners from the command
line.

Both print a dry-run plan; nothing is changed. The inputs are the API's request bodies
(`POST /v1/planner/...`), or, for capacity, profile bundles with their arrival rates and the
memory size their VMs run at; a rebalance of the live cluster (`--live`) asks the running
service, which reads its ledger.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from rich.console import Console
from rich.table import Table

from cli.common import JsonOpt, fail, from_file, guarded, load_bundle, parse_memory
from cli.get import DEFAULT_SERVER, Api, ServerOpt, TokenOpt
from cli.render import money, size
from model import PriceProfile, fit, machine_of_host, recommend
from model.planning_requests import (
    CapacityIn,
    KindIn,
    LiveRebalanceIn,
    RebalanceIn,
    ShadowPricesIn,
    capacity_plan,
    class_from_recommendation,
    rebalance_plan,
    shadow_price_plan,
)
from model.price_profiles import price_profile
from model.recommendation import vcpus_checked

# The shipped price profiles by their one name (the key every answer shows), and the source the
# planner's request names them by.
PRICE_SOURCES = {"paper-3dxp@1": "gce-n1", "msv2-lsq@1": "msv2-lsq"}
DEFAULT_FILL = float(CapacityIn.model_fields["fill"].default)
MAX_KINDS = 16

LEGEND = """kind       24G-128P: 24 GiB of DRAM and 128 GiB of slow memory, P when it is a pool shared by a
           rack of 8 machines (each holds an eighth), L when it is the machine's own; without
           --kinds or --host-kinds, Fig. 9's family (the TMC paper's twelve: 24 or 48 GiB DRAM with
           128L, 256L, 128P, 384P, 640P or 896P, 12 CPUs, one socket of 48 LLC ways in 12 MiB,
           local slow memory Optane, pools CXL) is compared; a profile's ways are carried over
           to a kind with another cache by its bytes, as the lines above the legend say
machines   whole machines of the kind the plan needs (* the cheapest kind)
greedy     what first-fit decreasing needs with every workload in its cheapest option
bound      no plan of these options needs fewer machines (CP-SAT's bound)
binds      the resource that fills first
per hour   the machines' price per hour at the price profile; tenants pay: what the workloads'
           runs cost their tenants per hour
sized at   the memory each class's VMs are planned, priced and packed at (their options' DRAM
           and slow bytes add up to it): --memory, else the profile's traced footprint"""


class KindsFile(BaseModel):
    """`--kinds FILE`: the machine kinds to compare, as a list or under "kinds"."""

    kinds: list[KindIn] = Field(min_length=1, max_length=MAX_KINDS)


def parse_kinds(data: bytes) -> list[KindIn]:
    if data.lstrip().startswith(b"["):
        return KindsFile(kinds=TypeAdapter(list[KindIn]).validate_json(data)).kinds
    return KindsFile.model_validate_json(data).kinds


def kinds_of_cluster(api: Api) -> list[KindIn]:
    """The service's registered host kinds (`GET /v1/cluster/host-kinds`) as machine kinds; a
    pooled kind's slow memory is the machine's share, so a rack of one holds exactly it."""
    registered = api.get("/v1/cluster/host-kinds")
    if not registered:
        fail(
            "the service has no registered host kinds (register one with PUT "
            "/v1/cluster/host-kinds, or give --kinds FILE)"
        )
    if len(registered) > MAX_KINDS:
        fail(f"the service has {len(registered)} host kinds; give at most {MAX_KINDS} with --kinds")
    kinds = []
    for k in registered:
        m = k["machine"]
        if len(k["name"]) > 64:
            fail(f"host kind {k['name'][:20]}...: longer than 64 characters; name it in --kinds")
        pooled = bool(m.get("slow_pooled"))
        # A kind states its sockets, one socket's LLC size and its slow tier when it was
        # registered with them; a pooled kind's slow memory is CXL's even when not stated.
        tier = k.get("slow_tier") or ("cxl_pool" if pooled and m["slow_bytes"] else None)
        try:
            kinds.append(
                KindIn(
                    name=k["name"],
                    cpus=m["cpus"],
                    dram_bytes=m["dram_bytes"],
                    llc_ways=m["llc_ways"],
                    local_slow_bytes=0 if pooled else m["slow_bytes"],
                    pool_bytes=m["slow_bytes"] if pooled else 0,
                    rack_nodes=1,
                    sockets=k.get("sockets") or 1,
                    llc_size_bytes=k.get("llc_size_bytes"),
                    slow_tier=tier,
                )
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "kind"
            fail(f"host kind {k['name']}: {where}: {first['msg']}; give it in --kinds instead")
    return kinds


def per_class(given: list[int] | None, classes: int, option: str) -> list[int | None]:
    """An option given once for all --profile classes, or once per class in their order; None
    for each without it."""
    if not given:
        return [None] * classes
    if len(given) not in (1, classes):
        fail(
            f"{option}: given {len(given)} times for {classes} --profile; give one for all, or"
            " one per --profile in their order"
        )
    values: list[int | None] = list(given)
    return values * classes if len(values) == 1 else values


def class_sizes(memory: list[str] | None, classes: int) -> list[int | None]:
    """The memory size each --profile's class is planned at: its own --memory, the one --memory
    given for all, or None (the profile's traced footprint) without any."""
    parsed = None if memory is None else [parse_memory(text) for text in memory]
    return per_class(parsed, classes, "--memory")


def class_vcpus(vcpus: list[int] | None, classes: int) -> list[int | None]:
    """The vCPUs each --profile's class is planned with: its own --vcpus, the one given for all,
    or None (the profile's) without any."""
    for n in vcpus or ():
        vcpus_checked(n)  # raises on a count out of range
    return per_class(vcpus, classes, "--vcpus")


def price_source(prices: str) -> str | None:
    """The shipped source a price profile's name means, or None for one the service stores."""
    if prices in PRICE_SOURCES:
        return PRICE_SOURCES[prices]
    if prices in PRICE_SOURCES.values():
        return prices
    if "@" not in prices:
        fail(
            f"--prices {prices!r}: give {' or '.join(PRICE_SOURCES)} (shipped), or a price "
            "profile the service stores by its name@version (tmc get prices is GET "
            "/v1/price-profiles)"
        )
    return None


def stored_prices(api: Api, key: str) -> PriceProfile:
    """A price profile the service stores (`GET /v1/price-profiles/{key}`)."""
    found = api.get("/v1/price-profiles/" + urllib.parse.quote(key, safe=""))
    return PriceProfile.model_validate(found["profile"])


plan_app = typer.Typer(
    help="OR-Tools plans: machines for a workload mix, pod moves that free machines (dry runs).",
    no_args_is_help=True,
)


from cli.patterns import patterns_app  # noqa: E402

plan_app.add_typer(patterns_app, name="patterns")


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
    prices: Annotated[
        str,
        typer.Option(
            help="Price profile: paper-3dxp@1 (the paper's method on GCE N1 list prices; also "
            "called gce-n1) | msv2-lsq@1 (Azure Msv2 by least squares; msv2-lsq) | any "
            "name@version the service stores (GET /v1/price-profiles): the service then plans, "
            "with --server/--token (operator or scheduler)."
        ),
    ] = "paper-3dxp@1",
    kinds: Annotated[
        Path | None,
        typer.Option(
            "--kinds",
            help="Your machine kinds, a JSON list of {name, cpus, dram_bytes, local_slow_bytes "
            "or pool_bytes (with rack_nodes), llc_ways (one socket's), and optionally sockets, "
            "llc_size_bytes (one socket's), slow_tier (none|optane|cxl_local|cxl_pool)}. "
            "Default: Fig. 9's family.",
        ),
    ] = None,
    host_kinds: Annotated[
        bool,
        typer.Option(
            "--host-kinds",
            help="Plan for the running service's registered host kinds, with the sockets, LLC"
            " size and slow tier each states (GET /v1/cluster/host-kinds).",
        ),
    ] = False,
    memory: Annotated[
        list[str] | None,
        typer.Option(
            "--memory",
            metavar="SIZE",
            help="The memory size the class's VMs or pods run at, e.g. 4Gi, 512Mi or 4294967296"
            " bytes: one per --profile, or one for all. Options, prices and patterns are at it."
            " Default: each profile's traced footprint, only the program's shape on a small"
            " input.",
        ),
    ] = None,
    vcpus: Annotated[
        list[int] | None,
        typer.Option(
            "--vcpus",
            metavar="N",
            help="The vCPUs the class's VMs or pods run with: one per --profile, or one for all."
            " Options and prices are with them. Default: each profile's.",
        ),
    ] = None,
    fill: Annotated[
        float,
        typer.Option(min=0.1, max=1.0, help="Share of each machine's resources a plan may use."),
    ] = DEFAULT_FILL,
    threshold: Annotated[float, typer.Option(help="Algorithm 1's T for each class.")] = 0.025,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Which machine kind and how many machines cost least for a mix (legend below the table)."""

    def run() -> None:
        if kinds is not None and host_kinds:
            fail("give --kinds FILE or --host-kinds, not both")
        sizes: dict[str, dict[str, Any]] = {}
        if request is not None:
            if memory or vcpus:
                fail(
                    "--memory and --vcpus size the classes of --profile; a request file's options"
                    " hold their own vCPUs, DRAM and slow bytes"
                )
            body = from_file(request, CapacityIn.model_validate_json)
        else:
            if not profile or not rate or len(profile) != len(rate):
                fail("give a request file, or one --rate per --profile")
            deployed = class_sizes(memory, len(profile))
            cpus = class_vcpus(vcpus, len(profile))
            source = price_source(prices)
            api = Api(server, token, timeout=60.0)
            unit_prices = price_profile(source) if source else stored_prices(api, prices)
            chosen_kinds = None
            if kinds is not None:
                chosen_kinds = from_file(kinds, parse_kinds)
            elif host_kinds:
                chosen_kinds = kinds_of_cluster(api)
            classes = []
            for path, r, memory_bytes, class_cpus in zip(
                profile, rate, deployed, cpus, strict=True
            ):
                bundle = load_bundle(path)
                rec = recommend(
                    fit(bundle),
                    machine=machine_of_host(bundle.host),
                    prices=unit_prices,
                    threshold=threshold,
                    memory_bytes=memory_bytes,
                    vcpus=class_cpus,
                )
                classes.append(
                    class_from_recommendation(bundle.workload.name, r, rec, host=bundle.host)
                )
                sizes[bundle.workload.name] = {
                    "memory_bytes": rec.memory_bytes,
                    "sized_from": rec.sized_from,
                    "footprint_bytes": rec.footprint_bytes,
                    "vcpus": rec.vcpus,
                    "vcpus_from": "profile" if class_cpus is None else "caller",
                }
            if source is None:
                # Priced by a profile only the service has: the service plans (a dry run).
                asked = CapacityIn(classes=classes, kinds=chosen_kinds, fill=fill)
                out = api.post(
                    "/v1/planner/capacity",
                    {**asked.model_dump(exclude={"prices"}), "price_profile": prices},
                )
                _show({**out, "class_memory": sizes}, as_json, unit_prices.currency)
                return
            body = CapacityIn(classes=classes, prices=source, kinds=chosen_kinds, fill=fill)
        out = capacity_plan(body)
        _show(
            {**out, "class_memory": sizes} if sizes else out,
            as_json,
            price_profile(body.prices).currency,
        )

    guarded(run)


def _show(out: dict[str, Any], as_json: bool, currency: str) -> None:
    if as_json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    _render_capacity(out, currency)


def _render_capacity(out: dict[str, Any], currency: str) -> None:
    table = Table(
        title=f"Capacity plan (whole machines, room for the {out['peak_quantile']:g} quantile of"
        f" VMs at once, fill {out['fill']:g}, prices {out['price_profile']})"
    )
    for col in ("kind", "machines", "greedy", "bound", "status", "binds", "per hour"):
        table.add_column(col)
    table.add_column("tenants pay")
    # The size each class's VMs are planned at: the options' DRAM and slow bytes add up to it.
    sized = [
        f"{name} {size(c['memory_bytes'])}"
        + (" (--memory)" if c["sized_from"] != "profile" else " (its traced footprint)")
        + (f", {c['vcpus']} vCPUs (--vcpus)" if c.get("vcpus_from") == "caller" else "")
        for name, c in out.get("class_memory", {}).items()
    ]
    if sized:
        table.caption = "VMs sized at: " + ", ".join(sized)

    def per_hour(x: float | None) -> str:
        return "cannot host" if x is None else money(x, currency) + "/h"

    def count(n: int) -> str:
        return "-" if n < 0 else str(n)

    kinds = sorted(out["kinds"], key=lambda k: (k["total_hour"] is None, k["total_hour"]))
    for k in kinds:
        mark = " *" if k["kind"] == out["best"]["kind"] else ""
        table.add_row(
            k["kind"] + mark,
            count(k["machines"]),
            count(k["greedy_machines"]),
            count(k["lower_bound"]) if k["status"] != "infeasible" else "-",
            k["status"],
            k["binding"],
            per_hour(k["total_hour"]),
            per_hour(k["tenant_hour"]),
        )
    console = Console()
    console.print(table)
    if out["best"]["note"]:
        console.print(f"{out['best']['kind']}: {out['best']['note']}")
    # Why each kind that cannot host the mix cannot: the table alone says only that.
    for k in kinds:
        if k["status"] == "infeasible" and k["kind"] != out["best"]["kind"] and k["note"]:
            console.print(f"{k['kind']} cannot host: {k['note']}", soft_wrap=True)
    # What was carried over from the profiles' hosts to each kind, or is doubtful there.
    for k in kinds:
        for reason in k.get("reasons", []):
            console.print(f"{k['kind']}: {reason}", soft_wrap=True, markup=False)
    typer.echo(LEGEND)


@plan_app.command("shadow-prices")
def shadow_prices_cmd(
    request: Annotated[
        Path,
        typer.Argument(
            help="A request JSON: {classes (as for capacity), kind (one machine kind), prices,"
            " blend}."
        ),
    ],
    prices: Annotated[
        str | None,
        typer.Option(
            help="List prices as a profile the service stores (name@version); the service then"
            " answers, with --server/--token. Default: the request's shipped `prices`."
        ),
    ] = None,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What each resource is worth to the mix's packing (the LP's duals), and the list, shadow
    and blended prices to recommend in; a dry run."""

    def run() -> None:
        body = from_file(request, ShadowPricesIn.model_validate_json)
        if prices is not None and price_source(prices) is None:
            api = Api(server, token, timeout=30.0)
            out = api.post(
                "/v1/planner/shadow-prices", {**body.model_dump(), "price_profile": prices}
            )
        else:
            shipped = (
                body if prices is None else body.model_copy(update={"prices": price_source(prices)})
            )
            out = shadow_price_plan(shipped)
        if as_json:
            sys.stdout.write(json.dumps(out, indent=2) + "\n")
            return
        currencies = out["currencies"]
        unit = currencies["list"]["currency"]
        table = Table(
            title=f"Shadow prices of the mix on {out['kind']} (list prices {out['price_profile']};"
            f" the packing needs {out['machines']:.1f} machines at least)"
        )
        for col in ("resource", "list", "shadow", "blend"):
            table.add_column(col)
        fields = (
            ("vCPU hour", "vcpu_hour"),
            ("DRAM GiB hour", "dram_gib_hour"),
            ("slow GiB hour", "slow_gib_hour"),
            ("LLC way hour", "llc_way_hour"),
        )
        for label, field in fields:
            table.add_row(
                label, *(money(currencies[c][field], unit) for c in ("list", "shadow", "blend"))
            )
        console = Console()
        console.print(table)
        console.print(
            f"binds: {', '.join(out['binding']) or 'nothing'}. To recommend in the blend, store it:"
            " POST /v1/price-profiles with its fields, then use it by name@version."
        )

    guarded(run)


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
            body = from_file(cluster, RebalanceIn.model_validate_json)
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
