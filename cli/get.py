"""`tmc get nodes|placements|decisions|workloads`: the service's state the way `kubectl get`
shows a cluster's, read over the HTTP API with a viewer token.

A table by default (readable units), `-o json|yaml` for every field as the API sends it.
The server and token come from `--server`/`TMC_SERVER` and `--token`/`TMC_TOKEN`; every request
has a timeout. Only the standard library speaks HTTP here, so that a node's install (no server
extra) has these commands too.
"""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from cli.common import fail, tmc_command
from cli.render import OutputFormat, money, print_rows, render_recommendation, size
from model import Recommendation

get_app = typer.Typer(
    help="Show nodes, placements per pod, decisions and workloads from a running service.",
    no_args_is_help=True,
)

DEFAULT_SERVER = "http://127.0.0.1:8000"
MAX_RESPONSE_BYTES = 64 << 20
# A paged list is read LIST_PAGE rows at a time, at most MAX_PAGES pages (a million rows).
LIST_PAGE = 1000
MAX_PAGES = 1000

ServerOpt = Annotated[
    str,
    typer.Option("--server", envvar="TMC_SERVER", show_envvar=True, help="The tmc API's base URL."),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="TMC_TOKEN",
        show_envvar=True,
        show_default=False,
        help="A viewer (or operator) token.",
    ),
]
TimeoutOpt = Annotated[
    float,
    typer.Option(min=0.1, max=300, help="Seconds to wait for the API, per request."),
]
OutputOpt = Annotated[OutputFormat, typer.Option("--output", "-o", help="table | json | yaml")]


@dataclass(frozen=True)
class Api:
    server: str
    token: str | None
    timeout: float

    def get(self, path: str, **query: str | None) -> Any:
        params = {k: v for k, v in query.items() if v is not None}
        return self.exchange("GET", path, params, None)[1]

    def get_all(self, path: str, **query: str | None) -> list[Any]:
        """Every page of a paged list, following each page's `X-Next-Cursor`."""
        params = {k: v for k, v in query.items() if v is not None}
        params["limit"] = str(LIST_PAGE)
        out: list[Any] = []
        for _ in range(MAX_PAGES):
            _, page, cursor = self._send("GET", path, params, None)
            out.extend(page or [])
            if cursor is None:
                return out
            params["cursor"] = cursor
        fail(f"{path} has more than {MAX_PAGES * LIST_PAGE} rows: filter it (see --help)")

    def post(self, path: str, body: object) -> Any:
        """A JSON request body, e.g. a planner's dry run (the token needs the operator's or
        scheduler's role)."""
        return self.exchange("POST", path, {}, body)[1]

    def exchange(
        self, method: str, path: str, params: dict[str, str], body: object | None
    ) -> tuple[int, Any]:
        """One request; the status and the decoded JSON answer (None for an empty one, as a
        DELETE's 204). A refusal or an unreachable server ends the command with one line."""
        status, answer, _ = self._send(method, path, params, body)
        return status, answer

    def _send(
        self, method: str, path: str, params: dict[str, str], body: object | None
    ) -> tuple[int, Any, str | None]:
        """`exchange`, and the next page's cursor when the answer is one page of a list."""
        if not self.token:
            fail(
                "no token: set TMC_TOKEN or give --token (a viewer token: "
                f"{tmc_command()} token create --role viewer)"
            )
        url = self.server.rstrip("/") + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            fail(f"--server {self.server!r} is not an http(s) URL (e.g. {DEFAULT_SERVER})")
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=payload, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status = int(response.status)
                cursor = response.headers.get("X-Next-Cursor")
                answer = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            fail(self._refusal(exc))
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            fail(
                f"cannot reach the tmc API at {self.server}: {reason} (start it with ./dev start "
                "or tmc serve, or point --server / TMC_SERVER at it)"
            )
        if len(answer) > MAX_RESPONSE_BYTES:
            fail(f"the API's answer is larger than {MAX_RESPONSE_BYTES} bytes")
        if not answer.strip():
            return status, None, cursor
        try:
            return status, json.loads(answer), cursor
        except json.JSONDecodeError:
            fail(f"{self.server} did not answer JSON: is it the tmc API? (check --server)")

    def _refusal(self, exc: urllib.error.HTTPError) -> str:
        detail = ""
        with contextlib.suppress(ValueError, AttributeError, OSError):
            detail = str(json.loads(exc.read(65536)).get("detail") or "")
        if exc.code == 401:
            return (
                f"the API refused the token: {detail or 'unknown or revoked token'} (set TMC_TOKEN "
                f"to a live token; see {tmc_command()} token list, {tmc_command()} token create "
                "--role viewer)"
            )
        if exc.code == 403:
            return f"the token's role may not do this: {detail} (use a viewer or operator token)"
        if exc.code == 404:
            return (
                f"{detail or 'not found'} (see {tmc_command()} get --help for what can be listed)"
            )
        if exc.code == 409:
            # A conflict with what the service knows (no configuration meets the objective, a
            # name taken): the values given may be valid, so the detail is the answer.
            return f"the API could not do this: {detail or exc.reason}"
        if exc.code == 422:
            return f"the API refused the request: {detail or exc.reason} (fix the values given)"
        return f"the API answered {exc.code}: {detail or exc.reason} (see the service's log)"


