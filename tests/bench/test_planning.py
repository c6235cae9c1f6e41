"""The plan-following placers of the planners' comparison (bench/planning.py)."""

from __future__ import annotations

import numpy as np

from bench.planning import pattern_placer, scheduled_placer
from sim.cluster import ClusterState, Menu, architecture

GIB = 1 << 30


def _menus() -> list[Menu]:
    # Two workloads, two options each: (1 vCPU, 8 GiB DRAM, 2 ways) and (1 vCPU, 2 GiB, 20 ways).
    demand = np.asarray([[1, 8 * GIB, 0, 2], [1, 2 * GIB, 0, 20]], dtype=np.int64)
    return [Menu(demand, np.ones(2)), Menu(demand, np.ones(2))]


def test_arrivals_go_to_the_machines_planned_for_them_in_the_planned_option() -> None:
    arch = architecture(24, "128L")
    for seed in range(4):  # whatever the node order
        state = ClusterState(arch, 2, seed, _menus())
        # Machine 0 is planned for workload 0 in option 0, machine 1 for workload 1 in option 1.
        place = pattern_placer([[(0, 0)], [(1, 1)]], fallback=[[0], [1]])
        assert place([1, 0, 1], state) == [(1, 1), (0, 0), (1, 1)]


def test_when_no_planned_machine_has_room_first_fit_takes_over() -> None:
    arch = architecture(24, "128L")
    state = ClusterState(arch, 2, 0, _menus())
    place = pattern_placer([[(0, 1)], [(0, 1)]], fallback=[[1, 0], [0]])
    # Four 20-way VMs, two per machine, leave 8 of each machine's 48 ways: the fifth 20-way one
    # fits nowhere, so it falls back to option 0 (2 ways) by first fit; workload 1 is in no
    # pattern and takes its fallback option by first fit.
    got = place([0, 0, 0, 0, 0, 1], state)
    assert all(g is not None and g[0] == 1 for g in got[:4])
    assert got[4] is not None and got[4][0] == 0
    assert got[5] is not None and got[5][0] == 0


def test_a_machine_takes_as_many_vms_as_its_pattern_has_slots_then_the_next_one() -> None:
    arch = architecture(24, "128L")
    for seed in range(4):
        state = ClusterState(arch, 2, seed, _menus())
        # Each machine is planned for one VM of workload 0 in option 0 (2 ways); either has
        # room for several. The first two arrivals fill one slot each, whatever the node order.
        place = pattern_placer([[(0, 0)], [(0, 0)]], fallback=[[0], [0]])
        got = place([0, 0], state)
        assert sorted(g[1] for g in got if g is not None) == [0, 1]
        for g in got:
            assert g is not None
            state.record(g[1], 0, g[0], 1)  # what the replay does once the call returns
        # Both slots taken: the next one goes where a pattern holds its workload (first in
        # the node order), not necessarily to an empty machine.
        first = int(state.order[0])
        assert place([0], state) == [(0, first)]


def test_a_departure_frees_its_slot() -> None:
    arch = architecture(24, "128L")
    menus = _menus()
    state = ClusterState(arch, 2, 0, menus)
    place = pattern_placer([[(0, 0)], [(0, 0)]], fallback=[[0], [0]])
    (first,) = place([0], state)
    assert first is not None
    # The replay records the VM, then it departs (run_cluster does both).
    state.record(first[1], 0, 0, 1)
    state.release(first[1], menus[0].demand[0])
    state.record(first[1], 0, 0, -1)
    assert place([0], state) == [first]


def test_the_scheduler_rule_prefers_an_exact_slot_then_room_for_the_workload_then_any() -> None:
    arch = architecture(24, "128L")
    for seed in range(4):
        state = ClusterState(arch, 3, seed, _menus())
        # Machine 0: one VM of workload 0 in option 1; machine 1: one in option 0; machine 2:
        # nothing planned. The policy always gives workload 0 option 0.
        place = scheduled_placer([[(0, 1)], [(0, 0)], []], lambda w, u: 0)
        (first,) = place([0], state)
        assert first == (0, 1)  # the exact slot, whatever the node order
        state.record(1, 0, 0, 1)
        (second,) = place([0], state)
        assert second == (0, 0)  # room for the workload in another configuration
        state.record(0, 0, 0, 1)
        # Every slot of workload 0 is taken: first fit over all machines.
        (third,) = place([0], state)
        assert third == (0, int(state.order[0]))


def test_without_patterns_the_scheduler_rule_is_first_fit() -> None:
    arch = architecture(24, "128L")
    state = ClusterState(arch, 3, 1, _menus())
    place = scheduled_placer(None, lambda w, u: 1)
    assert place([0, 1], state) == [(1, int(state.order[0]))] * 2
