"""`tmc plan patterns apply|clear`: adopt a capacity plan's machines as node patterns.

A capacity plan (`tmc plan capacity --json`, `POST /v1/planner/capacity`) lists per planned
machine its VMs by `"class#option"`. `apply` writes each machine, as a `tmc.dev/pattern`
annotation (`model.node_contract.NodePattern`), on a node of the plan's machine kind (nodes
labelled `tmc.dev/host-kind` with the kind's name, or `--host-kind`); placement then prefers the
nodes whose pattern holds a pod's workload (`model/patterns.py`). Which node stands for which
machine is `model.patterns.assign_machines`: stable by node name, kept on re-apply, cyclic
beyond the plan's count. Writes go to the API server with the operator's kubeconfig, as kubectl
would, one merge patch per node that changes; a node already carrying its pattern is not
written, so applying a plan twice writes nothing the second time. `--dry-run` prints what it
would write. `clear` removes the annotation.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict, Field

from cli.common import JsonOpt, fail, from_file, guarded
from model.node_contract import (
    HOST_KIND_LABEL,
    MAX_BYTES,
    MAX_LLC_WAYS,
    PATTERN_ANNOTATION,
    ContractError,
    NodeCapacity,
    NodePattern,
)
from model.patterns import PlanNotAdoptable, assign_machines, plan_id, plan_machines
from model.planning_requests import CapacityIn

REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read: every call to the API server
MAX_MACHINES = 100_000
MAX_NODES_LISTED = 100_000

patterns_app = typer.Typer(
    help="Adopt a capacity plan's machines as node patterns that placement follows.",
    no_args_is_help=True,
)


class _Loose(BaseModel):
    """The parts of a plan file that are read; the answer's other fields are left alone."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class OptionShape(_Loose):
    dram_bytes: int = Field(ge=0, lt=MAX_BYTES)
    slow_bytes: int = Field(ge=0, lt=MAX_BYTES)
    llc_ways: int = Field(ge=1, le=MAX_LLC_WAYS)


class KindContent(_Loose):
    kind: str = Field(min_length=1, max_length=64)
    machines: int = Field(ge=-1, le=MAX_MACHINES)
    machines_content: list[dict[str, int]] = Field(default=[], max_length=MAX_MACHINES)
    # per class, each option's ways on this kind (a profile's ways carried over to its cache)
    option_ways: dict[str, list[int]] | None = Field(default=None, max_length=64)


class PlanFile(_Loose):
    """A capacity plan as the API answers it (`best`, `kinds`, and `options` per class)."""

    best: KindContent
    kinds: list[KindContent] = Field(default=[], max_length=16)
    options: dict[str, list[OptionShape]] | None = Field(default=None, max_length=64)


@dataclass(frozen=True)
class Change:
    node: str
    machine: int | None  # None: the annotation is removed
    before: str | None
    after: str | None
    warning: str | None = None  # why the node cannot run its whole pattern

    @property
    def needed(self) -> bool:
        return self.before != self.after


def adoptable(
    plan: PlanFile, kind: str | None, request: CapacityIn | None
) -> tuple[str, list[Any]]:
    """(kind name, the kind's machines as pattern slots) from a plan file; the classes' options
    from the plan, else from the capacity request it answered."""
    chosen = plan.best if kind is None else next((k for k in plan.kinds if k.kind == kind), None)
    if chosen is None:
        names = ", ".join(k.kind for k in plan.kinds) or plan.best.kind
        fail(f"--kind {kind!r}: the plan has no such machine kind (it has {names})")
    if chosen.machines < 1 or not chosen.machines_content:
        fail(f"kind {chosen.kind}: the plan has no machines for it (it cannot host the mix)")
    if request is not None:
        options = {c.name: [o.model_dump() for o in c.options] for c in request.classes}
    elif plan.options is not None:
        options = {name: [o.model_dump() for o in opts] for name, opts in plan.options.items()}
    else:
        fail(
            "the plan names no options (a plan from an older tmc): give the capacity request it"
            " answered with --request, or plan again"
        )
    # The options' ways are the measuring host's; a kind with another cache was planned with
    # them carried over to its own ways, and its nodes are given those.
    for name, ways in (chosen.option_ways or {}).items():
        if name in options and len(ways) == len(options[name]):
            options[name] = [{**o, "llc_ways": w} for o, w in zip(options[name], ways, strict=True)]
    try:
        machines = plan_machines(chosen.model_dump(), options)
    except PlanNotAdoptable as exc:
        fail(str(exc))
    return chosen.kind, machines


