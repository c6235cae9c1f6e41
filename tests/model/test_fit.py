"""The fit recovers the parameters a bundle was generated from, on both paths; MAR is anchored to
the reference counters; a fitted model survives serialisation unchanged."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from model import FittedModel, Predictor, fit, host_grid, parse_bundle
from model.misscurve import nonincreasing_fit
from tests.factories import Shape, make_bundle
from tests.model.support import consistent_shapes, fitted

REL = 1e-6

SHAPES = {
    "default": Shape(),
    "latency_bound": Shape(cpi_cache=1.7, p_dram=250.0, p_slow=400.0),
    "cxl_like": Shape(cpi_cache=0.35, p_dram=40.0, p_slow=25.0, slow_kind="cxl_local"),
    "narrow_ways": Shape(
        curve=((2, 0.030), (3, 0.022), (6, 0.015), (10, 0.012), (16, 0.011)),
        w_min=2,
        w_max=16,
        p_dram=120.0,
        p_slow=90.0,
    ),
}


def mpi(data: dict[str, Any], run: int) -> float:
    r = data["runs"][run]
    return float(r["llc_misses"] / r["instructions"])


@pytest.mark.parametrize("stall_counters", [True, False], ids=["stall_counters", "eq4"])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_fit_recovers_known_parameters(name: str, stall_counters: bool) -> None:
    shape = SHAPES[name]
    model = fitted(Shape(**{**vars(shape), "stall_counters": stall_counters}))
    assert model.diagnostics.path == ("stall_counters" if stall_counters else "eq4")
    assert model.cpi_cache == pytest.approx(shape.cpi_cache, rel=REL)
    assert model.p_dram == pytest.approx(shape.p_dram, rel=REL)
    assert model.p_slow == pytest.approx(shape.p_slow, rel=REL)
    for run, residual in model.diagnostics.cpi_residuals.items():
        assert abs(residual) < 1e-9, run


@settings(max_examples=60, deadline=None)
@given(shape=consistent_shapes(), stall_counters=st.booleans())
def test_fit_recovers_random_parameters(shape: Shape, stall_counters: bool) -> None:
    mar_min, mar_max = dict(shape.curve)[shape.w_min], dict(shape.curve)[shape.w_max]
    # Eq. 4 separates P_dram from on-core time only through the fastmin-fastmax miss difference.
    assume(mar_max <= 0.9 * mar_min)
    # Counters are integers: enough instructions that their rounding stays far below 1e-6.
    model = fitted(shape, stall_counters=stall_counters, instructions=10**13)
    assert model.cpi_cache == pytest.approx(shape.cpi_cache, rel=REL)
    assert model.p_dram == pytest.approx(shape.p_dram, rel=REL)
    assert model.p_slow == pytest.approx(shape.p_slow, rel=REL)
    assert max(abs(r) for r in model.diagnostics.cpi_residuals.values()) < 1e-6


@pytest.mark.parametrize("stall_counters", [True, False], ids=["stall_counters", "eq4"])
def test_the_model_reproduces_the_three_reference_runs(stall_counters: bool) -> None:
    data = make_bundle(Shape(stall_counters=stall_counters))
    model = fit(parse_bundle(data))
    predictor = Predictor(model)
    walls = {r["name"]: r["wall_seconds"] for r in data["runs"]}
    assert predictor.predict_one(0.0, model.ways_max)[0] == pytest.approx(walls["fastmax"], rel=REL)
    assert predictor.predict_one(0.0, model.ways_min)[0] == pytest.approx(walls["fastmin"], rel=REL)
    assert predictor.predict_one(1.0, model.ways_max)[0] == pytest.approx(walls["slowmax"], rel=REL)


def test_fit_reports_plausible_diagnostics() -> None:
    model = fitted()
    # Nominal DRAM latency 100 ns at 2.5 GHz is 250 cycles; P_dram = 80 means an MLP of 3.125.
    assert model.diagnostics.mlp_estimate == pytest.approx(250.0 / 80.0, rel=REL)
    for run, coverage in model.diagnostics.pebs_coverage.items():
        assert coverage == pytest.approx(1.0, rel=1e-3), run


# -- MAR anchoring -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "distort",
    [lambda v: v * 1.3, lambda v: v * 0.7, lambda v: v + 0.002, lambda v: 1.2 * v + 0.001],
    ids=["scaled_1.3", "scaled_0.7", "offset", "affine"],
)
def test_mar_is_anchored_to_the_reference_counters(distort: Any) -> None:
    # The curve is swept separately from the reference runs and need not agree with them in
    # level; the counters are the ground truth at fastmin and fastmax, the curve only the shape.
    shape = Shape()
    data = make_bundle(shape)
    for point in data["miss_curve"]:
        point["misses_per_instruction"] = distort(point["misses_per_instruction"])
    model = fit(parse_bundle(data))
    assert model.curve_mar_at(model.ways_min) == pytest.approx(mpi(data, 1), rel=1e-12)
    assert model.curve_mar_at(model.ways_max) == pytest.approx(mpi(data, 0), rel=1e-12)
    # An affine distortion is undone exactly: the interior recovers the undistorted curve.
    assert model.curve_mar == pytest.approx([m for _, m in shape.curve], rel=1e-9)
    assert max(abs(r) for r in model.diagnostics.cpi_residuals.values()) < 1e-9


def test_mar_is_anchored_to_flat_counters_even_when_the_curve_slopes() -> None:
    # The counters say ways do not matter; the curve, swept separately, says they do. The
    # affine map to the two anchors is well defined here (the curve drops), and it yields the
    # flat curve the counters imply, which is what the flag's message promises: "MAR is held
    # at fastmax's level".
    data = make_bundle()
    fastmax, fastmin = data["runs"][0], data["runs"][1]
    for key in ("cycles", "llc_misses", "wall_seconds", "stall_cycles_l3_miss", "samples"):
        fastmin[key] = fastmax[key]
    model = fit(parse_bundle(data))
    assert model.curve_mar_at(model.ways_min) == pytest.approx(mpi(data, 1), rel=1e-9)
    assert max(abs(r) for r in model.diagnostics.cpi_residuals.values()) < 1e-6


def test_nonincreasing_fit_smooths_a_noisy_curve() -> None:
    noisy = [0.020, 0.016, 0.017, 0.011, 0.0112, 0.008]
    smooth = nonincreasing_fit(noisy)
    assert all(a >= b for a, b in itertools.pairwise(smooth))
    # Pool adjacent violators: each rise is replaced by the mean of the pair it breaks.
    assert smooth == pytest.approx([0.020, 0.0165, 0.0165, 0.0111, 0.0111, 0.008])


def test_nonincreasing_fit_leaves_a_monotone_curve_alone() -> None:
    curve = [0.020, 0.016, 0.011, 0.008, 0.008, 0.0072, 0.0070]
    assert nonincreasing_fit(curve) == curve


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.0, 10.0, allow_subnormal=False), min_size=1, max_size=20))
def test_nonincreasing_fit_properties(values: list[float]) -> None:
    smooth = nonincreasing_fit(values)
    assert len(smooth) == len(values)
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(smooth))
    # Pooling replaces values by their means, so the total is kept (a least-squares projection).
    assert sum(smooth) == pytest.approx(sum(values), rel=1e-9, abs=1e-9)
    assert nonincreasing_fit(smooth) == pytest.approx(smooth, rel=1e-12, abs=1e-15)
    if all(a >= b for a, b in itertools.pairwise(values)):
        assert smooth == values


# -- serialisation -------------------------------------------------------------------------------


@pytest.mark.parametrize("stall_counters", [True, False], ids=["stall_counters", "eq4"])
def test_a_round_tripped_model_predicts_identically(stall_counters: bool) -> None:
    # The service stores fitted models as JSON; a recommendation must not depend on whether the
    # model came from memory or from the database.
    model = fitted(Shape(stall_counters=stall_counters))
    again = FittedModel.model_validate_json(model.model_dump_json())
    assert again == model
    grid = host_grid(48)
    ratios = np.asarray(grid.slow_ratios)
    ways = np.asarray(grid.llc_ways, dtype=np.int64)
    before, after = Predictor(model).predict(ratios, ways), Predictor(again).predict(ratios, ways)
    for name in ("mar", "mar_slow", "cpi", "seconds", "slowdown", "dram_bytes", "slow_bytes"):
        assert np.array_equal(getattr(before, name), getattr(after, name)), name
    assert Predictor(model).placement(0.3, 4) == Predictor(again).placement(0.3, 4)


def _with_sweep(raise_at: dict[int, float]) -> dict[str, Any]:
    """The default bundle with the way sweep's CPI: the model's own CPI all in DRAM (0.6 + 80 x
    MAR), raised at some way counts, as misses that cost more than the average would do."""
    data = make_bundle()
    for point in data["miss_curve"]:
        w = point["llc_ways"]
        point["cycles_per_instruction"] = (
            0.6 + 80.0 * point["misses_per_instruction"] + (raise_at.get(w, 0.0))
        )
    return data


def test_all_in_dram_the_prediction_follows_the_way_sweeps_cpi() -> None:
    # A sweep 0.15 CPI above the miss curve's shape at 12 ways: the misses 12 ways add over 28
    # cost more than fastmin's overlapping ones. The prediction passes through it, and still
    # through the two reference runs.
    model = fit(parse_bundle(_with_sweep({12: 0.15})))
    assert model.curve_cpi is not None
    grid = Predictor(model).predict(np.asarray([0.0, 0.5]), np.asarray([1, 12, 28]))
    assert grid.cpi[0, 0] == pytest.approx(0.6 + 80.0 * 0.020, rel=1e-6)
    assert grid.cpi[0, 2] == pytest.approx(0.6 + 80.0 * 0.0070, rel=1e-6)
    assert grid.cpi[0, 1] == pytest.approx(0.6 + 80.0 * 0.008 + 0.15, rel=1e-6)
    # Without the sweep, the same bundle follows the miss curve's shape.
    plain = Predictor(model, sweep_shape=False).predict(np.asarray([0.0, 0.5]), np.asarray([12]))
    assert plain.cpi[0, 0] == pytest.approx(0.6 + 80.0 * 0.008, rel=1e-6)
    # The slow tier's extra latency is waited the same way: its share scales alike.
    factor = (grid.cpi[0, 1] - 0.6) / (plain.cpi[0, 0] - 0.6)
    assert grid.cpi[1, 1] - 0.6 == pytest.approx((plain.cpi[1, 0] - 0.6) * factor, rel=1e-6)


def test_a_sweep_that_agrees_with_the_miss_curve_changes_nothing() -> None:
    model = fit(parse_bundle(_with_sweep({})))
    ratios, ways = np.asarray([0.0, 0.3, 1.0]), np.asarray([1, 4, 12, 20, 28])
    with_sweep = Predictor(model).predict(ratios, ways).cpi
    without = Predictor(model, sweep_shape=False).predict(ratios, ways).cpi
    np.testing.assert_allclose(with_sweep, without, rtol=1e-9)
