"""The real programs' judging (bench/real_programs.py), on one small traced program priced as the
VM it stands for: each row is its pick against the host model's replay of the program's own
trace, priced at the deployed size, and a wrong pick planted in the rows is reported as one."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tmc_agent.profile_runs import DEFAULT_PROFILE_RUNS, with_runs

from bench.real_programs import (
    DEFAULT_PER_VCPU,
    ProgramResult,
    Truth,
    build,
    deployed_size,
    evaluate,
    gain_figures,
    judge,
    markdown,
    profile,
    retake_runs,
    run_program,
    summarize,
)
from model.bundle import ProfileBundle, parse_bundle
from model.objectives import parse_objective
from model.pricing import DEFAULT_PRICE_PROFILE
from model.resources import GIB

NAME = "bloomfilter"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[ProfileBundle, Path]:
    """The program traced by the agent with its default runs, and its LLC stream."""
    work = tmp_path_factory.mktemp("judging")
    exe = build(NAME, work / "bin")
    bundle = parse_bundle(profile(NAME, exe, work, ["4", "60000", "10"]).read_text())
    return bundle, work / "llc_stream.npz"


@pytest.fixture(scope="module")
def judged(traced: tuple[ProfileBundle, Path]) -> tuple[ProfileBundle, ProgramResult, Truth]:
    bundle, stream = traced
    # Its source declares the size it runs at in production (8 GiB), which wins over the VM's.
    size, sized = deployed_size(NAME, bundle.vcpus, DEFAULT_PER_VCPU)
    result, truth = evaluate(NAME, bundle, stream, size, sized)
    return bundle, result, truth


def test_a_reused_trace_takes_its_runs_again_as_the_agent_takes_them(
    traced: tuple[ProfileBundle, Path],
) -> None:
    # `--reuse` judges the agent's current choice of runs: on the same stream, the replay takes
    # the runs the agent took while tracing, at the same configurations and times.
    bundle, stream = traced
    assert bundle.profile_runs is not None
    again = retake_runs(NAME, bundle, stream, DEFAULT_PROFILE_RUNS)
    assert again.profile_runs == bundle.profile_runs
    assert retake_runs(NAME, bundle, stream, 0).profile_runs is None


def test_the_truth_is_the_replay_priced_at_the_deployed_size(
    judged: tuple[ProfileBundle, ProgramResult, Truth],
) -> None:
    bundle, result, truth = judged
    assert result.memory_bytes == 8 * GIB > 100 * bundle.footprint_bytes
    configs = truth.configs
    # The reference runs are replays of the same trace: the truth passes through them.
    for run in bundle.runs:
        at = configs.index((run.configuration.slow_ratio, run.configuration.llc_ways))
        assert truth.seconds[at] == pytest.approx(run.wall_seconds, rel=1e-9)
    # All slow against all DRAM at one way count: 8 GiB moved from DRAM's price to slow memory's.
    p = DEFAULT_PRICE_PROFILE
    saved = 8 * (p.dram_gib_hour - p.slow_gib_hour)
    assert truth.hourly[configs.index((0.0, 12))] - truth.hourly[configs.index((1.0, 12))] == (
        pytest.approx(saved, rel=1e-9)
    )
    assert np.allclose(truth.cost, truth.hourly * truth.seconds / 3600.0)


def test_each_row_is_its_pick_against_the_truth(
    judged: tuple[ProfileBundle, ProgramResult, Truth],
) -> None:
    _, result, truth = judged
    assert {d.objective for d in result.decisions} | set(result.infeasible) == {
        "cheapest",
        "slo:5%",
        "least-dram:5%",
        "slo:10%",
    }
    seconds = truth.seconds
    slowdown = seconds / seconds[truth.configs.index((0.0, 28))] - 1.0
    cost = truth.hourly * seconds / 3600.0
    for d in result.decisions:
        bound = parse_objective(d.objective).max_slowdown
        meets = truth.feasible & (slowdown <= (np.inf if bound is None else bound + 1e-12))
        i = truth.configs.index((d.slow_ratio, d.llc_ways))
        assert d.true_slowdown == pytest.approx(slowdown[i])
        assert d.kept == bool(meets[i])
        assert d.true_cost_over_best == pytest.approx(cost[i] / cost[meets].min() - 1.0)
        largest = max(r for (r, _), ok in zip(truth.configs, meets, strict=True) if ok)
        assert d.slow_ratio_shortfall == pytest.approx(largest - d.slow_ratio)


def test_a_planted_wrong_pick_is_reported_as_one(
    judged: tuple[ProfileBundle, ProgramResult, Truth],
) -> None:
    _, result, truth = judged
    cost = np.where(truth.feasible, truth.cost, np.nan)
    dearest, cheapest = int(np.nanargmax(cost)), int(np.nanargmin(cost))
    assert judge(truth, cheapest, None).true_cost_over_best == 0.0
    wrong = judge(truth, dearest, None)
    assert wrong.true_cost_over_best == pytest.approx(cost[dearest] / cost[cheapest] - 1.0)
    assert wrong.true_cost_over_best > 0.05

    # The slowest configuration breaks 5 % in truth; all DRAM at the most ways falls short of
    # the most slow memory that keeps it by exactly that ratio.
    slowest = int(np.argmax(truth.seconds))
    assert not judge(truth, slowest, 0.05).kept
    fastmax = judge(truth, truth.fast, 0.05)
    assert fastmax.kept and fastmax.slow_ratio_shortfall == fastmax.best_slow_ratio

    # Planted into the rows, the wrong pick moves the aggregate and misses the target.
    cheap = result.decision("cheapest")
    assert cheap is not None
    planted = replace(
        result,
        decisions=[
            replace(cheap, true_cost_over_best=wrong.true_cost_over_best)
            if d.objective == "cheapest"
            else d
            for d in result.decisions
        ],
    )
    honest, bad = summarize([result]), summarize([planted])
    assert bad["cheapest"]["over_best"]["worst"] == pytest.approx(wrong.true_cost_over_best)
    assert not bad["targets"]["cheapest"]
    assert honest["cheapest"]["over_best"]["worst"] == pytest.approx(cheap.true_cost_over_best)
    assert f"| {NAME} | 8 GiB (declared) |" in markdown([result], honest)


def test_a_program_is_priced_at_its_declared_size_else_per_vcpu() -> None:
    assert deployed_size("stencil", 1, DEFAULT_PER_VCPU) == (16 * GIB, "declared")
    assert deployed_size("bloomfilter", 1, None) == (8 * GIB, "declared")
    assert deployed_size("twotier", 2, DEFAULT_PER_VCPU) == (8 * GIB, "per vCPU")
    assert deployed_size("twotier", 1, None) == (None, "footprint")


def test_what_each_run_beyond_the_reference_runs_changed_is_reported(
    traced: tuple[ProfileBundle, Path], tmp_path: Path
) -> None:
    # `--gains`: the program judged with the first k of its runs, for each k. The first run's
    # "before" is the program judged without any, the last one's "after" the result itself.
    bundle, stream = traced
    assert bundle.profile_runs is not None
    kept = tmp_path / NAME
    kept.mkdir()
    shutil.copy(stream, kept / "llc_stream.npz")
    (kept / f"{NAME}.json").write_text(bundle.model_dump_json())
    result = run_program(NAME, tmp_path, reuse=True, gains=True)
    taken = bundle.profile_runs.runs
    assert [(g.label, g.slow_ratio, g.llc_ways) for g in result.gains] == [
        (r.objective, r.configuration.slow_ratio, r.configuration.llc_ways) for r in taken
    ]
    size, sized = deployed_size(NAME, bundle.vcpus, DEFAULT_PER_VCPU)
    plain, _ = evaluate(NAME, with_runs(bundle, []), stream, size, sized)
    first, last = result.gains[0], result.gains[-1]
    assert first.mape_before == pytest.approx(plain.mape) and first.before == gain_figures(plain)
    assert last.mape_after == pytest.approx(result.mape) and last.after == gain_figures(result)
    fastmax = bundle.run("fastmax").wall_seconds
    assert [g.cost for g in result.gains] == pytest.approx(
        [r.wall_seconds / fastmax for r in taken]
    )
    text = markdown([result], summarize([result]))
    assert "What each run beyond the reference runs changed" in text
    assert all(f"| {NAME} | {g.label} |" in text for g in result.gains)
