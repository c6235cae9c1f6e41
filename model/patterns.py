"""Placement that follows a capacity plan: machine patterns on nodes, and how much a node whose
pattern holds a pod is preferred.

The capacity planner (`model/capacity.py`) packs a workload mix into whole machines; each planned
machine holds so many VMs of each workload class in each configuration (`machines_content`,
`"class#option": count`). Its gain (fewer machines) is a placed gain only if pods land as planned.
An operator who adopts a plan writes each planned machine, as a *pattern*, on a node of the
plan's machine kind (`tmc.dev/pattern`, `model.node_contract.NodePattern`). Placement then
prefers, for a pod, the nodes whose pattern still has room for the pod's workload; a node without
a pattern, or without room in it, stays usable: a preference, never a filter.

Pure: no HTTP, SQL or Kubernetes. The scheduler's rule is the Go engine's
(`scheduler/plugin/pkg/tmc/patterns.go`, with the packing score it is combined with); the
preference here is the model the planning benchmark's simulator is checked against
(`bench/planning.py`), and scheduler/conformance/patterns.json holds both to the same answers.

**Counting placed VMs on a node's slots** (`placed_per_slot`). Pods are counted by (workload,
dram_bytes, slow_bytes, llc_ways), which is what their placement annotation says. A pod first
fills the slot of exactly its workload and configuration; pods of a workload beyond their own
slot's count, or in a configuration no slot names, then fill the workload's other slots with
room, in the pattern's order. Pods of a workload the pattern does not name fill nothing.

**The preference of a node for a pod** (`preference`), one of three levels:

    EXACT     the pattern has room for the pod's workload, and the slot of exactly its
              configuration is not full
    WORKLOAD  the pattern has room for the pod's workload in another configuration
    NONE      no pattern, or no room for the workload in it

"Room for the workload" is the slots of the workload minus every pod of it on the node (so a pod
in an unplanned configuration still takes one of its workload's places).

**Adopting a plan** (`plan_machines`, `assign_machines`): the planned machines become patterns
(one per machine of the plan, the slots from each `"class#option"` and the option's demand; the
class is the pod's workload name), and the patterns are spread over the nodes of the plan's kind
in a stable order: a node that already stands for a machine of the same plan keeps it, the
others take the machines nobody stands for, lowest index first, and nodes beyond the plan's
count repeat its patterns cyclically (each takes the machine the fewest nodes stand for).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from model.node_contract import MAX_PATTERN_SLOTS, NodePattern, PatternSlot

NONE = 0
WORKLOAD = 1
EXACT = 2

# (workload, dram_bytes, slow_bytes, llc_ways): what a placed pod is counted by.
PlacedKey = tuple[str, int, int, int]


class PlanNotAdoptable(ValueError):
    """A capacity plan that cannot become node patterns; the message says why."""


# -- the rule ------------------------------------------------------------------------------------


def placed_per_slot(slots: Sequence[PatternSlot], placed: Mapping[PlacedKey, int]) -> list[int]:
    """The placed VMs counted on each slot (same order as `slots`, each at most its count):
    `placed` maps (workload, dram_bytes, slow_bytes, llc_ways) to the VMs bound on the node."""
    out = [min(s.count, max(0, placed.get(s.key, 0))) for s in slots]
    overflow: dict[str, int] = {}
    slotted = {s.key for s in slots}
    for s, n in zip(slots, out, strict=True):  # pods of a slot beyond its count
        extra = max(0, placed.get(s.key, 0)) - n
        if extra:
            overflow[s.workload] = overflow.get(s.workload, 0) + extra
    for key, n in placed.items():  # pods in a configuration no slot names
        if key not in slotted and n > 0:
            overflow[key[0]] = overflow.get(key[0], 0) + n
    for i, s in enumerate(slots):
        left = overflow.get(s.workload, 0)
        if left:
            take = min(left, s.count - out[i])
            out[i] += take
            overflow[s.workload] = left - take
    return out


def preference(
    pattern: NodePattern | None,
    placed: Mapping[PlacedKey, int],
    workload: str | None,
    dram_bytes: int,
    slow_bytes: int,
    llc_ways: int,
) -> int:
    """How much a node with `pattern` and the VMs `placed` on it is preferred for a pod of
    `workload` in the configuration (dram_bytes, slow_bytes, llc_ways): EXACT, WORKLOAD or
    NONE (see the module docstring)."""
    if pattern is None or not workload:
        return NONE
    mine = [s for s in pattern.slots if s.workload == workload]
    if not mine:
        return NONE
    planned = sum(s.count for s in mine)
    here = sum(n for key, n in placed.items() if key[0] == workload and n > 0)
    if here >= planned:
        return NONE
    key = (workload, dram_bytes, slow_bytes, llc_ways)
    for s in mine:
        if s.key == key and placed.get(key, 0) < s.count:
            return EXACT
    return WORKLOAD


def plan_machines(
    kind_plan: Mapping[str, Any], options: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[tuple[PatternSlot, ...]]:
    """Each machine of a kind's plan (the API's `kinds[i]`: its `machines_content`, per machine
    `"class#option": VMs`) as the slots of a pattern; `options` are the classes' options (the
    plan's `options`: per class, `dram_bytes`, `slow_bytes`, `llc_ways`). Two options of a class
    with the same configuration are one slot."""
    content = kind_plan.get("machines_content")
    if not isinstance(content, list) or not content:
        raise PlanNotAdoptable(
            f"kind {kind_plan.get('kind')!r}: the plan has no machines_content to adopt"
        )
    machines = []
    for m, tally in enumerate(content):
        if not isinstance(tally, dict):
            raise PlanNotAdoptable(f"machines_content[{m}] is not an object")
        counts: dict[PlacedKey, int] = {}
        for label, n in tally.items():
            workload, sep, index = str(label).rpartition("#")
            if not sep or not workload or not index.isdigit() or len(index) > 4:
                raise PlanNotAdoptable(f"machines_content[{m}]: {label[:60]!r} is not class#option")
            choices = options.get(workload)
            if choices is None or int(index) >= len(choices):
                raise PlanNotAdoptable(
                    f"machines_content[{m}]: {label[:60]!r} names an option the plan's options lack"
                )
            if type(n) is not int or n < 1:
                raise PlanNotAdoptable(f"machines_content[{m}]: {label[:60]!r} is not a count")
            o = choices[int(index)]
            key = (workload, int(o["dram_bytes"]), int(o["slow_bytes"]), int(o["llc_ways"]))
            counts[key] = counts.get(key, 0) + n
        if len(counts) > MAX_PATTERN_SLOTS:
            raise PlanNotAdoptable(
                f"machines_content[{m}] has {len(counts)} configurations; a pattern holds at most"
                f" {MAX_PATTERN_SLOTS}"
            )
        try:
            machines.append(
                tuple(
                    PatternSlot(workload=w, dram_bytes=d, slow_bytes=s, llc_ways=k, count=n)
                    for (w, d, s, k), n in sorted(counts.items())
                )
            )
        except ValueError as exc:
            raise PlanNotAdoptable(f"machines_content[{m}]: {exc}") from exc
    return machines


def plan_id(machines: Sequence[Sequence[PatternSlot]]) -> str:
    """A name for a plan's patterns: a digest of them, so that the same plan applied again
    is recognised and changes nothing."""
    body = json.dumps(
        [[s.model_dump(mode="json") for s in m] for m in machines], separators=(",", ":")
    )
    return "plan-" + hashlib.sha256(body.encode()).hexdigest()[:16]


def assign_machines(
    plan: str, machines: int, nodes: Iterable[tuple[str, NodePattern | None]]
) -> dict[str, int]:
    """Which machine of the plan `plan` (with `machines` machines) each node stands for, from
    the nodes of the plan's kind and the pattern each carries now: by node name, a node already
    standing for a machine of this plan keeps it, the others take the machine the fewest nodes
    stand for (lowest index on a tie): first the machines nobody stands for, then, beyond the
    plan's count, the plan's machines again in order."""
    if machines < 1:
        raise PlanNotAdoptable("the plan has no machine")
    ordered = sorted(nodes, key=lambda n: n[0])
    out: dict[str, int] = {}
    held = [0] * machines
    for name, current in ordered:
        if current is not None and current.plan == plan and current.machine < machines:
            out[name] = current.machine
            held[current.machine] += 1
    for name, _ in ordered:
        if name not in out:
            m = min(range(machines), key=lambda i: (held[i], i))
            out[name] = m
            held[m] += 1
    return out
