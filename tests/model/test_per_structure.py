"""Per-structure penalties, bandwidth-aware prediction and the fit's diagnostics.

The synthetic bundles here are generated from per-structure penalties with the model's own
equation on purpose: they check the algebra and the plumbing (what the fit recovers, which path it
takes). Whether the equation describes a machine is the simulator's question (tests/sim, bench).
"""

from __future__ import annotations

import copy
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from model import Predictor, fit, parse_bundle
from model.confidence import UNCOVERED_LEVEL, prediction_interval
from model.fit import CPI_RESIDUAL_FLAG, QUEUE_KAPPA, WINDOW_MLP_MAX, FittedModel, erlang_c
from tests.factories import GHZ, Shape, make_bundle

# tag -> (DRAM penalty, extra slow penalty), cycles per miss. "chain" is a dependent pointer
# chase (one miss in flight), "scan" a stream with many; the workload-level pair lies between.
PENALTIES = {"hot": (200.0, 400.0), "warm": (20.0, 30.0), "cold": (60.0, 100.0)}
PERIOD = 1009


def per_structure_bundle(
    penalties: dict[str, tuple[float, float]] | None = None, traffic: bool = False
) -> dict[str, Any]:
    """The factories' bundle, re-timed with each structure's own penalties, plus stall samples."""
    pen = penalties or PENALTIES
    s = Shape()
    data = make_bundle(s)
    n = s.instructions
    total_min = dict(s.curve)[s.w_min]
    total_max = dict(s.curve)[s.w_max]
    rates = {
        name: {
            t: parts[col] * (total_min if col == 1 else total_max)
            for t, parts in s.structures.items()
        }
        for name, col in (("fastmax", 2), ("fastmin", 1), ("slowmax", 2))
    }
    runs = []
    for run in data["runs"]:
        name = run["name"]
        slow = name == "slowmax"
        stall = {t: rates[name][t] * (pen[t][0] + (pen[t][1] if slow else 0.0)) for t in pen}
        cycles = round((s.cpi_cache + sum(stall.values())) * n)
        run["cycles"] = cycles
        run["stall_cycles_l3_miss"] = round(sum(stall.values()) * n)
        run["wall_seconds"] = cycles / GHZ / s.vcpus
        entry: dict[str, Any] = {
            "run": name,
            "stall_samples": {t: round(v * n / PERIOD) for t, v in stall.items()},
        }
        if traffic:
            misses = run["llc_misses"]
            entry["slow_tier"] = {
                "read_bytes": misses * 64 if slow else 0,
                "write_bytes": misses * 16 if slow else 0,
            }
        runs.append(entry)
    data["structure_measurements"] = {
        "schema_version": "tmc.structure-measurements/v1",
        "source": "simulator",
        "stall_sample_period_cycles": PERIOD,
        "runs": runs,
    }
    if traffic:
        data["host"]["slow_tier"]["read_bandwidth_bytes_per_second"] = 4e9
        data["host"]["slow_tier"]["write_bandwidth_bytes_per_second"] = 1.5e9
    return data


