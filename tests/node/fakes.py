"""Hardware this machine lacks, as the kernel lays it out in files (tests/agent/fakehost.py's
writers): two sockets with a slow memory node each, and resctrl with L3 CAT."""

from __future__ import annotations

from pathlib import Path

from tests.agent import fakehost


def two_socket_sysfs(root: Path) -> Path:
    """node0 (CPUs 0-1) and node1 (CPUs 2-3): 16 GiB of DRAM each; node2 and node3: 64 GiB of
    CPU-less slow memory, node2 near node0 and node3 near node1 (the SLIT distances)."""
    rows = ["10 21 14 24", "21 10 24 14", "14 24 10 26", "24 14 26 10"]
    for n, (cpus, kib) in enumerate(
        [("0-1", 16 << 20), ("2-3", 16 << 20), ("", 64 << 20), ("", 64 << 20)]
    ):
        fakehost.node(root, n, cpus, kib)
        fakehost.write(root / f"sys/devices/system/node/node{n}/distance", rows[n] + "\n")
    fakehost.write(root / "sys/devices/system/node/online", "0-3\n")
    return root / "sys"


def resctrl_tree(root: Path) -> Path:
    """resctrl with 11 L3 ways on two cache domains."""
    fakehost.resctrl(root, mask="7ff")
    return root / "sys/fs/resctrl"
