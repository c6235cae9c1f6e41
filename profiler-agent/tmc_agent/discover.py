"""Preflight: what this node offers tmc, and for each missing piece, how to fix it.

Every probe reads through `HostPaths`, so the same code answers on a real node and on the fake
sysfs trees of the tests. The report is both a checklist for an operator (works / missing / fix)
and the facts the profile backends need (which node is slow, the LLC's ways, CAT's limits).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from tmc_agent.hostpaths import HostPaths, parse_list, read_text
from tmc_agent.resctrl import ResctrlFs

Status = Literal["works", "degraded", "missing"]
SlowKind = Literal["optane", "cxl", "unknown"]


@dataclass(frozen=True)
class Check:
    area: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class NumaNode:
    node: int
    cpus: list[int]
    memory_bytes: int
    kind: Literal["dram", "optane", "cxl", "unknown-slow"]
    memory_tier: int | None = None


@dataclass(frozen=True)
class Resctrl:
    kernel_support: bool
    cpu_support: bool
    mounted: bool
    cbm_mask: str | None = None
    min_cbm_bits: int | None = None
    num_closids: int | None = None
    ways: int | None = None


@dataclass(frozen=True)
class Pmu:
    vendor: str
    cpu_pmu: str | None  # "cpu" (Intel core PMU) or "cpu_core"; None when the PMU is not exposed
    pmu_name: str | None
    pebs: bool
    ibs_op: bool
    perf_path: str | None
    perf_version: str | None
    paranoid: int | None


@dataclass
class NodeReport:
    cpu_model: str
    cpus: int
    llc_ways: int | None
    llc_size_bytes: int | None
    numa: list[NumaNode]
    resctrl: Resctrl
    pmu: Pmu
    cgroup_v2: bool
    checks: list[Check] = field(default_factory=list)

    @property
    def fast_nodes(self) -> list[int]:
        return [n.node for n in self.numa if n.kind == "dram"]

    @property
    def slow_nodes(self) -> list[int]:
        return [n.node for n in self.numa if n.kind != "dram"]

    def backend(self) -> Literal["hardware", "trace", "sim"]:
        """What `--backend auto` picks: the hardware when it has all it needs, else a trace."""
        if self.hardware_ready():
            return "hardware"
        if self.check("valgrind").status == "works":
            return "trace"
        return "sim"

    def hardware_ready(self) -> bool:
        need = ("numa", "resctrl", "pmu", "perf")
        return all(self.check(a).status == "works" for a in need)

    def check(self, area: str) -> Check:
        for c in self.checks:
            if c.area == area:
                return c
        raise KeyError(area)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["fast_nodes"] = self.fast_nodes
        out["slow_nodes"] = self.slow_nodes
        out["backend_auto"] = self.backend()
        return out


# --- probes -------------------------------------------------------------------------------------


def _meminfo_bytes(text: str | None) -> int:
    # node meminfo: "Node 0 MemTotal:       16384000 kB"
    if not text:
        return 0
    m = re.search(r"MemTotal:\s+(\d+)\s*kB", text)
    return int(m.group(1)) * 1024 if m else 0


def memory_tiers(paths: HostPaths) -> dict[int, int]:
    """node -> memory tier number (smaller is faster), from the kernel's memory-tier sysfs."""
    base = paths.sys / "devices" / "virtual" / "memory_tiering"
    out: dict[int, int] = {}
    if not base.is_dir():
        return out
    for d in sorted(base.glob("memory_tier*")):
        m = re.fullmatch(r"memory_tier(\d+)", d.name)
        if not m:
            continue
        for node in parse_list(read_text(d / "nodelist")):
            out[node] = int(m.group(1))
    return out


def slow_memory_kinds(paths: HostPaths) -> dict[int, SlowKind]:
    """node -> technology where the kernel says so.

    Optane: a libnvdimm (ndbus) region onlined as system RAM via dax/kmem, or an nd region's
    `target_node`. CXL: a dax device under a CXL region, or a CXL region with a `target_node`
    (hot-plugged as its own node).
    """
    out: dict[int, SlowKind] = {}
    for region in sorted((paths.sys / "bus" / "nd" / "devices").glob("region*")):
        node = read_text(region / "target_node")
        if node is not None and node.lstrip("-").isdigit() and int(node) >= 0:
            out[int(node)] = "optane"
    for region in sorted((paths.sys / "bus" / "cxl" / "devices").glob("region*")):
        node = read_text(region / "target_node")
        if node is not None and node.lstrip("-").isdigit() and int(node) >= 0:
            out[int(node)] = "cxl"
    for dax in sorted((paths.sys / "bus" / "dax" / "devices").glob("dax*")):
        node = read_text(dax / "target_node")
        if node is None or not node.lstrip("-").isdigit() or int(node) < 0:
            continue
        where = str(dax.resolve())
        if "cxl" in where or ("region" in where and "cxl" in where):
            out[int(node)] = "cxl"
        elif "ndbus" in where or "pmem" in where or "nvdimm" in where:
            out.setdefault(int(node), "optane")
    return out


