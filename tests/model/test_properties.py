"""Properties that must hold for every physically consistent workload, not only hand-picked ones."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from model import (
    Grid,
    NoFeasibleConfiguration,
    Objective,
    Predictor,
    Utilization,
    host_grid,
    paper_grid,
    predicted_grid,
    recommend,
)
from model.confidence import PredictionInterval, prediction_interval, slowdown_sigma
from model.resources import split_memory
from tests.factories import Shape
from tests.model.support import HOST_WAYS, PAPER_MACHINE, consistent_shapes, fitted

PROPERTY = settings(max_examples=60, deadline=None)
ALL_WAYS = np.arange(1, HOST_WAYS + 1, dtype=np.int64)
FINE_RATIOS = np.linspace(0.0, 1.0, 21)
# Room for float summation order only; counters round at 1e-12 of the instruction count.
TINY = 1e-12

utilizations = st.builds(
    Utilization,
    cpu=st.floats(0.0, 1.0),
    dram=st.floats(0.0, 1.0),
    slow=st.floats(0.0, 1.0),
    llc=st.floats(0.0, 1.0),
)
thresholds = st.floats(0.0, 0.1)
grids = st.sampled_from([paper_grid(), host_grid(HOST_WAYS)])
RESOURCE_NAMES = ("cpu", "dram", "slow", "llc")


def predictor_of(shape: Shape) -> Predictor:
    return Predictor(fitted(shape))


# (i) --------------------------------------------------------------------------------------------


@PROPERTY
@given(shape=consistent_shapes())
def test_more_slow_memory_never_lowers_predicted_time(shape: Shape) -> None:
    predictor = predictor_of(shape)
    assert predictor.model.p_slow > 0
    p = predictor.predict(FINE_RATIOS, ALL_WAYS)
    steps = np.diff(p.seconds, axis=0)
    assert (steps >= -TINY * p.seconds[:-1]).all()


# (ii) -------------------------------------------------------------------------------------------


@PROPERTY
@given(shape=consistent_shapes())
# fastmin and fastmax miss alike (a flat curve, MAR held at fastmax's level) while their samples
# split the misses a little differently: one structure's rate must not rise with ways.
@example(
    shape=Shape(
        structures={"s0": (629.0, 0.5, 0.5076313771684196), "s1": (432.0, 0.5, 0.4923686228315803)},
        cpi_cache=0.2,
        p_dram=5.0,
        p_slow=1.0,
        curve=((1, 0.033174), (2, 0.03267528514987135)),
        w_min=1,
        w_max=2,
        sampling_interval=1,
        instructions=10**12,
    )
)
def test_more_ways_never_raise_mar_nor_mar_slow(shape: Shape) -> None:
    predictor = predictor_of(shape)
    mar = predictor.mar(ALL_WAYS.astype(np.float64))
    assert (np.diff(mar) <= TINY).all()
    p = predictor.predict(FINE_RATIOS, ALL_WAYS)
    # Coldest-first filling is the least-access placement at every way count, and every
    # structure's rate shrinks with ways, so the slow share's rate can only shrink too.
    assert (np.diff(p.mar_slow, axis=1) <= TINY).all()
    # All memory slow: every access is a slow access; and never more slow accesses than accesses.
    assert p.mar_slow[-1] == pytest.approx(p.mar, rel=1e-9, abs=TINY)
    assert (p.mar_slow <= p.mar[None, :] * (1.0 + 1e-9) + TINY).all()


def test_all_slow_means_every_access_is_slow_outside_the_profiled_range() -> None:
    # fastmin at 2 ways, fastmax at 28; the swept curve also covers 1 and 40 ways, as a CAT sweep
    # on a 48-way host naturally does. The paper grid asks for 1 way; host grids for 40.
    shape = Shape(
        curve=(
            (1, 0.03),
            (2, 0.02),
            (4, 0.011),
            (12, 0.008),
            (20, 0.0072),
            (28, 0.007),
            (40, 0.0068),
        ),
        w_min=2,
        w_max=28,
    )
    p = predictor_of(shape).predict(np.asarray([0.5, 1.0]), np.asarray([1, 2, 28, 40]))
    assert (p.mar_slow <= p.mar[None, :] * (1.0 + 1e-9)).all()
    assert p.mar_slow[-1] == pytest.approx(p.mar, rel=1e-9)


# (iii) and (v) ----------------------------------------------------------------------------------


@PROPERTY
@given(shape=consistent_shapes(), threshold=thresholds, util=utilizations, grid=grids)
def test_the_choice_is_within_t_of_the_cheapest(
    shape: Shape, threshold: float, util: Utilization, grid: Grid
) -> None:
    predictor = predictor_of(shape)
    rec = recommend(
        predictor, machine=PAPER_MACHINE, utilization=util, threshold=threshold, grid=grid
    )
    cheapest = min(
        g.cost for g in predicted_grid(predictor, machine=PAPER_MACHINE, grid=grid) if g.feasible
    )
    assert rec.best.cost == pytest.approx(cheapest, rel=1e-12)
    assert rec.chosen.cost <= rec.best.cost * (1.0 + threshold) + TINY
    for candidate in rec.within_threshold:
        assert candidate.cost <= rec.best.cost * (1.0 + threshold) + TINY
    # The chosen configuration's plan moves exactly its slow bytes.
    assert sum(s.slow_bytes for s in rec.placement) == rec.chosen.configuration.slow_bytes
    assert sum(s.fast_bytes for s in rec.placement) == rec.chosen.configuration.dram_bytes


# (iv) -------------------------------------------------------------------------------------------


@PROPERTY
@given(
    shape=consistent_shapes(),
    threshold=thresholds,
    util=utilizations,
    resource=st.sampled_from(RESOURCE_NAMES),
    low=st.floats(0.0, 0.99),
    # Demands of distinct candidates differ by at least ~1e-6 of a machine; steps far below 1 %
    # would only probe the 1e-9 penalty-tie rounding, not the packing rule.
    step=st.floats(0.01, 1.0),
)
def test_raising_a_resources_utilization_never_raises_the_demand_for_it(
    shape: Shape,
    threshold: float,
    util: Utilization,
    resource: str,
    low: float,
    step: float,
) -> None:
    high = min(1.0, low + step)
    predictor = predictor_of(shape)

    def chosen_demand(level: float) -> float:
        u = util.model_copy(update={resource: level})
        rec = recommend(predictor, machine=PAPER_MACHINE, utilization=u, threshold=threshold)
        return float(getattr(rec.chosen.demand, resource))

    assert chosen_demand(high) <= chosen_demand(low) + TINY


# (v) --------------------------------------------------------------------------------------------


@PROPERTY
@given(
    shape=consistent_shapes(),
    ratio=st.floats(0.0, 1.0),
    ways=st.integers(1, HOST_WAYS),
)
def test_placement_bytes_add_up_and_the_coldest_go_slow(
    shape: Shape, ratio: float, ways: int
) -> None:
    predictor = predictor_of(shape)
    plan = predictor.placement(ratio, ways)
    for s in plan:
        assert s.fast_bytes >= 0
        assert s.slow_bytes >= 0
        assert s.fast_bytes + s.slow_bytes == s.size_bytes, s.tag
    dram, slow = split_memory(predictor.model.footprint_bytes, ratio)
    assert sum(s.slow_bytes for s in plan) == slow
    assert sum(s.fast_bytes for s in plan) == dram
    # §3.4: nothing in the slow tier is hotter per byte than anything left in DRAM.
    in_slow = [s.hotness_per_mib for s in plan if s.slow_bytes > 0]
    in_fast = [s.hotness_per_mib for s in plan if s.fast_bytes > 0]
    if in_slow and in_fast:
        assert max(in_slow) <= min(in_fast) * (1.0 + 1e-12)
    # The plan is the one the prediction priced: its slow accesses are MAR_slow.
    p = predictor.predict(np.asarray([ratio]), np.asarray([ways], dtype=np.int64))
    planned = sum(s.accesses_per_instruction * s.slow_bytes / s.size_bytes for s in plan)
    assert planned == pytest.approx(float(p.mar_slow[0, 0]), rel=1e-9, abs=TINY)


# (vi) -------------------------------------------------------------------------------------------


@PROPERTY
@given(
    shape=consistent_shapes(),
    bound=st.floats(0.0, 1.0),
    threshold=thresholds,
    util=utilizations,
    grid=grids,
)
def test_slo_choice_meets_its_bound_and_is_cheap_among_those_that_do(
    shape: Shape, bound: float, threshold: float, util: Utilization, grid: Grid
) -> None:
    predictor = predictor_of(shape)
    points = predicted_grid(predictor, machine=PAPER_MACHINE, grid=grid)
    meeting = [g for g in points if g.feasible and g.slowdown <= bound + TINY]
    objective = Objective(kind="slo", max_slowdown=bound)
    # The paper's Algorithm 1 (no interval): the SLO is decided on the point prediction.
    if not meeting:
        # Possible on the paper grid when fastmax used more ways than its largest count (28).
        with pytest.raises(NoFeasibleConfiguration):
            recommend(
                predictor, machine=PAPER_MACHINE, objective=objective, grid=grid, confidence=None
            )
        return
    rec = recommend(
        predictor,
        machine=PAPER_MACHINE,
        utilization=util,
        objective=objective,
        threshold=threshold,
        grid=grid,
        confidence=None,
    )
    assert rec.chosen.slowdown <= bound + TINY
    cheapest = min(g.cost for g in meeting)
    assert rec.chosen.cost <= cheapest * (1.0 + threshold) + TINY


@PROPERTY
@given(
    shape=consistent_shapes(),
    bound=st.floats(0.0, 1.0),
    threshold=thresholds,
    util=utilizations,
    grid=grids,
)
def test_least_dram_choice_is_within_t_of_the_least_dram_that_meets_the_bound(
    shape: Shape, bound: float, threshold: float, util: Utilization, grid: Grid
) -> None:
    predictor = predictor_of(shape)
    footprint = predictor.model.footprint_bytes
    points = predicted_grid(predictor, machine=PAPER_MACHINE, grid=grid)
    meeting = [g for g in points if g.feasible and g.slowdown <= bound + TINY]
    objective = Objective(kind="least_dram", max_slowdown=bound)
    if not meeting:
        with pytest.raises(NoFeasibleConfiguration):
            recommend(
                predictor, machine=PAPER_MACHINE, objective=objective, grid=grid, confidence=None
            )
        return
    rec = recommend(
        predictor,
        machine=PAPER_MACHINE,
        utilization=util,
        objective=objective,
        threshold=threshold,
        grid=grid,
        confidence=None,
    )
    assert rec.chosen.slowdown <= bound + TINY
    least = min(g.dram_bytes for g in meeting) / footprint
    # T is an absolute share of the footprint here: DRAM shares are already fractions.
    assert rec.chosen.configuration.dram_bytes / footprint <= least + threshold + TINY


@PROPERTY
@given(
    shape=consistent_shapes(),
    bound=st.floats(0.0, 0.5),
    kind=st.sampled_from(["slo", "least_dram"]),
    level=st.sampled_from([0.9, 0.95, 0.99]),
)
def test_an_slo_is_decided_on_the_upper_bound_at_the_confidence_level(
    shape: Shape, bound: float, kind: str, level: float
) -> None:
    """With an interval, a candidate meets an SLO only if its upper bound does; the choice is
    the cheapest (least DRAM) of those, and the promise states the bound it was decided on."""
    predictor = predictor_of(shape)
    grid = paper_grid()
    p = predictor.predict(np.asarray(grid.slow_ratios), np.asarray(grid.llc_ways))
    sigma = prediction_interval(p, predictor.model.diagnostics, confidence=level).sigma
    relative = slowdown_sigma(sigma, p, predictor.model.ways_max)
    upper = PredictionInterval(relative, level).upper(p.seconds)
    upper_slowdown = upper / predictor.model.fastmax_seconds - 1.0
    points = predicted_grid(predictor, machine=PAPER_MACHINE, grid=grid)
    meets = upper_slowdown.ravel() <= bound + TINY
    meeting = [g for g, ok in zip(points, meets, strict=True) if g.feasible and ok]
    objective = Objective(kind=kind, max_slowdown=bound)
    if not meeting:
        with pytest.raises(NoFeasibleConfiguration, match=r"confidence|meets"):
            recommend(predictor, machine=PAPER_MACHINE, objective=objective, confidence=level)
        return
    rec = recommend(
        predictor, machine=PAPER_MACHINE, objective=objective, threshold=0.0, confidence=level
    )
    assert rec.chosen.slowdown_upper is not None
    assert rec.chosen.slowdown <= rec.chosen.slowdown_upper + TINY
    assert rec.chosen.slowdown_upper <= bound + TINY
    assert f"at {level * 100:g} %" in rec.promise
    if kind == "slo":
        assert rec.chosen.cost <= min(g.cost for g in meeting) * (1.0 + 1e-9)
    # Whatever the point prediction alone would have taken but the bound did not is explained.
    for d in rec.dropped:
        assert "break" in d.reason or "more than T" in d.reason


def test_fastmax_itself_promises_no_slowdown() -> None:
    """The model is anchored at fastmax: its own configuration is 0 % slower, with certainty,
    so an SLO as tight as 0 % is met there whatever the reference runs' noise."""
    predictor = Predictor(fitted())
    zero = Objective(kind="slo", max_slowdown=0.0)
    rec = recommend(predictor, machine=PAPER_MACHINE, objective=zero)
    c = rec.chosen
    assert (c.configuration.slow_ratio, c.configuration.llc_ways) == (
        0.0,
        predictor.model.ways_max,
    )
    assert c.slowdown_upper == pytest.approx(0.0, abs=1e-12)
    assert c.predicted_seconds_upper is not None
    assert c.predicted_seconds_upper >= c.predicted_seconds


