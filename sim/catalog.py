"""The simulator's workloads, described in `sim/workloads/*.toml`: the six shaped after the paper's
Table 5, and two written to put structures of different memory parallelism side by side."""

from __future__ import annotations

from pathlib import Path

from sim.workload import Workload, load_workload

WORKLOAD_DIR = Path(__file__).resolve().parent / "workloads"
# Table 5's order.
TABLE5 = ("cactusbssn", "graph500", "memcached", "xsbench", "canneal", "xhpcg")
# Structures of different memory parallelism side by side, for the per-structure penalties.
MIXED_PARALLELISM = ("hashjoin", "kvindex")
KNOWN = TABLE5 + MIXED_PARALLELISM


def workload(name: str) -> Workload:
    path = WORKLOAD_DIR / f"{name}.toml"
    if not path.is_file():
        raise KeyError(f"no workload {name!r}; known: {', '.join(KNOWN)}")
    return load_workload(path)


def table5() -> list[Workload]:
    return [workload(n) for n in TABLE5]
