"""The extender's cache and machine patterns: the preferences it keeps per pod key, updated as
pods come and go and patterns change, always equal the rule applied afresh (model/patterns.py)."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np

from ledger.types import Held, NodeCapacity
from model import patterns as pr
from model.node_contract import NodePattern, PatternSlot
from model.packing import Ask
from scheduler.state import ClusterState

GIB = 1 << 30
CONFIGS = [(2 * GIB, 0, 2), (4 * GIB, 0, 4), (1 * GIB, 1 * GIB, 1)]
WORKLOADS = ["w", "v", "u"]


def pattern(rng: random.Random, plan: str) -> NodePattern | None:
    if rng.random() < 0.3:
        return None
    keys = rng.sample([(w, c) for w in WORKLOADS[:2] for c in CONFIGS], rng.randint(1, 4))
    slots = tuple(
        PatternSlot(workload=w, dram_bytes=d, slow_bytes=s, llc_ways=k, count=rng.randint(1, 3))
        for w, (d, s, k) in keys
    )
    return NodePattern(plan=plan, machine=0, slots=slots)


def node(name: str, p: NodePattern | None) -> NodeCapacity:
    return NodeCapacity(name, "k", 64, 256 * GIB, 256 * GIB, 64, None, True, p)


def test_kept_preferences_equal_the_rule_after_every_change() -> None:
    rng = random.Random(11)
    state = ClusterState()
    names = [f"n{i}" for i in range(6)]
    patterns = {n: pattern(rng, "p1") for n in names}
    for n in names:
        state.upsert_node(node(n, patterns[n]))
    held: dict[str, Held] = {}
    for step in range(400):
        roll = rng.random()
        if roll < 0.5:
            uid = f"u{step}"
            d, s, k = rng.choice(CONFIGS)
            h = Held(
                uid,
                "ns",
                uid,
                rng.choice(names),
                1,
                d,
                s,
                False,
                (1 << k) - 1,
                rng.choice(WORKLOADS),
            )
            state.hold(h)
            held[uid] = h
        elif roll < 0.8 and held:
            uid = rng.choice(sorted(held))
            state.release(uid)
            del held[uid]
        elif roll < 0.9:
            n = rng.choice(names)
            patterns[n] = pattern(rng, f"p{step}")
            state.upsert_node(node(n, patterns[n]))
        elif roll < 0.95:  # a node joins
            n = f"n{len(names)}"
            names.append(n)
            patterns[n] = pattern(rng, "p1")
            state.upsert_node(node(n, patterns[n]))
        for _ in range(2):
            w = rng.choice(WORKLOADS)
            d, s, k = rng.choice(CONFIGS)
            pod = (w, d, s, k)
            per_node = {
                n: Counter(
                    (h.workload, h.dram_bytes, h.slow_bytes, h.llc_mask.bit_count())
                    for h in held.values()
                    if h.node == n and h.workload is not None
                )
                for n in names
            }
            want = [pr.preference(patterns[n], per_node[n], *pod) for n in names]
            assert state.preferences(names, pod) == want, step
            # The scores combine them with packing as the rule says.
            ask = Ask(1, d, s, k)
            packing = state.scores(names, ask)
            assert state.scores(names, ask, pod) == pr.combine(want, packing), step


def test_no_pattern_no_cost_and_no_change() -> None:
    state = ClusterState()
    for i in range(4):
        state.upsert_node(node(f"n{i}", None))
    ask = Ask(1, 2 * GIB, 0, 2)
    pos = np.arange(4, dtype=np.int64)
    assert list(state.scores_at(pos, ask, ("w", 2 * GIB, 0, 2))) == list(state.scores_at(pos, ask))
    assert state.preferences([f"n{i}" for i in range(4)], ("w", 2 * GIB, 0, 2)) == [0] * 4
