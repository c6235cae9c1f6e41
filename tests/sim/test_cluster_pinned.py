"""sim.cluster's results pinned bit for bit on small runs: the replay loop is written for speed,
and any change to it must leave every placement, rejection and utilization figure as it was."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from model.resources import GIB
from sim.cluster import (
    ClusterRun,
    FloatArray,
    Menu,
    Placer,
    architecture,
    compact_run,
    compact_size,
    online_placer,
    poisson_arrivals,
    run_cluster,
)


def _menus() -> list[Menu]:
    rng = np.random.default_rng(7)
    out = []
    for w in range(4):
        k = 5 + w
        demand = np.stack(
            [
                np.full(k, 1 + w),
                rng.integers(1, 12, size=k) * GIB // 2,
                rng.integers(0, 40, size=k) * GIB // 3,
                rng.integers(1, 14, size=k),
            ],
            axis=1,
        ).astype(np.int64)
        out.append(Menu(demand, rng.uniform(50.0, 400.0, size=k)))
    return out


def _policy(menus: list[Menu]) -> Placer:
    """A policy that reads the live utilization, as Algorithm 1 does."""
    weights = [
        np.random.default_rng(11 + w).uniform(0.5, 2.0, size=len(m.seconds))
        for w, m in enumerate(menus)
    ]

    def choose(w: int, u: FloatArray) -> int:
        frac = menus[w].demand / np.asarray([12, 24 * GIB, 128 * GIB, 48], dtype=np.float64)
        return int(np.argmin(weights[w] + frac @ u))

    return online_placer(choose)


def _digest(run: ClusterRun) -> str:
    h = hashlib.sha256()
    h.update(run.options.tobytes())
    h.update(np.asarray(run.mean_utilization, dtype=np.float64).tobytes())
    h.update(repr((run.machines, run.placed, run.rejected, run.first_rejection)).encode())
    h.update(repr(run.peak_machines_in_use).encode())
    return h.hexdigest()[:16]


PINNED = {
    ("24G-128L", 34, False): "8f3e37877bfef324",
    ("24G-128L", 22, True): "8da2ca0cad4ac29e",
    ("24G-128L", 22, False): "adfe6bd6b8e10c07",
    ("48G-384P", 30, False): "8b7b0774f4d3676b",
    ("48G-384P", 20, True): "16094a82eab0ad33",
    ("24G-128P", 27, False): "08a19c52d8fdffaa",
}


@pytest.mark.parametrize(("arch", "machines", "stop"), list(PINNED))
def test_replay_is_pinned(arch: str, machines: int, stop: bool) -> None:
    menus = _menus()
    dram, slow = arch.split("G-")
    a = architecture(int(dram), slow)
    arrivals = poisson_arrivals(800, (0, 1, 2, 3), 0.35, seed=3)
    run = run_cluster(
        a, machines, arrivals, menus, _policy(menus), order_seed=5, stop_on_reject=stop
    )
    assert _digest(run) == PINNED[arch, machines, stop]


def test_compaction_is_pinned() -> None:
    menus = _menus()
    a = architecture(24, "128L")
    arrivals = poisson_arrivals(800, (0, 1, 2, 3), 0.35, seed=4)

    def fits(n: int) -> bool:
        return run_cluster(a, n, arrivals, menus, _policy(menus), order_seed=4).rejected == 0

    assert compact_size(fits, upper=40) == 29


def test_compact_run_keeps_the_probe_that_fit() -> None:
    menus = _menus()
    a = architecture(24, "128L")
    arrivals = poisson_arrivals(800, (0, 1, 2, 3), 0.35, seed=4)

    def simulate(n: int, stop: bool) -> ClusterRun:
        return run_cluster(a, n, arrivals, menus, _policy(menus), order_seed=4, stop_on_reject=stop)

    n, run = compact_run(simulate, upper=40)
    again = simulate(n, False)
    assert n == 29 and run.rejected == 0
    assert _digest(run) == _digest(again)
