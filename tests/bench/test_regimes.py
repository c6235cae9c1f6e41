"""`tmc bench --quick --part regimes`: the regime map and the planners' comparison run end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bench.regimes import QUICK_MAP, _needs_seed_check, reshape, seed_check, summarise
from bench.regimes_report import verdict
from bench.studies import Regime
from cli.main import app
from sim.catalog import workload


def test_quick_regime_map_writes_json_markdown_and_plot(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["bench", "--quick", "--part", "regimes", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    folder = tmp_path / "regimes"
    data = json.loads((folder / "regimes-quick.json").read_text())
    assert data["schema"] == "tmc.bench-regimes/v1" and data["quick"] is True
    assert len(data["map"]) == len(QUICK_MAP.regimes())
    for entry in data["map"]:
        assert set(entry["policies"]) == {"es", "tmc-2.5", "tmc-2.5c", "tmc-2.5v", "tmc-2.5s"}
        es = entry["policies"]["es"]
        assert es["compact_vs_es"] == 0.0 and es["within_t_share"] == 1.0
        for p in entry["policies"].values():
            assert p["binding"] in {"cpu", "dram", "slow", "llc"}
            assert 0.0 <= p["within_t_share"] <= 1.0
    # The decisions themselves are judged on the full map (test_regime_map_ratchet.py): on these
    # short traces whether a regime keeps 95 % of them within T turns on near-ties.
    planning = data["planning"]
    assert planning["capacity"] and planning["rebalance"]
    for row in planning["capacity"]:
        assert row["planned_machines"] <= row["greedy_machines"]
    for row in planning["rebalance"]:
        assert row["cp_sat_after"] <= row["in_use"]
    md = (folder / "regimes-quick.md").read_text()
    assert "regimes-quick-map.svg" in md and "OR-Tools planners against greedy" in md
    svg = folder / "regimes-quick-map.svg"
    assert b"<svg" in svg.read_bytes()[:1000] and svg.stat().st_size < 1_000_000
    # the confidence level of every workload was learnt without it
    assert set(data["confidence"]) == {w["name"] for w in data["workloads"]["paper"]}
    for c in data["calibration"]:
        assert 0 <= c["cheapest_over_t"] <= c["workloads"]
    # the bounds' calibration is reported per level, paired beside each point's own
    levels = [c["level"] for c in data["paired_coverage"]]
    assert levels == sorted(levels) and all(c["pairs"] > 0 for c in data["paired_coverage"])
    # the shadow-blend policy names what each mix's packing was short of
    shadow_rows = [r for r in data["rows"] if r["policy"] == "tmc-2.5s"]
    assert shadow_rows and all(r["shadow_binding"] for r in shadow_rows)
    assert "shadow blend" in md and "paired bound exceeded" in md


def test_memory_heavy_shape_is_one_vcpu_with_structures_twice_as_large() -> None:
    w = workload("graph500")
    heavy = reshape(w, "memory-heavy")
    assert heavy.vcpus == 1 and heavy.instructions == w.instructions // w.vcpus
    assert abs(heavy.footprint_bytes - 2 * w.footprint_bytes) <= 64 * len(w.structures)
    assert reshape(w, "paper") == w


def test_summary_is_relative_to_exhaustive_search_on_the_same_mix() -> None:
    r = Regime("gce-n1", 0.2, 0.4, "paper", "run")
    base = {"regime": r.key, "binding": "cpu", "within_t_share": 1.0}
    rows = [
        {**base, "mix": [0], "policy": "es", "compact_p90": 10.0, "mean_cost": 1.0},
        {**base, "mix": [1], "policy": "es", "compact_p90": 20.0, "mean_cost": 2.0},
        {**base, "mix": [0], "policy": "tmc-2.5", "compact_p90": 9.0, "mean_cost": 1.01},
        {**base, "mix": [1], "policy": "tmc-2.5", "compact_p90": 16.0, "mean_cost": 2.04},
    ]
    out = summarise(rows, [r])[0]["policies"]["tmc-2.5"]
    assert abs(out["compact_vs_es"] - (-0.15)) < 1e-12  # mean of -10 % and -20 %
    assert out["cost_vs_es"] == pytest.approx(0.015)
    assert out["compact_vs_es_range"] == pytest.approx([-0.2, -0.1])


def _verified(size: float) -> dict[str, object]:
    return {"cost_vs_es": 0.0, "within_t_share_min": 1.0, "compact_vs_es": size}


def test_regimes_whose_verdict_turns_on_a_machine_are_re_measured() -> None:
    r = Regime("gce-n1", 0.2, 0.4, "paper", "run")

    def entries(size: float) -> list[dict[str, Any]]:
        return [{"regime": r.key, "policies": {"tmc-2.5v": _verified(size)}}]

    assert _needs_seed_check(entries(0.01), r)  # larger at all
    assert _needs_seed_check(entries(-0.05), r) and _needs_seed_check(entries(-0.03), r)
    assert not _needs_seed_check(entries(0.0), r)  # a tie
    assert not _needs_seed_check(entries(-0.12), r)  # pays by far more than a machine or two


def test_the_seed_check_is_the_mean_over_seeds_then_over_mixes_and_decides_the_verdict() -> None:
    r = Regime("gce-n1", 0.2, 0.4, "paper", "run")
    rows = [
        {"regime": r.key, "mix": [0, 1, 2, 3], "policy": "es", "compact_sizes": [10, 12]},
        {"regime": r.key, "mix": [0, 1, 2, 3], "policy": "tmc-2.5v", "compact_sizes": [12, 10]},
        {"regime": r.key, "mix": [0, 1, 2, 4], "policy": "es", "compact_sizes": [20, 20]},
        {"regime": r.key, "mix": [0, 1, 2, 4], "policy": "tmc-2.5v", "compact_sizes": [21, 21]},
    ]
    check = seed_check(rows, [r], 2)[r.key]
    assert check["compact_vs_es"] == pytest.approx((0.0 + 0.05) / 2)
    assert check["compact_vs_es_range"] == pytest.approx([0.0, 0.05])
    # One seed said larger by 10 %; the check's mean decides.
    p = {**_verified(0.10), "seed_check": {**check, "compact_vs_es": -0.001}}
    assert verdict(p, 0.025) == "no gain"
    assert verdict({**p, "seed_check": check}, 0.025) == "larger than ES"
    assert verdict(_verified(-0.06), 0.025) == "packing pays"
