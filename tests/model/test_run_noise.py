"""Run noise is measured, not assumed, and the way sweep's runs are measured configurations.

A bundle may carry the run-to-run noise of its runs, measured by repeating reference runs
(`run_noise`, `tmc.run-noise/v1`); a configuration the profile measured (a reference run, or the
way sweep's run all in DRAM at a way count) is then known up to that noise, not the 1 % an old
bundle is taken to have. Old bundles read and decide exactly as before."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from model import FittedModel, Predictor, fit, machine_of_host, parse_bundle
from model.bundle import DEFAULT_RUN_NOISE, ProfileBundle
from model.confidence import DEFAULT_CONFIDENCE
from model.objectives import parse_objective
from model.recommend import Shortlist, recommend, shortlist
from model.verification import measured_sigma
from tests.factories import make_bundle
from tests.model.support import rejected_fields, rejection

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Z = NormalDist().inv_cdf(DEFAULT_CONFIDENCE)
SWEEP_WAYS = (1, 2, 4, 12, 20, 28)  # the factory's miss curve, all on the paper grid but 3


def _repeats(data: dict[str, Any], change: float = 0.0) -> list[dict[str, Any]]:
    """Each reference run made again; fastmax's repeat `change` (relative) slower."""
    out = []
    for run in data["runs"]:
        cycles = run["cycles"]
        if run["name"] == "fastmax":
            cycles = round(cycles * (1.0 + change))
        out.append({"run": run["name"], "instructions": run["instructions"], "cycles": cycles})
    return out


def _with_noise(data: dict[str, Any], relative_sd: float, change: float = 0.0) -> dict[str, Any]:
    out = copy.deepcopy(data)
    out["run_noise"] = {
        "schema_version": "tmc.run-noise/v1",
        "relative_sd": relative_sd,
        "repeats": _repeats(data, change),
    }
    return out


def _with_sweep(data: dict[str, Any]) -> dict[str, Any]:
    """The way sweep's CPI at every curve point: the factory's CPI all in DRAM, plus a little
    the miss curve does not explain at 12 ways, so the sweep's points are not the model's."""
    out = copy.deepcopy(data)
    for point in out["miss_curve"]:
        extra = 0.05 if point["llc_ways"] == 12 else 0.0
        point["cycles_per_instruction"] = 0.6 + 80.0 * point["misses_per_instruction"] + extra
    return out


def _short(bundle: ProfileBundle, objective: str = "cheapest") -> Shortlist:
    return shortlist(
        Predictor(fit(bundle)),
        machine=machine_of_host(bundle.host),
        objective=parse_objective(objective),
        threshold=0.0,
    )


def _at(short: Shortlist, ratio: float, ways: int) -> int:
    p = short.priced.prediction
    row = int(np.flatnonzero(np.isclose(p.slow_ratios, ratio))[0])
    return row * len(p.llc_ways) + int(np.flatnonzero(p.llc_ways == ways)[0])


def _slowmax_slowdown(bundle: ProfileBundle) -> float:
    return bundle.run("slowmax").wall_seconds / bundle.run("fastmax").wall_seconds - 1.0


# -- the contract ----------------------------------------------------------------------------------


def test_an_old_bundle_reads_with_the_default_noise() -> None:
    bundle = parse_bundle(make_bundle())
    assert bundle.run_noise is None
    assert fit(bundle).run_noise == DEFAULT_RUN_NOISE
    # A model stored before the field existed reads back with the default too.
    stored = json.loads(fit(bundle).model_dump_json())
    del stored["run_noise"]
    assert FittedModel.model_validate(stored).run_noise == DEFAULT_RUN_NOISE


def test_a_measured_noise_is_carried_into_the_fit() -> None:
    bundle = parse_bundle(_with_noise(make_bundle(), 0.004, change=0.002))
    assert bundle.run_noise is not None and bundle.run_noise.relative_sd == 0.004
    assert fit(bundle).run_noise == 0.004


def test_a_noise_below_what_the_repeats_show_is_rejected() -> None:
    # fastmax's repeat 3 % slower: over three pairs, one run's noise is 3 % / sqrt(6) = 1.2 %.
    data = _with_noise(make_bundle(), 0.0, change=0.03)
    problems = rejection(data)
    assert [p.field for p in problems] == ["run_noise.relative_sd"]
    assert "0.0122" in problems[0].message
    parse_bundle(_with_noise(make_bundle(), 0.0123, change=0.03))


def test_a_repeat_of_another_program_is_rejected() -> None:
    data = _with_noise(make_bundle(), 0.01)
    data["run_noise"]["repeats"][1]["instructions"] *= 2
    assert rejected_fields(data) == ["run_noise.repeats[1].instructions"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"relative_sd": 0.6}, "run_noise.relative_sd"),
        ({"relative_sd": -0.001}, "run_noise.relative_sd"),
        ({"relative_sd": float("nan")}, "run_noise.relative_sd"),
        ({"repeats": []}, "run_noise.repeats"),
        ({"schema_version": "tmc.run-noise/v2"}, "run_noise.schema_version"),
        ({"unknown": 1}, "run_noise.unknown"),
    ],
)
def test_the_noise_field_is_bounded_and_versioned(change: dict[str, Any], field: str) -> None:
    data = _with_noise(make_bundle(), 0.01)
    data["run_noise"].update(change)
    assert field in rejected_fields(data)


