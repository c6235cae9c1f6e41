"""`tmc bench --quick` runs end to end and writes a report that parses."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app


def test_bench_quick_writes_json_markdown_and_plots(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["bench", "--quick", "--part", "evaluation", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "evaluation-quick.json").read_text())
    assert data["schema"] == "tmc.bench/v1" and data["quick"] is True
    s = data["summary"]
    assert s["tmc_runs"] == 3 and s["es_runs"] == 77
    assert -0.5 < s["tmc_cost_vs_es"] < 1.0
    # Verification runs: at most the budget beyond the three reference runs, and on average
    # at least one (the chosen configuration's, unless a reference run measured it).
    assert 4 <= s["tmc_verified_runs"] <= 3 + 4
    for w in data["workloads"]["local"]:
        v = w["tmc_verified"]
        # None when tmc chooses a reference run's configuration: it was measured already.
        assert 3 <= v["runs"] <= 7 and v["run_seconds"] >= w["tmc"]["run_seconds"]
        assert v["cost_vs_es"] <= v["cost_vs_es_max"] < 0.025
    assert {r["policy"] for r in data["cluster"]} >= {"es", "tmc-2.5", "batch-2.5"}
    assert all(r["compact_p90"] >= 1 for r in data["cluster"])
    md = (tmp_path / "evaluation-quick.md").read_text()
    assert "Against the targets" in md
    pngs = sorted(tmp_path.glob("*.png"))
    assert len(pngs) == 4
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert p.stat().st_size < 300_000
        assert p.name in md
