"""The six workloads shaped after the paper's Table 5, described in `sim/workloads/*.toml`."""

from __future__ import annotations

from pathlib import Path

from sim.workload import Workload, load_workload

WORKLOAD_DIR = Path(__file__).resolve().parent / "workloads"
# Table 5's order.
TABLE5 = ("cactusbssn", "graph500", "memcached", "xsbench", "canneal", "xhpcg")


def workload(name: str) -> Workload:
    path = WORKLOAD_DIR / f"{name}.toml"
    if not path.is_file():
        raise KeyError(f"no workload {name!r}; known: {', '.join(TABLE5)}")
    return load_workload(path)


def table5() -> list[Workload]:
    return [workload(n) for n in TABLE5]
