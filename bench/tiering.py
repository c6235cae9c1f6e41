"""`tmc tiering study`: the dynamic-tiering advisor against the simulator's ground truth.

Per workload, host and seed the agent's profile comes from one run (`sim.tiering.profile`) and
every decision is judged on another run of the same workload (a different seed), never by the
model:
- Sizing: the advised fast tier within τ (model.tiering.sizing) against the loss it really has,
  and against the largest saving a sweep of fast-tier sizes finds (the oracle).
- Migration period: the best of the advisor's trial plan (at most 3 trials) against the best of
  a 25-period sweep; beside it Cori's plain first three multiples and the default period.
- Knobs: Bayesian optimisation warm-started from the model (at most 30 trials) against exhaustive
  search over the knob grid, cold SMAC-like BO (random-forest surrogate, 100 trials) and the
  defaults.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bench.pools import pool_map
from model.tiering.period import period_plan, run_trials
from model.tiering.profile import TieringProfile
from model.tiering.sizing import size_fast_tier
from model.tiering.tune import HEMEM_SPACE, KnobDimension, KnobSpace, KnobTuner
from sim.machine import PRESETS, Host
from sim.tiering.manager import Knobs, run
from sim.tiering.profile import tiering_profile
from sim.tiering.streams import STUDY_WORKLOADS, Stream, draw_stream

TARGETS = {
    "saved_share_mean": 0.10,
    "loss_met_share": 0.95,
    "period_gap": 0.03,
    "period_trials": 3,
    "knob_trials": 30,
    "poor_default_speedup": 1.1,
}
PAPERS = {"tuna_saved": 0.085, "cori_gap": 0.03, "cori_trials": 5, "bo_speedup": "1.07-2.09x"}
DEFAULT_PERIOD_TICKS = 8
EVAL_SEED_OFFSET = 100


# The grid the committed study ran on (without the migration-rate limit, which the judges' report
# covers): exhaustive search stays at 900 runs a case.
STUDY_SPACE = KnobSpace(
    dimensions=tuple(d for d in HEMEM_SPACE.dimensions if d.name != "migration_rate_limit_mbps")
)


@dataclass(frozen=True)
class Settings:
    workloads: tuple[str, ...] = tuple(STUDY_WORKLOADS)
    hosts: tuple[str, ...] = ("optane", "cxl_local", "cxl_pool")
    sizing_seeds: tuple[int, ...] = (1, 2)
    tuning_seeds: tuple[int, ...] = (1,)
    loss_target: float = 0.05
    sizing_step: float = 0.02
    period_fast_share: float = 0.6
    knob_fast_share: float = 0.5
    period_grid_points: int = 25
    space: KnobSpace = STUDY_SPACE
    cold_trials: int = 100
    cold_initial: int = 20
    warm_trials: int = 30
    processes: int = 2


FULL = Settings()
QUICK = Settings(
    workloads=("strided",),
    hosts=("cxl_local",),
    sizing_seeds=(1,),
    sizing_step=0.05,
    period_grid_points=8,
    space=KnobSpace(
        dimensions=(
            KnobDimension(name="sampling_period", values=(1000, 5000, 10000), default=5000),
            KnobDimension(name="read_hot_threshold", values=(2, 8, 16), default=8),
            KnobDimension(name="write_hot_threshold", values=(4, 16), default=4),
            KnobDimension(name="cooling_threshold", values=(18, 36), default=18),
        )
    ),
    cold_trials=16,
    cold_initial=6,
    warm_trials=8,
    processes=1,
)


def _host(name: str) -> Host:
    return PRESETS[name]()


def _limit(stream: Stream, share: float) -> int:
    w = stream.workload
    return math.floor(share * w.pages + 1e-9) * w.page_bytes


def _knobs(point: dict[str, float]) -> Knobs:
    base = Knobs().model_dump()
    for k, v in point.items():
        base[k] = v if k in ("demotion_watermark", "migration_rate_limit_mbps") else round(v)
    return Knobs(**base)


def sizing_case(workload: str, host_name: str, seed: int, s: Settings) -> dict[str, Any]:
    host = _host(host_name)
    w = STUDY_WORKLOADS[workload]()
    profile = tiering_profile(draw_stream(w, seed), host, period_ticks=DEFAULT_PERIOD_TICKS)
    truth = draw_stream(w, seed + EVAL_SEED_OFFSET)
    ref = run(truth, host, w.footprint_bytes, managed=False).wall_seconds

    def loss(share: float) -> float:
        return (
            run(truth, host, _limit(truth, share), period_ticks=DEFAULT_PERIOD_TICKS).wall_seconds
            / ref
            - 1.0
        )

    advice = size_fast_tier(profile, s.loss_target)
    true_loss = loss(advice.fast_bytes / w.footprint_bytes)
    sweep = [(float(f), loss(float(f))) for f in np.arange(1.0, -1e-9, -s.sizing_step)]
    meeting = [f for f, x in sweep if x <= s.loss_target]
    oracle_saved = 1.0 - min(meeting) if meeting else 0.0
    return {
        "workload": workload,
        "host": host_name,
        "seed": seed,
        "advised_fast_share": advice.fast_share,
        "saved_share": advice.saved_share,
        "predicted_loss": advice.predicted_loss,
        "true_loss": true_loss,
        "met": true_loss <= s.loss_target + 1e-12,
        "oracle_saved_share": oracle_saved,
        "all_fast_under_manager_loss": sweep[0][1],
        "anchor_offset": advice.anchor_offset,
    }


def cold_bo(
    x: NDArray[np.float64], measure: Callable[[int], float], trials: int, initial: int, seed: int
) -> list[float]:
    """SMAC-like: random initial design, then EI on a random forest's mean and spread across
    trees, with one pick in five at random. Returns the best-so-far after each trial."""
    from sklearn.ensemble import (  # type: ignore[import-untyped]  # noqa: PLC0415 - bench only
        RandomForestRegressor,
    )

    rng = np.random.default_rng(seed)
    n = len(x)
    seen: dict[int, float] = {}
    best: list[float] = []
    order = rng.permutation(n)
    for t in range(min(trials, n)):
        free = np.array([i for i in range(n) if i not in seen])
        if t < initial or rng.random() < 0.2:
            pick = int(next(i for i in order if i not in seen))
        else:
            idx = np.array(list(seen))
            forest = RandomForestRegressor(n_estimators=30, random_state=seed + t, n_jobs=1)
            forest.fit(x[idx], np.log([seen[i] for i in idx]))
            per_tree = np.stack([tree.predict(x[free]) for tree in forest.estimators_])
            mean, std = per_tree.mean(axis=0), per_tree.std(axis=0) + 1e-9
            incumbent = math.log(min(seen.values()))
            z = (incumbent - mean) / std
            cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
            ei = (incumbent - mean) * cdf + std * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
            pick = int(free[int(np.argmax(ei))])
        seen[pick] = measure(pick)
        best.append(min(seen.values()))
    return best


def tuning_case(workload: str, host_name: str, seed: int, s: Settings) -> dict[str, Any]:
    host = _host(host_name)
    w = STUDY_WORKLOADS[workload]()
    profile: TieringProfile = tiering_profile(
        draw_stream(w, seed), host, period_ticks=DEFAULT_PERIOD_TICKS
    )
    truth = draw_stream(w, seed + EVAL_SEED_OFFSET)
    tick_seconds = profile.wall_seconds_fast / w.ticks

    # Migration period.
    limit = _limit(truth, s.period_fast_share)
    by_ticks: dict[int, float] = {}

    def at_period(ticks: int) -> float:
        ticks = max(1, min(w.ticks // 2, ticks))
        if ticks not in by_ticks:
            by_ticks[ticks] = run(truth, host, limit, period_ticks=ticks).wall_seconds
        return by_ticks[ticks]

    grid = sorted({round(p) for p in np.geomspace(1, w.ticks // 2, s.period_grid_points)})
    sweep_best = min(at_period(k) for k in grid)
    plan = period_plan(profile, fast_share=s.period_fast_share)
    chosen, plan_seconds, spent = run_trials(plan, lambda sec: at_period(round(sec / tick_seconds)))
    cori = [at_period(round(k * plan.dominant_reuse_seconds / tick_seconds)) for k in (1, 2, 3)]
    best_period = min(sweep_best, plan_seconds, *cori)
    period = {
        "dominant_reuse_ticks": plan.dominant_reuse_seconds / tick_seconds,
        "plan_ticks": [t.period_seconds / tick_seconds for t in plan.trials],
        "chosen_ticks": chosen.period_seconds / tick_seconds,
        "trials": spent,
        "plan_gap": plan_seconds / best_period - 1.0,
        "cori3_gap": min(cori) / best_period - 1.0,
        "default_gap": at_period(DEFAULT_PERIOD_TICKS) / best_period - 1.0,
        "sweep_runs": len(grid),
    }

    # Knobs.
    limit = _limit(truth, s.knob_fast_share)
    tuner = KnobTuner(
        profile, s.space, DEFAULT_PERIOD_TICKS * tick_seconds, s.knob_fast_share, s.warm_trials
    )
    points = tuner.grid
    cache: dict[int, float] = {}

    def at_point(i: int) -> float:
        if i not in cache:
            cache[i] = run(
                truth, host, limit, _knobs(points[i]), period_ticks=DEFAULT_PERIOD_TICKS
            ).wall_seconds
        return cache[i]

    exhaustive = min(at_point(i) for i in range(len(points)))
    default = at_point(tuner.default_index)
    cold = cold_bo(tuner.x, at_point, s.cold_trials, s.cold_initial, seed)
    warm: list[float] = []
    for _ in range(s.warm_trials):
        nxt = tuner.ask()
        if nxt is None:
            break
        tuner.tell(nxt, at_point(tuner.index_of(nxt)))
        best = tuner.best()
        assert best is not None
        warm.append(best[1])
    cold_best = cold[-1]
    reach = next((i + 1 for i, v in enumerate(warm) if v <= cold_best * (1 + 1e-9)), None)
    best_knobs = tuner.best()
    assert best_knobs is not None
    knobs = {
        "grid_points": len(points),
        "default_over_best": default / exhaustive,
        "cold_over_best": cold_best / exhaustive,
        "warm_over_best": warm[-1] / exhaustive,
        "warm_over_cold": warm[-1] / cold_best,
        "warm_speedup_over_default": default / warm[-1],
        "cold_speedup_over_default": default / cold_best,
        "warm_trials": len(warm),
        "warm_trials_to_cold_best": reach,
        "cold_trials": len(cold),
        "warm_best_knobs": best_knobs[0],
        "importance": tuner.importance(),
    }
    return {"workload": workload, "host": host_name, "seed": seed, "period": period, "knobs": knobs}


def _job(args: tuple[str, str, str, int, Settings]) -> dict[str, Any]:
    kind, workload, host, seed, s = args
    return (sizing_case if kind == "sizing" else tuning_case)(workload, host, seed, s)


def summarise(sizing: Sequence[dict[str, Any]], tuning: Sequence[dict[str, Any]]) -> dict[str, Any]:
    poor = [t["knobs"] for t in tuning if t["knobs"]["default_over_best"] >= 1.1]
    return {
        "sizing_cases": len(sizing),
        "saved_share_mean": float(np.mean([c["saved_share"] for c in sizing])),
        "oracle_saved_share_mean": float(np.mean([c["oracle_saved_share"] for c in sizing])),
        "loss_met_share": float(np.mean([c["met"] for c in sizing])),
        "true_loss_max": float(max(c["true_loss"] for c in sizing)),
        "tuning_cases": len(tuning),
        "period_gap_mean": float(np.mean([t["period"]["plan_gap"] for t in tuning])),
        "period_gap_max": float(max(t["period"]["plan_gap"] for t in tuning)),
        "period_within_3pct_share": float(
            np.mean([t["period"]["plan_gap"] <= 0.03 for t in tuning])
        ),
        "period_trials_max": int(max(t["period"]["trials"] for t in tuning)),
        "period_trials_mean": float(np.mean([t["period"]["trials"] for t in tuning])),
        "cori3_gap_mean": float(np.mean([t["period"]["cori3_gap"] for t in tuning])),
        "default_period_gap_mean": float(np.mean([t["period"]["default_gap"] for t in tuning])),
        "warm_over_cold_mean": float(np.mean([t["knobs"]["warm_over_cold"] for t in tuning])),
        "warm_over_cold_max": float(max(t["knobs"]["warm_over_cold"] for t in tuning)),
        "warm_at_least_cold_share": float(
            np.mean([t["knobs"]["warm_over_cold"] <= 1.0 + 1e-9 for t in tuning])
        ),
        "warm_over_best_mean": float(np.mean([t["knobs"]["warm_over_best"] for t in tuning])),
        "cold_over_best_mean": float(np.mean([t["knobs"]["cold_over_best"] for t in tuning])),
        "default_over_best_mean": float(np.mean([t["knobs"]["default_over_best"] for t in tuning])),
        "warm_speedup_over_default_mean": float(
            np.mean([t["knobs"]["warm_speedup_over_default"] for t in tuning])
        ),
        "poor_default_cases": len(poor),
        "poor_default_warm_speedup_mean": (
            float(np.mean([k["warm_speedup_over_default"] for k in poor])) if poor else None
        ),
        "poor_default_cold_speedup_mean": (
            float(np.mean([k["cold_speedup_over_default"] for k in poor])) if poor else None
        ),
    }


def run_study(s: Settings, out: Path | None = None, quick: bool = False) -> dict[str, Any]:
    start = time.perf_counter()
    jobs: list[tuple[str, str, str, int, Settings]] = [
        ("tuning", w, h, seed, s) for w in s.workloads for h in s.hosts for seed in s.tuning_seeds
    ] + [("sizing", w, h, seed, s) for w in s.workloads for h in s.hosts for seed in s.sizing_seeds]
    results = pool_map(_job, jobs, s.processes, start="spawn")
    tuning = [r for r, j in zip(results, jobs, strict=True) if j[0] == "tuning"]
    sizing = [r for r, j in zip(results, jobs, strict=True) if j[0] == "sizing"]
    data: dict[str, Any] = {
        "schema": "tmc.bench.tiering/v1",
        "quick": quick,
        "settings": {k: v for k, v in asdict(s).items() if k != "space"}
        | {"knob_space": {d.name: list(d.values) for d in s.space.dimensions}},
        "targets": TARGETS,
        "papers": PAPERS,
        "summary": summarise(sizing, tuning),
        "sizing": sizing,
        "tuning": tuning,
        "duration_seconds": time.perf_counter() - start,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        stem = "tiering-quick" if quick else "tiering"
        (out / f"{stem}.json").write_text(json.dumps(data, indent=2) + "\n")
        (out / f"{stem}.md").write_text(markdown(data))
    return data


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def markdown(data: dict[str, Any]) -> str:
    s = data["summary"]
    t = TARGETS
    poor = s["poor_default_warm_speedup_mean"]
    lines = [
        f"# Dynamic tiering study{' (quick)' if data['quick'] else ''}",
        "",
        f"Simulated ground truth (`sim/tiering`), {s['sizing_cases']} sizing cases and "
        f"{s['tuning_cases']} period/knob cases; {data['duration_seconds']:.0f} s.",
        "",
        "## Against the targets",
        "",
        "| question | target | measured |",
        "|---|---|---|",
        f"| fast memory saved at τ = {_pct(data['settings']['loss_target'])}, mean | ≥ {_pct(t['saved_share_mean'])} (Tuna 8.5 %) | {_pct(s['saved_share_mean'])} (oracle sweep {_pct(s['oracle_saved_share_mean'])}) |",
        f"| loss target met | ≥ {_pct(t['loss_met_share'])} of cases | {_pct(s['loss_met_share'])} (worst true loss {_pct(s['true_loss_max'])}) |",
        f"| migration period vs the best of a {data['settings']['period_grid_points']}-period sweep | within 3 % in ≤ 3 trials (Cori: 3 %, 5 trials) | mean gap {_pct(s['period_gap_mean'])}, max {_pct(s['period_gap_max'])}, {_pct(s['period_within_3pct_share'])} of cases within 3 %; at most {s['period_trials_max']} trials (mean {s['period_trials_mean']:.1f}) |",
        f"| knobs: warm BO (≤ {data['settings']['warm_trials']} trials) vs cold BO ({data['settings']['cold_trials']} trials) | at least as good | warm/cold run time {s['warm_over_cold_mean']:.4f} mean, {s['warm_over_cold_max']:.4f} worst; as good or better in {_pct(s['warm_at_least_cold_share'])} of cases |",
        f"| knobs: speed-up over defaults where defaults are poor (≥ 1.1× off the grid's best) | ≥ 1.1× (000: 1.07–2.09×) | {s['poor_default_cases']} such cases; "
        + (f"{poor:.3f}× (cold BO {s['poor_default_cold_speedup_mean']:.3f}×)" if poor else "none")
        + f"; over all cases {s['warm_speedup_over_default_mean']:.3f}× |",
        "",
        f"Knob settings against exhaustive search: warm {s['warm_over_best_mean']:.4f}×, cold {s['cold_over_best_mean']:.4f}×, defaults {s['default_over_best_mean']:.4f}× the best run time, on average. Period: Cori's first three multiples in order leave {_pct(s['cori3_gap_mean'])} on average, the default period {_pct(s['default_period_gap_mean'])}.",
        "",
        "## Sizing",
        "",
        "| workload | host | seed | advised fast | saved | predicted loss | true loss | oracle saved | all-fast loss under the manager |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in data["sizing"]:
        lines.append(
            f"| {c['workload']} | {c['host']} | {c['seed']} | {_pct(c['advised_fast_share'])} | {_pct(c['saved_share'])} | {_pct(c['predicted_loss'])} | {_pct(c['true_loss'])}{'' if c['met'] else ' ✗'} | {_pct(c['oracle_saved_share'])} | {_pct(c['all_fast_under_manager_loss'])} |"
        )
    lines += [
        "",
        "## Migration period and knobs",
        "",
        "| workload | host | dominant reuse (ticks) | plan (ticks) | trials | plan gap | Cori-3 gap | default gap | default/best | cold/best | warm/best | warm trials to cold's best | most important knob |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in data["tuning"]:
        p, k = c["period"], c["knobs"]
        top = max(k["importance"], key=k["importance"].get) if k["importance"] else "-"
        lines.append(
            f"| {c['workload']} | {c['host']} | {p['dominant_reuse_ticks']:.1f} | {', '.join(f'{x:.0f}' for x in p['plan_ticks'])} | {p['trials']} | {_pct(p['plan_gap'])} | {_pct(p['cori3_gap'])} | {_pct(p['default_gap'])} | {k['default_over_best']:.3f} | {k['cold_over_best']:.3f} | {k['warm_over_best']:.3f} | {k['warm_trials_to_cold_best'] or '-'} | {top} |"
        )
    return "\n".join(lines) + "\n"
