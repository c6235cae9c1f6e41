"""The plan-following placers of the planners' comparison (bench/planning.py)."""

from __future__ import annotations

import numpy as np

from bench.planning import pattern_placer, scheduled_placer
from model.node_contract import NodePattern, PatternSlot
from model.patterns import preference
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


def test_the_simulator_replays_the_schedulers_pattern_rule() -> None:
    """On random plans and clusters, the machine `scheduled_placer` picks is the first in the
    node order among the fitting machines at the highest `model.patterns.preference`."""
    arch = architecture(24, "128L")
    menus = _menus()
    rng = np.random.default_rng(7)
    for case in range(200):
        machines = 4
        patterns = [
            [(int(rng.integers(2)), int(rng.integers(2))) for _ in range(int(rng.integers(0, 4)))]
            for _ in range(machines)
        ]
        state = ClusterState(arch, machines, case, menus)
        for _ in range(int(rng.integers(0, 6))):
            m, w, o = int(rng.integers(machines)), int(rng.integers(2)), int(rng.integers(2))
            if state.fits(menus[w].demand[o])[m]:
                state.place(m, menus[w].demand[o])
                state.record(m, w, o, 1)
        w, o = int(rng.integers(2)), int(rng.integers(2))

        def config(w: int, o: int) -> tuple[str, int, int, int]:
            d = menus[w].demand[o]
            return (f"w{w}", int(d[1]), int(d[2]), int(d[3]))

        prefs = []
        for k in range(machines):
            counts: dict[tuple[str, int, int, int], int] = {}
            for ww, oo in patterns[k]:
                counts[config(ww, oo)] = counts.get(config(ww, oo), 0) + 1
            node = (
                NodePattern(
                    plan="p",
                    machine=k,
                    slots=tuple(
                        PatternSlot(
                            workload=key[0],
                            dram_bytes=key[1],
                            slow_bytes=key[2],
                            llc_ways=key[3],
                            count=n,
                        )
                        for key, n in counts.items()
                    ),
                )
                if counts
                else None
            )
            placed = {
                config(ww, oo): int(state.vms_of(ww, oo)[k]) for ww in range(2) for oo in range(2)
            }
            prefs.append(preference(node, placed, f"w{w}", *config(w, o)[1:]))
        fits = state.fits(menus[w].demand[o])

        def policy(_w: int, _u: np.ndarray, o: int = o) -> int:
            return o

        got = scheduled_placer(patterns, policy)([w], state)[0]
        if not fits.any():
            assert got is None
            continue
        top = max(p for p, f in zip(prefs, fits, strict=True) if f)
        tier = [int(k) for k in state.order if fits[k] and prefs[k] == top]
        assert got == (o, tier[0]), (case, patterns, prefs)
