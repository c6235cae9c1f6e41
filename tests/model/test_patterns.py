"""Machine patterns: the node annotation's contract, the preference rule, combining it with the
packing score, and spreading a capacity plan's machines over nodes (model/patterns.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from model import patterns as pr
from model.capacity import MachineKind, Option, WorkloadClass, plan_capacity
from model.node_contract import (
    PATTERN_ANNOTATION,
    ContractError,
    NodePattern,
    PatternSlot,
)
from model.price_profiles import price_profile
from model.resources import GIB


def slot(workload: str, dram: int, ways: int, count: int, slow: int = 0) -> PatternSlot:
    return PatternSlot(
        workload=workload, dram_bytes=dram, slow_bytes=slow, llc_ways=ways, count=count
    )


A1 = slot("a", 4 * GIB, 4, 2)
A2 = slot("a", 2 * GIB, 2, 1, slow=2 * GIB)
B1 = slot("b", 8 * GIB, 8, 1)
PATTERN = NodePattern(plan="plan-1", machine=0, slots=(A1, A2, B1))


def test_the_annotation_round_trips_and_is_bounded() -> None:
    text = PATTERN.to_annotation()
    assert json.loads(text)["schema"] == "tmc.pattern/v1"
    assert NodePattern.from_annotations({PATTERN_ANNOTATION: text}) == PATTERN
    assert NodePattern.from_annotations({}) is None
    assert NodePattern.from_annotations({PATTERN_ANNOTATION: ""}) is None
    body = json.loads(text)
    bad = [
        "not json",
        "x" * (64 * 1024 + 1),
        json.dumps({**body, "schema": "tmc.pattern/v9"}),
        json.dumps({**body, "extra": 1}),
        json.dumps({**body, "machine": -1}),
        json.dumps({**body, "plan": "has space"}),
        json.dumps({**body, "slots": [body["slots"][0]] * 2}),  # the same pair twice
        json.dumps({**body, "slots": [{**body["slots"][0], "count": 0}]}),
        json.dumps({**body, "slots": [{**body["slots"][0], "count": 4097}]}),
        json.dumps({**body, "slots": [{**body["slots"][0], "count": "2"}]}),
        json.dumps({**body, "slots": [{**body["slots"][0], "dram_bytes": 1.0}]}),
        json.dumps({**body, "slots": [{**body["slots"][0], "dram_bytes": 1 << 52}]}),
        json.dumps({**body, "slots": [{**body["slots"][0], "llc_ways": 65}]}),
        json.dumps({**body, "slots": [{**body["slots"][0], "workload": ""}]}),
        json.dumps(
            {
                **body,
                "slots": [{**body["slots"][0], "dram_bytes": i} for i in range(65)],
            }
        ),
    ]
    for raw in bad:
        with pytest.raises(ContractError):
            NodePattern.from_annotations({PATTERN_ANNOTATION: raw})


def test_placed_vms_fill_their_own_slot_first_then_the_workloads_others() -> None:
    slots = PATTERN.slots
    assert pr.placed_per_slot(slots, {}) == [0, 0, 0]
    assert pr.placed_per_slot(slots, {A1.key: 1, B1.key: 1}) == [1, 0, 1]
    # Three of A1's configuration: two on its slot, the third on a's other slot.
    assert pr.placed_per_slot(slots, {A1.key: 3}) == [2, 1, 0]
    # An unplanned configuration of a takes a place of a; of c, none.
    assert pr.placed_per_slot(slots, {("a", 1, 0, 1): 1, ("c", 1, 0, 1): 5}) == [1, 0, 0]
    assert pr.placed_per_slot(slots, {A2.key: 1, ("a", 1, 0, 1): 9}) == [2, 1, 0]


def test_preference_levels() -> None:
    def pref(placed: dict[pr.PlacedKey, int], key: pr.PlacedKey) -> int:
        return pr.preference(PATTERN, placed, *key)

    assert pref({}, A1.key) == pr.EXACT
    assert pref({}, ("a", 1, 0, 1)) == pr.WORKLOAD  # a's slot, another configuration
    assert pref({}, ("c", *A1.key[1:])) == pr.NONE  # not in the pattern
    assert pr.preference(None, {}, *A1.key) == pr.NONE
    assert pr.preference(PATTERN, {}, None, 1, 0, 1) == pr.NONE  # no workload
    # A1's slot full: a still has A2's place, so another configuration's.
    assert pref({A1.key: 2}, A1.key) == pr.WORKLOAD
    # a's three places taken, one of them by an unplanned configuration: none left.
    assert pref({A1.key: 1, A2.key: 1, ("a", 1, 0, 1): 1}, A1.key) == pr.NONE
    # Two places of three taken by unplanned pods: A1's slot still has room for this pod.
    assert pref({("a", 1, 0, 1): 2}, A1.key) == pr.EXACT
    assert pref({B1.key: 1}, B1.key) == pr.NONE


@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=5),
    st.dictionaries(st.sampled_from([A1.key, A2.key, B1.key, ("a", 1, 0, 1)]), st.integers(0, 4)),
)
def test_an_exact_preference_never_overfills_the_pattern(
    adds: list[int], placed: dict[pr.PlacedKey, int]
) -> None:
    """Placing a pod where the rule says EXACT keeps every pod of its workload on one of its
    slots, and the pods of its own configuration within their slot's count."""
    keys = [A1.key, A2.key, B1.key, ("a", 1, 0, 1)]
    for k in adds:
        key = keys[k]
        level = pr.preference(PATTERN, placed, *key)
        placed = {**placed, key: placed.get(key, 0) + 1}
        if level == pr.EXACT:
            per = pr.placed_per_slot(PATTERN.slots, placed)
            own = next(i for i, s in enumerate(PATTERN.slots) if s.key == key)
            assert placed[key] <= PATTERN.slots[own].count
            mine = [i for i, s in enumerate(PATTERN.slots) if s.workload == key[0]]
            held = sum(n for q, n in placed.items() if q[0] == key[0])
            assert sum(per[i] for i in mine) == held


