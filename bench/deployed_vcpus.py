"""Priced with the vCPUs it is deployed with: what the cheapest pick costs in truth when a
workload profiled on fewer vCPUs runs on more.

    python -m bench.deployed_vcpus [--vcpus 8] [--per-vcpu 4Gi] [workload ...]

Each example bundle (`examples/*.json`, the simulator's profiles of Table 5's workloads on the
§4.1 machine, 4 vCPUs) is deployed as a VM of `--vcpus` vCPUs with `--per-vcpu` memory each.
tmc picks `cheapest` (idle cluster, the product's confidence) priced twice at that memory: with
the profile's vCPUs (what it did before the deployment's vCPUs were known) and with the
deployment's. Ground truth is the simulator's run of the workload at every configuration of
the paper's grid with tmc's plan there, priced as the deployed VM (its vCPUs, its memory split
by the ratio, its ways): each pick's true cost over the truly cheapest configuration.

The simulator never evaluates the model; the predicted times are the same in both picks, only
the prices differ.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cli.common import parse_memory
from model import (
    DEFAULT_PRICE_PROFILE,
    Predictor,
    fit,
    machine_of_host,
    parse_bundle,
    parse_objective,
    recommend,
)
from model.grid import paper_grid
from model.priced_grid import price_grid
from model.resources import GIB
from sim.catalog import workload
from sim.engine import prepare
from sim.host import run_many
from sim.machine import optane_host

SLO = 0.05
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
WORKLOADS = ("graph500", "xsbench", "memcached", "canneal", "xhpcg", "cactusbssn")


@dataclass(frozen=True)
class Judged:
    workload: str
    profile_vcpus: int
    pick_at_profile: tuple[float, int]
    pick_at_deployed: tuple[float, int]
    truly_cheapest: tuple[float, int]
    over_at_profile: float  # true cost over the truly cheapest
    over_at_deployed: float
    # `slo:5%` priced with the deployed vCPUs: kept in truth, and its true cost over the cheapest
    # configuration that truly keeps 5 %.
    slo_kept: bool
    slo_over: float


def judge(name: str, vcpus: int, per_vcpu: int) -> Judged:
    bundle = parse_bundle((EXAMPLES / f"{name}.json").read_bytes())
    predictor = Predictor(fit(bundle))
    machine = machine_of_host(bundle.host)
    size = per_vcpu * vcpus
    grid = paper_grid()

    def pick(cpus: int | None, objective: str = "cheapest") -> tuple[float, int]:
        c = recommend(
            predictor,
            machine=machine,
            memory_bytes=size,
            vcpus=cpus,
            objective=parse_objective(objective),
        )
        return c.chosen.configuration.slow_ratio, c.chosen.configuration.llc_ways

    # Ground truth at every grid point, priced as the deployed VM.
    priced = price_grid(predictor, DEFAULT_PRICE_PROFILE, grid, machine, (), size, vcpus)
    configs = [(r, w) for r in grid.slow_ratios for w in grid.llc_ways]
    prep = prepare(workload(name), optane_host(), 0, list(grid.llc_ways))
    runs = run_many(prep, [(r, w, predictor.placement(r, w)) for r, w in configs])
    seconds = np.asarray([run.wall_seconds for run in runs])
    cost = np.where(priced.feasible, priced.hourly * seconds / 3600.0, np.inf)
    best = int(np.argmin(cost))
    index = {c: i for i, c in enumerate(configs)}
    at_profile, at_deployed = pick(None), pick(vcpus)
    slowdown = seconds / seconds[index[(0.0, max(grid.llc_ways))]] - 1.0
    keeps = slowdown <= SLO
    slo_pick = index[pick(vcpus, f"slo:{SLO:.0%}")]
    slo_best = float(np.min(np.where(keeps, cost, np.inf)))
    return Judged(
        workload=name,
        profile_vcpus=bundle.vcpus,
        pick_at_profile=at_profile,
        pick_at_deployed=at_deployed,
        truly_cheapest=configs[best],
        over_at_profile=float(cost[index[at_profile]] / cost[best] - 1.0),
        over_at_deployed=float(cost[index[at_deployed]] / cost[best] - 1.0),
        slo_kept=bool(keeps[slo_pick]),
        slo_over=float(cost[slo_pick] / slo_best - 1.0),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vcpus", type=int, default=12, help="the deployed VM's vCPUs")
    parser.add_argument("--per-vcpu", default="4Gi", help="the deployed VM's memory per vCPU")
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    args = parser.parse_args(argv)
    per_vcpu = parse_memory(args.per_vcpu, "--per-vcpu")
    print(
        f"deployed as {args.vcpus} vCPUs, {per_vcpu * args.vcpus / GIB:g} GiB; `cheapest`, "
        "true cost over the truly cheapest (slow ratio / ways)"
    )
    print(
        "| workload | profile's vCPUs | priced with the profile's | priced with the deployed"
        " | truly cheapest | `slo:5%` (deployed): kept, over the cheapest truly keeping 5 % |"
    )
    print("|---|---|---|---|---|---|")
    profile_over, deployed_over, slo_over, slo_kept = [], [], [], 0
    for name in args.workloads:
        j = judge(name, args.vcpus, per_vcpu)
        profile_over.append(j.over_at_profile)
        deployed_over.append(j.over_at_deployed)
        slo_over.append(j.slo_over)
        slo_kept += j.slo_kept
        print(
            f"| {j.workload} | {j.profile_vcpus} "
            f"| {j.pick_at_profile[0]:g} / {j.pick_at_profile[1]}: {100 * j.over_at_profile:+.1f} % "
            f"| {j.pick_at_deployed[0]:g} / {j.pick_at_deployed[1]}: "
            f"{100 * j.over_at_deployed:+.1f} % "
            f"| {j.truly_cheapest[0]:g} / {j.truly_cheapest[1]} "
            f"| {'kept' if j.slo_kept else 'MISSED'}, {100 * j.slo_over:+.1f} % |",
            flush=True,
        )
    print(
        f"mean / worst over the truly cheapest: with the profile's vCPUs "
        f"{100 * np.mean(profile_over):+.1f} % / {100 * max(profile_over):+.1f} %, with the "
        f"deployed {100 * np.mean(deployed_over):+.1f} % / {100 * max(deployed_over):+.1f} %"
    )
    print(
        f"slo:5% priced with the deployed vCPUs: kept {slo_kept} of {len(slo_over)}; over the"
        f" cheapest truly keeping 5 %: {100 * np.mean(slo_over):+.1f} % mean,"
        f" {100 * max(slo_over):+.1f} % worst"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
