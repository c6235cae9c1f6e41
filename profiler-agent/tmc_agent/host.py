"""Applying a placement on the host: the pod's resctrl group (through `tmc_agent.resctrl`, the
agent's one resctrl executor), cgroup v2 `memory.max` and `cpuset.mems`, and the plan file the
allocator shim enforces (`TMC_PLAN`, read from `<plan_dir>/<pod uid>.plan`). Every step writes
only what differs, so a pass may be repeated any number of times."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from model import node_contract as contract
from tmc_agent.discover import NodeReport
from tmc_agent.hostpaths import HostPaths, read_text
from tmc_agent.placement import Placement
from tmc_agent.resctrl import ResctrlError, ResctrlFs

log = logging.getLogger("tmc.agent.host")

# What the agent owns on disk. The prefix is how a restarted agent tells its own resctrl groups
# and plan files from anyone else's (e.g. the profiler's `tmc-profile-*` groups).
RESCTRL_PREFIX = "tmc-pod-"
PLAN_SUFFIX = ".plan"


@dataclass
class Applied:
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "what: why"


def pod_cgroup(cgroup_root: Path, uid: str) -> Path | None:
    """The pod-level cgroup under either kubelet cgroup driver:
    cgroupfs `kubepods/[burstable|besteffort/]pod<uid>`, systemd
    `kubepods.slice/[kubepods-burstable.slice/]kubepods-[burstable-]pod<uid_>.slice`."""
    u = uid.replace("-", "_")
    patterns = (
        f"kubepods*/pod{uid}",
        f"kubepods*/*/pod{uid}",
        f"kubepods*/*pod{u}.slice",
        f"kubepods*/*/*pod{u}.slice",
    )
    for pattern in patterns:
        for found in sorted(cgroup_root.glob(pattern)):
            if found.is_dir():
                return found
    return None


def _threads(cgroup: Path) -> list[int]:
    """Every thread in the pod's cgroup tree: resctrl groups hold threads, not processes."""
    out: set[int] = set()
    for d in [cgroup, *sorted(p for p in cgroup.rglob("*") if p.is_dir())]:
        text = read_text(d / "cgroup.threads")
        if text is None:
            text = read_text(d / "cgroup.procs")
        for line in (text or "").split():
            if line.isdigit():
                out.add(int(line))
    return sorted(out)


def _write_if_changed(path: Path, value: str) -> bool:
    """Write a control file only when it says something else: a pass repeated does nothing."""
    current = read_text(path)
    if current is not None and current == value.strip():
        return False
    path.write_text(value if value.endswith("\n") else value + "\n")
    return True


