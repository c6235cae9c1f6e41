"""Applying dynamic-tiering advice on a node, behind small interfaces probed before use.

- `NumaBalancingTiering`: Linux NUMA balancing in memory-tiering mode (the TPP design, kernel 6.1
  and later): the mode bit in `kernel.numa_balancing`, demotion on reclaim, the promotion rate
  limit (sysctl), the hot threshold and the scan period (debugfs, `sched/numa_balancing`).
- `FastTierLimit`: a memory.max-style cap on a cgroup's fast-tier memory. Upstream Linux has no
  per-tier limit; kernels that carry one name its file differently, so the file name is
  configuration, and where it is absent the limit is reported unsupported, never guessed.
- `runtime_environment`: the knobs of a user-space manager that reads them from its environment.

Every write is checked against bounds first, skipped when the file already holds the value (so
applying twice changes nothing), and reported; host roots come from `HostPaths`, so tests run on
fake trees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tmc_agent.hostpaths import HostPaths, read_text

NUMA_BALANCING_TIERING = 2  # the mode bit of kernel.numa_balancing (NUMA_BALANCING_MEMORY_TIERING)
# Bounds a setting must lie within before it is written (ms, MB/s).
BOUNDS = {
    "hot_threshold_ms": (1, 600_000),
    "promote_rate_limit_mbps": (1, 1 << 30),
    "scan_period_min_ms": (1, 3_600_000),
}
CGROUP_NAME = re.compile(r"^[A-Za-z0-9_.@:-]+(/[A-Za-z0-9_.@:-]+)*$")
ENV_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class TieringApplyError(Exception):
    """A setting that must not be written (out of bounds, a bad cgroup path)."""


@dataclass(frozen=True)
class TieringSettings:
    fast_bytes: int | None = None
    migration_period_ms: int | None = None
    knobs: dict[str, float] = field(default_factory=dict)


@dataclass
class Applied:
    written: list[tuple[str, str]] = field(default_factory=list)  # (path, value)
    unchanged: list[str] = field(default_factory=list)
    unsupported: list[tuple[str, str]] = field(default_factory=list)  # (setting, why)


class TieringTarget(Protocol):
    def probe(self) -> dict[str, bool]: ...

    def apply(self, settings: TieringSettings, dry_run: bool = False) -> Applied: ...


def _bounded(name: str, value: float) -> int:
    lo, hi = BOUNDS[name]
    if not float(value).is_integer() or not lo <= value <= hi:
        raise TieringApplyError(f"{name}={value} is not a whole number in [{lo}, {hi}]")
    return int(value)


def _write(path: Path, value: str, out: Applied, dry_run: bool) -> None:
    if read_text(path) == value:
        out.unchanged.append(str(path))
        return
    if not dry_run:
        path.write_text(value + "\n")
    out.written.append((str(path), value))


class NumaBalancingTiering:
    """Linux NUMA balancing in memory-tiering mode."""

    def __init__(self, paths: HostPaths, debugfs: Path | None = None) -> None:
        self.mode = paths.proc / "sys/kernel/numa_balancing"
        self.rate_limit = paths.proc / "sys/kernel/numa_balancing_promote_rate_limit_MBps"
        self.demotion = paths.sys / "kernel/mm/numa/demotion_enabled"
        sched = (debugfs or paths.sys / "kernel/debug") / "sched/numa_balancing"
        self.hot_threshold = sched / "hot_threshold_ms"
        self.scan_min = sched / "scan_period_min_ms"
        self.scan_max = sched / "scan_period_max_ms"

    def probe(self) -> dict[str, bool]:
        return {
            "mode": self.mode.is_file(),
            "demotion": self.demotion.is_file(),
            "promote_rate_limit_mbps": self.rate_limit.is_file(),
            "hot_threshold_ms": self.hot_threshold.is_file(),
            "migration_period_ms": self.scan_min.is_file(),
        }

    def apply(self, settings: TieringSettings, dry_run: bool = False) -> Applied:
        out = Applied()
        have = self.probe()
        # Validate everything before the first write: a bad value must change nothing.
        hot = settings.knobs.get("hot_threshold_ms")
        rate = settings.knobs.get("promote_rate_limit_mbps")
        hot_v = _bounded("hot_threshold_ms", hot) if hot is not None else None
        rate_v = _bounded("promote_rate_limit_mbps", rate) if rate is not None else None
        period = settings.migration_period_ms
        period_v = _bounded("scan_period_min_ms", period) if period is not None else None
        unknown = sorted(set(settings.knobs) - {"hot_threshold_ms", "promote_rate_limit_mbps"})
        for name in unknown:
            out.unsupported.append((name, "not a NUMA-balancing tiering knob"))
        if not have["mode"]:
            out.unsupported.append(("mode", f"{self.mode} is absent: no NUMA balancing"))
            return out
        current = read_text(self.mode) or "0"
        mode = int(current) if current.isdigit() else 0
        _write(self.mode, str(mode | NUMA_BALANCING_TIERING), out, dry_run)
        if have["demotion"]:
            _write(self.demotion, "true", out, dry_run)
        else:
            out.unsupported.append(("demotion", f"{self.demotion} is absent"))
        for name, value, path in (
            ("hot_threshold_ms", hot_v, self.hot_threshold),
            ("promote_rate_limit_mbps", rate_v, self.rate_limit),
        ):
            if value is None:
                continue
            if have[name]:
                _write(path, str(value), out, dry_run)
            else:
                out.unsupported.append((name, f"{path} is absent (debugfs not mounted?)"))
        if period_v is not None:
            if not have["migration_period_ms"]:
                out.unsupported.append(("migration_period_ms", f"{self.scan_min} is absent"))
            else:
                # The scanner's period may grow up to scan_period_max_ms: keep max >= min.
                top = read_text(self.scan_max)
                if top is not None and top.isdigit() and int(top) < period_v:
                    _write(self.scan_max, str(period_v), out, dry_run)
                _write(self.scan_min, str(period_v), out, dry_run)
        return out


class FastTierLimit:
    """A memory.max-style cap on one cgroup's fast-tier memory, through a configured file."""

    def __init__(self, paths: HostPaths, cgroup: str, limit_file: str) -> None:
        if not CGROUP_NAME.fullmatch(cgroup) or ".." in cgroup.split("/"):
            raise TieringApplyError(f"bad cgroup path {cgroup!r}")
        if "/" in limit_file or not limit_file.startswith("memory."):
            raise TieringApplyError(f"bad limit file {limit_file!r}: a memory.* file name")
        self.path = paths.cgroup / cgroup / limit_file

    def probe(self) -> dict[str, bool]:
        return {"fast_bytes": self.path.is_file()}

    def apply(self, settings: TieringSettings, dry_run: bool = False) -> Applied:
        out = Applied()
        if settings.fast_bytes is None:
            return out
        if not 0 < settings.fast_bytes < 1 << 56:
            raise TieringApplyError(f"fast_bytes={settings.fast_bytes} is out of range")
        if not self.path.is_file():
            out.unsupported.append(("fast_bytes", f"{self.path} is absent: no per-tier limit"))
            return out
        page = 4096  # the kernel rounds limits down to pages; write what it will keep
        _write(self.path, str(settings.fast_bytes // page * page), out, dry_run)
        return out


def runtime_environment(kind: str, settings: TieringSettings) -> dict[str, str]:
    """`TMC_TIERING_*` variables for a user-space manager that reads its knobs at start."""
    env = {"TMC_TIERING_MANAGER": kind}
    for name, value in sorted(settings.knobs.items()):
        if not ENV_NAME.fullmatch(name):
            raise TieringApplyError(f"bad knob name {name!r}")
        env[f"TMC_TIERING_{name.upper()}"] = (
            f"{value:g}" if not float(value).is_integer() else str(int(value))
        )
    if settings.migration_period_ms is not None:
        env["TMC_TIERING_MIGRATION_PERIOD_MS"] = str(int(settings.migration_period_ms))
    if settings.fast_bytes is not None:
        env["TMC_TIERING_FAST_BYTES"] = str(int(settings.fast_bytes))
    return env
