"""The OR-Tools capacity planner and the CAT-aware rebalancer (model/capacity.py, model/rebalancer.py)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from pydantic import ValidationError

import model.capacity as capacity_module
from model.capacity import (
    MachineKind,
    Option,
    WorkloadClass,
    greedy_machines,
    paper_machine_kinds,
    peak_factor,
    peak_vms,
    plan_capacity,
    plan_kind,
)
from model.packing import run_mask
from model.planning_requests import KindIn
from model.pricing import DEFAULT_PRICE_PROFILE
from model.rebalancer import Node, Pod, greedy_rebalance, rebalance
from model.resources import GIB

HOUR = 3600.0


def _memory_heavy_mix() -> list[WorkloadClass]:
    """Two classes whose cheapest options both lean on DRAM; each has a slow-memory option 2 %
    dearer that frees most of it."""
    a = WorkloadClass(
        "a", 60, (Option(1, 8 * GIB, 0, 2, HOUR, 1.0), Option(1, 2 * GIB, 6 * GIB, 2, HOUR, 1.02))
    )
    b = WorkloadClass(
        "b", 60, (Option(1, 6 * GIB, 0, 2, HOUR, 1.0), Option(1, 1 * GIB, 5 * GIB, 2, HOUR, 1.02))
    )
    return [a, b]


def test_the_planner_frees_dram_where_greedy_strands_cpu() -> None:
    kind = MachineKind("24G-128L")
    plan = plan_capacity(_memory_heavy_mix(), [kind], DEFAULT_PRICE_PROFILE, fill=1.0)
    best = plan.best
    # 120 VMs at once on average; the cluster's 95th percentile is 139 (120 + 1.645 sqrt(120)),
    # so each class gets room for 60 x 139 / 120 = 69.5 -> 70.
    assert peak_vms(120.0, 0.95) == 139
    assert peak_factor(_memory_heavy_mix(), 0.95) == pytest.approx(139 / 120)
    # Greedy, whole machines: 70 VMs of 8 GiB three to a machine (24), 70 of 6 GiB four to a
    # machine (17.5, the last machine shared by first fit decreasing): 41 machines of 24 GiB.
    assert greedy_machines(_memory_heavy_mix(), kind, 1.0) == 41
    assert best.greedy_machines == 41
    # Planner: CPU binds at 140 vCPUs / 12 = 12 machines, DRAM moved to slow memory; CP-SAT
    # proves it.
    assert best.machines == 12 and best.status == "optimal" and best.lower_bound == 12
    assert best.binding in ("cpu", "dram")
    assert sum(best.vms["a"]) >= 70 and sum(best.vms["b"]) >= 70
    assert sum(best.mix["a"]) == pytest.approx(60) and sum(best.mix["b"]) == pytest.approx(60)
    _check_machines(_memory_heavy_mix(), kind, best.machines_content)


def _check_machines(
    classes: list[WorkloadClass], kind: MachineKind, content: list[dict[str, int]]
) -> None:
    """Every machine of a plan holds its VMs within its CPUs, DRAM, slow memory and ways."""
    by_name = {c.name: c for c in classes}
    for m in content:
        used = [0.0, 0.0, 0.0, 0.0]
        for key, n in m.items():
            name, oi = key.rsplit("#", 1)
            for r, d in enumerate(by_name[name].options[int(oi)].demand()):
                used[r] += n * d
        assert all(u <= c + 1e-6 for u, c in zip(used, kind.capacity(), strict=True)), m


def test_the_plan_falls_back_to_greedy_when_cp_sat_does_not_beat_it() -> None:
    kind = MachineKind("24G-128L")
    # One option per class: nothing to trade, greedy's count is the answer and says so.
    only = [WorkloadClass("a", 60, (Option(1, 8 * GIB, 0, 2, HOUR, 1.0),))]
    plan = plan_kind(only, kind, DEFAULT_PRICE_PROFILE)
    assert plan.status == "greedy" and plan.machines == plan.greedy_machines == 25  # 73 / 3
    assert "greedy" in plan.note
    # A time limit too short to search: never more machines than greedy's.
    rushed = plan_kind(_memory_heavy_mix(), kind, DEFAULT_PRICE_PROFILE, time_limit_seconds=1e-3)
    assert rushed.machines <= rushed.greedy_machines == 41
    if rushed.status == "greedy":
        assert rushed.note


def test_whole_machines_not_average_use() -> None:
    """A VM taking 28 of 48 ways leaves room for no other such VM: average use (0.58 of a
    machine each) would plan half the machines needed."""
    kind = MachineKind("24G-128L")
    wide = [WorkloadClass("w", 10, (Option(1, GIB, 0, 28, HOUR, 1.0),))]
    plan = plan_kind(wide, kind, DEFAULT_PRICE_PROFILE)
    assert plan.machines == peak_vms(10.0, 0.95) == 16


def test_the_planner_picks_the_cheapest_kind_and_reports_every_kind() -> None:
    plan = plan_capacity(_memory_heavy_mix(), paper_machine_kinds(), DEFAULT_PRICE_PROFILE)
    assert len(plan.kinds) == 12
    assert plan.best.total_hour == min(k.total_hour for k in plan.kinds)
    for k in plan.kinds:
        assert k.machines <= k.greedy_machines


def test_a_class_no_kind_can_host_is_refused() -> None:
    huge = WorkloadClass("huge", 1, (Option(64, GIB, 0, 1, HOUR, 1.0),))
    small = WorkloadClass("small", 1, (Option(1, GIB, 0, 1, HOUR, 1.0),))
    with pytest.raises(ValueError, match="no machine kind can host huge: no option of it fits"):
        plan_capacity([small, huge], [MachineKind("24G-128L")], DEFAULT_PRICE_PROFILE)
    # Each class fits some kind, but no kind holds both: every kind names what it cannot host.
    dram = WorkloadClass("dram", 1, (Option(1, 64 * GIB, 0, 1, HOUR, 1.0),))
    slow = WorkloadClass("slow", 1, (Option(1, GIB, 200 * GIB, 1, HOUR, 1.0),))
    kinds = [
        MachineKind("24G-256L", dram_bytes=24 * GIB, local_slow_bytes=256 * GIB),
        MachineKind("96G-0L", dram_bytes=96 * GIB, local_slow_bytes=0),
    ]
    with pytest.raises(ValueError, match=r"cannot host: 24G-256L: dram; 96G-0L: slow\)"):
        plan_capacity([dram, slow], kinds, DEFAULT_PRICE_PROFILE)
    with pytest.raises(ValueError, match="no option"):
        plan_capacity([WorkloadClass("x", 1, ())], paper_machine_kinds(), DEFAULT_PRICE_PROFILE)
    bad = WorkloadClass("x", float("nan"), (Option(1, GIB, 0, 1, HOUR, 1.0),))
    with pytest.raises(ValueError, match="finite"):
        plan_capacity([bad], paper_machine_kinds(), DEFAULT_PRICE_PROFILE)


def _node(i: int, pool: int = -1) -> Node:
    return Node(f"n{i}", 12, 24 * GIB, 0 if pool >= 0 else 128 * GIB, 48, pool)


def _check(
    plan_nodes: list[Node], pods: list[Pod], placement: list[tuple[int, int]], pools: list[int]
) -> None:
    """Capacities, pool capacities and contiguous, non-overlapping CAT runs hold."""
    masks = [0] * len(plan_nodes)
    cpu = [0] * len(plan_nodes)
    pool_used = [0] * len(pools)
    for p, (ni, start) in zip(pods, placement, strict=True):
        m = run_mask(start, p.llc_ways)
        assert masks[ni] & m == 0, "overlapping CAT runs"
        assert start + p.llc_ways <= plan_nodes[ni].llc_ways
        masks[ni] |= m
        cpu[ni] += p.vcpus
        if plan_nodes[ni].pool >= 0:
            pool_used[plan_nodes[ni].pool] += p.slow_bytes
    assert all(c <= n.cpus for c, n in zip(cpu, plan_nodes, strict=True))
    assert all(u <= c for u, c in zip(pool_used, pools, strict=True))


def test_rebalance_frees_nodes_with_contiguous_way_runs() -> None:
    nodes = [_node(i) for i in range(4)]
    pods = [
        Pod("p0", 0, 4, 4 * GIB, 0, 4, 0),
        Pod("p1", 1, 4, 4 * GIB, 0, 4, 10),
        Pod("p2", 2, 4, 4 * GIB, 0, 30, 0),
        Pod("p3", 3, 2, 2 * GIB, 0, 20, 5),
    ]
    plan = rebalance(nodes, pods, time_limit_seconds=5)
    assert plan.nodes_before == 4 and plan.nodes_after == 2 and len(plan.freed) == 2
    assert len(plan.moves) == 2  # two moves suffice
    _check(nodes, pods, plan.placement, [])
    greedy = greedy_rebalance(nodes, pods)
    _check(nodes, pods, greedy.placement, [])
    assert greedy.nodes_after >= plan.nodes_after


def test_contiguity_can_block_a_drain_that_counts_alone_would_allow() -> None:
    nodes = [_node(0), _node(1)]
    # Node 0's pods must stay on it, and leave 36 free ways only in runs of 12: the 20-way pod
    # of node 1 fits by count but not as one contiguous run, unless their runs are re-laid (a
    # remap on the same node, which the CP-SAT plan may do and greedy does not).
    pods = [
        Pod("a", 0, 1, GIB, 0, 4, 12, movable=False),
        Pod("b", 0, 1, GIB, 0, 4, 28, movable=False),
        Pod("c", 0, 1, GIB, 0, 4, 44, movable=False),
        Pod("big", 1, 1, GIB, 0, 20, 0),
    ]
    greedy = greedy_rebalance(nodes, pods)
    assert greedy.nodes_after == 2
    plan = rebalance(nodes, pods, time_limit_seconds=5)
    assert plan.nodes_after == 1 and plan.remaps and plan.freed == ["n1"]
    assert [m.pod for m in plan.moves] == ["big"]
    _check(nodes, pods, plan.placement, [])


def test_pods_that_must_stay_and_pools_are_respected() -> None:
    nodes = [_node(0, pool=0), _node(1, pool=0), _node(2, pool=1)]
    pools = [40 * GIB, 40 * GIB]
    pods = [
        Pod("a", 0, 2, GIB, 30 * GIB, 2, 0),
        Pod("b", 1, 2, GIB, 5 * GIB, 2, 0, movable=False),
        Pod("c", 2, 2, GIB, 20 * GIB, 2, 0),
    ]
    plan = rebalance(nodes, pods, pools, time_limit_seconds=5)
    where = {p.name: plan.placement[i][0] for i, p in enumerate(pods)}
    assert where["b"] == 1
    # c's 20 GiB of slow memory cannot join pool 0 (30 + 5 + 20 > 40); a joins b's node.
    assert where["a"] == 1 and where["c"] == 2 and plan.nodes_after == 2
    _check(nodes, pods, plan.placement, pools)


def test_an_already_tight_cluster_is_left_unchanged_and_bad_input_is_refused() -> None:
    nodes = [_node(0), _node(1)]
    pods = [Pod("a", 0, 12, GIB, 0, 1, 0), Pod("b", 1, 12, GIB, 0, 1, 0)]
    assert rebalance(nodes, pods, time_limit_seconds=2).status == "unchanged"
    assert greedy_rebalance(nodes, pods).moves == []
    with pytest.raises(ValueError, match="ways lie outside"):
        rebalance(nodes, [Pod("a", 0, 1, GIB, 0, 8, 44)])
    with pytest.raises(ValueError, match="out of range"):
        rebalance(nodes, [Pod("a", 5, 1, GIB, 0, 1, 0)])


def test_cp_sat_frees_at_least_as_many_nodes_as_greedy_on_random_clusters() -> None:
    rng = np.random.default_rng(3)
    for _ in range(3):
        nodes = [_node(i) for i in range(8)]
        pods: list[Pod] = []
        masks = [0] * 8
        for i in range(14):
            ni = int(rng.integers(0, 8))
            ways = int(rng.choice([1, 2, 4, 12]))
            free = [s for s in range(48 - ways + 1) if masks[ni] & run_mask(s, ways) == 0]
            if not free or sum(p.vcpus for p in pods if p.node == ni) + 2 > 12:
                continue
            start = int(rng.choice(free))
            masks[ni] |= run_mask(start, ways)
            pods.append(Pod(f"p{i}", ni, 2, 3 * GIB, GIB, ways, start))
        plan = rebalance(nodes, pods, time_limit_seconds=5)
        greedy = greedy_rebalance(nodes, pods)
        _check(nodes, pods, plan.placement, [])
        _check(nodes, pods, greedy.placement, [])
        assert plan.nodes_after <= greedy.nodes_after


def test_extreme_mixes_get_an_answer_or_a_clear_refusal() -> None:
    kind = MachineKind("24G-128L")
    # Runs of 5e-324 s at ten million arrivals per hour: no VM is ever present for long; the
    # plan still holds room for one (no division by a vanishing total).
    tiny = [WorkloadClass("t", 9_999_999.0, (Option(1, 0, 0, 1, 5e-324, 0.0),))]
    plan = plan_kind(tiny, kind, DEFAULT_PRICE_PROFILE)
    assert plan.machines == 1 and plan.vms["t"] == [1]
    # Ten million arrivals per hour held for 1e9 s: ~2.8e12 VMs at once. Refused before any
    # VM is listed (listing them would exhaust memory).
    huge = [WorkloadClass("h", 1e7, (Option(1, GIB, 0, 1, 1e9, 1.0),))]
    with pytest.raises(ValueError, match="VMs at once"):
        plan_kind(huge, kind, DEFAULT_PRICE_PROFILE)


def _first_fit_one_at_a_time(
    items: list[tuple[int, int]], classes: list[WorkloadClass], kind: MachineKind, fill: float
) -> list[list[tuple[int, int]]] | None:
    """First fit decreasing the plain way, one VM at a time: the oracle for the planner's
    grouped version."""
    cap = capacity_module._per_machine(kind, fill)

    def units(it: tuple[int, int]) -> tuple[int, int, int, int]:
        return capacity_module._units(classes[it[0]].options[it[1]])

    def share(it: tuple[int, int]) -> float:
        return max(
            d / c if c else (math.inf if d else 0.0) for d, c in zip(units(it), cap, strict=True)
        )

    machines: list[list[tuple[int, int]]] = []
    free: list[list[int]] = []
    pool_free: list[int] = []
    pool = int(kind.pool_bytes * fill) // (1 << 20)
    for it in sorted(items, key=share, reverse=True):
        u = units(it)
        for k, f in enumerate(free):
            rack = k // kind.rack_nodes
            if all(d <= x for d, x in zip(u, f, strict=True)) and (
                not kind.pool_bytes or u[2] <= pool_free[rack]
            ):
                for r in range(4):
                    f[r] -= u[r]
                if kind.pool_bytes:
                    pool_free[rack] -= u[2]
                machines[k].append(it)
                break
        else:
            k = len(machines)
            if kind.pool_bytes and k % kind.rack_nodes == 0:
                pool_free.append(pool)
            rack = k // kind.rack_nodes
            if kind.pool_bytes and u[2] > pool_free[rack]:
                return None
            machines.append([it])
            free.append([c - d for c, d in zip(cap, u, strict=True)])
            if kind.pool_bytes:
                pool_free[rack] -= u[2]
    return machines


@pytest.mark.parametrize("seed", range(30))
def test_grouped_first_fit_decreasing_places_as_one_at_a_time_does(seed: int) -> None:
    rng = np.random.default_rng(seed)
    kinds = paper_machine_kinds()
    kind = kinds[int(rng.integers(len(kinds)))]
    classes = [
        WorkloadClass(
            f"c{c}",
            float(rng.uniform(1, 200)),
            tuple(
                Option(
                    int(rng.integers(1, 4)),
                    int(rng.integers(1, 12)) * GIB,
                    int(rng.integers(0, 40)) * GIB,
                    int(rng.integers(1, 24)),
                    HOUR,
                    1.0,
                )
                for _ in range(3)
            ),
        )
        for c in range(int(rng.integers(1, 5)))
    ]
    # As the greedy plan lists them: a run of alike VMs per (class, option).
    items = [
        (ci, oi)
        for ci in range(len(classes))
        for oi in range(3)
        for _ in range(int(rng.integers(0, 60)))
    ]
    items = [
        it for it in items if capacity_module._usable(classes[it[0]].options[it[1]], kind, 1.0)
    ]
    assert capacity_module._first_fit_decreasing(
        items, classes, kind, 1.0
    ) == _first_fit_one_at_a_time(items, classes, kind, 1.0)


def test_greedy_runs_inside_the_plans_time_limit() -> None:
    # One class at 8,000 arrivals an hour held for 45 minutes: ~6,000 VMs at once. One VM at a
    # time, first fit took tens of seconds before CP-SAT began, whatever the time limit said.
    big = [WorkloadClass("big", 8000, (Option(1, 2 * GIB, 0, 2, 0.75 * HOUR, 1.0),))]
    started = time.monotonic()
    plan = plan_capacity(
        big,
        paper_machine_kinds(),
        DEFAULT_PRICE_PROFILE,
        time_limit_seconds=0.1 / 12,
        deadline=time.monotonic() + 0.1 + 1.0,
    )
    assert time.monotonic() - started < 1.1 + 0.5  # the deadline, and a margin for the answer
    assert plan.best.machines > 0


def test_a_plan_past_its_deadline_is_refused_not_finished() -> None:
    big = [WorkloadClass("big", 8000, (Option(1, 2 * GIB, 0, 2, 0.75 * HOUR, 1.0),))]
    with pytest.raises(capacity_module.PlanningTimeLimit, match="time_limit_seconds"):
        plan_capacity(
            big, paper_machine_kinds(), DEFAULT_PRICE_PROFILE, deadline=time.monotonic() - 1
        )


def test_planner_sizes_are_taken_with_their_units_and_bounded() -> None:
    kind = {"name": "k", "cpus": 12, "dram_bytes": "512GiB", "local_slow_bytes": "1.5 TiB"}
    parsed = KindIn.model_validate({**kind, "llc_ways": 48})
    assert (parsed.dram_bytes, parsed.local_slow_bytes) == (512 * GIB, 1536 * GIB)
    assert KindIn.model_validate({**kind, "dram_bytes": 4096, "llc_ways": 48}).dram_bytes == 4096
    for bad, why in [
        ("17TiB", "less than or equal"),
        ("512 parsecs", "byte unit"),
        (-1, "byte string"),
    ]:
        with pytest.raises(ValidationError, match=why) as err:
            KindIn.model_validate({**kind, "dram_bytes": bad, "llc_ways": 48})
        assert err.value.errors()[0]["loc"] == ("dram_bytes",)
