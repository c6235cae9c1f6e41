"""The DRA door's emulation in simulation: kube-scheduler's default scores as v1.36 computes them
for a claim of alternatives, and the door's placer on a small cluster."""

from __future__ import annotations

import numpy as np

from bench.dra_decisions import dra_policy, stock_node_scores
from bench.evaluation import WorkloadData
from model.resources import GIB
from sim.cluster import ClusterState, Menu, architecture

ARCH = architecture(24, "128L")


def _state(machines: int = 3) -> ClusterState:
    return ClusterState(ARCH, machines, order_seed=0)


def _pod(dram_gib: int, slow_gib: int = 0, cpus: int = 2, ways: int = 4) -> np.ndarray:
    return np.asarray([cpus, dram_gib * GIB, slow_gib * GIB, ways], dtype=np.int64)


def test_an_earlier_alternative_outweighs_spreading() -> None:
    # Machine 0 holds a pod, machine 1 is empty; machine 0 takes the first alternative, machine 1
    # only the second. DynamicResources (weight 2) gives 100 against 87.5: 25 points, more
    # than LeastAllocated and balance give machine 1 for being emptier.
    state = _state(2)
    state.place(0, _pod(6, cpus=2))
    demand = np.stack([_pod(4), _pod(4)])
    scores = stock_node_scores(state, demand, np.asarray([0, 1]), packing=False)
    assert scores[0] > scores[1]
    # The same alternative on both: the emptier node wins by default, the fuller one packing.
    same = np.asarray([0, 0])
    spread = stock_node_scores(state, demand, same, packing=False)
    packed = stock_node_scores(state, demand, same, packing=True)
    assert spread[1] > spread[0]
    assert packed[0] > packed[1]


def test_a_node_where_nothing_fits_is_never_chosen() -> None:
    state = _state(2)
    scores = stock_node_scores(state, np.stack([_pod(4), _pod(4)]), np.asarray([-1, 0]), False)
    assert scores[0] == -np.inf and np.isfinite(scores[1])


def _workload() -> WorkloadData:
    # Two configurations within T of one workload: 16 GiB all in DRAM (the cheapest) and 8 GiB
    # of DRAM with 8 GiB slow; every other configuration far dearer.
    n = 77
    cost = np.full(n, 10.0)
    cost[0], cost[1] = 1.0, 1.01
    dram = np.full(n, 16 * GIB, dtype=np.int64)
    slow = np.zeros(n, dtype=np.int64)
    dram[1], slow[1] = 8 * GIB, 8 * GIB
    return WorkloadData(
        name="w",
        vcpus=2,
        footprint_bytes=16 * GIB,
        hourly=np.ones(n),
        truth_seconds=np.ones(n),
        truth_cost=cost,
        tmc_seconds=np.ones(n),
        tmc_cost=cost,
        predicted_cost=cost,
        dram_bytes=dram,
        slow_bytes=slow,
        ways=np.full(n, 4, dtype=np.int64),
    )


def test_the_door_takes_the_next_alternative_where_the_first_fits_nowhere() -> None:
    policy = dra_policy([_workload()], threshold=0.025, arch=ARCH, packing=False)
    menu: Menu = policy.menus[0]
    assert [int(d[2]) for d in menu.demand] == [0, 8 * GIB]
    state = ClusterState(ARCH, 2, order_seed=0, menus=policy.menus)
    # Machine 0's DRAM nearly full, machine 1's slow memory: Algorithm 1 prefers half slow
    # (the lower packing penalty), which fits on neither; all DRAM fits on machine 1.
    state.place(0, _pod(20, cpus=1, ways=1))
    state.place(1, _pod(0, slow_gib=125, cpus=1, ways=1))
    assert policy.make(0)([0], state) == [(0, 1)]
    assert state.free[1][1] == 8 * GIB
    # Nothing fits any more: the pod waits.
    assert policy.make(0)([0], state) == [None]