def test_the_repeats_are_bounded() -> None:
    data = _with_noise(make_bundle(), 0.01)
    data["run_noise"]["repeats"] = data["run_noise"]["repeats"] * 22  # 66 > 64
    assert rejected_fields(data) == ["run_noise.repeats"]


# -- what the model does with it ----------------------------------------------------------------


def test_noise_zero_promises_a_measured_point_at_its_measured_time() -> None:
    data = make_bundle()
    exact = parse_bundle(_with_noise(data, 0.0))
    assumed = parse_bundle(data)
    measured = _slowmax_slowdown(exact)
    short = _short(exact)
    i = _at(short, 1.0, 28)
    assert short.priced.measured[i]
    assert short.priced.sigma.ravel()[i] == 0.0
    assert short.slowdown_upper is not None
    assert short.slowdown_upper[i] == pytest.approx(measured, rel=1e-9)
    # least-DRAM within a bound just above slowmax's measured slowdown: all of the memory slow,
    # promised at what slowmax measured. With the assumed 1 %, the bound is +3.3 % of a run
    # wider and slowmax is not promised within it.
    objective = f"least-dram:{100.0 * (measured + 0.001):.6f}%"
    rec = recommend(
        fit(exact),
        machine=machine_of_host(exact.host),
        objective=parse_objective(objective),
        threshold=0.0,
    )
    assert (rec.chosen.configuration.slow_ratio, rec.chosen.configuration.llc_ways) == (1.0, 28)
    assert rec.chosen.slowdown_upper == pytest.approx(measured, rel=1e-9)
    before = recommend(
        fit(assumed),
        machine=machine_of_host(assumed.host),
        objective=parse_objective(objective),
        threshold=0.0,
    )
    assert before.chosen.configuration.slow_ratio < 1.0


def test_a_measured_noise_sets_the_measured_points_interval() -> None:
    bundle = parse_bundle(_with_noise(make_bundle(), 0.003, change=0.003))
    short = _short(bundle)
    for ratio, ways in ((0.0, 28), (0.0, 1), (1.0, 28)):
        i = _at(short, ratio, ways)
        assert short.priced.sigma.ravel()[i] == pytest.approx(measured_sigma(1, 0.003))


def test_the_way_sweeps_all_dram_points_are_measured_configurations() -> None:
    bundle = parse_bundle(_with_sweep(make_bundle()))
    model = fit(bundle)
    assert model.curve_cpi is not None
    short = _short(bundle)
    p = short.priced.prediction
    cpi_at_max = model.curve_cpi[model.curve_ways.index(28)]
    for ways in p.llc_ways:
        i = _at(short, 0.0, int(ways))
        if int(ways) not in SWEEP_WAYS:
            assert not short.priced.measured[i], ways  # 3 ways: no sweep run there
            continue
        assert short.priced.measured[i], ways
        cpi = model.curve_cpi[model.curve_ways.index(int(ways))]
        want = model.fastmax_seconds * cpi / cpi_at_max
        assert p.seconds.ravel()[i] == pytest.approx(want, rel=1e-9), ways
        assert short.priced.sigma.ravel()[i] <= measured_sigma(1) + 1e-12, ways
    # Only the all-DRAM row: with slow memory nothing was measured but slowmax.
    measured = short.priced.measured.reshape(p.seconds.shape)
    assert measured[1:-1].sum() == 0


def test_a_sweep_point_is_judged_by_its_measured_time() -> None:
    # With no run noise, a sweep point's slowdown bound is its measured slowdown; an SLO just
    # above it admits it, where the miss-curve term (at 12 ways, between the reference runs'
    # way counts) would have widened its bound past the SLO.
    bundle = parse_bundle(_with_noise(_with_sweep(make_bundle()), 0.0))
    short = _short(bundle)
    i = _at(short, 0.0, 12)
    measured = short.priced.prediction.seconds.ravel()[i] / fit(bundle).fastmax_seconds - 1.0
    assert short.slowdown_upper is not None
    assert short.slowdown_upper[i] == pytest.approx(measured, rel=1e-9)
    assert measured > 0.02
    slo = f"slo:{100.0 * (measured + 0.0005):.6f}%"
    judged = _short(bundle, slo)
    assert judged.acceptable[i]
    # The same bundle before: the model's interval at 12 ways rejects it.
    model_sigma = judged.priced.model_sigma
    assert model_sigma is not None and model_sigma.ravel()[i] > 0.01


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_old_bundles_decide_as_before(path: Path) -> None:
    # The examples carry no run noise and no sweep CPI: their measured configurations are the
    # three reference runs, each known up to the assumed 1 % (one run's and a future run's), and
    # a bundle that states that same 1 % decides exactly alike.
    data = json.loads(path.read_text())
    old = parse_bundle(data)
    short = _short(old, "slo:5%")
    assert int(short.priced.measured.sum()) == 3
    for run in old.runs:
        i = _at(short, run.configuration.slow_ratio, run.configuration.llc_ways)
        assert short.priced.sigma.ravel()[i] <= measured_sigma(1) + 1e-12
    stated = parse_bundle(_with_noise(data, DEFAULT_RUN_NOISE))
    again = _short(stated, "slo:5%")
    np.testing.assert_array_equal(short.priced.sigma, again.priced.sigma)
    assert short.slowdown_upper is not None and again.slowdown_upper is not None
    np.testing.assert_array_equal(short.slowdown_upper, again.slowdown_upper)
    assert (short.first is None) == (again.first is None)
    if short.first is not None and again.first is not None:
        assert short.first.best == again.first.best
