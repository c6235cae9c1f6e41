"""sim.cluster: capacity, pools, departures, first fit in node order, compaction."""

from __future__ import annotations

import numpy as np

from model.resources import GIB
from sim.cluster import (
    Arrivals,
    ClusterState,
    Menu,
    architecture,
    compact_size,
    online_placer,
    poisson_arrivals,
    run_cluster,
)


def menu(cpus: int, dram_gib: int, slow_gib: int, ways: int, seconds: float) -> Menu:
    return Menu(
        demand=np.asarray([[cpus, dram_gib * GIB, slow_gib * GIB, ways]], dtype=np.int64),
        seconds=np.asarray([seconds]),
    )


def fixed(times: list[float]) -> Arrivals:
    return Arrivals(times=np.asarray(times), workloads=np.zeros(len(times), dtype=np.int64))


def test_architectures_of_the_paper() -> None:
    local = architecture(24, "256L")
    assert not local.pooled and local.slow_share_bytes == 256 * GIB
    pool = architecture(48, "384P")
    assert pool.pooled and pool.slow_share_bytes == 48 * GIB and pool.dram_bytes == 48 * GIB


def test_cpu_binds_and_departures_free_room() -> None:
    arch = architecture(24, "128L")
    place = online_placer(lambda w, u: 0)
    # Three 4-vCPU VMs fill a 12-core machine; a fourth at the same time is rejected...
    run = run_cluster(arch, 1, fixed([0, 0, 0, 0]), [menu(4, 1, 0, 1, 10.0)], place)
    assert run.rejected == 1 and run.first_rejection == 3
    # ...but fits once the first has left.
    run = run_cluster(arch, 1, fixed([0, 0, 0, 10.5]), [menu(4, 1, 0, 1, 10.0)], place)
    assert run.rejected == 0


def test_llc_ways_are_a_capacity() -> None:
    arch = architecture(24, "128L")
    place = online_placer(lambda w, u: 0)
    run = run_cluster(arch, 1, fixed([0, 0, 0]), [menu(2, 1, 0, 20, 10.0)], place)
    assert run.rejected == 1  # 3 x 20 ways > 48


def test_rack_pool_is_shared() -> None:
    arch = architecture(24, "128P")  # 16 GiB per node, 128 GiB per rack of 8
    place = online_placer(lambda w, u: 0)
    # 9 VMs of 12 GiB slow on 8 machines: each machine has CPU room, the pool has room for 10.
    run = run_cluster(
        arch, 8, fixed([0] * 10), [menu(1, 1, 12, 1, 10.0)], place, stop_on_reject=False
    )
    assert run.placed == 10 and run.rejected == 0
    run = run_cluster(
        arch, 8, fixed([0] * 11), [menu(1, 1, 12, 1, 10.0)], place, stop_on_reject=False
    )
    assert run.placed == 10 and run.rejected == 1


def test_first_fit_follows_the_node_order() -> None:
    state = ClusterState(architecture(24, "128L"), 5, order_seed=3)
    d = np.asarray([4, GIB, 0, 1], dtype=np.int64)
    assert state.first_fit(d) == int(state.order[0])
    state.place(int(state.order[0]), np.asarray([12, GIB, 0, 1], dtype=np.int64))
    assert state.first_fit(d) == int(state.order[1])
    assert 0 < state.utilization()[0] < 1


def test_compaction_finds_the_smallest_size() -> None:
    arch = architecture(24, "128L")
    arr = poisson_arrivals(400, [0], rate_per_second=10.0, seed=1)
    menus = [menu(4, 1, 0, 1, 3.0)]
    place = online_placer(lambda w, u: 0)

    def fits(n: int) -> bool:
        return run_cluster(arch, n, arr, menus, place).rejected == 0

    n = compact_size(fits, upper=4)
    assert fits(n) and not fits(n - 1)
