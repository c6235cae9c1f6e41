"""A recommendation priced at the size the program runs at: a profile traced at 32 MiB and a
deployment of 4 GiB. The bytes priced, fitted to the machine, packed and planned are the
deployment's; the predicted times are the profile's."""

from __future__ import annotations

import pytest

from model import (
    DEFAULT_PRICE_PROFILE,
    FittedModel,
    InvalidRequest,
    MachineShape,
    NoFeasibleConfiguration,
    Predictor,
    Recommendation,
    parse_objective,
    recommend,
)
from model.bundle import MAX_BYTES
from model.grid import paper_grid
from model.priced_grid import predicted_grid, price_grid
from model.recommend import shortlist
from model.resources import GIB, MIB, split_memory
from tests.factories import Shape
from tests.model.support import PAPER_MACHINE, fitted

DEPLOYED = 4 * GIB

# Traced on a small input: 32 MiB in all, sizes that do not divide evenly into 4 GiB's share.
SMALL = Shape(
    name="small",
    structures={
        "hot": (3.3, 0.55, 0.70),
        "warm": (7.7, 0.35, 0.25),
        "cold": (21.0, 0.10, 0.05),
    },
    cpi_cache=0.6,
    p_dram=60.0,
    p_slow=40.0,
)


@pytest.fixture(scope="module")
def small() -> FittedModel:
    return fitted(SMALL)


def test_the_profile_is_small(small: FittedModel) -> None:
    assert small.footprint_bytes == pytest.approx(32 * MIB, abs=4)


def test_configurations_split_the_deployed_size_by_their_ratio(small: FittedModel) -> None:
    rec = recommend(small, machine=PAPER_MACHINE, memory_bytes=DEPLOYED)
    assert rec.memory_bytes == DEPLOYED and rec.sized_from == "caller"
    for c in [rec.chosen, *rec.within_threshold, *rec.other_candidates]:
        config = c.configuration
        assert config.dram_bytes + config.slow_bytes == DEPLOYED
        assert (config.dram_bytes, config.slow_bytes) == split_memory(DEPLOYED, config.slow_ratio)
        # Demand (packing) at the deployed size too.
        assert c.demand.dram == pytest.approx(config.dram_bytes / PAPER_MACHINE.dram_bytes)
        assert c.demand.slow == pytest.approx(config.slow_bytes / PAPER_MACHINE.slow_bytes)


def test_prices_are_of_the_deployed_size_and_times_of_the_profile(small: FittedModel) -> None:
    predictor = Predictor(small)
    grid = paper_grid()
    traced = price_grid(predictor, DEFAULT_PRICE_PROFILE, grid, PAPER_MACHINE)
    sized = price_grid(predictor, DEFAULT_PRICE_PROFILE, grid, PAPER_MACHINE, (), DEPLOYED)
    assert (sized.prediction.seconds == traced.prediction.seconds).all()
    assert traced.memory_bytes == small.footprint_bytes and sized.memory_bytes == DEPLOYED
    points = predicted_grid(predictor, machine=PAPER_MACHINE, memory_bytes=DEPLOYED)
    for point in points:
        config = split_memory(DEPLOYED, point.slow_ratio)
        assert (point.dram_bytes, point.slow_bytes) == config
        hourly = (
            small.vcpus * DEFAULT_PRICE_PROFILE.vcpu_hour
            + config[0] / GIB * DEFAULT_PRICE_PROFILE.dram_gib_hour
            + config[1] / GIB * DEFAULT_PRICE_PROFILE.slow_gib_hour
            + point.llc_ways * DEFAULT_PRICE_PROFILE.llc_way_hour
        )
        assert point.hourly_price == pytest.approx(hourly, rel=1e-12)
        assert point.cost == pytest.approx(hourly * point.predicted_seconds / 3600.0, rel=1e-12)


