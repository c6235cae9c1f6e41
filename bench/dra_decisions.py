"""`python -m bench.dra_decisions`: what the DRA door decides against Algorithm 1, in simulation.

Through the DRA door the stock kube-scheduler places a tiered pod, not tmc's engine. A claim
lists up to four of Algorithm 1's candidates within T (the pick first, then by packing penalty:
the TieredRecommendation's `alternatives`), each taken whole, and kube-scheduler's allocator takes
on each node the first that fits. Which node, kube-scheduler's default profile decides (v1.36,
`pkg/scheduler/apis/config/v1/default_plugins.go`, the plugins that tell these nodes apart):

- DynamicResources, weight 2: a node scores `8 - i` per request for the alternative `i` it
  allocated (each of the claim's three requests), normalised to 0..100 over the nodes;
- NodeResourcesFit, weight 1, LeastAllocated on CPU and memory (spreads pods: the node left
  emptiest wins), or with an operator's MostAllocated (`--packing`, fills nodes);
- NodeResourcesBalancedAllocation, weight 1: 100 × (1 − the standard deviation of the CPU and
  memory shares requested after the pod).

The pod's memory request is its DRAM and slow bytes (a node's memory counts both: slow memory
onlined as CPU-less NUMA nodes is kernel memory). Against it, in the same replays: exhaustive
search's configuration placed first fit (`es`), and tmc's policy (`tmc-T`: Algorithm 1 at every
arrival with the live utilization, first fit), as `tmc bench`'s cluster study runs them. The
alternatives' order is taken with the live utilization at every arrival too, which favours the
door: the publisher orders them when it publishes. Ways are counts on both sides (the engine's
contiguous runs and a DRA node's compaction, `dra.Compact`, both fit whatever the count allows).

Per mix: the cluster size compaction finds (p90 over the node orders) and the mean true cost of
a VM, each against exhaustive search's. The simulator never sees the model.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bench.evaluation import (
    _JOB_CONTEXT,
    FULL,
    QUICK,
    PolicySet,
    Settings,
    WorkloadData,
    _study_job,
    build_policies,
    candidates_within,
    compact,
    mixes_of,
)
from bench.pools import pool_unordered
from sim.cluster import CPU, DRAM, SLOW, Architecture, ClusterState, architecture

FloatArray = NDArray[np.float64]

# A claim lists at most four alternatives (DRA's 32 constraints a claim: docs/scheduler.md).
MAX_ALTERNATIVES = 4
FIRST_AVAILABLE_MAX = 8  # resourceapi.FirstAvailableDeviceRequestMaxSize
REQUESTS_PER_CLAIM = 3  # ways, DRAM, slow memory
WEIGHT_DRA, WEIGHT_FIT, WEIGHT_BALANCED = 2.0, 1.0, 1.0


def stock_node_scores(
    state: ClusterState, demand: NDArray[np.int64], alternative: NDArray[np.int64], packing: bool
) -> FloatArray:
    """kube-scheduler's default score of each machine for a pod given `demand[m]` there, which
    is its `alternative[m]`-th alternative (machines where none fits: -inf)."""
    cap = state.arch.capacity().astype(np.float64)
    used = cap[None, :] - state.free
    cpu = (used[:, CPU] + demand[:, CPU]) / cap[CPU]
    if state.arch.pooled:
        # A rack pool's memory is the pool's, not a node's allocatable memory.
        mem = (used[:, DRAM] + demand[:, DRAM]) / cap[DRAM]
    else:
        mem_cap = cap[DRAM] + cap[SLOW]
        mem = (used[:, DRAM] + used[:, SLOW] + demand[:, DRAM] + demand[:, SLOW]) / mem_cap
    cpu, mem = np.minimum(cpu, 1.0), np.minimum(mem, 1.0)
    fit = 100.0 * (cpu + mem) / 2.0 if packing else 100.0 * ((1 - cpu) + (1 - mem)) / 2.0
    balanced = 100.0 * (1.0 - np.abs(cpu - mem) / 2.0)
    raw = REQUESTS_PER_CLAIM * (FIRST_AVAILABLE_MAX - alternative).astype(np.float64)
    ok = alternative >= 0
    top = float(raw[ok].max()) if ok.any() else 1.0
    dra = 100.0 * raw / top
    total = WEIGHT_DRA * dra + WEIGHT_FIT * fit + WEIGHT_BALANCED * balanced
    return np.where(ok, total, -np.inf)


def dra_policy(
    data: Sequence[WorkloadData], threshold: float, arch: Architecture, packing: bool
) -> PolicySet:
    """The DRA door: Algorithm 1's candidates within T as a claim's alternatives (the pick, then
    by packing penalty), the first that fits a node taken there, the node by kube-scheduler's
    default scores."""
    within = candidates_within(data, threshold, arch)

    def placer(pending: Sequence[int], state: ClusterState) -> list[tuple[int, int] | None]:
        out: list[tuple[int, int] | None] = []
        for w in pending:
            sel = within.algorithm1(w, state.utilization(), threshold)
            alternatives = [int(x) for x in sel.within[:MAX_ALTERNATIVES]]
            demands = state.menus[w].demand
            taken = np.full(state.machines, -1, dtype=np.int64)  # alternative index per machine
            for k, option in reversed(list(enumerate(alternatives))):
                taken[state.fits(demands[option])] = k
            if not (taken >= 0).any():
                out.append(None)
                continue
            option_of = np.asarray(alternatives, dtype=np.int64)[np.maximum(taken, 0)]
            scores = stock_node_scores(state, demands[option_of], taken, packing)
            # Ties go to the first in the run's node order (kube-scheduler picks one at random).
            ranked = scores[state.order]
            machine = int(state.order[int(np.argmax(ranked))])
            option = int(option_of[machine])
            state.place(machine, demands[option])
            out.append((option, machine))
        return out

    return PolicySet(within.menus, within.costs, lambda seed: placer)


def policy(name: str, data: Sequence[WorkloadData], arch: Architecture) -> PolicySet:
    if name.startswith("dra-"):
        return dra_policy(data, float(name[4:]) / 100, arch, packing=False)
    if name.startswith("drapack-"):
        return dra_policy(data, float(name[8:]) / 100, arch, packing=True)
    return build_policies(name, data, arch, FULL)


def _job(job: tuple[str, tuple[int, ...], str, int]) -> dict[str, Any]:
    data, names, settings = _JOB_CONTEXT["job"]
    arch_name, mix, name, seeds = job
    arch = architecture(int(arch_name.split("G-")[0]), arch_name.split("G-")[1])
    d = data["pool" if arch.pooled else "local"]
    es_seconds = float(np.mean([d[i].truth_seconds[np.argmin(d[i].truth_cost)] for i in mix]))
    res = compact(
        policy(name, d, arch), arch, mix, settings.concurrency / es_seconds, settings, seeds
    )
    return {"architecture": arch_name, "mix": [names[i] for i in mix], "policy": name, **res}


def run(
    settings: Settings, architectures: Sequence[str], policies: Sequence[str]
) -> dict[str, Any]:
    started = time.monotonic()
    names = list(settings.workloads)
    kinds = sorted({"pool" if a.endswith("P") else "local" for a in architectures})
    _JOB_CONTEXT["study"] = ({}, [], settings)
    jobs = [(k, n, settings.profile_seeds, settings.bo_repeats) for k in kinds for n in names]
    studied = dict(pool_unordered(_study_job, jobs, settings.processes))
    data = {k: [studied[k, n] for n in names] for k in kinds}
    _JOB_CONTEXT["job"] = (data, names, settings)
    mixes = mixes_of(names, settings.mixes)
    cluster_jobs = [
        (a, mix, p, settings.order_seeds) for a in architectures for mix in mixes for p in policies
    ]
    rows = list(pool_unordered(_job, cluster_jobs, settings.processes))
    return {
        "schema": "tmc.bench.dra-decisions/v1",
        "settings": {k: v for k, v in settings.__dict__.items()},
        "architectures": list(architectures),
        "policies": list(policies),
        "rows": rows,
        "summary": summarise(rows, architectures, policies),
        "wall_seconds": time.monotonic() - started,
    }


def summarise(
    rows: Sequence[dict[str, Any]], architectures: Sequence[str], policies: Sequence[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """Per architecture and policy: cluster size and mean VM cost against exhaustive search's,
    mean over the mixes (and the worst mix's size)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for a in architectures:
        es = {tuple(r["mix"]): r for r in rows if r["architecture"] == a and r["policy"] == "es"}
        out[a] = {}
        for p in policies:
            mine = [r for r in rows if r["architecture"] == a and r["policy"] == p]
            size = [r["compact_p90"] / es[tuple(r["mix"])]["compact_p90"] for r in mine]
            cost = [r["mean_cost"] / es[tuple(r["mix"])]["mean_cost"] for r in mine]
            out[a][p] = {
                "size_vs_es_mean": float(np.mean(size)),
                "size_vs_es_max": float(np.max(size)),
                "cost_vs_es_mean": float(np.mean(cost)),
                "mixes": float(len(mine)),
            }
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=2.5, help="T, in percent")
    parser.add_argument("--architectures", nargs="+", default=["24G-128L", "24G-384P"])
    parser.add_argument("--mixes", type=int, default=None, help="the first N mixes (all: 15)")
    parser.add_argument("--profile-seeds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="`tmc bench --quick`'s workloads")
    args = parser.parse_args(argv)
    if not 0.0 <= args.threshold <= 100.0:
        parser.error("--threshold is a percentage in 0..100")
    settings = replace(
        QUICK if args.quick else FULL,
        profile_seeds=args.profile_seeds,
        mixes=args.mixes,
        processes=args.processes,
        bo_repeats=0,  # no Bayesian optimisation: the cluster study needs none
    )
    t = f"{args.threshold:g}"
    policies = ["es", f"tmc-{t}", f"dra-{t}", f"drapack-{t}"]
    result = run(settings, args.architectures, policies)
    for a, by in result["summary"].items():
        for p, x in by.items():
            print(
                f"{a:9s} {p:12s} cluster ×{x['size_vs_es_mean']:.3f} of es (worst mix"
                f" ×{x['size_vs_es_max']:.3f}), VM cost ×{x['cost_vs_es_mean']:.3f}"
            )
    print(f"{result['wall_seconds']:.0f} s wall")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    main()
