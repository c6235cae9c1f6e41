"""`python -m bench.tiering_judges`: the tiering advice on held-out shapes, judged by two
independent page managers.

Judges: the sampling, HeMem-like manager of `sim/tiering/manager.py`, and the hint-fault,
TPP-like manager of `sim/tiering/tpp.py` (other promotion path, other costs). Shapes:
`sim/tiering/heldout.py`, on which none of the advisor's constants was chosen. Per judge, shape,
host and seed, the profile comes from one run (what the agent records, with the judge's own
counters at the fast size in use, all of the footprint) and every decision is judged on another
run of the same workload (seed + 100), never by the model:

- Size: the advised fast tier's true loss against τ, and the saving against the largest one a
  2 % sweep of sizes finds within τ (the oracle). Beside that one judged run, the advised size
  and the whole footprint fast are run on further runs of the workload (seeds no decision and no
  other case saw, `spread_runs` of them): how often a run is over τ at the advice where it is
  within τ all fast is the size's own risk, which one judged run a case shows only by luck.
- Period, at the advised size: the best of the advisor's trials (at most 3, the period in use the
  first) against the best of a 25-period sweep, and the period in use against it too.
- Knobs, at the advised size and period: 30 trials of the tuner, then the advice with the
  configuration in use (its knobs at its period) as the guard; the advised configuration's time
  against the one in use.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.pools import pool_map
from model.tiering import TieringRequest, advise
from model.tiering.advise import TPP_SPACE
from model.tiering.period import period_plan, run_trials
from model.tiering.profile import TieringProfile
from model.tiering.sizing import MAX_SIZE_TRIALS, SizeMeasurement, SizingAdvice, size_fast_tier
from model.tiering.tune import HEMEM_SPACE, KnobSpace, KnobTuner, advise_knobs
from sim.machine import PRESETS
from sim.tiering.heldout import HELD_OUT_WORKLOADS
from sim.tiering.manager import Knobs, run
from sim.tiering.profile import tiering_profile
from sim.tiering.streams import STUDY_WORKLOADS, Stream, TieringWorkload, draw_stream
from sim.tiering.tpp import TppKnobs, run_tpp, tpp_profile

TARGETS = {
    "loss_met_share": 0.95,
    "saved_share_mean": 0.10,
    "period_regret_mean": 0.01,
    "period_regret_max": 0.03,
    "period_trials": 3,
}
IN_USE_PERIOD_TICKS = 8
EVAL_SEED_OFFSET = 100


@dataclass(frozen=True)
class Settings:
    judges: tuple[str, ...] = ("hemem-like", "tpp-like")
    workloads: tuple[str, ...] = tuple(HELD_OUT_WORKLOADS)
    hosts: tuple[str, ...] = ("optane", "cxl_local")
    seeds: tuple[int, ...] = (11, 12, 13)
    loss_target: float = 0.05
    sizing_step: float = 0.02
    period_grid_points: int = 25
    knob_trials: int = 30
    processes: int = 2
    # Further runs of the workload at the advised size (seeds no decision saw).
    spread_runs: int = 20


FULL = Settings()
QUICK = Settings(
    workloads=("two-heats",),
    hosts=("cxl_local",),
    seeds=(11,),
    sizing_step=0.1,
    period_grid_points=6,
    knob_trials=6,
    processes=1,
    spread_runs=3,
)


def _limit(stream: Stream, share: float) -> int:
    w = stream.workload
    return math.floor(share * w.pages + 1e-9) * w.page_bytes


class Judge:
    """One page manager's ground truth on one stream: run time at a size, period and knobs."""

    def __init__(self, kind: str, stream: Stream, host_name: str) -> None:
        self.kind = kind
        self.stream = stream
        self.host = PRESETS[host_name]()
        self.space: KnobSpace = HEMEM_SPACE if kind == "hemem-like" else TPP_SPACE
        self.memo: dict[tuple[int, int, tuple[tuple[str, float], ...]], float] = {}

    def seconds(self, fast_bytes: int, period_ticks: int, knobs: dict[str, float]) -> float:
        w = self.stream.workload
        period_ticks = max(1, min(w.ticks // 2, period_ticks))
        key = (fast_bytes, period_ticks, tuple(sorted(knobs.items())))
        if key not in self.memo:
            if self.kind == "hemem-like":
                base = Knobs().model_dump()
                for k, v in knobs.items():
                    base[k] = (
                        v if k in ("demotion_watermark", "migration_rate_limit_mbps") else round(v)
                    )
                knob_set = Knobs(**base)
                self.memo[key] = run(
                    self.stream, self.host, fast_bytes, knob_set, period_ticks
                ).wall_seconds
            else:
                self.memo[key] = run_tpp(
                    self.stream, self.host, fast_bytes, TppKnobs(**knobs), period_ticks
                ).wall_seconds
        return self.memo[key]


def profile_for(kind: str, stream: Stream, host_name: str) -> TieringProfile:
    host = PRESETS[host_name]()
    if kind == "hemem-like":
        return tiering_profile(stream, host, period_ticks=IN_USE_PERIOD_TICKS)
    return tpp_profile(stream, host, scan_ticks=IN_USE_PERIOD_TICKS)


def shape(name: str) -> TieringWorkload:
    """A held-out shape, or one of the study's (the shapes the advisor was made on)."""
    make = HELD_OUT_WORKLOADS.get(name) or STUDY_WORKLOADS[name]
    return make()


def case(kind: str, workload: str, host_name: str, seed: int, s: Settings) -> dict[str, Any]:
    w = shape(workload)
    profile = profile_for(kind, draw_stream(w, seed), host_name)
    truth = draw_stream(w, seed + EVAL_SEED_OFFSET)
    judge = Judge(kind, truth, host_name)
    in_use_knobs = judge.space.default()
    ref = run(truth, judge.host, w.footprint_bytes, managed=False).wall_seconds
    tick = profile.wall_seconds_fast / w.ticks

    def loss(share: float) -> float:
        return judge.seconds(_limit(truth, share), IN_USE_PERIOD_TICKS, in_use_knobs) / ref - 1.0

    # Size: the advice from the profile alone, then the size trials it names, each one run of
    # the workload (another seed per run) at the named size, until it names none.
    started = time.thread_time()
    advice = advise(profile, TieringRequest(loss_target=s.loss_target))
    advice_cpu = time.thread_time() - started
    first_share = advice.sizing.fast_bytes / profile.footprint_bytes
    first_loss = loss(first_share)
    sweep = [(float(f), loss(float(f))) for f in np.arange(1.0, -1e-9, -s.sizing_step)]
    within = [f for f, x in sweep if x <= s.loss_target]
    oracle_saved = 1.0 - min(within) if within else 0.0
    size_trials: list[SizeMeasurement] = []
    sizing = advice.sizing
    while sizing.next_trial_fast_bytes is not None:
        again = Judge(
            kind, draw_stream(w, seed + 2 * EVAL_SEED_OFFSET + 10 * len(size_trials)), host_name
        )
        at_bytes = max(1, _limit(again.stream, sizing.next_trial_fast_bytes / w.footprint_bytes))
        size_trials.append(
            SizeMeasurement(
                fast_bytes=at_bytes,
                wall_seconds=again.seconds(at_bytes, IN_USE_PERIOD_TICKS, in_use_knobs),
            )
        )
        started = time.thread_time()
        sizing = size_fast_tier(profile, s.loss_target, measured=size_trials)
        advice_cpu = max(advice_cpu, time.thread_time() - started)
    share = sizing.fast_bytes / profile.footprint_bytes
    true_loss = loss(share)
    feasible = bool(within)
    met = size_met(feasible, true_loss, sizing, s.loss_target)
    spread = losses_over_runs(kind, w, host_name, share, seed, s.spread_runs, in_use_knobs)
    over = [x > s.loss_target + 1e-12 for x, _ in spread]
    fast_within = [y <= s.loss_target + 1e-12 for _, y in spread]

    # Period, at the advised size.
    limit = _limit(truth, share)

    def at_period(seconds: float) -> float:
        return judge.seconds(limit, round(seconds / tick), in_use_knobs)

    grid = sorted(
        {round(p) for p in np.geomspace(1, w.ticks // 2, s.period_grid_points)}
        | {IN_USE_PERIOD_TICKS}
    )
    by_ticks = {k: judge.seconds(limit, k, in_use_knobs) for k in grid}
    plan = period_plan(profile, fast_share=share, offset=advice.sizing.anchor_offset)
    chosen, plan_seconds, spent = run_trials(plan, at_period)
    in_use = by_ticks[IN_USE_PERIOD_TICKS]
    best_period = min(*by_ticks.values(), plan_seconds)
    predicted = [t.predicted_loss for t in plan.ladder]
    measured = [at_period(t.period_seconds) for t in plan.ladder]
    rank = (
        float(
            np.corrcoef(np.argsort(np.argsort(predicted)), np.argsort(np.argsort(measured)))[0, 1]
        )
        if len(set(predicted)) > 1 and len(set(measured)) > 1
        else None
    )

    # Knobs, at the advised size and the chosen period.
    period_ticks = max(1, round(chosen.period_seconds / tick))
    tuner = KnobTuner(profile, judge.space, chosen.period_seconds, share, s.knob_trials)
    trials: list[tuple[dict[str, float], float]] = []
    for _ in range(s.knob_trials):
        nxt = tuner.ask()
        if nxt is None:
            break
        seconds = judge.seconds(limit, period_ticks, nxt)
        tuner.tell(nxt, seconds)
        trials.append((nxt, seconds))
    from model.tiering.tune import Trial  # noqa: PLC0415 - beside its only use

    final = advise_knobs(
        profile,
        [Trial(knobs=k, wall_seconds=v) for k, v in trials],
        judge.space,
        chosen.period_seconds,
        share,
        s.knob_trials,
        in_use_wall_seconds=in_use,
    )
    final_seconds = (
        judge.seconds(limit, period_ticks, final.best) if not final.is_default else plan_seconds
    )
    return {
        "judge": kind,
        "workload": workload,
        "host": host_name,
        "seed": seed,
        "advice_cpu_seconds": advice_cpu,
        "sizing": {
            "first_fast_share": first_share,
            "first_saved_share": advice.sizing.saved_share,
            "first_predicted_loss": advice.sizing.predicted_loss,
            "first_true_loss": first_loss,
            "first_met": first_loss <= s.loss_target + 1e-12,
            "advised_fast_share": share,
            "saved_share": sizing.saved_share,
            "predicted_loss": sizing.predicted_loss,
            "true_loss": true_loss,
            "met": met,
            "size_trials": len(size_trials),
            "verified": sizing.verified,
            "said_unreachable": not sizing.target_reachable,
            # Some size meets τ at all (else the manager's own overhead at a full fast tier is
            # over τ, and no advice can meet it).
            "feasible": feasible,
            "oracle_saved_share": oracle_saved,
            "correction": advice.sizing.anchor_offset,
            "all_fast_loss": sweep[0][1],
            "predicted_at_oracle": _predicted_at(advice.sizing.curve, 1.0 - oracle_saved),
            # The advised size on further runs of the workload: how often a run is over τ there,
            # and how often where the whole footprint fast is within τ in the same run.
            "spread_runs": len(spread),
            "runs_over_target": int(sum(over)),
            "runs_all_fast_within": int(sum(fast_within)),
            "runs_over_where_all_fast_within": int(
                sum(o and f for o, f in zip(over, fast_within, strict=True))
            ),
            "run_loss_median": float(np.median([x for x, _ in spread])) if spread else None,
            "run_loss_max": float(max(x for x, _ in spread)) if spread else None,
        },
        "period": {
            "dominant_reuse_ticks": plan.dominant_reuse_seconds / tick,
            "trial_ticks": [t.period_seconds / tick for t in plan.trials],
            "chosen_ticks": chosen.period_seconds / tick,
            "trials": spent,
            "regret": plan_seconds / best_period - 1.0,
            "in_use_regret": in_use / best_period - 1.0,
            "never_worse_than_in_use": plan_seconds <= in_use * (1 + 1e-12),
            "rank_correlation": rank,
        },
        "knobs": {
            "trials": len(trials),
            "advised": final.best,
            "is_in_use": final.is_default,
            "speedup_over_in_use": in_use / final_seconds,
            # The advised configuration (size, period, knobs) against τ.
            "final_loss": final_seconds / ref - 1.0,
            "never_slower_than_in_use": final_seconds <= in_use * (1 + 1e-12),
        },
    }


def losses_over_runs(
    kind: str,
    w: TieringWorkload,
    host_name: str,
    share: float,
    seed: int,
    runs: int,
    knobs: dict[str, float],
) -> list[tuple[float, float]]:
    """(loss at `share`, loss all fast), the period and knobs in use, on `runs` further runs of
    the workload, each against its own run without the manager; seeds 1000 × seed + 300, + 301,
    …, which neither the profile, the size trials nor the judged run used, and which another
    seed's further runs never share (a report on fresh seeds is judged on fresh runs too)."""
    out: list[tuple[float, float]] = []
    for k in range(runs):
        stream = draw_stream(w, 1000 * seed + 3 * EVAL_SEED_OFFSET + k)
        judge = Judge(kind, stream, host_name)
        ref = run(stream, judge.host, w.footprint_bytes, managed=False).wall_seconds
        at_share, all_fast = (
            judge.seconds(_limit(stream, x), IN_USE_PERIOD_TICKS, knobs) / ref - 1.0
            for x in (share, 1.0)
        )
        out.append((at_share, all_fast))
    return out


def size_met(feasible: bool, true_loss: float, sizing: SizingAdvice, loss_target: float) -> bool:
    """τ met by the size advice. Where some size meets τ in the judged run, by its true loss,
    whatever the advice said. Where none does (the manager's own overhead at a full fast tier is
    over τ), only if the advice says so and keeps the whole footprint fast: that is the best any
    size does there, and the period and the knobs, or turning the manager off, are the way down."""
    if feasible:
        return true_loss <= loss_target + 1e-12
    return not sizing.target_reachable and sizing.fast_share >= 1.0


def _predicted_at(curve: Sequence[Any], share: float) -> float:
    point = min(curve, key=lambda p: abs(p.fast_share - share))
    return float(point.predicted_loss)


def _job(args: tuple[str, str, str, int, Settings]) -> dict[str, Any]:
    return case(*args)


def summarise(cases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    def block(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        sz = [r["sizing"] for r in rows]
        pe = [r["period"] for r in rows]
        kn = [r["knobs"] for r in rows]
        ranks = [p["rank_correlation"] for p in pe if p["rank_correlation"] is not None]
        feasible = [x for x in sz if x["feasible"]]
        # A report from before the further runs has none. Pooled over the cases' runs.
        spread = [x for x in sz if x.get("spread_runs")]
        within_all_fast = sum(x["runs_all_fast_within"] for x in spread)
        over_there = sum(x["runs_over_where_all_fast_within"] for x in spread)
        return {
            "cases": len(rows),
            "first_loss_met_share": float(np.mean([x["first_met"] for x in sz])),
            "first_loss_met_where_feasible_share": (
                float(np.mean([x["first_met"] for x in feasible])) if feasible else None
            ),
            "first_saved_share_mean": float(np.mean([x["first_saved_share"] for x in sz])),
            "first_predicted_minus_true_mean": float(
                np.mean([x["first_predicted_loss"] - x["first_true_loss"] for x in sz])
            ),
            "loss_met_share": float(np.mean([x["met"] for x in sz])),
            "infeasible_cases": len(sz) - len(feasible),
            "loss_met_where_feasible_share": (
                float(np.mean([x["met"] for x in feasible])) if feasible else None
            ),
            "true_loss_max": float(max(x["true_loss"] for x in sz)),
            "true_loss_max_where_feasible": (
                float(max(x["true_loss"] for x in feasible)) if feasible else None
            ),
            "size_trials_mean": float(np.mean([x["size_trials"] for x in sz])),
            "size_trials_max": int(max(x["size_trials"] for x in sz)),
            "infeasible_said_so": int(sum(x["said_unreachable"] for x in sz if not x["feasible"])),
            "feasible_said_unreachable": int(sum(x["said_unreachable"] for x in feasible)),
            "infeasible_final_within": int(
                sum(
                    r["knobs"]["final_loss"] <= 0.05 + 1e-12
                    for r in rows
                    if not r["sizing"]["feasible"]
                )
            ),
            "runs_within_share": (
                1.0
                - sum(x["runs_over_target"] for x in spread) / sum(x["spread_runs"] for x in spread)
                if spread
                else None
            ),
            "runs_within_where_all_fast_within_share": (
                1.0 - over_there / within_all_fast if within_all_fast else None
            ),
            "cases_over_where_all_fast_within_5": (
                int(
                    sum(
                        x["runs_over_where_all_fast_within"] > 0.05 * x["runs_all_fast_within"]
                        for x in spread
                    )
                )
                if spread
                else None
            ),
            "spread_cases": len(spread),
            "saved_share_mean": float(np.mean([x["saved_share"] for x in sz])),
            "oracle_saved_share_mean": float(np.mean([x["oracle_saved_share"] for x in sz])),
            "all_fast_advised": int(sum(x["saved_share"] == 0 for x in sz)),
            "predicted_minus_true_mean": float(
                np.mean([x["predicted_loss"] - x["true_loss"] for x in sz])
            ),
            "period_regret_mean": float(np.mean([p["regret"] for p in pe])),
            "period_regret_max": float(max(p["regret"] for p in pe)),
            "period_in_use_regret_mean": float(np.mean([p["in_use_regret"] for p in pe])),
            "period_trials_max": int(max(p["trials"] for p in pe)),
            "period_never_worse_share": float(np.mean([p["never_worse_than_in_use"] for p in pe])),
            "period_rank_correlation_mean": float(np.mean(ranks)) if ranks else None,
            "knobs_never_slower_share": float(np.mean([k["never_slower_than_in_use"] for k in kn])),
            "knobs_speedup_mean": float(np.mean([k["speedup_over_in_use"] for k in kn])),
            "knobs_speedup_max": float(max(k["speedup_over_in_use"] for k in kn)),
            "advice_cpu_seconds_max": float(max(r["advice_cpu_seconds"] for r in rows)),
        }

    judges = sorted({c["judge"] for c in cases})
    return {"all": block(cases)} | {j: block([c for c in cases if c["judge"] == j]) for j in judges}


def run_judges(s: Settings, out: Path | None = None, quick: bool = False) -> dict[str, Any]:
    start = time.perf_counter()
    cpu = time.process_time()
    jobs = [
        (j, w, h, seed, s)
        for j in s.judges
        for w in s.workloads
        for h in s.hosts
        for seed in s.seeds
    ]
    cases = pool_map(_job, jobs, s.processes, start="spawn")
    data: dict[str, Any] = {
        "schema": "tmc.bench.tiering-judges/v1",
        "quick": quick,
        "settings": asdict(s),
        "targets": TARGETS,
        "summary": summarise(cases),
        "cases": cases,
        "wall_seconds": time.perf_counter() - start,
        "parent_cpu_seconds": time.process_time() - cpu,
        "load_average": list(os.getloadavg()),
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        stem = "tiering-judges-quick" if quick else "tiering-judges"
        if set(s.workloads) <= set(STUDY_WORKLOADS):
            stem += "-study-shapes"
        if not quick and s.seeds != FULL.seeds:
            stem += "-seeds-" + "-".join(str(x) for x in s.seeds)
        write_report(data, out, stem)
    return data


def write_report(data: dict[str, Any], out: Path, stem: str) -> None:
    """The JSON, the markdown and the figure (`<stem>.png`, linked from the markdown)."""
    from bench.tiering_judges_plot import write_plot  # noqa: PLC0415 - matplotlib loads here

    (out / f"{stem}.json").write_text(json.dumps(data, indent=2) + "\n")
    write_plot(data, out / f"{stem}.png")
    (out / f"{stem}.md").write_text(markdown(data, f"{stem}.png"))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _spread(sz: dict[str, Any]) -> str:
    if not sz.get("spread_runs"):
        return "-"
    over = sz["runs_over_target"]
    return (
        f"{over} of {sz['spread_runs']} ({_pct(sz['run_loss_median'])},"
        f" {_pct(sz['run_loss_max'])}) / {sz['spread_runs'] - sz['runs_all_fast_within']}"
    )


def markdown(data: dict[str, Any], figure: str | None = None) -> str:
    t = data["targets"]
    lines = [
        f"# Tiering advice against two judges{' (quick)' if data['quick'] else ''}",
        "",
        f"Shapes ({', '.join(data['settings']['workloads'])}) on"
        f" {', '.join(data['settings']['hosts'])}, seeds {data['settings']['seeds']}; profile"
        f" from one run, judged on another (seed + {EVAL_SEED_OFFSET}). τ ="
        f" {_pct(data['settings']['loss_target'])}. {data['wall_seconds']:.0f} s wall, load"
        f" average {data['load_average'][0]:.1f} at the end.",
        "",
        "| question | target | " + " | ".join(k for k in data["summary"] if k != "all") + " |",
        "|---|---|" + "---|" * (len(data["summary"]) - 1),
    ]
    judges = [k for k in data["summary"] if k != "all"]

    def row(label: str, target: str, fmt: Callable[[dict[str, Any]], str]) -> None:
        lines.append(
            f"| {label} | {target} | " + " | ".join(fmt(data["summary"][j]) for j in judges) + " |"
        )

    row("cases", "", lambda x: str(x["cases"]))
    row(
        "from the profile alone: τ met (where some size meets it) / saved",
        f"≥ {_pct(t['loss_met_share'])} / ≥ {_pct(t['saved_share_mean'])}",
        lambda x: (
            f"{_pct(x['first_loss_met_share'])} ({_pct(x['first_loss_met_where_feasible_share'])})"
            f" / {_pct(x['first_saved_share_mean'])}"
        ),
    )
    row(
        "after the size trials: τ met (a case where no size meets τ counts as met only if the"
        " advice says so and keeps all of it fast)",
        f"≥ {_pct(t['loss_met_share'])}",
        lambda x: f"{_pct(x['loss_met_share'])}",
    )
    row(
        "τ met where some size meets it",
        f"≥ {_pct(t['loss_met_share'])}",
        lambda x: (
            f"{_pct(x['loss_met_where_feasible_share'])}"
            f" (worst {_pct(x['true_loss_max_where_feasible'])})"
        ),
    )
    row(
        "further runs of the workload at the advised size: within τ / within τ where all fast is"
        " (cases over τ in more than 5 % of those runs)",
        "",
        lambda x: (
            "-"
            if x.get("runs_within_share") is None
            else f"{_pct(x['runs_within_share'])} /"
            f" {_pct(x['runs_within_where_all_fast_within_share'])}"
            f" ({x['cases_over_where_all_fast_within_5']} of {x['spread_cases']})"
        ),
    )
    row(
        "cases where no size meets τ: the advice says so / the advised period and knobs bring"
        " it within τ",
        "all",
        lambda x: (
            f"{x['infeasible_said_so']} of {x['infeasible_cases']} /"
            f" {x['infeasible_final_within']} of {x['infeasible_cases']}"
            f" (said so where some size meets τ: {x['feasible_said_unreachable']})"
        ),
    )
    row(
        "size trials (runs of the workload), mean / most",
        f"≤ {MAX_SIZE_TRIALS}",
        lambda x: f"{x['size_trials_mean']:.1f} / {x['size_trials_max']}",
    )
    row(
        "DRAM saved, mean",
        f"≥ {_pct(t['saved_share_mean'])}",
        lambda x: (
            f"{_pct(x['saved_share_mean'])} (oracle {_pct(x['oracle_saved_share_mean'])}; all-fast advised {x['all_fast_advised']})"
        ),
    )
    row(
        "predicted − true loss at the advice, mean",
        "≈ 0",
        lambda x: _pct(x["predicted_minus_true_mean"]),
    )
    row(
        "period regret, mean / worst",
        f"≤ {_pct(t['period_regret_mean'])} / ≤ {_pct(t['period_regret_max'])}",
        lambda x: f"{_pct(x['period_regret_mean'])} / {_pct(x['period_regret_max'])}",
    )
    row("period in use: regret, mean", "", lambda x: _pct(x["period_in_use_regret_mean"]))
    row("period trials, most", f"≤ {t['period_trials']}", lambda x: str(x["period_trials_max"]))
    row(
        "period never worse than the one in use",
        "100 %",
        lambda x: _pct(x["period_never_worse_share"]),
    )
    row(
        "model's period ranking vs measured (Spearman)",
        "",
        lambda x: (
            "-"
            if x["period_rank_correlation_mean"] is None
            else f"{x['period_rank_correlation_mean']:.2f}"
        ),
    )
    row(
        "knob advice never slower than in use",
        "100 %",
        lambda x: _pct(x["knobs_never_slower_share"]),
    )
    row(
        "advised configuration's speed-up over the one in use, mean / best",
        "",
        lambda x: f"{x['knobs_speedup_mean']:.3f}× / {x['knobs_speedup_max']:.3f}×",
    )
    row("advice CPU per request, worst", "", lambda x: f"{x['advice_cpu_seconds_max']:.2f} s")
    if figure is not None:
        lines += [
            "",
            f"![Advised against oracle saving per case, and period regret against the period in"
            f" use, per judge]({figure})",
        ]
    lines += [
        "",
        "## Cases",
        "",
        "| judge | workload | host | seed | advised fast | size trials | true loss | further runs over τ at the advice (median, worst loss) / all fast | oracle saved | period regret (in use) | period trials | knob speed-up | final loss |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in data["cases"]:
        sz, pe, kn = c["sizing"], c["period"], c["knobs"]
        lines.append(
            f"| {c['judge']} | {c['workload']} | {c['host']} | {c['seed']} |"
            f" {_pct(sz['advised_fast_share'])}{' (said unreachable)' if sz['said_unreachable'] else ''} |"
            f" {sz['size_trials']} | {_pct(sz['true_loss'])}{'' if sz['met'] else ' ✗'} |"
            f" {_spread(sz)} |"
            f" {_pct(sz['oracle_saved_share'])}{'' if sz['feasible'] else ' (none within τ)'} |"
            f" {_pct(pe['regret'])} ({_pct(pe['in_use_regret'])}) |"
            f" {pe['trials']} | {kn['speedup_over_in_use']:.3f}× | {_pct(kn['final_loss'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one case per judge, seconds")
    parser.add_argument("--out", type=Path, default=Path("docs/reports"))
    parser.add_argument("--processes", type=int, default=None)
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="rewrite the markdown and the figure of a report already run",
    )
    parser.add_argument(
        "--study-shapes",
        action="store_true",
        help="the study's shapes (the advisor's making) instead of the held-out ones",
    )
    parser.add_argument(
        "--seeds",
        type=lambda text: tuple(int(x) for x in text.split(",")),
        default=None,
        help="comma-separated seeds instead of 11,12,13 (fresh cases: 21,22,23)",
    )
    args = parser.parse_args(argv)
    if args.from_json is not None:
        data = json.loads(args.from_json.read_text())
        write_report(data, args.from_json.parent, args.from_json.stem)
        return
    s = QUICK if args.quick else FULL
    if args.processes is not None:
        s = Settings(**{**asdict(s), "processes": args.processes})
    if args.study_shapes:
        s = Settings(**{**asdict(s), "workloads": tuple(STUDY_WORKLOADS)})
    if args.seeds is not None:
        s = Settings(**{**asdict(s), "seeds": args.seeds})
    data = run_judges(s, args.out, quick=args.quick)
    for judge, x in data["summary"].items():
        print(
            f"{judge}: τ met {_pct(x['loss_met_share'])}"
            f" ({_pct(x['loss_met_where_feasible_share'])} where feasible), saved {_pct(x['saved_share_mean'])}"
            f" (oracle {_pct(x['oracle_saved_share_mean'])}), period regret"
            f" {_pct(x['period_regret_mean'])} mean / {_pct(x['period_regret_max'])} worst,"
            f" knobs never slower {_pct(x['knobs_never_slower_share'])}; further runs at the"
            f" advised size within τ {_pct(x['runs_within_share'])}, where all fast is"
            f" {_pct(x['runs_within_where_all_fast_within_share'])}"
        )
    print(f"{data['wall_seconds']:.0f} s wall; load average {data['load_average']}")


if __name__ == "__main__":
    main()