def test_the_plan_is_scaled_by_share(small: FittedModel) -> None:
    predictor = Predictor(small)
    for ratio in (0.0, 0.1, 0.3, 0.5, 0.7, 1.0):
        traced = {p.tag: p for p in predictor.placement(ratio, 4)}
        sized = predictor.placement(ratio, 4, DEPLOYED)
        dram, slow = split_memory(DEPLOYED, ratio)
        # Whole bytes that add up to the configuration's, never more.
        assert sum(p.fast_bytes for p in sized) == dram
        assert sum(p.slow_bytes for p in sized) == slow
        for p in sized:
            assert isinstance(p.fast_bytes, int) and isinstance(p.slow_bytes, int)
            assert p.fast_bytes >= 0 and p.slow_bytes >= 0
            assert p.fast_bytes + p.slow_bytes == p.size_bytes
            t = traced[p.tag]
            # Each structure keeps its share of the memory and its share in the slow tier.
            share = t.size_bytes / small.footprint_bytes
            assert p.size_bytes == pytest.approx(share * DEPLOYED, abs=1)
            assert p.slow_bytes / p.size_bytes == pytest.approx(
                t.slow_bytes / t.size_bytes, abs=1e-6
            )
            assert p.accesses_per_instruction == t.accesses_per_instruction


def test_the_recommendations_plan_is_at_its_size(small: FittedModel) -> None:
    rec = recommend(small, machine=PAPER_MACHINE, memory_bytes=DEPLOYED)
    config = rec.chosen.configuration
    assert sum(p.fast_bytes for p in rec.placement) == config.dram_bytes
    assert sum(p.slow_bytes for p in rec.placement) == config.slow_bytes


def test_without_a_size_the_profile_prices_itself(small: FittedModel) -> None:
    alone = recommend(small, machine=PAPER_MACHINE)
    assert alone.sized_from == "profile" and alone.memory_bytes == small.footprint_bytes
    same = recommend(
        small, machine=PAPER_MACHINE, memory_bytes=small.footprint_bytes, sized_from="request"
    )
    assert same.sized_from == "request"
    assert same.model_dump(exclude={"sized_from"}) == alone.model_dump(exclude={"sized_from"})


def test_the_size_changes_the_answer(small: FittedModel) -> None:
    """At 32 MiB memory costs nothing beside a vCPU and all-DRAM wins; at 4 GiB memory is a real
    share of the bill and the cold structure goes slow. A recommendation that ignored the size
    would give the first answer to both questions."""
    traced = recommend(small, machine=PAPER_MACHINE)
    sized = recommend(small, machine=PAPER_MACHINE, memory_bytes=DEPLOYED)
    assert traced.chosen.configuration.slow_ratio == 0.0
    assert sized.chosen.configuration.slow_ratio > 0.0
    assert sized.chosen.predicted_seconds == pytest.approx(
        Predictor(small).predict_one(
            sized.chosen.configuration.slow_ratio, sized.chosen.configuration.llc_ways
        )[0]
    )


def test_the_machine_holds_the_deployed_size(small: FittedModel) -> None:
    """2 GiB of DRAM holds every traced configuration, and none of 4 GiB below half slow."""
    machine = MachineShape(cpus=12, dram_bytes=2 * GIB, slow_bytes=128 * GIB, llc_ways=48)
    traced = price_grid(Predictor(small), DEFAULT_PRICE_PROFILE, paper_grid(), machine)
    assert traced.feasible.all()
    rec = recommend(small, machine=machine, memory_bytes=DEPLOYED)
    assert rec.feasible_count == 6 * 7  # ratios 0.5 .. 1.0 at every way count
    for c in [rec.chosen, *rec.within_threshold, *rec.other_candidates]:
        assert c.configuration.dram_bytes <= machine.dram_bytes
    no_slow = MachineShape(cpus=12, dram_bytes=2 * GIB, slow_bytes=0, llc_ways=48)
    with pytest.raises(NoFeasibleConfiguration):
        recommend(small, machine=no_slow, memory_bytes=DEPLOYED)


def test_least_dram_scores_by_share_whatever_the_size(small: FittedModel) -> None:
    objective = parse_objective("least-dram:10%")
    traced = recommend(small, machine=PAPER_MACHINE, objective=objective)
    sized = recommend(small, machine=PAPER_MACHINE, objective=objective, memory_bytes=DEPLOYED)
    pick = (traced.chosen.configuration.slow_ratio, traced.chosen.configuration.llc_ways)
    assert pick == (sized.chosen.configuration.slow_ratio, sized.chosen.configuration.llc_ways)


