"""Where the agent reads the host from: every probe goes through these roots.

On a node they are the real `/sys`, `/proc` and resctrl mount (inside a DaemonSet pod the host's are
usually mounted elsewhere, e.g. `/host/sys`); in tests they point at fake trees, so that every
collector is exercised without the hardware (koordlet's approach).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class HostPaths:
    sys: Path = Path("/sys")
    proc: Path = Path("/proc")
    resctrl: Path = Path("/sys/fs/resctrl")
    cgroup: Path = Path("/sys/fs/cgroup")
    # Programs the probes may run; a test points them at stubs (or at nothing).
    perf: str = "perf"
    valgrind: str = "valgrind"
    cc: str = "gcc"
    path_env: str = field(default_factory=lambda: os.environ.get("PATH", "/usr/bin:/bin"))

    @classmethod
    def from_env(cls) -> HostPaths:
        """`TMC_AGENT_SYS`, `TMC_AGENT_PROC`, `TMC_AGENT_RESCTRL`, `TMC_AGENT_CGROUP` override."""
        env = os.environ
        sys_root = Path(env.get("TMC_AGENT_SYS", "/sys"))
        return cls(
            sys=sys_root,
            proc=Path(env.get("TMC_AGENT_PROC", "/proc")),
            resctrl=Path(env.get("TMC_AGENT_RESCTRL", str(sys_root / "fs" / "resctrl"))),
            cgroup=Path(env.get("TMC_AGENT_CGROUP", str(sys_root / "fs" / "cgroup"))),
            perf=env.get("TMC_AGENT_PERF", "perf"),
            valgrind=env.get("TMC_AGENT_VALGRIND", "valgrind"),
        )

    @classmethod
    def under(cls, root: Path, **kw: str) -> HostPaths:
        """A whole fake host below `root` (root/sys, root/proc, root/sys/fs/resctrl)."""
        return cls(
            sys=root / "sys",
            proc=root / "proc",
            resctrl=root / "sys" / "fs" / "resctrl",
            cgroup=root / "sys" / "fs" / "cgroup",
            **kw,
        )


def read_text(path: Path) -> str | None:
    """A sysfs attribute's value, stripped; None where it does not exist or cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def parse_list(text: str | None) -> list[int]:
    """A kernel cpulist/nodelist such as `0-3,8,10-11`."""
    out: list[int] = []
    if not text:
        return out
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out
