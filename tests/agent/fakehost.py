"""Fake host trees (sysfs, procfs, resctrl) for the agent's collectors: no hardware needed."""

from __future__ import annotations

from pathlib import Path

from tmc_agent.hostpaths import HostPaths

XEON_CPUINFO = "".join(
    f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6252N CPU"
    " @ 2.30GHz\nflags\t\t: fpu sse2 avx512f cat_l3 cdp_l3 rdt_a pebs\n\n"
    for i in range(4)
)
EPYC_CPUINFO = "".join(
    f"processor\t: {i}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2"
    " avx2\n\n"
    for i in range(2)
)
UNIFIED_MOUNTS = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec 0 0\n"
HYBRID_MOUNTS = (
    "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n"
    "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
    "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def node(root: Path, n: int, cpus: str, mem_kib: int) -> None:
    base = root / "sys/devices/system/node" / f"node{n}"
    write(base / "cpulist", cpus + "\n")
    write(base / "meminfo", f"Node {n} MemTotal:       {mem_kib} kB\nNode {n} MemFree: 1 kB\n")


def llc(root: Path, ways: int, size: str) -> None:
    base = root / "sys/devices/system/cpu/cpu0/cache/index3"
    write(base / "level", "3\n")
    write(base / "ways_of_associativity", f"{ways}\n")
    write(base / "size", size + "\n")


def tiers(root: Path, tiers: dict[int, str]) -> None:
    for tier, nodelist in tiers.items():
        write(root / f"sys/devices/virtual/memory_tiering/memory_tier{tier}/nodelist", nodelist)


def resctrl(root: Path, mask: str = "7ff", min_bits: int = 1, closids: int = 16) -> None:
    info = root / "sys/fs/resctrl/info/L3"
    write(info / "cbm_mask", mask + "\n")
    write(info / "min_cbm_bits", f"{min_bits}\n")
    write(info / "num_closids", f"{closids}\n")
    write(root / "sys/fs/resctrl/schemata", f"L3:0={mask};1={mask}\n")
    write(root / "sys/fs/resctrl/tasks", "")


def proc(root: Path, cpuinfo: str, mounts: str, paranoid: int, resctrl_fs: bool) -> None:
    write(root / "proc/cpuinfo", cpuinfo)
    fs = "nodev\tcgroup\nnodev\tcgroup2\n" + ("nodev\tresctrl\n" if resctrl_fs else "")
    write(root / "proc/filesystems", fs)
    write(root / "proc/sys/kernel/perf_event_paranoid", f"{paranoid}\n")
    write(root / "proc/mounts", mounts)


def perf_stub(root: Path) -> str:
    stub = root / "bin/perf"
    write(stub, "#!/bin/sh\necho 'perf version 6.1.0'\n")
    stub.chmod(0o755)
    return str(stub)


def paths(root: Path, perf: str = "/nonexistent/perf") -> HostPaths:
    return HostPaths.under(root, perf=perf, valgrind="/nonexistent/valgrind", cc="/nonexistent/gcc")


def optane_host(root: Path) -> HostPaths:
    """Two-socket Cascade Lake with Optane DC PMM in App Direct, onlined as CPU-less nodes 2-3."""
    write(root / "sys/devices/system/node/online", "0-3\n")
    node(root, 0, "0-1", 192 * 2**20)
    node(root, 1, "2-3", 192 * 2**20)
    node(root, 2, "", 768 * 2**20)
    node(root, 3, "", 768 * 2**20)
    tiers(root, {4: "0-1", 22: "2-3"})
    for r, n in ((0, 2), (1, 3)):
        write(root / f"sys/bus/nd/devices/region{r}/target_node", f"{n}\n")
    llc(root, 11, "36608K")
    resctrl(root)
    dev = root / "sys/bus/event_source/devices"
    write(dev / "cpu/caps/pmu_name", "skylake\n")
    write(root / "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
    proc(root, XEON_CPUINFO, UNIFIED_MOUNTS + "resctrl /sys/fs/resctrl resctrl rw 0 0\n", 1, True)
    return paths(root, perf_stub(root))


def cxl_host(root: Path) -> HostPaths:
    """Sapphire Rapids with a CXL Type-3 expander as node 1 (dax device under a CXL region)."""
    write(root / "sys/devices/system/node/online", "0-1\n")
    node(root, 0, "0-7", 256 * 2**20)
    node(root, 1, "", 128 * 2**20)
    tiers(root, {4: "0", 5: "1"})
    region = root / "sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0"
    write(region / "target_node", "1\n")
    (root / "sys/bus/dax/devices").mkdir(parents=True)
    (root / "sys/bus/dax/devices/dax0.0").symlink_to(region)
    llc(root, 15, "61440K")
    resctrl(root, mask="7fff", min_bits=1, closids=15)
    write(root / "sys/bus/event_source/devices/cpu/caps/pmu_name", "sapphire_rapids\n")
    write(root / "sys/fs/cgroup/cgroup.controllers", "cpu io memory pids\n")
    proc(root, XEON_CPUINFO, UNIFIED_MOUNTS, 2, True)
    return paths(root, perf_stub(root))


def this_machine(root: Path) -> HostPaths:
    """What this project's 2-vCPU EPYC VM shows (recorded): one node, no resctrl, no PMU,
    hybrid cgroups."""
    write(root / "sys/devices/system/node/online", "0\n")
    node(root, 0, "0-1", 7825184)
    tiers(root, {4: "0"})
    llc(root, 16, "32768K")
    (root / "sys/bus/event_source/devices/software").mkdir(parents=True)
    (root / "sys/bus/event_source/devices/tracepoint").mkdir(parents=True)
    proc(root, EPYC_CPUINFO, HYBRID_MOUNTS, 2, False)
    return paths(root, perf_stub(root))


def amd_ibs_host(root: Path) -> HostPaths:
    """An EPYC host with IBS and a CPU-less node of unidentified memory."""
    write(root / "sys/devices/system/node/online", "0-1\n")
    node(root, 0, "0-1", 64 * 2**20)
    node(root, 1, "", 64 * 2**20)
    llc(root, 16, "32768K")
    (root / "sys/bus/event_source/devices/ibs_op").mkdir(parents=True)
    (root / "sys/bus/event_source/devices/cpu").mkdir(parents=True)
    proc(root, EPYC_CPUINFO, UNIFIED_MOUNTS, 3, False)
    write(root / "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
    return paths(root, perf_stub(root))