class HostApplier:
    """Creates, checks and removes what a placement needs on the host, under configured paths."""

    def __init__(self, paths: HostPaths, report: NodeReport, plan_dir: Path) -> None:
        self.paths = paths
        self.report = report
        self.plan_dir = plan_dir
        self.resctrl = ResctrlFs(paths.resctrl)

    # -- resctrl (through the agent's one executor) ------------------------------------------------

    def resctrl_group(self, uid: str) -> Path:
        return self.resctrl.group(f"{RESCTRL_PREFIX}{uid}")

    def _apply_resctrl(self, p: Placement, cgroup: Path | None, out: Applied) -> None:
        name = f"{RESCTRL_PREFIX}{p.uid}"
        if not self.resctrl.has_cat():
            out.skipped.append("resctrl: no L3 CAT through resctrl on this node")
            return
        try:
            self.resctrl.check_mask(p.llc_mask)
            _, schemata = self.resctrl.ensure_group(name, p.llc_mask)
        except ResctrlError as exc:
            text = str(exc)
            if "no L3 line" in text:
                text = "no L3 CAT through resctrl on this node"
            out.skipped.append(f"resctrl: {text}")
            return
        out.applied.append(f"resctrl {name} {schemata}")
        if cgroup is None:
            out.skipped.append("resctrl tasks: the pod's cgroup is not there yet")
            return
        moved = self.resctrl.add_tasks(name, _threads(cgroup))
        out.skipped.extend(f"resctrl tasks: {e}" for e in moved.errors)
        out.applied.append(f"resctrl tasks +{moved.moved}")

    # -- cgroup v2 and NUMA -----------------------------------------------------------------------

    def _nodes(self, p: Placement) -> tuple[int | None, int | None]:
        fast = self.report.fast_nodes
        slow = self.report.slow_nodes
        return (fast[0] if fast else None), (slow[0] if slow else None)

    def _apply_cgroup(self, p: Placement, cgroup: Path | None, out: Applied) -> None:
        if cgroup is None:
            out.skipped.append("cgroup: the pod's cgroup is not there yet (retried next pass)")
            return
        limit = p.dram_bytes + p.slow_bytes
        if (cgroup / "memory.max").exists():
            try:
                own = (cgroup / "memory.max").read_text().strip()
                if own not in ("max", str(limit)) and _pods_own_limit(own, limit):
                    # The kubelet set the pod's own limit: what the pod asked for is never
                    # lowered (tmc-nri's MemoryLimit holds the same rule).
                    out.applied.append(f"memory.max {own} (the pod's own)")
                else:
                    if _write_if_changed(cgroup / "memory.max", str(limit)):
                        log.info("%s: memory.max %d", p.key, limit)
                    out.applied.append(f"memory.max {limit}")
            except OSError as exc:
                out.skipped.append(f"memory.max: {exc.strerror}")
        else:
            out.skipped.append("memory.max: no cgroup v2 memory controller on the pod's cgroup")
        fast, slow = self._nodes(p)
        if fast is None:
            out.skipped.append("cpuset.mems: no DRAM NUMA node found")
            return
        mems = str(fast) if p.slow_bytes == 0 or slow is None else f"{fast},{slow}"
        if (cgroup / "cpuset.mems").exists():
            try:
                _write_if_changed(cgroup / "cpuset.mems", mems)
                out.applied.append(f"cpuset.mems {mems}")
            except OSError as exc:
                out.skipped.append(f"cpuset.mems {mems}: {exc.strerror}")
        else:
            out.skipped.append("cpuset.mems: no cgroup v2 cpuset controller on the pod's cgroup")

    def plan_path(self, uid: str) -> Path:
        return self.plan_dir / f"{uid}{PLAN_SUFFIX}"

    def _apply_plan(self, p: Placement, out: Applied) -> None:
        fast, slow = self._nodes(p)
        if fast is None or slow is None:
            out.skipped.append("plan: no slow NUMA node, nothing for the shim to place")
            return
        # Per structure when the placement has a plan (each tag's fast bytes), else the pod's
        # DRAM share for every tag (a fallback: all of it fits in DRAM anyway).
        text = contract.render_plan_file(p.given, fast, slow, f"{p.key} {p.uid}")
        path = self.plan_path(p.uid)
        if read_text(path) == text.strip():
            out.applied.append(f"plan {path.name}")
            return
        self.plan_dir.mkdir(parents=True, exist_ok=True)
        # Atomic: a process starting in the pod reads either no plan or a whole one.
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        out.applied.append(f"plan {path.name}")

    def apply(self, p: Placement) -> Applied:
        out = Applied()
        cgroup = pod_cgroup(self.paths.cgroup, p.uid)
        self._apply_resctrl(p, cgroup, out)
        self._apply_cgroup(p, cgroup, out)
        self._apply_plan(p, out)
        return out

    # -- what is on disk --------------------------------------------------------------------------

    def on_disk(self) -> set[str]:
        """Uids of pods the agent left something for: resctrl groups and plan files it made."""
        found = {g[len(RESCTRL_PREFIX) :] for g in self.resctrl.groups(RESCTRL_PREFIX)}
        if self.plan_dir.is_dir():
            for f in self.plan_dir.glob(f"*{PLAN_SUFFIX}"):
                if not f.name.startswith("."):
                    found.add(f.name[: -len(PLAN_SUFFIX)])
        return found

    def remove(self, uid: str) -> list[str]:
        """Remove the pod's resctrl group and plan file (the cgroup goes with the pod itself)."""
        removed: list[str] = []
        if self.resctrl.remove(f"{RESCTRL_PREFIX}{uid}"):
            removed.append(f"resctrl {RESCTRL_PREFIX}{uid}")
        plan = self.plan_path(uid)
        if plan.exists():
            plan.unlink()
            removed.append(f"plan {plan.name}")
        return removed


def _pods_own_limit(current: str, placed: int) -> bool:
    """Whether `current` (a cgroup's memory.max) is a limit of the pod's own, set by the kubelet
    from its containers' limits: a number, never tmc's placement (which the agent wrote)."""
    return current.isdigit() and int(current) != placed