def kinds_plan() -> tuple[dict[str, object], dict[str, list[dict[str, int]]]]:
    classes = [
        WorkloadClass(
            "cpu-heavy",
            60.0,
            (Option(4, 2 * GIB, 0, 2, 3600.0, 1.0), Option(4, 1 * GIB, 1 * GIB, 2, 3700.0, 1.1)),
        ),
        WorkloadClass("mem-heavy", 60.0, (Option(1, 10 * GIB, 0, 8, 3600.0, 1.0),)),
    ]
    kind = MachineKind("small", cpus=12, dram_bytes=24 * GIB, local_slow_bytes=64 * GIB)
    plan = plan_capacity(classes, [kind], price_profile("gce-n1"), time_limit_seconds=2.0)
    content: dict[str, object] = {"kind": "small", "machines_content": plan.best.machines_content}
    options = {
        c.name: [
            {"dram_bytes": o.dram_bytes, "slow_bytes": o.slow_bytes, "llc_ways": o.llc_ways}
            for o in c.options
        ]
        for c in classes
    }
    return content, options


def test_a_plans_machines_become_patterns() -> None:
    kind_plan, options = kinds_plan()
    machines = pr.plan_machines(kind_plan, options)
    content = kind_plan["machines_content"]
    assert isinstance(content, list) and len(machines) == len(content) > 1
    for slots, tally in zip(machines, content, strict=True):
        assert sum(s.count for s in slots) == sum(tally.values())
        assert {s.workload for s in slots} == {k.rpartition("#")[0] for k in tally}
    assert pr.plan_id(machines) == pr.plan_id(pr.plan_machines(kind_plan, options))
    assert pr.plan_id(machines) != pr.plan_id(machines[1:])
    for bad_content in ([], [{"nope": 1}], [{"cpu-heavy#7": 1}], [{"cpu-heavy#0": 0}]):
        with pytest.raises(pr.PlanNotAdoptable):
            pr.plan_machines({"kind": "small", "machines_content": bad_content}, options)


def test_machines_spread_over_nodes_stably_and_cyclically() -> None:
    nodes: list[tuple[str, NodePattern | None]] = [(f"n{i}", None) for i in (3, 1, 2, 0, 4)]
    first = pr.assign_machines("p", 3, nodes)
    assert first == {"n0": 0, "n1": 1, "n2": 2, "n3": 0, "n4": 1}
    # Applied again with the patterns written: nothing moves.
    written = [(n, NodePattern(plan="p", machine=m, slots=())) for n, m in first.items()]
    assert pr.assign_machines("p", 3, written) == first
    # A new node joins and one leaves: the others keep their machines, the newcomer takes
    # the machine fewest nodes stand for.
    changed = [w for w in written if w[0] != "n2"] + [("n10", None)]
    again = pr.assign_machines("p", 3, changed)
    assert {n: again[n] for n in ("n0", "n1", "n3", "n4")} == {
        n: first[n] for n in again if n != "n10"
    }
    assert again["n10"] == 2
    # Another plan's patterns are not kept.
    other = [(n, NodePattern(plan="q", machine=2, slots=())) for n, _ in nodes]
    assert pr.assign_machines("p", 3, other) == first
    with pytest.raises(pr.PlanNotAdoptable):
        pr.assign_machines("p", 0, nodes)


CASES = Path(__file__).parents[2] / "scheduler" / "conformance" / "patterns.json"


def test_the_shared_cases_are_the_models_answers() -> None:
    """scheduler/conformance/patterns.json holds the Go engine to these answers (its `combine`
    cases are the engine's alone); here the planning simulator's model of the preference is held
    to them, so that neither side drifts alone."""
    cases = json.loads(CASES.read_text())
    pattern = NodePattern.model_validate(cases["pattern"])
    assert sum(a["valid"] for a in cases["annotations"]) >= 5
    assert sum(not a["valid"] for a in cases["annotations"]) >= 25
    for a in cases["annotations"]:
        try:
            got = NodePattern.from_annotations({PATTERN_ANNOTATION: a["text"]})
        except ContractError:
            got = None
        assert (got is not None) == a["valid"], a["text"][:80]
        if got is not None:
            assert len(got.slots) == a["slots"]
    levels = {pr.NONE: 0, pr.WORKLOAD: 0, pr.EXACT: 0}
    for c in cases["preferences"]:
        placed = {(w, d, s, k): n for w, d, s, k, n in c["placed"]}
        pod = tuple(c["pod"])
        assert pr.preference(pattern, placed, *pod) == c["want"]
        assert pr.placed_per_slot(pattern.slots, placed) == c["per_slot"]
        levels[c["want"]] += 1
    assert min(levels.values()) >= 5  # every level is exercised
