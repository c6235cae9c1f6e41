"""Real programs, end to end: does the advice for a traced C program agree with its own truth?

    python -m bench.real_programs [--out DIR] [--keep DIR] [program ...]

Each program of the corpus (`profiler-agent/corpus/*.c`) is built with gcc and profiled through
the real CLI, `tmc-agent profile --backend trace`, which keeps the program's LLC access stream
in its work directory. tmc fits the bundle and predicts the paper's 77 configurations; the host
model then replays the same stream at every configuration with the placement tmc's plan applies
there (its ground truth: the three reference runs are three of these replays). Per program:

- the cheapest pick's true cost against the truly cheapest configuration (own placement);
- the prediction error over the grid (mean |predicted / true - 1|) and its worst point;
- the error at each reference configuration (the trace backend's runs have no noise, so the
  model must pass through them);
- whether the `slo:5%` and `slo:10%` picks keep their bound in truth (by the model alone);
- the share of true times under the one-sided upper bound at 90 % and at the product's 99 %.

The simulator never evaluates the model: every figure is a prediction judged by a replay.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import NDArray

from model.bundle import ProfileBundle, parse_bundle
from model.confidence import DEFAULT_CONFIDENCE, prediction_interval
from model.errors import NoFeasibleConfiguration
from model.fit import fit
from model.grid import paper_grid
from model.objectives import parse_objective
from model.predict import Predictor
from model.pricing import DEFAULT_PRICE_PROFILE
from model.recommend import machine_of_host, price_grid, recommend

FloatArray = NDArray[np.float64]

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "profiler-agent" / "corpus"
ALLOC = ROOT / "profiler-agent" / "alloc"
EXAMPLES = ROOT / "profiler-agent" / "examples"
# Each program with the arguments that keep its trace to a few seconds. The order is the table's.
PROGRAMS: dict[str, list[str]] = {
    "twotier": ["64", "4", "2000000"],
    "writesweep": ["48", "3"],
    "hashupdate": ["8", "1500000"],
    "listchase": ["6", "3"],
    "tree": ["200000", "600000"],
    "stream": ["16", "4"],
    "bfs": ["16", "6", "2"],
    "sort": ["1500000"],
    "kvstore": ["32", "1000000"],
    "phases": ["8", "4", "400000"],
}
# A fast subset for the test suite: store-heavy, pointer chasing and a moving hot set.
FAST = ("twotier", "listchase", "phases")
SLOS = ("slo:5%", "slo:10%")
UPPER_LEVEL = 0.90


@dataclass
class Decision:
    objective: str
    slow_ratio: float
    llc_ways: int
    predicted_slowdown: float
    true_slowdown: float
    true_cost_over_best: float  # against the truly cheapest configuration meeting the objective
    promise: str


@dataclass
class ProgramResult:
    program: str
    fit_path: str
    flags: list[str]
    reference_errors: dict[str, float]  # predicted / measured - 1 at each reference run
    errors: list[float]  # per grid point, predicted / true - 1
    covered_90: list[bool]  # true time under the 90 % one-sided upper bound
    covered_product: list[bool]  # under the product's (99 %) upper bound
    decisions: list[Decision] = field(default_factory=list)
    infeasible: list[str] = field(default_factory=list)
    trace_seconds: float = 0.0

    @property
    def mape(self) -> float:
        return float(np.mean(np.abs(self.errors)))

    @property
    def worst(self) -> float:
        return float(np.max(np.abs(self.errors)))

    def decision(self, objective: str) -> Decision | None:
        return next((d for d in self.decisions if d.objective == objective), None)


def build(name: str, out: Path) -> Path:
    """Compile one corpus program (-O2, the shim's header for its tags)."""
    out.mkdir(parents=True, exist_ok=True)
    exe = out / name
    # The agent's BFS example (profiler-agent/examples) is the corpus's graph traversal.
    source = CORPUS / f"{name}.c"
    if not source.exists():
        source = EXAMPLES / f"{name}.c"
    subprocess.run(
        ["gcc", "-O2", "-g", f"-I{ALLOC}", "-o", str(exe), str(source)],
        check=True,
        capture_output=True,
        text=True,
    )
    return exe


def profile(name: str, exe: Path, workdir: Path, args: Sequence[str]) -> Path:
    """`tmc-agent profile --backend trace`, as a user runs it; returns the bundle's path (the LLC
    stream is kept next to it)."""
    agent = Path(sys.executable).with_name("tmc-agent")
    bundle = workdir / f"{name}.json"
    done = subprocess.run(
        [
            str(agent),
            "profile",
            "--backend",
            "trace",
            "--name",
            name,
            "--out",
            str(bundle),
            "--workdir",
            str(workdir),
            "--",
            str(exe),
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"profiling {name} failed: {done.stderr.strip()[-2000:]}")
    return bundle


def evaluate(name: str, bundle: ProfileBundle, stream: Path) -> ProgramResult:
    """Judge tmc's advice for one traced program against the replays of its own stream."""
    # The simulator side (numba) loads here, not at import: the model's tests import this module.
    from tmc_agent.backends.trace import (  # noqa: PLC0415
        TraceOptions,
        load_attributed,
        prepared_from_attributed,
    )

    from sim.host import run_many  # noqa: PLC0415

    fitted = fit(bundle)
    predictor = Predictor(fitted)
    grid = paper_grid()
    machine = machine_of_host(bundle.host)
    priced = price_grid(predictor, DEFAULT_PRICE_PROFILE, grid, machine)
    ratios = np.asarray(grid.slow_ratios, dtype=np.float64)
    ways = np.asarray(grid.llc_ways, dtype=np.int64)
    configs = [(float(r), int(k)) for r in ratios for k in ways]
    prep = prepared_from_attributed(load_attributed(stream), TraceOptions(name=name))
    runs = run_many(prep, [(r, k, predictor.placement(r, k)) for r, k in configs])
    truth = np.asarray([x.wall_seconds for x in runs])
    predicted = priced.prediction.seconds.ravel()
    sigma = prediction_interval(priced.prediction, fitted.diagnostics).promise_sigma.ravel()
    z90 = NormalDist().inv_cdf(UPPER_LEVEL)
    z_product = NormalDist().inv_cdf(DEFAULT_CONFIDENCE)

    index = {c: i for i, c in enumerate(configs)}
    refs: dict[str, float] = {}
    for run in bundle.runs:
        c = (run.configuration.slow_ratio, run.configuration.llc_ways)
        if c in index:
            refs[run.name] = float(predicted[index[c]] / run.wall_seconds - 1.0)
    fast = index.get((0.0, fitted.ways_max), 0)
    true_slowdown = truth / truth[fast] - 1.0
    true_cost = priced.hourly * truth / 3600.0
    result = ProgramResult(
        program=name,
        fit_path=fitted.diagnostics.path,
        flags=[f.code for f in fitted.diagnostics.flags],
        reference_errors=refs,
        errors=(predicted / truth - 1.0).tolist(),
        covered_90=(truth <= predicted * (1.0 + z90 * sigma)).tolist(),
        covered_product=(truth <= predicted * (1.0 + z_product * sigma)).tolist(),
    )
    for spec in ("cheapest", *SLOS):
        objective = parse_objective(spec)
        try:
            rec = recommend(predictor, machine=machine, objective=objective, threshold=0.0)
        except NoFeasibleConfiguration:
            result.infeasible.append(spec)
            continue
        chosen = rec.chosen.configuration
        i = index[(chosen.slow_ratio, chosen.llc_ways)]
        meets = (
            np.ones(len(truth), dtype=bool)
            if objective.max_slowdown is None
            else true_slowdown <= objective.max_slowdown + 1e-12
        )
        best = float(true_cost[meets].min()) if meets.any() else float("nan")
        result.decisions.append(
            Decision(
                objective=spec,
                slow_ratio=chosen.slow_ratio,
                llc_ways=chosen.llc_ways,
                predicted_slowdown=float(rec.chosen.slowdown),
                true_slowdown=float(true_slowdown[i]),
                true_cost_over_best=float(true_cost[i] / best - 1.0),
                promise=rec.promise,
            )
        )
    return result


def run_program(name: str, work: Path) -> ProgramResult:
    exe = build(name, work / "bin")
    workdir = work / name
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    path = profile(name, exe, workdir, PROGRAMS[name])
    elapsed = time.perf_counter() - started
    result = evaluate(name, parse_bundle(path.read_text()), workdir / "llc_stream.npz")
    result.trace_seconds = elapsed
    return result


def summarize(results: Sequence[ProgramResult]) -> dict[str, Any]:
    cheap = [r.decision("cheapest") for r in results]
    gaps = [d.true_cost_over_best for d in cheap if d is not None]
    out: dict[str, Any] = {
        "programs": len(results),
        "cheapest_gap_mean": float(np.mean(gaps)) if gaps else float("nan"),
        "cheapest_gap_worst": float(np.max(gaps)) if gaps else float("nan"),
        "mape": float(np.mean(np.concatenate([np.abs(r.errors) for r in results]))),
        "mape_worst_program": max(r.mape for r in results),
        "worst_point": max(r.worst for r in results),
        "reference_error_worst": max(
            (abs(v) for r in results for v in r.reference_errors.values()), default=0.0
        ),
        "coverage_90": float(np.mean(np.concatenate([r.covered_90 for r in results]))),
        "coverage_product": float(np.mean(np.concatenate([r.covered_product for r in results]))),
    }
    for spec in SLOS:
        bound = parse_objective(spec).max_slowdown or 0.0
        ds = [d for r in results if (d := r.decision(spec)) is not None]
        out[spec] = {
            "decisions": len(ds),
            "kept": sum(d.true_slowdown <= bound + 1e-9 for d in ds),
            "no_configuration": sum(spec in r.infeasible for r in results),
        }
    return out


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def markdown(results: Sequence[ProgramResult], summary: dict[str, Any]) -> str:
    lines = [
        "| program | fit path | cheapest: true gap to best | MAPE / worst | error at fastmax,"
        " fastmin, slowmax | slo:5% kept (true) | slo:10% kept (true) | upper-bound coverage"
        " 90 % / 99 % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        cheap = r.decision("cheapest")
        slo = []
        for spec in SLOS:
            d = r.decision(spec)
            bound = parse_objective(spec).max_slowdown or 0.0
            slo.append(
                "no configuration"
                if d is None
                else f"{'yes' if d.true_slowdown <= bound + 1e-9 else 'NO'} ({_pct(d.true_slowdown)})"
            )
        ref = ", ".join(
            _pct(r.reference_errors[n])
            for n in ("fastmax", "fastmin", "slowmax")
            if n in r.reference_errors
        )
        lines.append(
            f"| {r.program} | {r.fit_path} | {_pct(cheap.true_cost_over_best) if cheap else '-'}"
            f" | {r.mape:.1%} / {r.worst:.1%} | {ref} | {slo[0]} | {slo[1]} |"
            f" {np.mean(r.covered_90):.0%} / {np.mean(r.covered_product):.0%} |"
        )
    s = summary
    s5, s10 = s["slo:5%"], s["slo:10%"]
    lines += [
        "",
        f"cheapest pick vs the true best: mean {_pct(s['cheapest_gap_mean'])}, worst"
        f" {_pct(s['cheapest_gap_worst'])}",
        f"prediction error (MAPE over {s['programs']} x 77 points): {s['mape']:.1%} (worst"
        f" program {s['mape_worst_program']:.1%}, worst point {s['worst_point']:.1%});"
        f" worst miss at a reference run {s['reference_error_worst']:.2%}",
        f"slo:5% kept in truth: {s5['kept']} of {s5['decisions']} (no configuration:"
        f" {s5['no_configuration']}); slo:10%: {s10['kept']} of {s10['decisions']} (no"
        f" configuration: {s10['no_configuration']})",
        f"upper bounds covering the truth: {s['coverage_90']:.1%} at 90 %,"
        f" {s['coverage_product']:.1%} at the product's 99 %",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*", help=f"default: {' '.join(PROGRAMS)}")
    parser.add_argument("--fast", action="store_true", help=f"only {', '.join(FAST)}")
    parser.add_argument("--out", type=Path, default=None, help="write the figures (json, md)")
    parser.add_argument("--keep", type=Path, default=None, help="keep builds, bundles, streams")
    args = parser.parse_args(argv)
    names = args.programs or (list(FAST) if args.fast else list(PROGRAMS))
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        parser.error(f"unknown program(s) {unknown}: one of {list(PROGRAMS)}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tmc-real-") as tmp:
        work = args.keep or Path(tmp)
        results = [run_program(n, work) for n in names]
    summary = summarize(results)
    text = markdown(results, summary)
    print(text)
    print(f"\n{len(results)} programs in {time.perf_counter() - started:.0f} s")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "real_programs.json").write_text(
            json.dumps({"summary": summary, "programs": [asdict(r) for r in results]}, indent=1)
        )
        (args.out / "real_programs.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