def _api(server: str, token: str | None, timeout: float) -> Api:
    return Api(server=server, token=token, timeout=timeout)


def emit(data: Any, output: OutputFormat) -> bool:
    """Print `data` as JSON or YAML when asked; False when a table is wanted."""
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return True
    if output is OutputFormat.yaml:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        return True
    return False


def ways_of(mask: int) -> str:
    """A CAT mask as the ways it holds: 12 ways (0-11)."""
    if not mask:
        return "-"
    bits = [i for i in range(mask.bit_length()) if mask >> i & 1]
    return f"{len(bits)} ({bits[0]}-{bits[-1]})" if len(bits) > 1 else f"1 ({bits[0]})"


def held_ways(placement: dict[str, Any]) -> str:
    """The LLC ways a placement holds: its mask's run, or (a pod of the DRA door, no mask) the
    count, whose run its node chose."""
    mask = placement.get("llc_mask")
    if mask:
        return ways_of(mask)
    count = int(placement.get("reserved_llc_ways") or 0)
    return f"{count} (run chosen by the node)" if count else "-"


def node_ways(node: dict[str, Any]) -> str:
    """A node's reserved LLC ways over its ways: its masks' and its DRA claims' counts."""
    reserved = node.get("reserved_llc_ways", bin(node["llc_mask"]).count("1"))
    counted = int(node.get("counted_llc_ways") or 0)
    held = f"{reserved}/{node['llc_ways']}"
    return f"{held} ({counted} run by the node)" if counted else held


@get_app.command("nodes")
def get_nodes(
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
    output: OutputOpt = OutputFormat.table,
) -> None:
    """Nodes with their tiered capacity, what is reserved on each, and how many pods hold it."""
    api = _api(server, token, timeout)
    nodes = api.get_all("/v1/cluster/nodes")
    if emit(nodes, output):
        return
    pods: dict[str, int] = {}
    for p in api.get_all("/v1/placements"):
        pods[p["node"]] = pods.get(p["node"], 0) + 1
    rows = [
        {
            "name": n["name"],
            "ready": "yes" if n["ready"] else "no",
            "pods": pods.get(n["name"], 0),
            "cpu": f"{n['reserved_cpus']}/{n['cpus']}",
            "dram": f"{size(n['reserved_dram_bytes'])} / {size(n['dram_bytes'])}",
            "slow": f"{size(n['reserved_slow_bytes'])} / "
            + (f"pool {n['pool']}" if n["pool"] else size(n["slow_bytes"])),
            "llc_ways": node_ways(n),
            "host_kind": n["host_kind"],
        }
        for n in nodes
    ]
    cols = ["name", "ready", "pods", "cpu", "dram", "slow", "llc_ways", "host_kind"]
    print_rows(rows, cols, output, title="Nodes")


@get_app.command("placements")
def get_placements(
    pod: Annotated[
        str | None,
        typer.Argument(help="NAMESPACE/POD: one pod, with its predicted slowdown and plan."),
    ] = None,
    node: Annotated[str | None, typer.Option(help="Only the pods on this node.")] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only this namespace.")
    ] = None,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
    output: OutputOpt = OutputFormat.table,
) -> None:
    """What each pod holds on its node (DRAM, slow memory, LLC ways) and the decision behind it."""
    api = _api(server, token, timeout)
    if pod is not None:
        ns, sep, name = pod.partition("/")
        if not sep or not ns or not name:
            fail(f"{pod!r}: name one pod as NAMESPACE/POD (e.g. default/web-0)")
        path = "/v1/placements/" + urllib.parse.quote(ns, safe="") + "/"
        detail = api.get(path + urllib.parse.quote(name, safe=""))
        if not emit(detail, output):
            _print_placement(detail)
        return
    found = api.get_all("/v1/placements", node=node, namespace=namespace)
    if emit(found, output):
        return
    rows = [
        {
            "pod": f"{p['namespace']}/{p['pod']}",
            "node": p["node"],
            "workload": p["workload"],
            "objective": p["objective"],
            "slow_ratio": p["slow_ratio"],
            "vcpus": p["vcpus"],
            "dram": size(p["dram_bytes"]),
            "slow": size(p["slow_bytes"]) + (" (pool)" if p["slow_from_pool"] else ""),
            "llc_ways": held_ways(p),
        }
        for p in found
    ]
    cols = ["pod", "node", "workload", "objective", "slow_ratio"]
    cols += ["vcpus", "dram", "slow", "llc_ways"]
    print_rows(rows, cols, output, title="Placements", cells={"slow_ratio": lambda r: f"{r:.2f}"})