def current_pattern(node: dict[str, Any]) -> NodePattern | None:
    try:
        return NodePattern.from_annotations((node.get("metadata") or {}).get("annotations"))
    except ContractError:
        return None  # unreadable: rewritten


def shortfall(node: dict[str, Any], slots: Any) -> str | None:
    """Why a node cannot hold every VM of a pattern at once by what its agent publishes (DRAM,
    ways, node-local slow memory), or None. A pattern is a preference, so it is written anyway;
    the operator is told that this node will not run its machine as planned."""
    meta = node.get("metadata") or {}
    try:
        cap = NodeCapacity.from_metadata(meta.get("labels"), meta.get("annotations"))
    except ContractError as exc:
        return f"its tiered capacity is unreadable ({exc})"
    if cap is None:
        return "it publishes no tiered capacity (not a tmc node)"
    dram = sum(s.dram_bytes * s.count for s in slots)
    ways = sum(s.llc_ways * s.count for s in slots)
    slow = sum(s.slow_bytes * s.count for s in slots)
    short = []
    if dram > cap.dram_bytes:
        short.append(f"DRAM {dram} > {cap.dram_bytes} bytes")
    if ways > cap.llc_ways:
        short.append(f"LLC ways {ways} > {cap.llc_ways}")
    if cap.slow_pool is None and slow > cap.slow_bytes:
        short.append(f"slow memory {slow} > {cap.slow_bytes} bytes")
    return "the pattern needs " + ", ".join(short) if short else None


def plan_changes(nodes: list[dict[str, Any]], machines: list[Any]) -> list[Change]:
    """What `apply` writes on each node of the kind (`model.patterns.assign_machines`)."""
    pid = plan_id(machines)
    named = [(str(n["metadata"]["name"]), current_pattern(n)) for n in nodes]
    where = assign_machines(pid, len(machines), named)
    by_name = {str(n["metadata"]["name"]): n for n in nodes}
    out = []
    for name in sorted(where):
        m = where[name]
        text = NodePattern(plan=pid, machine=m, slots=machines[m]).to_annotation()
        before = ((by_name[name].get("metadata") or {}).get("annotations") or {}).get(
            PATTERN_ANNOTATION
        )
        out.append(Change(name, m, before, text, shortfall(by_name[name], machines[m])))
    return out


# -- the API server -------------------------------------------------------------------------------


def core_api(kubeconfig: Path | None, context: str | None) -> Any:
    """The core API with the operator's kubeconfig (or in a pod, its service account)."""
    try:
        # needs the server extra
        from kubernetes import client, config  # noqa: PLC0415

        from scheduler.kube import api_client  # noqa: PLC0415
    except ImportError:  # pragma: no cover - the light install
        fail("writing patterns needs the kubernetes client: pip install 'tmc[server]'")
    try:
        return client.CoreV1Api(api_client(str(kubeconfig) if kubeconfig else None, context))
    except (config.ConfigException, OSError) as exc:
        fail(f"kubeconfig: {exc}")


def list_nodes(api: Any, host_kind: str | None) -> list[dict[str, Any]]:
    selector = f"{HOST_KIND_LABEL}={host_kind}" if host_kind else None
    kwargs: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}
    if selector:
        kwargs["label_selector"] = selector
    response = api.list_node(limit=MAX_NODES_LISTED, **kwargs)
    try:
        items: list[dict[str, Any]] = json.loads(response.data).get("items") or []
    finally:
        response.release_conn()
    return items


def write(api: Any, change: Change) -> None:
    """One merge patch of the node's annotation (null removes it)."""
    body = {"metadata": {"annotations": {PATTERN_ANNOTATION: change.after}}}
    api.patch_node(change.node, body, _request_timeout=REQUEST_TIMEOUT)


