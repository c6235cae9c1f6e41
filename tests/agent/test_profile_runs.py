"""Runs beyond the reference runs, where the model asks for them (`tmc-agent profile --runs N`,
tmc_agent.profile_runs): a traced C program (valgrind) and a simulator workload gain up to N
runs, each at the configuration a recommendation names as its next run, measured by the backend
with the model's plan, and the bundle carries them (`tmc.profile-runs/v1`); the fit passes through
each (the prediction there is the run's time); a bundle without them reads and fits as before;
a budget past the contract's is refused with a reason. The hardware backend's runs are in
tests/agent/test_hardware.py (fake perf, resctrl and clock)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tmc_agent import profile_runs
from tmc_agent.backends import simulated
from tmc_agent.cli import app
from tmc_agent.profile_runs import (
    DEFAULT_OBJECTIVES,
    FEW_WAYS_RUN,
    FEW_WAYS_SHARING_RUN,
    SHAPE_RUN,
    SHARING_RUN,
    RunNotMeasured,
    few_ways_sharing_point,
    objectives_of,
    partial_at_fewest_ways,
    shape_point,
    sharing_point,
    take_runs,
    with_runs,
)
from typer.testing import CliRunner

from model import Predictor, fit, parse_bundle
from model.bundle import MAX_PROFILE_RUNS, ProfileRun, ProfileRuns, RunConfiguration
from model.errors import InvalidBundle, NoFeasibleConfiguration
from model.grid import PAPER_LLC_WAYS, PAPER_SLOW_RATIOS
from model.predict import StructurePlacement
from tests.agent.runs_check import passes_through

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "profiler-agent" / "corpus"
ALLOC = ROOT / "profiler-agent" / "alloc"
EXAMPLE = ROOT / "examples" / "graph500.json"


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None,
    reason="the trace backend needs valgrind and gcc",
)
def test_a_traced_program_takes_the_runs_the_model_asks_for(tmp_path: Path) -> None:
    # bfs: at 4 GiB per vCPU its partial slow ratios are where `slo:5%` and `least-dram:5%`
    # decide and the model's bounds alone keep them out (docs/model.md, "Real programs").
    exe = tmp_path / "bfs"
    subprocess.run(
        [
            "gcc",
            "-O2",
            f"-I{ALLOC}",
            "-o",
            str(exe),
            str(ROOT / "profiler-agent" / "examples" / "bfs.c"),
        ],
        check=True,
    )
    out = tmp_path / "bfs.json"
    result = CliRunner().invoke(
        app,
        [
            "profile",
            "--backend",
            "trace",
            "--name",
            "bfs",
            "--runs",
            "2",
            "--runs-for",
            "least-dram:5%",
            "--runs-for",
            "slo:5%",
            "--out",
            str(out),
            "--",
            str(exe),
            "16",
            "6",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    bundle = parse_bundle(out.read_text())
    assert bundle.profile_runs is not None
    runs = bundle.profile_runs.runs
    assert 1 <= len(runs) <= 2
    # The objectives' runs, and the last one all slow at one way (none of theirs measured it).
    assert {r.objective for r in runs[:-1]} <= {"least-dram:5%", "slo:5%"}
    assert runs[-1].objective == FEW_WAYS_RUN
    passes_through(bundle)
    # The bundle without them is the three reference runs' bundle, as before.
    assert with_runs(bundle, []).profile_runs is None


def test_a_simulated_workload_takes_them_too_and_a_bundle_without_them_is_unchanged() -> None:
    bundle = simulated.profile("graph500", runs=3)
    assert bundle.profile_runs is not None and 1 <= len(bundle.profile_runs.runs) <= 3
    passes_through(bundle)
    plain = simulated.profile("graph500")
    assert plain.profile_runs is None
    assert plain.runs == bundle.runs  # the same reference runs: the runs are only added


def test_the_contract_bounds_the_runs() -> None:
    raw = json.loads(EXAMPLE.read_text())
    run = {"configuration": {"slow_ratio": 0.5, "llc_ways": 4}, "wall_seconds": 1.0}
    raw["profile_runs"] = {"runs": [run] * (MAX_PROFILE_RUNS + 1)}
    with pytest.raises(InvalidBundle, match="profile_runs"):
        parse_bundle(raw)
    raw["profile_runs"] = {"runs": [{**run, "wall_seconds": 0}]}
    with pytest.raises(InvalidBundle, match="wall_seconds"):
        parse_bundle(raw)
    raw["profile_runs"] = {"runs": [run]}
    read = parse_bundle(raw)
    assert read.profile_runs == ProfileRuns(
        runs=[
            ProfileRun(configuration=RunConfiguration(slow_ratio=0.5, llc_ways=4), wall_seconds=1.0)
        ]
    )


def test_a_budget_past_the_contract_is_refused() -> None:
    many = CliRunner().invoke(
        app, ["profile", "--backend", "sim", "--runs", str(MAX_PROFILE_RUNS + 1), "--", "x"]
    )
    assert many.exit_code != 0 and "--runs" in many.output
    bad = CliRunner().invoke(
        app, ["profile", "--backend", "sim", "--runs-for", "fastest", "--", "x"]
    )
    assert bad.exit_code != 0 and "--runs-for" in bad.output


def test_a_run_calibrates_the_slow_sharing_when_the_objectives_took_none() -> None:
    # No objective asks for a run here: the budget's run goes where the sharing moves the
    # prediction most, at a partial slow ratio within the profile's ways, with the model's plan.
    bundle = simulated.profile("graph500")
    predictor = Predictor(fit(bundle))
    asked: list[tuple[float, int]] = []

    def measure(ratio: float, ways: int, plan: list[StructurePlacement]) -> float:
        asked.append((ratio, ways))
        assert plan == predictor.placement(ratio, ways)
        return 1.05 * predictor.predict_one(ratio, ways)[0]

    taken = take_runs(bundle, measure, [], 1)
    assert taken.profile_runs is not None
    (run,) = taken.profile_runs.runs
    assert run.objective == SHARING_RUN
    assert 0.0 < run.configuration.slow_ratio < 1.0
    assert predictor.model.ways_min <= run.configuration.llc_ways <= predictor.model.ways_max
    assert asked == [(run.configuration.slow_ratio, run.configuration.llc_ways)]
    assert sharing_point(predictor, PAPER_SLOW_RATIOS, PAPER_LLC_WAYS) == asked[0]
    # Measured above the linear charge, it is fitted: the sharing is no longer 0.
    assert Predictor(fit(taken)).slow_sharing > 0.0
    # No budget, no run.
    assert take_runs(bundle, measure, [], 0).profile_runs is None


def test_a_run_all_slow_at_the_fewest_ways_when_budget_is_left_and_the_fit_passes_through_it() -> (
    None
):
    bundle = simulated.profile("graph500")
    predictor = Predictor(fit(bundle))
    few = predictor.model.ways_min
    slowmin = predictor.predict_one(1.0, few)[0]

    def measure(ratio: float, ways: int, plan: list[StructurePlacement]) -> float:
        # Slow memory at few ways 30 % slower than the model carries it there.
        seconds = predictor.predict_one(ratio, ways)[0]
        return 1.3 * seconds if (ratio, ways) == (1.0, few) else seconds

    taken = take_runs(bundle, measure, [], 3)
    assert taken.profile_runs is not None
    labels = [r.objective for r in taken.profile_runs.runs]
    assert labels == [SHARING_RUN, FEW_WAYS_RUN]
    run = taken.profile_runs.runs[1]
    assert (run.configuration.slow_ratio, run.configuration.llc_ways) == (1.0, few)
    refitted = Predictor(fit(taken))
    assert refitted.slow_few_ways > 0.0
    assert refitted.predict_one(1.0, few)[0] == pytest.approx(1.3 * slowmin, rel=1e-3)
    # Nothing changes where nothing is slow, nor all slow at the most ways (slowmax).
    for ratio, ways in ((0.0, few), (0.0, 28), (1.0, predictor.model.ways_max)):
        assert refitted.predict_one(ratio, ways)[0] == pytest.approx(
            predictor.predict_one(ratio, ways)[0], rel=1e-9
        )


@pytest.mark.parametrize("share", [0.3, 0.6])
def test_a_second_partial_ratio_tells_the_sharing_from_the_uncovered_share(share: float) -> None:
    # A workload whose slow structures' misses wait as their own (the uncovered share): its one
    # run at a partial ratio is fitted as well by the sharing, which then misses the others.
    # A second run, at the ratio where the two shapes part most, decides between them.
    bundle = simulated.profile("graph500")
    truth = Predictor(fit(bundle), slow_sharing=0.0, slow_uncovered=share)

    def measure(ratio: float, ways: int, plan: list[StructurePlacement]) -> float:
        return truth.predict_one(ratio, ways)[0]

    taken = take_runs(bundle, measure, [], 3)
    assert taken.profile_runs is not None
    runs = taken.profile_runs.runs
    assert [r.objective for r in runs] == [SHARING_RUN, SHAPE_RUN, FEW_WAYS_RUN]
    first, second = runs[0].configuration, runs[1].configuration
    assert 0.0 < second.slow_ratio < 1.0 and second.slow_ratio != first.slow_ratio
    one = with_runs(taken, runs[:1])
    at = shape_point(Predictor(fit(one)), PAPER_SLOW_RATIOS, PAPER_LLC_WAYS)
    assert at == (second.slow_ratio, second.llc_ways)
    grid = (np.asarray(PAPER_SLOW_RATIOS)[1:-1], np.asarray(PAPER_LLC_WAYS, dtype=np.int64))
    want = truth.predict(*grid).seconds
    both = np.abs(Predictor(fit(taken)).predict(*grid).seconds / want - 1.0).max()
    alone = np.abs(Predictor(fit(one)).predict(*grid).seconds / want - 1.0).max()
    assert both < 0.005 < alone
    # With both shapes alike (a run measured as predicted), no run goes to tell them apart.
    plain = Predictor(fit(bundle))
    exact = take_runs(bundle, lambda r, w, plan: plain.predict_one(r, w)[0], [], 3)
    assert exact.profile_runs is not None
    assert SHAPE_RUN not in [r.objective for r in exact.profile_runs.runs]


def test_the_objectives_leave_one_run_for_slow_memory_at_few_ways() -> None:
    # Objectives that would ask for a run every time (each measured 5 % above its prediction, so
    # the advice keeps moving) still leave the budget's last run all slow at the fewest ways.
    bundle = simulated.profile("graph500")
    predictor = Predictor(fit(bundle))
    few = predictor.model.ways_min

    def measure(ratio: float, ways: int, plan: list[StructurePlacement]) -> float:
        return 1.05 * predictor.predict_one(ratio, ways)[0]

    for budget in (2, 3):
        taken = take_runs(bundle, measure, objectives_of(DEFAULT_OBJECTIVES), budget)
        assert taken.profile_runs is not None
        runs = taken.profile_runs.runs
        assert len(runs) <= budget
        all_slow = [r for r in runs if r.configuration.slow_ratio == 1.0]
        assert all_slow and all_slow[-1].configuration.llc_ways == few


def test_an_objective_no_configuration_meets_asks_for_no_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On a host whose ways the paper's grid meets only in part (an 11-way LLC: 1-4 ways on the
    # grid), an SLO may be met by no configuration of the grid; that objective then asks for no
    # run, and the budget goes to the calibrations as if it had asked for none.
    bundle = simulated.profile("graph500")
    predictor = Predictor(fit(bundle))

    def nothing_meets(*args: object, **kwargs: object) -> object:
        raise NoFeasibleConfiguration("no configuration of grid paper-77 meets slo:5%")

    monkeypatch.setattr(profile_runs, "recommend", nothing_meets)
    taken = take_runs(
        bundle,
        lambda ratio, ways, plan: predictor.predict_one(ratio, ways)[0],
        objectives_of(["slo:5%"]),
        2,
    )
    assert taken.profile_runs is not None
    assert [r.objective for r in taken.profile_runs.runs] == [SHARING_RUN, FEW_WAYS_RUN]


def test_a_run_the_backend_cannot_measure_stops_the_runs_and_keeps_those_before() -> None:
    bundle = simulated.profile("graph500")
    predictor = Predictor(fit(bundle))
    said: list[str] = []

    def measure(ratio: float, ways: int, plan: list[StructurePlacement]) -> float:
        if ratio == 1.0:
            raise RunNotMeasured("1 ways is below this CPU's fewest (2)")
        return predictor.predict_one(ratio, ways)[0]

    taken = take_runs(bundle, measure, [], 3, stopped=said.append)
    assert taken.profile_runs is not None
    assert [r.objective for r in taken.profile_runs.runs] == [SHARING_RUN]
    assert said == ["1 ways is below this CPU's fewest (2)"]


def test_no_run_is_asked_at_fewer_ways_than_a_group_holds() -> None:
    # CAT refuses a group of fewer ways than min_cbm_bits: on such a host no run goes there,
    # neither an objective's nor a calibration's (the calibrations' fewest ways are fastmin's).
    bundle = simulated.profile("graph500")
    predictor = Predictor(fit(bundle))
    asked: list[tuple[float, int]] = []

    def measure(ratio: float, ways: int, plan: list[StructurePlacement]) -> float:
        asked.append((ratio, ways))
        return predictor.predict_one(ratio, ways)[0]

    take_runs(bundle, measure, objectives_of(DEFAULT_OBJECTIVES), 3)
    fewest = min(w for _, w in asked)
    assert fewest == 1  # where nothing stops it, some run is at one way
    asked.clear()
    host = bundle.host.model_copy(update={"min_llc_ways": 2})
    take_runs(
        bundle.model_copy(update={"host": host}), measure, objectives_of(DEFAULT_OBJECTIVES), 3
    )
    assert asked and all(w >= 2 for _, w in asked)


def test_partial_runs_only_at_many_ways_are_followed_by_one_at_the_fewest() -> None:
    # xhpcg's `least-dram:5%` measures its choice at 12 ways; the budget's rest goes all slow at
    # the fewest ways, then to a partial ratio there: the sharing at few ways, where other
    # structures miss, is fitted by no partial run at 12 ways.
    bundle = simulated.profile("xhpcg")
    predictor = Predictor(fit(bundle))
    fewest = predictor.model.ways_min

    def measure(ratio: float, ways: int, plan: list[StructurePlacement]) -> float:
        return predictor.predict_one(ratio, ways)[0]

    taken = take_runs(bundle, measure, objectives_of(["least-dram:5%"]), 4)
    assert taken.profile_runs is not None
    runs = taken.profile_runs.runs
    assert [r.objective for r in runs][-2:] == [FEW_WAYS_RUN, FEW_WAYS_SHARING_RUN]
    last = runs[-1].configuration
    assert last.llc_ways == fewest and 0.0 < last.slow_ratio < 1.0
    assert all(
        r.configuration.llc_ways > fewest
        for r in runs[:-1]
        if 0.0 < r.configuration.slow_ratio < 1.0
    )
    passes_through(taken)
    # The run all slow comes first: with a budget of two, the objective's run and it take it.
    two = take_runs(bundle, measure, objectives_of(["least-dram:5%"]), 2)
    assert two.profile_runs is not None
    assert [r.objective for r in two.profile_runs.runs] == ["least-dram:5%", FEW_WAYS_RUN]


def test_no_partial_run_at_the_fewest_ways_is_added_where_one_was_taken() -> None:
    # canneal's `cheapest` measures its choices at one way (0.2, then 0.1): budget left over
    # stays unspent rather than measuring the sharing there again.
    bundle = simulated.profile("canneal")
    predictor = Predictor(fit(bundle))
    taken = take_runs(
        bundle,
        lambda ratio, ways, plan: predictor.predict_one(ratio, ways)[0],
        objectives_of(["cheapest"]),
        5,
    )
    assert taken.profile_runs is not None
    runs = taken.profile_runs.runs
    assert len(runs) < 5 and FEW_WAYS_SHARING_RUN not in [r.objective for r in runs]
    fewest = predictor.model.ways_min
    assert any(partial_at_fewest_ways(r, fewest) for r in runs)
    # Not for want of a place to go: the point the run would take was not measured.
    point = few_ways_sharing_point(Predictor(fit(taken)))
    assert point is not None
    assert point not in {(r.configuration.slow_ratio, r.configuration.llc_ways) for r in runs}


def test_a_partial_run_at_the_fewest_ways_is_one_at_a_partial_ratio_there_or_fewer() -> None:
    def run(ratio: float, ways: int) -> ProfileRun:
        at = RunConfiguration(slow_ratio=ratio, llc_ways=ways)
        return ProfileRun(configuration=at, wall_seconds=1.0)

    assert partial_at_fewest_ways(run(0.3, 2), 2)
    assert partial_at_fewest_ways(run(0.3, 1), 2)
    assert not partial_at_fewest_ways(run(0.3, 3), 2)
    assert not partial_at_fewest_ways(run(1.0, 2), 2)  # all slow: the few-ways run
    assert not partial_at_fewest_ways(run(0.0, 2), 2)