def test_every_candidate_the_confidence_filter_drops_is_listed_with_its_reason() -> None:
    """Within T of the best by the prediction, left out by the interval: each is in `dropped`,
    and the acceptable candidates beyond T are `other_candidates`, best first."""
    predictor = Predictor(fitted())
    rec = recommend(predictor, machine=PAPER_MACHINE, threshold=0.05)
    points = predicted_grid(predictor, machine=PAPER_MACHINE)
    best = rec.best.cost
    kept = {(c.configuration.slow_ratio, c.configuration.llc_ways) for c in rec.within_threshold}
    near = {
        (g.slow_ratio, g.llc_ways)
        for g in points
        if g.feasible and g.cost <= best * 1.05 * (1.0 + 1e-12)
    }
    dropped = {
        (d.candidate.configuration.slow_ratio, d.candidate.configuration.llc_ways): d.reason
        for d in rec.dropped
    }
    missing = sorted(near - kept - set(dropped))
    # At most five are listed, cheapest first: only dearer ones may be missing.
    if missing:
        assert len(dropped) == 5
    assert all("more than T" in why for why in dropped.values())
    others = rec.other_candidates
    assert [c.cost for c in others] == sorted(c.cost for c in others)
    # Beyond T, and not those already listed as dropped.
    assert others and all(c.cost > best * 1.05 for c in others)