@pytest.mark.parametrize("bad", [0, -1, MAX_BYTES + 1, True, 4.0])
def test_a_size_out_of_bounds_is_refused(small: FittedModel, bad: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        recommend(small, machine=PAPER_MACHINE, memory_bytes=bad)  # type: ignore[arg-type]
    assert "memory_bytes" in str(info.value)


def test_the_largest_size_is_priced_exactly(small: FittedModel) -> None:
    priced = price_grid(
        Predictor(small), DEFAULT_PRICE_PROFILE, paper_grid(), PAPER_MACHINE, (), MAX_BYTES
    )
    assert int(priced.dram_bytes[0]) == MAX_BYTES and int(priced.slow_bytes[-1]) == MAX_BYTES
    assert not priced.feasible.any()  # far beyond the machine
    plan = Predictor(small).placement(0.3, 4, MAX_BYTES)
    assert sum(p.fast_bytes + p.slow_bytes for p in plan) == MAX_BYTES


def test_a_source_without_a_size_is_refused(small: FittedModel) -> None:
    with pytest.raises(InvalidRequest) as info:
        shortlist(small, machine=PAPER_MACHINE, sized_from="request")
    assert "sized_from" in str(info.value)
    with pytest.raises(InvalidRequest):
        shortlist(small, machine=PAPER_MACHINE, memory_bytes=DEPLOYED, sized_from="profile")


def test_a_stored_recommendation_without_a_size_reads_as_the_profiles(small: FittedModel) -> None:
    rec = recommend(small, machine=PAPER_MACHINE)
    stored = rec.model_dump(mode="json")
    del stored["memory_bytes"], stored["sized_from"]
    read = Recommendation.model_validate(stored)
    assert read.memory_bytes == small.footprint_bytes and read.sized_from == "profile"


def test_configurations_are_priced_and_packed_with_the_deployed_vcpus(small: FittedModel) -> None:
    """A program profiled on four vCPUs and deployed on eight pays eight vCPUs an hour at every
    configuration, and asks eight of the machine's CPUs; the predicted times stay the profile's."""
    predictor = Predictor(small)
    grid = paper_grid()
    own = price_grid(predictor, DEFAULT_PRICE_PROFILE, grid, PAPER_MACHINE, (), DEPLOYED)
    eight = price_grid(predictor, DEFAULT_PRICE_PROFILE, grid, PAPER_MACHINE, (), DEPLOYED, 8)
    assert own.vcpus == small.vcpus == 4 and eight.vcpus == 8
    extra = eight.hourly - own.hourly
    assert extra == pytest.approx([4 * DEFAULT_PRICE_PROFILE.vcpu_hour] * len(extra))
    assert eight.demand[:, 0] == pytest.approx([8 / PAPER_MACHINE.cpus] * len(extra))
    assert (eight.prediction.seconds == own.prediction.seconds).all()
    rec = recommend(small, machine=PAPER_MACHINE, memory_bytes=DEPLOYED, vcpus=8)
    assert rec.vcpus == 8
    for c in [rec.chosen, rec.best, *rec.within_threshold, *rec.other_candidates]:
        assert c.configuration.vcpus == 8
    assert recommend(small, machine=PAPER_MACHINE).vcpus == small.vcpus


def test_a_slowdown_costs_every_deployed_vcpu(small: FittedModel) -> None:
    """Priced with one vCPU, memory is most of the bill and the cheapest takes 0.9 slow; with
    the machine's twelve, each second a slow configuration adds costs twelve vCPU-seconds and
    the cheapest takes less slow memory."""
    size = 16 * GIB
    one = recommend(small, machine=PAPER_MACHINE, memory_bytes=size, vcpus=1)
    twelve = recommend(small, machine=PAPER_MACHINE, memory_bytes=size, vcpus=12)
    assert one.chosen.configuration.slow_ratio == pytest.approx(0.9)
    assert twelve.chosen.configuration.slow_ratio < one.chosen.configuration.slow_ratio


@pytest.mark.parametrize("vcpus", [0, -1, 4097, True, 2.0])
def test_a_vcpu_count_out_of_range_is_refused(small: FittedModel, vcpus: object) -> None:
    with pytest.raises(InvalidRequest, match="vcpus"):
        recommend(small, machine=PAPER_MACHINE, vcpus=vcpus)  # type: ignore[arg-type]


def test_more_vcpus_than_the_machine_has_fit_nowhere(small: FittedModel) -> None:
    with pytest.raises(NoFeasibleConfiguration):
        recommend(small, machine=PAPER_MACHINE, vcpus=PAPER_MACHINE.cpus + 1)
