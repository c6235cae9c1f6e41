"""The calibration protocol: does tmc keep its promises on workloads it was not built on?

    python -m bench.heldout [--seeds 2] [--hosts local cxl_local] [--out DIR] [workload ...]

Per workload, host kind (Optane-like and local CXL) and profile seed: tmc profiles the three
reference runs on the simulator, fits, and predicts the 77 configurations of the paper's grid;
the simulator then runs all 77 with tmc's own placement plan (ground truth for the predictions)
and with the oracle's (exhaustive search's answer). The workloads are Table 5's, the two of
mixed parallelism, and the shapes held out from the model's development (`sim.heldout`:
pointer chasing behind an index, streaming with a small hot set, write-heavy, mixed LLC and
memory sensitivity, a large Zipf-accessed cache).

Measured, per host kind:

- **SLO keeping**: `slo:5%` and `slo:10%` decisions (idle cluster, T = 0, the product's
  confidence), by the model alone and after the verification runs it asks for (each run: the
  simulated time of tmc's placement there with one run's noise); kept when the true slowdown
  against the true fastmax is within the bound.
- **Interval coverage**: the share of the 77 true times inside the two-sided 95 % prediction
  interval, with the product's constants, and leave-one-workload-out: the interval's width
  scaled so that it covers 95 % on the other workloads, then measured on the one left out.
- **Cheapest pick**: the true cost of the `cheapest` choice (after verification) against
  exhaustive search's.
- **Prediction error**: mean and worst |predicted / true - 1| over the 77 configurations, for
  the path tmc takes and for the paper's path on the same bundles.

The simulator never sees the model: every figure is judged by its ground truth.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import NDArray

from model.confidence import prediction_interval
from model.errors import NoFeasibleConfiguration
from model.fit import fit
from model.grid import paper_grid
from model.objectives import Objective, parse_objective
from model.predict import Predictor
from model.pricing import DEFAULT_PRICE_PROFILE
from model.recommend import price_grid, recommend
from model.resources import MachineShape
from model.verification import RUN_NOISE, Observation
from sim.catalog import MIXED_PARALLELISM, TABLE5, workload
from sim.engine import prepare
from sim.heldout import HELDOUT, heldout_workload
from sim.host import ground_truth_grid, run_many
from sim.machine import Host, cxl_local_host, optane_host
from sim.profile import NoiseSpec, reference_bundle
from sim.workload import Workload

FloatArray = NDArray[np.float64]

HOSTS = {"local": optane_host, "cxl_local": cxl_local_host}
WORKLOADS = TABLE5 + MIXED_PARALLELISM + HELDOUT
SLOS = ("slo:5%", "slo:10%")
COVERAGE_LEVEL = 0.95
TARGETS = {
    "slo_kept": 0.95,
    "coverage": (0.90, 0.98),
    "cost_mean": 0.005,
    "cost_worst": 0.03,
    "error_mean": 0.05,
    "error_worst": 0.15,
}


def _workload(name: str) -> Workload:
    return heldout_workload(name) if name in HELDOUT else workload(name)


@dataclass
class Decision:
    objective: str
    config: tuple[float, int]
    true_slowdown: float
    true_cost: float
    es_cost: float  # the cheapest true cost that meets the objective in truth (own placement)
    runs: int
    promise: str


@dataclass
class Case:
    workload: str
    host: str
    seed: int
    penalty_path: str
    errors: list[float]  # per configuration, predicted / true - 1 (tmc's path)
    errors_paper: list[float]
    z_scores: list[float]  # |predicted / true - 1| / sigma
    es_oracle_cost: float
    alone: list[Decision] = field(default_factory=list)
    verified: list[Decision] = field(default_factory=list)
    monotone_violations: int = 0
    # "objective/alone" or "objective/verified" where no configuration met the objective with
    # the model's confidence (tmc answers 422 rather than break a promise).
    infeasible: list[str] = field(default_factory=list)


def _machine(host: Host) -> MachineShape:
    return MachineShape(
        cpus=host.cores,
        dram_bytes=host.fast_tier.capacity_bytes,
        slow_bytes=host.slow_tier.capacity_bytes,
        llc_ways=host.llc_ways,
    )


def study(name: str, host_kind: str, seeds: int) -> list[Case]:
    """Every seed of one workload on one host kind."""
    host = HOSTS[host_kind]()
    w = _workload(name)
    grid = paper_grid()
    ratios, ways = np.asarray(grid.slow_ratios), np.asarray(grid.llc_ways, dtype=np.int64)
    machine = _machine(host)
    prices = DEFAULT_PRICE_PROFILE
    oracle = ground_truth_grid(w, host, seed=0).seconds.ravel()
    prep = prepare(w, host, 0, list(grid.llc_ways))
    cases = []
    for s in range(seeds):
        bundle = reference_bundle(w, host, NoiseSpec(), seed=100 + s)
        fitted = fit(bundle)
        predictor = Predictor(fitted)
        paper = Predictor(fit(bundle, penalties="paper"))
        priced = price_grid(predictor, prices, grid, machine)
        predicted = priced.prediction.seconds.ravel()
        configs = [(float(r), int(k)) for r in ratios for k in ways]
        runs = run_many(prep, [(r, k, predictor.placement(r, k)) for r, k in configs])
        truth = np.asarray([x.wall_seconds for x in runs])
        paper_pred = paper.predict(ratios, ways).seconds.ravel()
        sigma = prediction_interval(priced.prediction, fitted.diagnostics).sigma.ravel()
        hourly = priced.hourly
        true_cost = hourly * truth / 3600.0
        # The true fastmax: all DRAM at the profile's most ways (a grid point when the profile
        # used one of the grid's way counts; else the nearest below).
        fast_col = int(np.flatnonzero(ways <= fitted.ways_max)[-1])
        true_slowdown = truth / truth[fast_col] - 1.0
        case = Case(
            workload=name,
            host=host_kind,
            seed=s,
            penalty_path=fitted.penalty_path,
            errors=(predicted / truth - 1.0).tolist(),
            errors_paper=(paper_pred / truth - 1.0).tolist(),
            z_scores=(np.abs(predicted / truth - 1.0) / np.maximum(sigma, 1e-12)).tolist(),
            es_oracle_cost=float((hourly * oracle / 3600.0).min()),
            monotone_violations=_violations(predicted.reshape(len(ratios), len(ways))),
        )
        rng = np.random.default_rng(7000 + s)
        for spec in ("cheapest", *SLOS):
            objective = parse_objective(spec)
            meets = (
                np.ones(len(truth), dtype=bool)
                if objective.max_slowdown is None
                else true_slowdown <= objective.max_slowdown + 1e-12
            )
            es_cost = float(true_cost[meets].min()) if meets.any() else float("nan")
            for verify, out in ((False, case.alone), (True, case.verified)):
                d = _decide(predictor, objective, machine, configs, truth, verify, rng)
                if d is None:
                    case.infeasible.append(f"{spec}/{'verified' if verify else 'alone'}")
                    continue
                i, n_runs, promise = d
                out.append(
                    Decision(
                        objective=spec,
                        config=configs[i],
                        true_slowdown=float(true_slowdown[i]),
                        true_cost=float(true_cost[i]),
                        es_cost=es_cost,
                        runs=n_runs,
                        promise=promise,
                    )
                )
        cases.append(case)
    return cases


def _violations(seconds: FloatArray) -> int:
    """Predicted times that fall with more slow memory or rise with more ways."""
    tol = 1e-9 * seconds
    ratio = int((np.diff(seconds, axis=0) < -tol[1:]).sum())
    ways = int((np.diff(seconds, axis=1) > tol[:, 1:]).sum())
    return ratio + ways


def _decide(
    predictor: Predictor,
    objective: Objective,
    machine: MachineShape,
    configs: Sequence[tuple[float, int]],
    truth: FloatArray,
    verify: bool,
    rng: np.random.Generator,
) -> tuple[int, int, str] | None:
    """The configuration tmc settles on (index into configs), the runs it took, its promise."""
    observations: list[Observation] = []
    index = {c: i for i, c in enumerate(configs)}
    while True:
        try:
            rec = recommend(
                predictor,
                machine=machine,
                objective=objective,
                threshold=0.0,
                observations=observations,
            )
        except NoFeasibleConfiguration:
            return None
        if not rec.objective_met:  # runs put the objective out of reach
            return None
        v = rec.verification
        if not verify or v is None or v.next_slow_ratio is None or v.next_llc_ways is None:
            c = rec.chosen.configuration
            return index[(c.slow_ratio, c.llc_ways)], len(observations), rec.promise
        at = (v.next_slow_ratio, v.next_llc_ways)
        seconds = float(truth[index[at]]) * (1.0 + RUN_NOISE * rng.standard_normal())
        observations.append(Observation(slow_ratio=at[0], llc_ways=at[1], seconds=seconds))


# -- summary --------------------------------------------------------------------------------------


def summarize(cases: Sequence[Case]) -> dict[str, Any]:
    z = NormalDist().inv_cdf(0.5 + COVERAGE_LEVEL / 2.0)
    out: dict[str, Any] = {}
    for host in sorted({c.host for c in cases}):
        mine = [c for c in cases if c.host == host]
        zs = np.concatenate([np.asarray(c.z_scores) for c in mine])
        # Leave one workload out: the width that covers 95 % on the others, tried on the one.
        loo_hits = []
        names = sorted({c.workload for c in mine})
        for name in names if len(names) > 1 else []:
            train = np.concatenate([np.asarray(c.z_scores) for c in mine if c.workload != name])
            test = np.concatenate([np.asarray(c.z_scores) for c in mine if c.workload == name])
            width = float(np.quantile(train, COVERAGE_LEVEL))
            loo_hits.append(test <= width)
        err = np.concatenate([np.abs(np.asarray(c.errors)) for c in mine])
        err_paper = np.concatenate([np.abs(np.asarray(c.errors_paper)) for c in mine])
        per_workload = {}
        for name in sorted({c.workload for c in mine}):
            e = np.concatenate([np.abs(np.asarray(c.errors)) for c in mine if c.workload == name])
            ep = np.concatenate(
                [np.abs(np.asarray(c.errors_paper)) for c in mine if c.workload == name]
            )
            zz = np.concatenate([np.asarray(c.z_scores) for c in mine if c.workload == name])
            per_workload[name] = {
                "error_mean": float(e.mean()),
                "error_worst": float(e.max()),
                "paper_error_mean": float(ep.mean()),
                "paper_error_worst": float(ep.max()),
                "coverage": float((zz <= z).mean()),
            }
        entry: dict[str, Any] = {
            "cases": len(mine),
            "coverage": float((zs <= z).mean()),
            "coverage_leave_one_out": float(np.concatenate(loo_hits).mean())
            if loo_hits
            else float("nan"),
            "error_mean": float(err.mean()),
            "error_worst": float(err.max()),
            "paper_error_mean": float(err_paper.mean()),
            "paper_error_worst": float(err_paper.max()),
            "monotone_violations": int(sum(c.monotone_violations for c in mine)),
            "per_workload": per_workload,
        }
        for label, pick in (("alone", "alone"), ("verified", "verified")):
            decisions = [d for c in mine for d in getattr(c, pick)]
            for spec in SLOS:
                ds = [d for d in decisions if d.objective == spec]
                bound = parse_objective(spec).max_slowdown or 0.0
                kept = [d.true_slowdown <= bound + 1e-9 for d in ds]
                over = [d.true_cost / d.es_cost - 1.0 for d in ds if np.isfinite(d.es_cost)]
                entry[f"{spec}/{label}"] = {
                    "decisions": len(ds),
                    "no_configuration": sum(c.infeasible.count(f"{spec}/{label}") for c in mine),
                    "kept": float(np.mean(kept)) if ds else float("nan"),
                    "worst_true_slowdown": max((d.true_slowdown for d in ds), default=0.0),
                    "cost_vs_es_mean": float(np.mean(over)) if over else float("nan"),
                    "runs": float(np.mean([d.runs for d in ds])) if ds else 0.0,
                }
            cheap = [d for d in decisions if d.objective == "cheapest"]
            vs_own = [d.true_cost / d.es_cost - 1.0 for d in cheap]
            vs_oracle = [
                d.true_cost / c.es_oracle_cost - 1.0
                for c in mine
                for d in getattr(c, pick)
                if d.objective == "cheapest"
            ]
            entry[f"cheapest/{label}"] = {
                "cost_vs_es_mean": float(np.mean(vs_oracle)),
                "cost_vs_es_worst": float(np.max(vs_oracle)),
                "cost_vs_own_es_mean": float(np.mean(vs_own)),
                "runs": float(np.mean([d.runs for d in cheap])),
            }
        out[host] = entry
    return out


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        "| host | SLO 5 % kept (alone / verified) | SLO 10 % kept | 95 % coverage (product / "
        "leave-one-out) | cheapest vs ES mean / worst | error mean / worst (paper's path) "
        "| runs (cheapest) |",
        "|---|---|---|---|---|---|---|",
    ]
    for host, e in summary.items():
        s5a, s5v = e["slo:5%/alone"], e["slo:5%/verified"]
        s10a, s10v = e["slo:10%/alone"], e["slo:10%/verified"]
        cv = e["cheapest/verified"]
        lines.append(
            f"| {host} | {s5a['kept']:.1%} / {s5v['kept']:.1%} | {s10a['kept']:.1%} /"
            f" {s10v['kept']:.1%} | {e['coverage']:.1%} / {e['coverage_leave_one_out']:.1%} |"
            f" {cv['cost_vs_es_mean']:+.2%} / {cv['cost_vs_es_worst']:+.2%} |"
            f" {e['error_mean']:.1%} / {e['error_worst']:.1%} ({e['paper_error_mean']:.1%} /"
            f" {e['paper_error_worst']:.1%}) | {cv['runs']:.2f} |"
        )
    lines += ["", "| host | workload | error mean / worst | paper's path | 95 % coverage |"]
    lines.append("|---|---|---|---|---|")
    for host, e in summary.items():
        for name, w in e["per_workload"].items():
            lines.append(
                f"| {host} | {name} | {w['error_mean']:.1%} / {w['error_worst']:.1%} |"
                f" {w['paper_error_mean']:.1%} / {w['paper_error_worst']:.1%} |"
                f" {w['coverage']:.1%} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", help=f"default: {' '.join(WORKLOADS)}")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--hosts", nargs="*", default=list(HOSTS), choices=sorted(HOSTS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    names = args.workloads or list(WORKLOADS)
    started = time.perf_counter()
    cases = [c for host in args.hosts for n in names for c in study(n, host, args.seeds)]
    summary = summarize(cases)
    summary["seconds"] = time.perf_counter() - started
    text = markdown({k: v for k, v in summary.items() if k != "seconds"})
    print(text)
    print(f"\n{len(cases)} cases in {summary['seconds']:.0f} s")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "heldout.json").write_text(
            json.dumps({"summary": summary, "cases": [asdict(c) for c in cases]}, indent=1)
        )
        (args.out / "heldout.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
