"""The sim backend: profile one of the simulator's synthetic workloads (`sim/workloads/*.toml`,
or a workload file) on a simulated host, as `sim.profile.reference_bundle` does."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from model.bundle import ProfileBundle
from model.predict import StructurePlacement
from sim.catalog import workload as by_name
from sim.host import simulate
from sim.machine import cxl_local_host, cxl_pool_host, optane_host
from sim.profile import NoiseSpec, reference_bundle
from sim.workload import load_workload
from tmc_agent.profile_runs import DEFAULT_OBJECTIVES, objectives_of, take_runs


def profile(
    workload: str,
    host: str = "optane",
    seed: int = 7,
    runs: int = 0,
    objectives: Sequence[str] = DEFAULT_OBJECTIVES,
) -> ProfileBundle:
    """The reference bundle, with up to `runs` runs where the model asks for one
    (tmc_agent.profile_runs): the simulator's run at that configuration with the plan, on the
    reference runs' trace (the same seed)."""
    hosts = {"optane": optane_host, "cxl_local": cxl_local_host, "cxl_pool": cxl_pool_host}
    w = load_workload(Path(workload)) if Path(workload).is_file() else by_name(workload)
    machine = hosts[host]()
    bundle = reference_bundle(w, machine, NoiseSpec(), seed=seed)
    if not runs:
        return bundle

    def run(ratio: float, ways: int, plan: list[StructurePlacement]) -> float:
        return float(simulate(w, machine, ratio, ways, seed=seed, placement=plan).wall_seconds)

    return take_runs(bundle, run, objectives_of(objectives), runs)
