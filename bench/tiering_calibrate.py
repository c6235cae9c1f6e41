"""`python -m bench.tiering_calibrate`: the sizing's uncertainty, measured on the study's shapes.

The sizing advises where the corrected loss plus an uncertainty stays within τ. The uncertainty
has two parts, both measured here on the shapes the advisor was made on (never the held-out
ones), per manager model (sampling, hint-fault):

- noise: how much more loss another run of the workload (another seed) shows at a size than one
  run did, over the runs within 2 τ: what a measured size trial leaves uncertain;
- slope: how fast the corrected model's under-prediction (beyond the noise) grows with the
  distance, in shares of the footprint, from the nearest measured size, over the sizes the
  corrected model puts within τ.

Both are shares of the workload's slowdown all-slow; each is the `QUANTILE` of its cases. The constants in `model/tiering/sizing.py` come from this
command's output.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.pools import pool_map
from bench.tiering_judges import IN_USE_PERIOD_TICKS, Judge, _limit, profile_for
from model.tiering.sizing import SizeMeasurement, size_fast_tier
from sim.machine import PRESETS
from sim.tiering.manager import run
from sim.tiering.streams import STUDY_WORKLOADS, draw_stream

QUANTILE = 0.95  # the constants in model/tiering/sizing.py are this quantile
SHARES = tuple(round(1.0 - 0.05 * i, 2) for i in range(11))  # 1.00 … 0.50
ANCHORS = (1.0, 0.9, 0.8, 0.7)
SEEDS = (1, 2)
HOSTS = ("optane", "cxl_local")
OTHER_SEED = 50  # the second run of a workload
TAU = 0.05


def _case(args: tuple[str, str, str, int]) -> dict[str, Any]:
    kind, workload, host, seed = args
    w = STUDY_WORKLOADS[workload]()
    profile = profile_for(kind, draw_stream(w, seed), host)
    one = Judge(kind, draw_stream(w, seed + OTHER_SEED), host)
    other = Judge(kind, draw_stream(w, seed + 2 * OTHER_SEED), host)
    knobs = one.space.default()

    def loss(judge: Judge, share: float) -> float:
        ref = run(judge.stream, judge.host, w.footprint_bytes, managed=False).wall_seconds
        return judge.seconds(_limit(judge.stream, share), IN_USE_PERIOD_TICKS, knobs) / ref - 1.0

    # Both are read relative to the workload's slowdown all-slow (a miss served slow costs more
    # on a slower tier, and so does a run's variation in which pages are slow).
    slowdown = profile.wall_seconds_slow / profile.wall_seconds_fast - 1.0
    first = {s: loss(one, s) for s in SHARES}
    second = {s: loss(other, s) for s in SHARES}
    # Where the rule decides: runs near τ (noise) and sizes the corrected model puts within τ.
    noise = [(second[s] - first[s]) / slowdown for s in SHARES if first[s] <= 2 * TAU]
    errors: list[tuple[float, float]] = []  # (distance, true minus corrected prediction)
    for anchor in ANCHORS:
        measured = []
        if anchor < 1.0:
            limit = _limit(one.stream, anchor)
            measured = [
                SizeMeasurement(
                    fast_bytes=max(limit, 1),
                    wall_seconds=one.seconds(limit, IN_USE_PERIOD_TICKS, knobs),
                )
            ]
        curve = size_fast_tier(profile, measured=measured).curve
        for s in SHARES:
            if s < anchor:
                point = min(curve, key=lambda p: abs(p.fast_share - s))
                if point.predicted_loss <= TAU:
                    errors.append((anchor - s, (second[s] - point.predicted_loss) / slowdown))
    return {
        "kind": profile.page_manager.kind,
        "workload": workload,
        "host": host,
        "seed": seed,
        "noise": noise,
        "errors": errors,
    }


def calibrate(
    cases: Sequence[dict[str, Any]], quantile: float = QUANTILE
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for kind in sorted({c["kind"] for c in cases}):
        mine = [c for c in cases if c["kind"] == kind]
        noise = np.array([x for c in mine for x in c["noise"]] or [0.0])
        errors = np.array([e for c in mine for e in c["errors"]])
        base = float(np.quantile(np.maximum(noise, 0.0), quantile))
        slope = (
            float(np.quantile(np.maximum(errors[:, 1] - base, 0.0) / errors[:, 0], quantile))
            if errors.size
            else 0.0
        )
        out[kind] = {"noise": base, "slope": slope, "cases": float(len(mine))}
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    jobs = [
        (kind, w, h, seed)
        for kind in ("hemem-like", "tpp-like")
        for w in STUDY_WORKLOADS
        for h in HOSTS
        for seed in SEEDS
    ]
    assert all(h in PRESETS for h in HOSTS)
    cases = pool_map(_case, jobs, args.processes, start="spawn")
    print(json.dumps({q: calibrate(cases, q) for q in (0.9, QUANTILE, 0.99)}, indent=2))


if __name__ == "__main__":
    main()
