"""Time emerges from the mechanics: overlap of independent misses, serial chains, slow tiers,
bandwidth queueing."""

from __future__ import annotations

import dataclasses

import numpy as np

from sim import kernels
from sim.engine import Job, Prepared, prepare, time_jobs
from sim.host import ground_truth_grid, simulate
from sim.machine import Tier
from sim.placement import all_in
from tests.sim.support import one_structure, small_host, workload


def with_dependence(prep: Prepared, kind: int) -> Prepared:
    """The same accesses (same hits, misses and write-backs), every one with dependence `kind`."""
    flags = (prep.trace.flags & kernels.FLAG_WRITE) | np.uint8(kind << kernels.DEP_SHIFT)
    trace = dataclasses.replace(prep.trace, flags=flags.astype(np.uint8))
    return Prepared(prep.workload, prep.host, prep.seed, trace, prep.depth, dict(prep.wb))


def test_dependent_chains_serialise_independent_misses_overlap() -> None:
    w = workload(one_structure({"kind": "uniform"}), accesses=20_000)
    prep = prepare(w, small_host(), seed=1, ways=[4])
    fast = all_in(w, "fast")
    chained = time_jobs(with_dependence(prep, kernels.DEP_CHAIN), [Job(4, fast)])
    free = time_jobs(with_dependence(prep, kernels.DEP_NONE), [Job(4, fast)])
    c, f = chained.counters[0], free.counters[0]
    misses = kernels.C_LOAD_MISSES
    assert c[misses] == f[misses] > 10_000
    assert c[kernels.C_CYCLES] > 3 * f[kernels.C_CYCLES]
    # Every chained miss waits for the one before it: at least one latency each.
    latency = prep.host.ns_to_cycles(prep.host.fast_tier.latency_ns)
    assert c[kernels.C_CYCLES] >= 0.95 * c[misses] * latency


def test_memory_level_parallelism_follows_dependence() -> None:
    def mlp(dependent: float) -> float:
        w = workload(one_structure({"kind": "uniform"}, dependent_fraction=dependent))
        return simulate(w, small_host(), 0.0, 4, seed=2).effective_mlp

    chained, half, free = mlp(1.0), mlp(0.5), mlp(0.0)
    assert chained < 1.3
    assert chained < half < free
    assert free > 4


def test_more_slow_memory_never_runs_faster() -> None:
    grid = ground_truth_grid(workload(), small_host(), (0.0, 0.3, 0.6, 1.0), (1, 4, 48), seed=5)
    assert np.all(np.diff(grid.seconds, axis=0) >= 0)
    assert grid.seconds[-1, -1] > 1.3 * grid.seconds[0, -1]
    # The slow misses follow the placement, and all of them are slow at ratio 1.
    assert grid.slow_misses[0].sum() == 0
    np.testing.assert_allclose(grid.slow_misses[-1], grid.llc_misses[-1], rtol=1e-9)


def test_a_slower_tier_costs_more_time() -> None:
    w = workload()
    optane = small_host()
    cxl = small_host(
        slow_tier=Tier(
            kind="cxl_local",
            latency_ns=185.0,
            read_bandwidth_bytes_per_second=28e9,
            write_bandwidth_bytes_per_second=24e9,
            capacity_bytes=128 << 30,
        )
    )
    fastmax = simulate(w, optane, 0.0, 12, seed=6)
    on_cxl = simulate(w, cxl, 1.0, 12, seed=6)
    on_optane = simulate(w, optane, 1.0, 12, seed=6)
    assert fastmax.wall_seconds < on_cxl.wall_seconds < on_optane.wall_seconds
    assert fastmax.llc_misses == on_cxl.llc_misses == on_optane.llc_misses


def test_heavy_writes_queue_on_the_optane_like_tier() -> None:
    def slowmax(write_fraction: float, write_bw: float) -> tuple[float, float]:
        w = workload(
            one_structure({"kind": "stream", "streams": 4}, write_fraction=write_fraction),
            cpi_core=0.3,
            vcpus=4,
        )
        host = small_host()
        slow = host.slow_tier.model_copy(update={"write_bandwidth_bytes_per_second": write_bw})
        r = simulate(w, host.model_copy(update={"slow_tier": slow}), 1.0, 4, seed=7)
        return r.slow_tier.mean_latency_ns, r.slow_tier.mean_utilization

    read_lat, read_util = slowmax(0.0, 4.6e9)
    write_lat, write_util = slowmax(0.6, 4.6e9)
    easy_lat, _ = slowmax(0.6, 100e9)
    assert write_util > read_util + 0.2
    assert write_lat > 1.2 * read_lat
    assert write_lat > 1.2 * easy_lat  # the same writes, ample write bandwidth: little queueing
    assert read_lat >= 300.0  # never below the idle latency


def test_same_seed_same_truth() -> None:
    w = workload()
    a = simulate(w, small_host(), 0.5, 4, seed=8)
    b = simulate(w.model_copy(), small_host(), 0.5, 4, seed=8)
    c = simulate(w, small_host(), 0.5, 4, seed=9)
    assert a == b
    assert a.cycles != c.cycles
    assert abs(a.cycles / c.cycles - 1) < 0.1


@dataclasses.dataclass(frozen=True)
class Plan:
    """Any object with these three attributes is a placement (e.g. the model's plan)."""

    tag: str
    fast_bytes: int
    slow_bytes: int


def test_explicit_placement_is_followed() -> None:
    w = workload()
    sizes = {s.tag: s.size_bytes for s in w.structures}
    plan = [Plan("cold", 0, sizes["cold"]), Plan("hot", sizes["hot"], 0)]
    r = simulate(w, small_host(), 0.5, 4, seed=10, placement=plan)
    by_tag = {s.tag: s for s in r.structures}
    assert by_tag["cold"].slow_misses == by_tag["cold"].llc_misses > 0
    assert by_tag["hot"].slow_misses == 0 and by_tag["warm"].slow_misses == 0