def without_measurements(data: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    del out["structure_measurements"]
    return out


# -- the paths ------------------------------------------------------------------------------------


def test_a_bundle_without_measurements_takes_the_paper_path_and_says_so() -> None:
    model = fit(parse_bundle(make_bundle()))
    assert model.penalty_path == "paper"
    assert model.diagnostics.penalty_path == "paper"
    assert "no per-structure measurements" in model.diagnostics.penalty_path_reason
    assert model.p_dram_by_structure is None and model.slow_queue is None


def test_the_paper_path_ignores_measurements_exactly() -> None:
    data = per_structure_bundle(traffic=True)
    plain = fit(parse_bundle(without_measurements(data)))
    asked = fit(parse_bundle(data), penalties="paper")
    assert asked.penalty_path == "paper"
    assert "paper's path was asked for" in asked.diagnostics.penalty_path_reason
    for field in ("cpi_cache", "p_dram", "p_slow", "access_rate_at_min", "access_rate_at_max"):
        assert getattr(asked, field) == getattr(plain, field)
    grid = (np.asarray([0.0, 0.3, 0.7, 1.0]), np.asarray([1, 4, 28], dtype=np.int64))
    np.testing.assert_array_equal(
        Predictor(asked).predict(*grid).seconds, Predictor(plain).predict(*grid).seconds
    )


def test_per_structure_penalties_are_recovered() -> None:
    model = fit(parse_bundle(per_structure_bundle()))
    assert model.penalty_path == "per_structure"
    assert "3 of 3 structures" in model.diagnostics.penalty_path_reason
    assert model.p_dram_by_structure is not None and model.p_slow_by_structure is not None
    for tag, pd, ps in zip(
        model.tags, model.p_dram_by_structure, model.p_slow_by_structure, strict=True
    ):
        assert pd == pytest.approx(PENALTIES[tag][0], rel=0.01)
        assert ps == pytest.approx(PENALTIES[tag][1], rel=0.01)
    assert max(abs(r) for r in model.diagnostics.cpi_residuals.values()) < 0.005


def linear_only(model: FittedModel) -> FittedModel:
    """The per-structure model without the window and cover corrections."""
    return model.model_copy(
        update={
            "window_mlp_by_structure": None,
            "dram_latency_cycles": None,
            "slow_latency_cycles": None,
        }
    )


def test_per_structure_prediction_charges_each_structure_its_own_penalty() -> None:
    model = linear_only(fit(parse_bundle(per_structure_bundle())))
    pred = Predictor(model)
    plan = pred.placement(0.5, 28)
    rates = pred.access_rates(28.0)
    assert model.p_dram_by_structure is not None and model.p_slow_by_structure is not None
    expected = model.cpi_cache + sum(
        a * (pd + ps * p.slow_bytes / p.size_bytes)
        for a, p, pd, ps in zip(
            rates, plan, model.p_dram_by_structure, model.p_slow_by_structure, strict=True
        )
    )
    got = pred.predict(np.asarray([0.5]), np.asarray([28], dtype=np.int64)).cpi[0, 0]
    assert got == pytest.approx(expected, rel=1e-9)
    # The paper's single pair would charge the average: a different answer at a mixed placement.
    paper = fit(parse_bundle(per_structure_bundle()), penalties="paper")
    p_cpi = Predictor(paper).predict(np.asarray([0.5]), np.asarray([28], dtype=np.int64)).cpi
    assert abs(p_cpi[0, 0] / got - 1.0) > 0.01


def test_slow_misses_in_one_window_wait_for_the_slowest() -> None:
    model = fit(parse_bundle(per_structure_bundle()))
    mlp = model.window_mlp_by_structure
    assert mlp is not None and all(1.0 <= m <= WINDOW_MLP_MAX for m in mlp)
    # ΔL / P_slow: 200 ns at 2.5 GHz = 500 cycles over each structure's slow penalty.
    expected = [min(max(500.0 / PENALTIES[t][1], 1.0), 12.0) for t in model.tags]
    assert mlp == pytest.approx(expected, rel=0.01)
    plain = Predictor(model.model_copy(update={"dram_latency_cycles": None}), window_effect=True)
    pred_lin = Predictor(linear_only(model))
    ways = np.asarray([28], dtype=np.int64)
    ratios = np.asarray([0.0, 0.2, 0.5, 1.0])
    with_window = plain.predict(ratios, ways).cpi[:, 0]
    linear = pred_lin.predict(ratios, ways).cpi[:, 0]
    assert with_window[0] == pytest.approx(linear[0]) and with_window[3] == pytest.approx(linear[3])
    assert (with_window[1:3] > linear[1:3]).all()  # a partly slow structure costs more than linear


def test_a_structure_hidden_behind_others_in_slowmax_is_charged_its_own_latency() -> None:
    # "warm" streams (5 extra cycles per slow miss in slowmax, hidden behind "hot"'s chain);
    # alone on the slow tier its misses cannot overlap more than the fill buffers allow.
    pen = {"hot": (200.0, 400.0), "warm": (4.0, 5.0), "cold": (60.0, 100.0)}
    model = fit(parse_bundle(per_structure_bundle(pen)))
    assert model.slow_latency_cycles == pytest.approx(750.0)
    assert model.dram_latency_cycles == pytest.approx(250.0)
    no_window = model.model_copy(update={"window_mlp_by_structure": None})
    covered = Predictor(no_window)
    naive = Predictor(linear_only(model))
    ways = np.asarray([28], dtype=np.int64)
    only_warm = 0.2  # the slow share holds "warm" (cheapest per byte) and nothing else
    plan = covered.placement(only_warm, 28)
    assert {p.tag for p in plan if p.slow_bytes} == {"warm"}
    got = covered.predict(np.asarray([only_warm, 1.0]), ways).cpi[:, 0]
    lin = naive.predict(np.asarray([only_warm, 1.0]), ways).cpi[:, 0]
    floor = (750.0 - 250.0) / WINDOW_MLP_MAX
    i = model.tags.index("warm")
    share = next(p.slow_bytes / p.size_bytes for p in plan if p.tag == "warm")
    rate = covered.access_rates(28.0)[i]
    # Nearly all the stall is on DRAM ("hot" and "cold"): the floor applies almost in full.
    assert got[0] - lin[0] == pytest.approx(share * rate * (floor - 5.0), rel=0.05)
    assert got[1] == pytest.approx(lin[1], rel=1e-9)  # in slowmax it was measured: no change


def with_stores(data: dict[str, Any], tag: str, share: float) -> dict[str, Any]:
    """The bundle with `share` of one tag's sampled misses marked as stores in every run."""
    out = copy.deepcopy(data)
    for run in out["runs"]:
        run["store_samples"] = {tag: round(run["samples"][tag] * share)}
    return out


def floor_above_linear(model: FittedModel, tag: str, ratio: float) -> float:
    """What the cover floor adds at `ratio` (28 ways), where the slow share holds `tag` alone."""
    covered = Predictor(model.model_copy(update={"window_mlp_by_structure": None}))
    assert {p.tag for p in covered.placement(ratio, 28) if p.slow_bytes} == {tag}
    naive = Predictor(linear_only(model))
    ways = np.asarray([28], dtype=np.int64)
    got = covered.predict(np.asarray([ratio]), ways).cpi[0, 0]
    return float(got - naive.predict(np.asarray([ratio]), ways).cpi[0, 0])


def test_a_store_miss_is_charged_the_floor_only_as_often_as_the_fill_buffers_are_full() -> None:
    # The same "warm" as above, but its misses are stores: a store retires before its line
    # arrives, so its slow latency costs time only when another miss waits for a fill buffer.
    pen = {"hot": (200.0, 400.0), "warm": (4.0, 5.0), "cold": (60.0, 100.0)}
    data = per_structure_bundle(pen)
    loads = fit(parse_bundle(data))
    assert loads.load_share_by_structure is None and loads.fill_buffers_full is None
    stores = fit(parse_bundle(with_stores(data, "warm", 1.0)))
    i = stores.tags.index("warm")
    assert stores.load_share_by_structure is not None
    assert stores.load_share_by_structure[i] == 0.0
    assert [x for j, x in enumerate(stores.load_share_by_structure) if j != i] == [1.0, 1.0]
    full = stores.fill_buffers_full
    assert full is not None and 0.0 < full < 1.0
    as_loads = floor_above_linear(loads, "warm", 0.2)
    assert as_loads > 0.0
    assert floor_above_linear(stores, "warm", 0.2) == pytest.approx(as_loads * full, rel=1e-6)
    # Half of them stores: half of its misses charged in full, half as often as the buffers fill.
    half = fit(parse_bundle(with_stores(data, "warm", 0.5)))
    assert floor_above_linear(half, "warm", 0.2) == pytest.approx(
        as_loads * (0.5 + 0.5 * full), rel=1e-3
    )
    # The reference runs are where the model was measured: stores change nothing there.
    ratios, ways = np.asarray([0.0, 1.0]), np.asarray([1, 28], dtype=np.int64)
    at_stores = Predictor(stores).predict(ratios, ways).cpi
    at_loads = Predictor(loads).predict(ratios, ways).cpi
    for r, w in ((0, 0), (0, 1), (1, 1)):  # fastmin, fastmax, slowmax
        assert at_stores[r, w] == pytest.approx(at_loads[r, w], rel=1e-9)


def first_writes_bundle(tag: str = "warm", per_load: float = 20.0) -> dict[str, Any]:
    """The bundle with `tag`'s misses at fastmax's ways its first writes (stores, which stall
    nothing: no stall sample is a store's) and at fastmin's the same writes and loads that stall
    `per_load` cycles each in DRAM: a table that fits the cache once written and is read from
    memory with fewer ways."""
    data = per_structure_bundle()
    runs = {r["name"]: r for r in data["runs"]}
    writes = runs["fastmax"]["samples"][tag]
    for meas in data["structure_measurements"]["runs"]:
        run = runs[meas["run"]]
        n, samples = run["instructions"], run["samples"][tag]
        run["store_samples"] = {tag: min(writes, samples)}
        meas["store_stall_samples"] = {tag: 0}
        rate = run["llc_misses"] / n * samples / sum(run["samples"].values())
        stall = rate * (samples - min(writes, samples)) / samples * per_load
        extra = round((stall - meas["stall_samples"][tag] * PERIOD / n) * n)
        meas["stall_samples"][tag] = round(stall * n / PERIOD)
        run["wall_seconds"] *= (run["cycles"] + extra) / run["cycles"]
        run["cycles"] += extra
        run["stall_cycles_l3_miss"] += extra
    return data


def test_a_structure_that_stores_with_many_ways_and_loads_with_few_is_charged_its_loads() -> None:
    model = fit(parse_bundle(first_writes_bundle(per_load=20.0)))
    i = model.tags.index("warm")
    assert model.load_rate_at_min_by_structure is not None
    assert model.load_rate_at_max_by_structure is not None
    assert model.load_rate_at_max_by_structure[i] == 0.0 < model.load_rate_at_min_by_structure[i]
    assert model.p_dram_by_structure is not None and model.p_slow_by_structure is not None
    assert model.p_dram_by_structure[i] == pytest.approx(20.0, rel=1e-3)  # per load, recovered
    # slowmax (many ways) saw none of its loads: its DRAM penalty slowed as the other
    # structures' loads measured there are ("hot" 400 over 200, "cold" 100 over 60, by rate).
    loads = model.load_rate_at_max_by_structure
    others = [j for j in range(len(model.tags)) if j != i]
    slowed = sum(loads[j] * model.p_slow_by_structure[j] for j in others) / sum(
        loads[j] * model.p_dram_by_structure[j] for j in others
    )
    assert 100.0 / 60.0 < slowed < 2.0
    assert model.p_slow_by_structure[i] == pytest.approx(20.0 * slowed, rel=1e-3)
    assert max(abs(r) for r in model.diagnostics.cpi_residuals.values()) < 1e-3
    pred = Predictor(model.model_copy(update={"window_mlp_by_structure": None}))
    ratios = np.asarray([0.0, 0.2])
    assert {p.tag for p in pred.placement(0.2, 1) if p.slow_bytes} == {"warm"}
    share = next(p.slow_bytes / p.size_bytes for p in pred.placement(0.2, 1) if p.tag == "warm")
    full = model.fill_buffers_full
    assert full is not None
    # With one way its loads pay a load's slow penalty, at least the linear charge...
    few = pred.predict(ratios, np.asarray([1], dtype=np.int64)).cpi[:, 0]
    loads_at_min = model.load_rate_at_min_by_structure[i]
    assert few[1] - few[0] >= share * loads_at_min * model.p_slow_by_structure[i] * (1 - 1e-9)
    # ...with every way its misses are stores: only the fill buffers' floor.
    many = pred.predict(ratios, np.asarray([28], dtype=np.int64)).cpi[:, 0]
    floor = (750.0 - 250.0) / WINDOW_MLP_MAX
    rate = pred.access_rates(28.0)[i]
    share_28 = next(p.slow_bytes / p.size_bytes for p in pred.placement(0.2, 28) if p.tag == "warm")
    assert many[1] - many[0] == pytest.approx(share_28 * rate * floor * full, rel=1e-6)


def test_loads_and_stores_of_one_structure_are_charged_their_own_penalties() -> None:
    # "cold" costs 60 cycles a miss in DRAM and 100 more when slow (PENALTIES), on average:
    # half of its misses are stores that wait 30 (+50) for a fill buffer, half loads that wait
    # 90 (+150) for their line. The bundle says which samples and stall samples were stores'.
    data = per_structure_bundle()
    runs = {r["name"]: r for r in data["runs"]}
    for meas in data["structure_measurements"]["runs"]:
        run = runs[meas["run"]]
        stores = run["samples"]["cold"] // 2
        run["samples"]["cold"] = 2 * stores
        run["store_samples"] = {"cold": stores}
        meas["store_stall_samples"] = {"cold": round(meas["stall_samples"]["cold"] * 0.25)}
    model = fit(parse_bundle(data))
    i = model.tags.index("cold")
    assert "loads and stores" in model.diagnostics.penalty_path_reason
    assert model.p_dram_by_structure is not None and model.p_slow_by_structure is not None
    assert model.p_dram_store_by_structure is not None
    assert model.p_slow_store_by_structure is not None
    assert model.p_dram_by_structure[i] == pytest.approx(90.0, rel=0.02)
    assert model.p_dram_store_by_structure[i] == pytest.approx(30.0, rel=0.02)
    assert model.p_slow_by_structure[i] == pytest.approx(150.0, rel=0.02)
    assert model.p_slow_store_by_structure[i] == pytest.approx(50.0, rel=0.02)
    # A structure that never stores keeps its penalties per miss, as without the split.
    j = model.tags.index("hot")
    assert model.p_dram_by_structure[j] == pytest.approx(PENALTIES["hot"][0], rel=0.01)
    assert max(abs(r) for r in model.diagnostics.cpi_residuals.values()) < 1e-3


def test_erlang_c_is_the_chance_of_waiting() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # one server: the utilisation
    assert erlang_c(2, 1.0) == pytest.approx(1.0 / 3.0)
    assert erlang_c(12, 0.0) == 0.0 and erlang_c(12, 12.0) == 1.0 and erlang_c(12, 1e6) == 1.0
    busier = [erlang_c(12, a) for a in (2.0, 6.0, 10.0, 11.9)]
    assert busier == sorted(busier) and busier[0] < 1e-3 < busier[-1] < 1.0


def test_placement_sends_the_cheapest_stall_per_byte_slow_first() -> None:
    # "warm" is accessed more per byte than "cold" but costs far less per slow miss: the
    # per-structure plan sends it slow first, the paper's plan (accesses per byte) does not.
    pen = {"hot": (200.0, 400.0), "warm": (20.0, 5.0), "cold": (60.0, 200.0)}
    model = fit(parse_bundle(per_structure_bundle(pen)))
    paper = fit(parse_bundle(per_structure_bundle(pen)), penalties="paper")
    small = 0.15
    slow_first = {p.tag for p in Predictor(model).placement(small, 28) if p.slow_bytes > 0}
    paper_first = {p.tag for p in Predictor(paper).placement(small, 28) if p.slow_bytes > 0}
    assert slow_first == {"warm"}
    assert paper_first == {"cold"}


def test_structures_with_few_samples_keep_the_workload_penalties() -> None:
    data = per_structure_bundle()
    for run in data["runs"]:
        run["samples"]["warm"] = 3
    model = fit(parse_bundle(data))
    assert model.penalty_path == "per_structure"
    assert "2 of 3 structures" in model.diagnostics.penalty_path_reason
    assert model.p_dram_by_structure is not None and model.p_slow_by_structure is not None
    i = model.tags.index("warm")
    assert model.p_dram_by_structure[i] == model.p_dram
    assert model.p_slow_by_structure[i] == model.p_slow


def test_no_stall_samples_falls_back_to_the_paper_path() -> None:
    data = per_structure_bundle()
    data["structure_measurements"]["runs"][2]["stall_samples"] = {}
    model = fit(parse_bundle(data))
    assert model.penalty_path == "paper"
    assert "slowmax has no memory-stall samples" in model.diagnostics.penalty_path_reason


# -- queueing ---------------------------------------------------------------------------------------


def test_slow_penalties_follow_the_loaded_latency() -> None:
    model = fit(parse_bundle(per_structure_bundle(traffic=True)))
    q = model.slow_queue
    assert q is not None and q.kappa == QUEUE_KAPPA
    slowmax = parse_bundle(per_structure_bundle(traffic=True)).run("slowmax")
    own = (slowmax.llc_misses * 64 / 4e9 + slowmax.llc_misses * 16 / 1.5e9) / slowmax.wall_seconds
    assert q.own_utilization_at_slowmax == pytest.approx(own, rel=1e-9)
    assert q.background_utilization == pytest.approx(0.0, abs=1e-12)

    pred = Predictor(linear_only(model))
    linear = Predictor(linear_only(fit(parse_bundle(per_structure_bundle()))))
    ways = np.asarray([28], dtype=np.int64)
    ratios = np.asarray([0.0, 0.5, 1.0])
    queued, plain = pred.predict(ratios, ways).cpi[:, 0], linear.predict(ratios, ways).cpi[:, 0]
    # All-DRAM and all-slow are where the penalties were measured: both predictions agree there.
    assert queued[0] == pytest.approx(plain[0], rel=1e-12)
    assert queued[2] == pytest.approx(plain[2], rel=1e-3)
    # In between, the slow tier carries less traffic than in slowmax, so its latency is lower.
    assert queued[1] < plain[1]

    # The fixed point: the load implied by the predicted time gives back that time.
    rates = pred.access_rates(28.0)
    plan = pred.placement(0.5, 28)
    share = np.asarray([p.slow_bytes / p.size_bytes for p in plan])
    slow_rate = float(share @ rates)
    u = own * slow_rate / q.slowmax_mpi * q.slowmax_cpi / queued[1]
    factor = q.loaded(u) / q.loaded(own)
    pd = np.asarray(model.p_dram_by_structure)
    ps = np.asarray(model.p_slow_by_structure)
    expect = model.cpi_cache + rates @ pd + (share * np.maximum((pd + ps) * factor - pd, 0)) @ rates
    assert queued[1] == pytest.approx(expect, rel=2e-3)


def test_a_loaded_pool_charges_others_traffic() -> None:
    data = per_structure_bundle(traffic=True)
    slowmax = next(r for r in data["structure_measurements"]["runs"] if r["run"] == "slowmax")
    wall = next(r for r in data["runs"] if r["name"] == "slowmax")["wall_seconds"]
    slowmax["slow_tier"]["read_bytes"] += round(0.3 * 4e9 * wall)  # others use 30 %
    q = fit(parse_bundle(data)).slow_queue
    assert q is not None
    assert q.background_utilization == pytest.approx(0.3, rel=1e-6)


def test_without_bandwidth_or_traffic_there_is_no_queueing() -> None:
    assert fit(parse_bundle(per_structure_bundle())).slow_queue is None


# -- diagnostics -------------------------------------------------------------------------------------


def codes(data: dict[str, Any]) -> dict[str, str]:
    return {f.code: f.message for f in fit(parse_bundle(data)).diagnostics.flags}


def test_a_clean_per_structure_fit_raises_no_flag() -> None:
    assert codes(per_structure_bundle()) == {}


def test_cycles_the_stall_counter_cannot_explain_move_the_fit_to_eq4() -> None:
    # slowmax ran 15 % longer than its stall counter explains: the stall path would put that
    # time into on-core CPI; the cycles (Eq. 4) pass through all three runs.
    data = make_bundle()
    data["runs"][2]["cycles"] = round(data["runs"][2]["cycles"] * (1 + 3 * CPI_RESIDUAL_FLAG))
    model = fit(parse_bundle(data))
    found = {f.code: f.message for f in model.diagnostics.flags}
    assert model.diagnostics.path == "eq4"
    assert "stall_counters_incomplete" in found and "slowmax" in found["stall_counters_incomplete"]
    assert "cpi_residual" not in found
    assert max(abs(r) for r in model.diagnostics.cpi_residuals.values()) < CPI_RESIDUAL_FLAG


def test_a_cpi_residual_above_the_threshold_is_flagged_with_what_to_do() -> None:
    # fastmin ran faster than fastmax despite more misses: no path passes through that.
    data = make_bundle()
    data["runs"][1]["cycles"] = round(data["runs"][0]["cycles"] * 0.8)
    data["runs"][1]["stall_cycles_l3_miss"] = min(
        data["runs"][1]["stall_cycles_l3_miss"], data["runs"][1]["cycles"]
    )
    found = codes(data)
    assert "cpi_residual" in found
    assert "profile again" in found["cpi_residual"]


def test_a_small_residual_is_not_flagged() -> None:
    data = make_bundle()
    data["runs"][2]["cycles"] = round(data["runs"][2]["cycles"] * (1 + CPI_RESIDUAL_FLAG / 3))
    assert "cpi_residual" not in codes(data)


def test_many_structures_without_samples_make_one_line() -> None:
    structures = {f"s{i:03d}": (4.0, 0.0, 0.0) for i in range(200)}
    structures["hot"] = (256.0, 1.0, 1.0)
    found = fit(parse_bundle(make_bundle(Shape(structures=structures)))).diagnostics.flags
    unsampled = [f for f in found if f.code == "structure_without_samples"]
    assert len(unsampled) == 1
    msg = unsampled[0].message
    assert msg.startswith("200 of 201 structures") and "and 197 more" in msg
    assert "smaller sampling interval" in msg


def test_low_pebs_coverage_is_flagged() -> None:
    data = make_bundle()
    for run in data["runs"]:
        run["samples"] = {t: c // 4 for t, c in run["samples"].items()}
    assert "low_pebs_coverage" in codes(data)


def test_an_implausible_mlp_is_flagged() -> None:
    # A 100 ns DRAM with a 2000-cycle penalty per miss: 0.1 misses in flight.
    assert "implausible_mlp" in codes(make_bundle(Shape(p_dram=2000.0, p_slow=3000.0)))


def test_an_implied_slow_latency_far_from_the_declared_one_is_flagged() -> None:
    # The host declares 300 ns against DRAM's 100; slowmax behaves as if it were 30x slower.
    found = codes(make_bundle(Shape(p_dram=80.0, p_slow=80.0 * 30)))
    assert "slow_latency_mismatch" in found
    assert "bound to the slow tier" in found["slow_latency_mismatch"]


def test_a_disagreement_the_calibration_removes_still_widens_the_interval() -> None:
    from model.confidence import prediction_interval  # noqa: PLC0415
    from model.grid import paper_grid  # noqa: PLC0415

    clean = fit(parse_bundle(per_structure_bundle()))
    assert all(abs(r) < 1e-3 for r in clean.diagnostics.uncalibrated_residuals.values())
    # slowmax's stall counter explains less of its cycles than fastmax's does: the stall
    # samples' level disagrees with the cycles, and the calibration through slowmax takes it out.
    data = per_structure_bundle()
    slowmax = data["runs"][2]
    slowmax["stall_cycles_l3_miss"] = round(slowmax["stall_cycles_l3_miss"] * 0.95)
    skewed = fit(parse_bundle(data))
    before = skewed.diagnostics.uncalibrated_residuals
    assert abs(skewed.diagnostics.cpi_residuals["slowmax"]) < 1e-3
    assert abs(before["slowmax"]) > 0.02
    grid = paper_grid()
    prediction = Predictor(skewed).predict(np.asarray(grid.slow_ratios), np.asarray(grid.llc_ways))
    wide = prediction_interval(prediction, skewed.diagnostics).sigma
    forgotten = skewed.diagnostics.model_copy(update={"uncalibrated_residuals": {}})
    narrow = prediction_interval(prediction, forgotten).sigma
    assert (wide >= narrow - 1e-12).all() and (wide > narrow * 1.5).any()


def test_per_structure_penalties_follow_the_way_sweep_between_the_reference_runs() -> None:
    data = per_structure_bundle()
    plain = Predictor(fit(parse_bundle(data)))
    ways = [p["llc_ways"] for p in data["miss_curve"]]
    at = plain.predict(np.asarray([0.0]), np.asarray(ways, dtype=np.int64)).cpi[0]
    # The sweep: the model's own CPI all in DRAM, except 0.1 higher at 12 ways.
    for point, cpi in zip(data["miss_curve"], at, strict=True):
        point["cycles_per_instruction"] = float(cpi) + (0.1 if point["llc_ways"] == 12 else 0.0)
    model = fit(parse_bundle(data))
    assert model.penalty_path == "per_structure" and model.curve_cpi is not None
    swept = Predictor(model).predict(np.asarray([0.0, 1.0]), np.asarray([1, 12, 28])).cpi
    i12 = ways.index(12)
    assert swept[0, 0] == pytest.approx(at[0], rel=1e-6)  # fastmin
    assert swept[0, 2] == pytest.approx(at[-1], rel=1e-6)  # fastmax
    assert swept[0, 1] == pytest.approx(at[i12] + 0.1, rel=1e-6)
    slow = plain.predict(np.asarray([1.0]), np.asarray([12, 28])).cpi[0]
    assert swept[1, 2] == pytest.approx(slow[1], rel=1e-6)  # slowmax
    assert swept[1, 1] > slow[0]


def test_a_promise_reaches_the_uncovered_prediction_and_the_cost_band_does_not() -> None:
    # "warm" hid behind "hot" in slowmax: alone on the slow tier it may wait far longer. The
    # upper bound a promise states reaches that at UNCOVERED_LEVEL; the cost band's does not move.
    pen = {"hot": (200.0, 400.0), "warm": (4.0, 5.0), "cold": (60.0, 100.0)}
    model = fit(parse_bundle(per_structure_bundle(pen)))
    p = Predictor(model).predict(np.asarray([0.0, 0.2, 1.0]), np.asarray([28], dtype=np.int64))
    assert p.seconds_uncovered is not None
    gap = p.seconds_uncovered / p.seconds - 1.0
    assert gap[1, 0] > 0.01 and gap[0, 0] == 0.0 and gap[2, 0] == pytest.approx(0.0, abs=1e-12)
    interval = prediction_interval(p, model.diagnostics, confidence=UNCOVERED_LEVEL)
    promise = interval.promise_upper(p.seconds)
    assert (promise >= p.seconds_uncovered * (1.0 - 1e-9)).all()
    assert (interval.upper(p.seconds) < promise).any()
    z = NormalDist().inv_cdf(UNCOVERED_LEVEL)
    np.testing.assert_allclose(interval.upper(p.seconds), p.seconds * (1.0 + z * interval.sigma))


def test_the_uncovered_prediction_is_capped_by_all_slow_whatever_the_grid() -> None:
    # A grid that stops short of ratio 1 keeps its top row's gap: the cap is all of it slow.
    pen = {"hot": (200.0, 400.0), "warm": (4.0, 5.0), "cold": (60.0, 100.0)}
    predictor = Predictor(fit(parse_bundle(per_structure_bundle(pen))))
    ways = np.asarray([12, 28], dtype=np.int64)
    full = predictor.predict(np.asarray([0.0, 0.2, 1.0]), ways)
    short = predictor.predict(np.asarray([0.0, 0.2]), ways)
    assert full.seconds_uncovered is not None and short.seconds_uncovered is not None
    np.testing.assert_allclose(short.seconds_uncovered, full.seconds_uncovered[:2], rtol=1e-12)
    assert (full.seconds_uncovered <= full.seconds[2][None, :] * (1 + 1e-12)).all()