def _short(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    status = getattr(exc, "status", None)
    if status is not None:
        return f"{status} {reason}"
    return str(exc).replace("\n", " ")[:300]


def _report(changes: list[Change], dry_run: bool, as_json: bool) -> None:
    if as_json:
        rows = [
            {
                "node": c.node,
                "machine": c.machine,
                "changed": c.needed,
                "pattern": json.loads(c.after) if c.after else None,
                "warning": c.warning,
            }
            for c in changes
        ]
        sys.stdout.write(json.dumps({"dry_run": dry_run, "nodes": rows}, indent=2) + "\n")
        return
    verb = "would write" if dry_run else "wrote"
    for c in changes:
        what = "remove the pattern" if c.after is None else f"machine {c.machine}"
        state = (verb if c.needed else "unchanged") + (
            ": " + (c.after or "(removed)") if dry_run and c.needed else ""
        )
        typer.echo(f"{c.node}: {what} ({state})")
        if c.warning:
            typer.echo(f"  warning: {c.node} cannot run this machine as planned: {c.warning}")
    n = sum(c.needed for c in changes)
    typer.echo(f"{len(changes)} nodes, {n} {'to change' if dry_run else 'changed'}")


def _apply(api: Any, changes: list[Change], dry_run: bool, as_json: bool) -> None:
    if not dry_run:
        for c in changes:
            if c.needed:
                try:
                    write(api, c)
                except Exception as exc:
                    fail(f"node {c.node}: the API server refused the pattern: {_short(exc)}")
    _report(changes, dry_run, as_json)


KubeconfigOpt = Annotated[
    Path | None,
    typer.Option(help="kubeconfig to write with (default: $KUBECONFIG or ~/.kube/config)."),
]
ContextOpt = Annotated[str | None, typer.Option(help="The kubeconfig context to use.")]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print what would be written; change nothing.")
]


@patterns_app.command("apply")
def apply_cmd(
    plan: Annotated[
        Path,
        typer.Argument(help="A capacity plan JSON (tmc plan capacity --json, the API's answer)."),
    ],
    kind: Annotated[
        str | None, typer.Option(help="The plan's machine kind to adopt (default: its best).")
    ] = None,
    host_kind: Annotated[
        str | None,
        typer.Option(
            help="The nodes to write: those labelled tmc.dev/host-kind=HOST_KIND (default: the"
            " kind's name)."
        ),
    ] = None,
    request: Annotated[
        Path | None,
        typer.Option(help="The capacity request the plan answered, when the plan lacks options."),
    ] = None,
    dry_run: DryRunOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the plan's machines as tmc.dev/pattern on the nodes of its machine kind."""

    def run() -> None:
        body = from_file(plan, PlanFile.model_validate_json)
        asked = from_file(request, CapacityIn.model_validate_json) if request else None
        name, machines = adoptable(body, kind, asked)
        api = core_api(kubeconfig, context)
        nodes = list_nodes(api, host_kind or name)
        if not nodes:
            fail(
                f"no node is labelled {HOST_KIND_LABEL}={host_kind or name}: name the nodes' host"
                " kind with --host-kind"
            )
        _apply(api, plan_changes(nodes, machines), dry_run, as_json)

    guarded(run)


@patterns_app.command("clear")
def clear_cmd(
    host_kind: Annotated[
        str | None,
        typer.Option(help="Only the nodes labelled tmc.dev/host-kind=HOST_KIND (default: all)."),
    ] = None,
    dry_run: DryRunOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove tmc.dev/pattern from the nodes: placement goes back to packing alone."""

    def run() -> None:
        api = core_api(kubeconfig, context)
        nodes = list_nodes(api, host_kind)
        changes = [
            Change(str(n["metadata"]["name"]), None, before, None)
            for n in nodes
            if (
                before := ((n.get("metadata") or {}).get("annotations") or {}).get(
                    PATTERN_ANNOTATION
                )
            )
            is not None
        ]
        _apply(api, changes, dry_run, as_json)

    guarded(run)