def probe_numa(paths: HostPaths) -> list[NumaNode]:
    base = paths.sys / "devices" / "system" / "node"
    nodes = parse_list(read_text(base / "online"))
    if not nodes:
        nodes = sorted(
            int(m.group(1))
            for d in base.glob("node*")
            if (m := re.fullmatch(r"node(\d+)", d.name)) is not None
        )
    tiers = memory_tiers(paths)
    kinds = slow_memory_kinds(paths)
    out: list[NumaNode] = []
    for n in nodes:
        d = base / f"node{n}"
        cpus = parse_list(read_text(d / "cpulist"))
        mem = _meminfo_bytes(read_text(d / "meminfo"))
        fastest = min(tiers.values()) if tiers else None
        slow = (
            n in kinds
            or (not cpus and mem > 0)
            or (fastest is not None and tiers.get(n, fastest) > fastest)
        )
        kind: Literal["dram", "optane", "cxl", "unknown-slow"] = "dram"
        if slow:
            k = kinds.get(n, "unknown")
            kind = "unknown-slow" if k == "unknown" else k
        out.append(NumaNode(n, cpus, mem, kind, tiers.get(n)))
    return out


def _cpuinfo(paths: HostPaths) -> tuple[str, str, set[str], int]:
    text = read_text(paths.proc / "cpuinfo") or ""
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    vendor = re.search(r"^vendor_id\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
    n = len(re.findall(r"^processor\s*:", text, re.M))
    return (
        model.group(1).strip() if model else "unknown CPU",
        vendor.group(1).strip() if vendor else "unknown",
        set(flags.group(1).split()) if flags else set(),
        n,
    )


def probe_llc(paths: HostPaths) -> tuple[int | None, int | None]:
    for idx in sorted((paths.sys / "devices" / "system" / "cpu" / "cpu0" / "cache").glob("index*")):
        if read_text(idx / "level") != "3":
            continue
        ways = read_text(idx / "ways_of_associativity")
        size = read_text(idx / "size") or ""
        m = re.fullmatch(r"(\d+)([KMG]?)", size)
        size_bytes = None
        if m:
            size_bytes = (
                int(m.group(1)) * {"": 1, "K": 1024, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
            )
        return (int(ways) if ways and ways.isdigit() else None), size_bytes
    return None, None


def _mounts(paths: HostPaths) -> list[tuple[str, str]]:
    """(mount point, fs type) of every mount the host's /proc/mounts lists."""
    text = read_text(paths.proc / "mounts") or ""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append((parts[1], parts[2]))
    return out


def probe_resctrl(paths: HostPaths, flags: set[str]) -> Resctrl:
    filesystems = read_text(paths.proc / "filesystems") or ""
    kernel = "resctrl" in filesystems.split()
    cpu = bool(flags & {"cat_l3", "rdt_a"})
    fs = ResctrlFs(paths.resctrl)
    mounted = any(kind == "resctrl" for _, kind in _mounts(paths)) or fs.has_cat()
    if not fs.has_cat():
        return Resctrl(kernel, cpu, mounted)
    info = fs.info()
    return Resctrl(
        kernel, cpu, mounted, info.cbm_mask, info.min_cbm_bits, info.num_closids, info.ways
    )


def _run(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout + done.stderr


def probe_pmu(paths: HostPaths, vendor: str) -> Pmu:
    devices = paths.sys / "bus" / "event_source" / "devices"
    cpu_pmu = next((n for n in ("cpu", "cpu_core") if (devices / n).is_dir()), None)
    pmu_name = read_text(devices / cpu_pmu / "caps" / "pmu_name") if cpu_pmu else None
    # Intel's core PMU advertises its microarchitecture in caps/pmu_name; PEBS comes with every
    # core PMU from Nehalem on, and precise load-latency sampling needs a real (not arch-only) one.
    pebs = vendor == "GenuineIntel" and cpu_pmu is not None and pmu_name not in (None, "generic")
    ibs = (devices / "ibs_op").is_dir()
    perf = shutil.which(paths.perf, path=paths.path_env) if "/" not in paths.perf else paths.perf
    version = None
    if perf:
        text = _run([perf, "--version"])
        version = text.strip() if text else None
    para = read_text(paths.proc / "sys" / "kernel" / "perf_event_paranoid")
    return Pmu(
        vendor,
        cpu_pmu,
        pmu_name,
        pebs,
        ibs,
        perf,
        version,
        int(para) if para and para.lstrip("-").isdigit() else None,
    )


def probe_cgroup_v2(paths: HostPaths) -> tuple[bool, bool, str]:
    """(unified, hybrid, controllers): unified means cgroup2 at the cgroup root."""
    mounts = _mounts(paths)
    root = str(paths.cgroup)
    unified = any(fs == "cgroup2" and (mp in ("/sys/fs/cgroup", root)) for mp, fs in mounts)
    hybrid = not unified and any(fs == "cgroup2" for _, fs in mounts)
    controllers = read_text(paths.cgroup / "cgroup.controllers") or ""
    return unified, hybrid, controllers


# --- the report ---------------------------------------------------------------------------------


def _numa_checks(numa: list[NumaNode]) -> list[Check]:
    fast = [n for n in numa if n.kind == "dram"]
    slow = [n for n in numa if n.kind != "dram"]
    if not numa:
        return [
            Check(
                "numa",
                "missing",
                "no NUMA nodes readable under sys/devices/system/node",
                "mount the host's /sys into the agent (TMC_AGENT_SYS)",
            )
        ]
    desc = ", ".join(
        f"node{n.node}: {n.kind}, {len(n.cpus)} CPUs, {n.memory_bytes / 2**30:.1f} GiB"
        + (f", memory_tier{n.memory_tier}" if n.memory_tier is not None else "")
        for n in numa
    )
    if not slow:
        return [
            Check(
                "numa",
                "missing",
                f"one memory tier only ({desc}): no slow tier to place memory on",
                "online the slow memory as a CPU-less NUMA node: Optane via `ndctl create-namespace"
                " -m devdax` + `daxctl reconfigure-device -m system-ram`; CXL via `cxl"
                " create-region -t ram` (kmem); check that it is not all in one memory tier",
            )
        ]
    checks = [Check("numa", "works", desc)]
    unknown = [n.node for n in slow if n.kind == "unknown-slow"]
    if unknown:
        checks.append(
            Check(
                "slow-tier-kind",
                "degraded",
                f"slow node(s) {unknown} have no CPUs but no dax/nd/CXL device names them",
                "say the tier kind in the agent's config (--slow-kind optane|cxl_local|cxl_pool)",
            )
        )
    else:
        kinds = sorted({n.kind for n in slow})
        checks.append(
            Check("slow-tier-kind", "works", f"slow tier identified as {', '.join(kinds)}")
        )
    if not fast:
        checks.append(
            Check(
                "numa", "missing", "no node with CPUs and DRAM", "check the node's BIOS NUMA mode"
            )
        )
    return checks


def _resctrl_check(r: Resctrl) -> Check:
    if r.mounted and r.cbm_mask:
        return Check(
            "resctrl",
            "works",
            f"mounted; cbm_mask {r.cbm_mask} ({r.ways} ways), min_cbm_bits {r.min_cbm_bits},"
            f" num_closids {r.num_closids}",
        )
    if r.mounted:
        return Check(
            "resctrl",
            "missing",
            "mounted but has no info/L3: this CPU has no L3 CAT",
            "use a CPU with L3 CAT (Intel RDT / AMD PQoS); the trace backend works meanwhile",
        )
    if r.kernel_support and r.cpu_support:
        return Check(
            "resctrl",
            "missing",
            "supported by the CPU and the kernel but not mounted",
            "mount -t resctrl resctrl /sys/fs/resctrl",
        )
    if r.kernel_support:
        return Check(
            "resctrl",
            "missing",
            "the kernel has resctrl but the CPU advertises no L3 CAT (no cat_l3/rdt_a flag)",
            "a VM needs its hypervisor to pass CAT through; on bare metal enable RDT in the BIOS",
        )
    return Check(
        "resctrl",
        "missing",
        "no resctrl in the kernel (/proc/filesystems) and no L3 CAT",
        "build the kernel with CONFIG_X86_CPU_RESCTRL=y on a CPU with L3 CAT",
    )


def _pmu_checks(p: Pmu) -> list[Check]:
    out: list[Check] = []
    if p.pebs:
        out.append(
            Check(
                "pmu",
                "works",
                f"Intel core PMU ({p.pmu_name}): PEBS mem_load_retired.l3_miss with data addresses",
            )
        )
    elif p.ibs_op:
        out.append(Check("pmu", "works", "AMD IBS op sampling (ibs_op): data addresses of misses"))
    elif p.cpu_pmu:
        out.append(
            Check(
                "pmu",
                "degraded",
                f"a core PMU ({p.cpu_pmu}, {p.pmu_name or 'no pmu_name'}) without address sampling",
                "PEBS needs Intel, IBS needs AMD's ibs_op; counters still work, samples do not",
            )
        )
    else:
        out.append(
            Check(
                "pmu",
                "missing",
                f"no hardware PMU exposed ({p.vendor}; sys/bus/event_source has no cpu/ibs_op):"
                " a VM without a virtual PMU",
                "enable the guest PMU (KVM: -cpu host,pmu=on; cloud: a bare-metal or vPMU"
                " instance type); meanwhile use --backend trace",
            )
        )
    if p.perf_path is None:
        out.append(Check("perf", "missing", "perf not on PATH", "apt-get install linux-perf"))
    else:
        detail = f"{p.perf_version or 'perf'} at {p.perf_path}; perf_event_paranoid {p.paranoid}"
        if p.paranoid is not None and p.paranoid > 2:
            out.append(
                Check(
                    "perf",
                    "missing",
                    detail + ": unprivileged users may not open events",
                    "sysctl kernel.perf_event_paranoid=1 (or run the agent with CAP_PERFMON)",
                )
            )
        elif p.paranoid is not None and p.paranoid > 1:
            out.append(
                Check(
                    "perf",
                    "works",
                    detail + ": user-space events of own processes only (enough for profile)",
                    "",
                )
            )
        else:
            out.append(Check("perf", "works", detail))
    return out


def _cgroup_check(unified: bool, hybrid: bool, controllers: str) -> Check:
    if unified:
        need = {"memory", "cpuset"}
        have = set(controllers.split())
        if need <= have:
            return Check("cgroup-v2", "works", f"unified hierarchy; controllers: {controllers}")
        return Check(
            "cgroup-v2",
            "degraded",
            f"unified hierarchy without {sorted(need - have)} enabled at the root",
            "echo +memory +cpuset > /sys/fs/cgroup/cgroup.subtree_control",
        )
    if hybrid:
        return Check(
            "cgroup-v2",
            "missing",
            "hybrid mode: cgroup2 is mounted but memory and cpuset are on cgroup v1",
            "boot with systemd.unified_cgroup_hierarchy=1 (or cgroup_no_v1=all)",
        )
    return Check(
        "cgroup-v2",
        "missing",
        "no cgroup2 mount",
        "boot with systemd.unified_cgroup_hierarchy=1 and mount cgroup2 at /sys/fs/cgroup",
    )


def _tool_check(area: str, name: str, paths: HostPaths, why: str, fix: str) -> Check:
    found = shutil.which(name, path=paths.path_env) if "/" not in name else name
    if found and Path(found).exists():
        return Check(area, "works", f"{found} ({why})")
    return Check(area, "missing", f"{name} not found ({why})", fix)


def discover(paths: HostPaths | None = None) -> NodeReport:
    paths = paths or HostPaths.from_env()
    model, vendor, flags, ncpu = _cpuinfo(paths)
    numa = probe_numa(paths)
    ways, size = probe_llc(paths)
    resctrl = probe_resctrl(paths, flags)
    pmu = probe_pmu(paths, vendor)
    unified, hybrid, controllers = probe_cgroup_v2(paths)
    report = NodeReport(
        cpu_model=model,
        cpus=ncpu,
        llc_ways=resctrl.ways or ways,
        llc_size_bytes=size,
        numa=numa,
        resctrl=resctrl,
        pmu=pmu,
        cgroup_v2=unified,
    )
    report.checks += _numa_checks(numa)
    report.checks.append(_resctrl_check(resctrl))
    report.checks += _pmu_checks(pmu)
    report.checks.append(_cgroup_check(unified, hybrid, controllers))
    report.checks.append(
        _tool_check(
            "valgrind",
            paths.valgrind,
            paths,
            "the trace backend runs the program under tmc's own Valgrind tool (tmctrace), which "
            "streams its data accesses through a cache model",
            "apt-get install valgrind",
        )
    )
    report.checks.append(
        _tool_check(
            "cc", paths.cc, paths, "builds the allocator shim", "apt-get install gcc make libc6-dev"
        )
    )
    return report