def _print_placement(p: dict[str, Any]) -> None:
    console = Console()
    table = Table(
        title=f"Placement of {p['namespace']}/{p['pod']}", show_header=False, title_justify="left"
    )
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("node", p["node"])
    table.add_row("workload", p["workload"] or "- (placed without a decision)")
    table.add_row("objective", p["objective"] or "-")
    table.add_row("vCPUs", str(p["vcpus"]))
    table.add_row("DRAM", size(p["dram_bytes"]))
    table.add_row("slow memory", size(p["slow_bytes"]) + (" (pool)" if p["slow_from_pool"] else ""))
    table.add_row("LLC ways", held_ways(p))
    if p["predicted_slowdown"] is not None:
        table.add_row("predicted slowdown", f"{p['predicted_slowdown'] * 100:+.1f}% vs fastmax")
        table.add_row("cost of one run", money(p["cost"], p["currency"]))
    table.add_row("decision", p["recommendation_id"] or "-")
    console.print(table)
    if p["plan"]:
        plan = Table(title="Per-structure plan", title_justify="left")
        for col in ("tag", "fast", "slow"):
            plan.add_column(col, justify="right")
        for s in p["plan"]:
            plan.add_row(s["tag"], size(s["fast_bytes"]), size(s["slow_bytes"]))
        console.print(plan)


@get_app.command("decisions")
def get_decisions(
    decision: Annotated[
        str | None, typer.Argument(help="One decision's id: the whole recommendation.")
    ] = None,
    workload: Annotated[str | None, typer.Option(help="Only this workload's.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 50,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
    output: OutputOpt = OutputFormat.table,
) -> None:
    """The decision log, newest first: workload, objective, configuration chosen."""
    api = _api(server, token, timeout)
    if decision is not None:
        found = api.get("/v1/recommendations/" + urllib.parse.quote(decision, safe=""))
        if not emit(found, output):
            rec = Recommendation.model_validate(found["recommendation"])
            render_recommendation(Console(), rec)
        return
    listed = api.get("/v1/recommendations", workload=workload, limit=str(limit))
    if emit(listed, output):
        return
    names = {w["id"]: w["name"] for w in api.get("/v1/workloads", limit="500")}
    rows = [
        {
            "id": d["id"],
            "created": d["created_at"][:19].replace("T", " "),
            "workload": names.get(d["workload_id"], d["workload_id"]),
            "objective": d["objective"],
            "threshold": f"{d['threshold']:.1%}",
            "slow_ratio": f"{d['slow_ratio']:.2f}",
            "llc_ways": d["llc_ways"],
            "utilization": d["utilization_source"],
        }
        for d in listed
    ]
    cols = ["id", "created", "workload", "objective", "threshold", "slow_ratio", "llc_ways"]
    print_rows(rows, [*cols, "utilization"], output, title="Decisions")


@get_app.command("workloads")
def get_workloads(
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
    output: OutputOpt = OutputFormat.table,
) -> None:
    """Workloads with their latest profile's state and host kind, and their latest
    recommendation (slow ratio, LLC ways, objective)."""
    api = _api(server, token, timeout)
    found = api.get("/v1/workloads", limit="500")
    if emit(found, output):
        return
    # The decision log is newest first: the first decision seen per workload is its latest.
    decided: dict[str, dict[str, Any]] = {}
    for d in api.get("/v1/recommendations", limit="500"):
        decided.setdefault(d["workload_id"], d)
    rows = []
    for w in found:
        latest = max(w["profiles"], key=lambda p: p["created_at"], default=None)
        d = decided.get(w["id"])
        rows.append(
            {
                "name": w["name"],
                "profiles": len(w["profiles"]),
                "latest": latest["status"] if latest else None,
                "input": latest["input_label"] if latest else None,
                "host_kind": latest["host_kind"] if latest else None,
                "recommendation": (
                    f"slow {d['slow_ratio']:.2f}, {d['llc_ways']} ways ({d['objective']})"
                    if d
                    else None
                ),
                "created": w["created_at"][:19].replace("T", " "),
            }
        )
    cols = ["name", "profiles", "latest", "input", "host_kind", "recommendation", "created"]
    print_rows(rows, cols, output, title="Workloads")
