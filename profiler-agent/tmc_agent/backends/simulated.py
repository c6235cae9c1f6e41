"""The sim backend: profile one of the simulator's synthetic workloads (`sim/workloads/*.toml`,
or a workload file) on a simulated host, as `sim.profile.reference_bundle` does."""

from __future__ import annotations

from pathlib import Path

from model.bundle import ProfileBundle
from sim.catalog import workload as by_name
from sim.machine import cxl_local_host, cxl_pool_host, optane_host
from sim.profile import NoiseSpec, reference_bundle
from sim.workload import load_workload


def profile(workload: str, host: str = "optane", seed: int = 7) -> ProfileBundle:
    hosts = {"optane": optane_host, "cxl_local": cxl_local_host, "cxl_pool": cxl_pool_host}
    w = load_workload(Path(workload)) if Path(workload).is_file() else by_name(workload)
    return reference_bundle(w, hosts[host](), NoiseSpec(), seed=seed)
