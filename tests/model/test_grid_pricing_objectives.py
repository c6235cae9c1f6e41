"""The candidate grid, the price profile (Eq. 1), objectives, and what recommend promises."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from model import (
    CHEAPEST,
    Configuration,
    Grid,
    InvalidRequest,
    MachineShape,
    NoFeasibleConfiguration,
    Objective,
    Predictor,
    Recommendation,
    Utilization,
    demand,
    host_grid,
    paper_grid,
    paper_price_profile,
    parse_objective,
    predicted_grid,
    recommend,
)
from model.pricing import LIST_DRAM_GIB_HOUR, LIST_VCPU_HOUR
from model.resources import GIB
from tests.factories import Shape
from tests.model.support import PAPER_MACHINE, fitted

# -- grids ---------------------------------------------------------------------------------------


def test_paper_grid_is_the_77_candidates_of_section_4_1() -> None:
    grid = paper_grid()
    assert grid.size == 77
    assert grid.slow_ratios == pytest.approx([i / 10 for i in range(11)], abs=1e-12)
    assert grid.llc_ways == (1, 2, 3, 4, 12, 20, 28)


def test_host_grid_covers_every_way_of_a_48_way_llc() -> None:
    grid = host_grid(48)
    assert grid.size == 11 * 48 == 528
    assert grid.llc_ways == tuple(range(1, 49))
    assert grid.slow_ratios == paper_grid().slow_ratios


def test_host_grid_respects_cats_minimum() -> None:
    assert host_grid(48, min_llc_ways=2).llc_ways == tuple(range(2, 49))
    with pytest.raises(ValueError):
        host_grid(4, min_llc_ways=5)


@pytest.mark.parametrize(
    ("ratios", "ways"),
    [
        ((0.2, 0.1), (1, 2)),  # unsorted ratios
        ((0.1, 0.1), (1, 2)),  # repeated ratio
        ((0.0, 1.1), (1, 2)),  # ratio above 1
        ((-0.1, 0.5), (1, 2)),  # ratio below 0
        ((0.0, 0.5), (4, 2)),  # unsorted ways
        ((0.0, 0.5), (2, 2)),  # repeated ways
        ((0.0, 0.5), (0, 2)),  # no ways at all
        ((), (1, 2)),  # empty
        ((0.0, 0.5), ()),  # empty
    ],
)
def test_grid_rejects_unsorted_or_out_of_range_values(
    ratios: tuple[float, ...], ways: tuple[int, ...]
) -> None:
    with pytest.raises(ValidationError):
        Grid(name="bad", slow_ratios=ratios, llc_ways=ways)


# -- prices --------------------------------------------------------------------------------------


def test_paper_prices_slow_memory_at_0_4_of_dram() -> None:
    prices = paper_price_profile()
    assert prices.dram_gib_hour == LIST_DRAM_GIB_HOUR
    assert prices.slow_gib_hour == pytest.approx(0.4 * prices.dram_gib_hour, rel=1e-12)


@pytest.mark.parametrize("vcpus", [1, 3, 12])
def test_a_vm_with_the_fair_ways_per_core_pays_the_vcpu_list_price(vcpus: int) -> None:
    # 48 ways over 12 cores: 4 ways per vCPU is the share a list-price vCPU already paid for.
    prices = paper_price_profile()
    config = Configuration(
        vcpus=vcpus, dram_bytes=0, slow_bytes=0, slow_ratio=0.0, llc_ways=4 * vcpus
    )
    assert prices.hourly_price(config) == pytest.approx(vcpus * LIST_VCPU_HOUR, rel=1e-12)


def test_fewer_ways_than_fair_cost_less_and_more_cost_more() -> None:
    prices = paper_price_profile()

    def price(ways: int) -> float:
        return prices.hourly_price(
            Configuration(vcpus=1, dram_bytes=0, slow_bytes=0, slow_ratio=0.0, llc_ways=ways)
        )

    assert price(1) < LIST_VCPU_HOUR < price(12)


def test_cost_is_hourly_price_times_hours() -> None:
    prices = paper_price_profile()
    config = Configuration(
        vcpus=4, dram_bytes=3 * GIB, slow_bytes=5 * GIB, slow_ratio=0.625, llc_ways=12
    )
    hourly = prices.hourly_price(config)
    assert hourly == pytest.approx(
        4 * prices.vcpu_hour
        + 3 * prices.dram_gib_hour
        + 5 * prices.slow_gib_hour
        + 12 * prices.llc_way_hour,
        rel=1e-12,
    )
    assert prices.cost(config, 3600.0) == pytest.approx(hourly, rel=1e-12)
    assert prices.cost(config, 5400.0) == pytest.approx(1.5 * hourly, rel=1e-12)
    assert prices.cost(config, 0.0) == 0.0


# -- objectives ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "kind", "bound"),
    [
        ("cheapest", "cheapest", None),
        ("slo:5%", "slo", 0.05),
        ("least-dram:10%", "least_dram", 0.10),
        ("least_dram:10%", "least_dram", 0.10),
        ("slo:0%", "slo", 0.0),
        ("slo:10000%", "slo", 100.0),
        (" slo:12.5% ", "slo", 0.125),
    ],
)
def test_parse_objective_accepts(spec: str, kind: str, bound: float | None) -> None:
    objective = parse_objective(spec)
    assert objective.kind == kind
    if bound is None:
        assert objective.max_slowdown is None
    else:
        assert objective.max_slowdown == pytest.approx(bound, rel=1e-12)


@pytest.mark.parametrize(
    "spec", ["slo", "cheapest:5%", "fastest", "least-dram", "slo:-5%", "slo:five", "", "SLO:5%"]
)
def test_parse_objective_rejects(spec: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_objective(spec)
    assert [p.field for p in info.value.problems] == ["objective"]


@pytest.mark.parametrize(
    ("spec", "shown"),
    [
        ("slo:5", "slo:5%"),
        ("least-dram:10", "least-dram:10%"),
        ("least_dram:0.1", "least_dram:0.1%"),
        ("slo:0.05", "slo:0.05%"),
    ],
)
def test_a_bound_without_percent_is_rejected_with_the_right_form(spec: str, shown: str) -> None:
    # `slo:5` used to be read as a fraction (500 %) without a word; now it is an error that shows
    # what to write.
    with pytest.raises(InvalidRequest) as info:
        parse_objective(spec)
    assert shown in info.value.problems[0].message


@pytest.mark.parametrize(
    "spec", ["slo:10000.5%", "slo:1" + "0" * 400 + "%", "slo:1e3%", "slo:5%%", "slo:.5%", "slo:5 %"]
)
def test_out_of_range_or_malformed_bounds_are_rejected(spec: str) -> None:
    with pytest.raises(InvalidRequest):
        parse_objective(spec)


@pytest.mark.parametrize(
    "spec", ["cheapest", "slo:5%", "least-dram:10%", "slo:0.000001%", "slo:12.5%", "slo:10000%"]
)
def test_objectives_print_back_as_they_parse(spec: str) -> None:
    # The recommendation records str(objective); it must be re-parseable to audit a decision.
    assert str(parse_objective(spec)) == spec
    assert parse_objective(str(parse_objective(spec))) == parse_objective(spec)


# -- recommend -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor(fitted())


def test_no_feasible_configuration_without_room_for_the_footprint(predictor: Predictor) -> None:
    footprint = predictor.model.footprint_bytes
    machine = MachineShape(cpus=12, dram_bytes=footprint - 1, slow_bytes=0, llc_ways=48)
    with pytest.raises(NoFeasibleConfiguration):
        recommend(predictor, machine=machine)


def test_no_feasible_configuration_with_too_few_cpus(predictor: Predictor) -> None:
    machine = PAPER_MACHINE.model_copy(update={"cpus": predictor.model.vcpus - 1})
    with pytest.raises(NoFeasibleConfiguration):
        recommend(predictor, machine=machine)


def test_a_threshold_outside_0_1_is_an_invalid_request(predictor: Predictor) -> None:
    with pytest.raises(InvalidRequest):
        recommend(predictor, machine=PAPER_MACHINE, threshold=1.5)
    with pytest.raises(InvalidRequest):
        recommend(predictor, machine=PAPER_MACHINE, threshold=-0.01)


@pytest.mark.parametrize("machine_ways", [1, 2, 3, 8])
@pytest.mark.parametrize("util", [Utilization(), Utilization(cpu=0.9, dram=0.9, slow=0.1, llc=0.1)])
def test_ways_beyond_the_machine_are_never_chosen(
    predictor: Predictor, machine_ways: int, util: Utilization
) -> None:
    unconstrained = recommend(predictor, machine=PAPER_MACHINE, threshold=0.1, utilization=util)
    machine = PAPER_MACHINE.model_copy(update={"llc_ways": machine_ways})
    rec = recommend(predictor, machine=machine, threshold=0.1, utilization=util)
    assert rec.chosen.configuration.llc_ways <= machine_ways
    assert all(c.configuration.llc_ways <= machine_ways for c in rec.within_threshold)
    assert rec.best.configuration.llc_ways <= machine_ways
    assert all(p.llc_ways <= machine_ways for p in rec.pareto_frontier)
    # The constraint must bite for the test to mean anything (this workload prefers 12 ways).
    assert unconstrained.best.configuration.llc_ways > machine_ways


def test_memory_beyond_the_machine_is_never_chosen(predictor: Predictor) -> None:
    # Half the footprint in DRAM at most: only ratios of 0.5 and above fit.
    machine = PAPER_MACHINE.model_copy(update={"dram_bytes": predictor.model.footprint_bytes // 2})
    rec = recommend(predictor, machine=machine, threshold=0.1)
    for c in [rec.chosen, rec.best, *rec.within_threshold]:
        assert c.configuration.dram_bytes <= machine.dram_bytes
        assert c.configuration.slow_ratio >= 0.5


def test_the_pareto_frontier_is_non_dominated_and_sorted(predictor: Predictor) -> None:
    rec = recommend(predictor, machine=PAPER_MACHINE)
    frontier = rec.pareto_frontier
    assert len(frontier) >= 2
    for a, b in itertools.pairwise(frontier):
        assert a.predicted_seconds < b.predicted_seconds
        assert a.cost > b.cost
    # Non-dominated against every feasible point, not only against each other.
    everything = [g for g in predicted_grid(predictor, machine=PAPER_MACHINE) if g.feasible]
    for p in frontier:
        for g in everything:
            dominates = (
                g.predicted_seconds <= p.predicted_seconds
                and g.cost <= p.cost
                and (g.predicted_seconds < p.predicted_seconds or g.cost < p.cost)
            )
            assert not dominates, (p, g)
    # And complete: every feasible point is dominated by or equal to some frontier point.
    for g in everything:
        assert any(
            p.predicted_seconds <= g.predicted_seconds and p.cost <= g.cost for p in frontier
        ), g
    # The fastest and the cheapest feasible configurations are its two ends.
    assert frontier[0].predicted_seconds == min(g.predicted_seconds for g in everything)
    assert frontier[-1].cost == min(g.cost for g in everything)


@pytest.mark.parametrize(
    "util",
    [
        Utilization(),
        Utilization(cpu=0.2, dram=0.9, slow=0.1, llc=0.3),
        Utilization(cpu=0.5, dram=0.1, slow=0.95, llc=0.9),
    ],
)
@pytest.mark.parametrize("objective", [CHEAPEST, Objective(kind="slo", max_slowdown=0.05)])
def test_the_recommendation_is_self_consistent(
    predictor: Predictor, util: Utilization, objective: Objective
) -> None:
    prices = paper_price_profile()
    rec = recommend(
        predictor, machine=PAPER_MACHINE, utilization=util, objective=objective, threshold=0.1
    )
    assert rec.within_threshold[0] == rec.chosen
    assert rec.best in rec.within_threshold
    assert rec.grid_size == 77
    assert rec.objective == str(objective)
    # Penalties are sorted, and each is D . U for the demand the candidate reports.
    penalties = [c.packing_penalty for c in rec.within_threshold]
    known = [p for p in penalties if p is not None]
    assert known == penalties
    assert known == sorted(known)
    for c in rec.within_threshold:
        assert c.demand == demand(c.configuration, PAPER_MACHINE)
        assert c.packing_penalty == pytest.approx(
            sum(d * u for d, u in zip(c.demand.as_tuple(), util.as_tuple(), strict=True)),
            rel=1e-12,
            abs=1e-15,
        )
        # Eq. 1 priced by the vectorised grid agrees with the profile's own arithmetic.
        assert c.cost == pytest.approx(prices.cost(c.configuration, c.predicted_seconds), rel=1e-12)
        assert c.predicted_seconds == pytest.approx(
            predictor.predict_one(c.configuration.slow_ratio, c.configuration.llc_ways)[0],
            rel=1e-12,
        )
    cheapest = min(g.cost for g in predicted_grid(predictor, machine=PAPER_MACHINE) if g.feasible)
    assert rec.chosen.cost_vs_cheapest == pytest.approx(rec.chosen.cost / cheapest - 1.0)


def test_ways_outside_the_profiled_range_are_marked_extrapolated() -> None:
    # Profiled between 2 and 16 ways: MAR is held flat outside, which the caller must be told.
    narrow = fitted(
        Shape(
            curve=((2, 0.030), (3, 0.022), (6, 0.015), (10, 0.012), (16, 0.011)),
            w_min=2,
            w_max=16,
        )
    )
    points = predicted_grid(narrow, machine=PAPER_MACHINE)
    assert {g.llc_ways for g in points if g.extrapolated} == {1, 20, 28}
    by_ways = {g.llc_ways: g.mar for g in points if g.slow_ratio == 0.0}
    assert by_ways[1] == by_ways[2] == narrow.curve_mar_at(2)
    assert by_ways[20] == by_ways[28] == narrow.curve_mar_at(16)


def test_an_idle_cluster_gets_the_objectives_best(predictor: Predictor) -> None:
    # With U = 0 every penalty ties at 0; the tie goes to cost, so nothing dearer is chosen.
    rec = recommend(predictor, machine=PAPER_MACHINE, threshold=0.1)
    assert rec.chosen == rec.best


def test_a_recommendation_round_trips_through_json(predictor: Predictor) -> None:
    rec = recommend(predictor, machine=PAPER_MACHINE, utilization=Utilization(dram=0.5))
    assert Recommendation.model_validate_json(rec.model_dump_json()) == rec
