"""`tmc plan capacity` and `tmc plan rebalance`: plans from files, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GIB = 1 << 30


def test_capacity_from_profiles_and_rates() -> None:
    args = ["plan", "capacity", "-p", str(EXAMPLES / "memcached.json"), "--rate", "3000"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["dry_run"] is True and len(out["kinds"]) == 12
    assert out["best"]["machines"] <= out["best"]["greedy_machines"]
    table = CliRunner().invoke(app, [*args, "--prices", "msv2-lsq"])
    assert table.exit_code == 0 and "msv2-lsq@1" in table.output
    assert "status" in table.output and "whole machines" in table.output


def test_rebalance_from_a_cluster_file(tmp_path: Path) -> None:
    node = {"cpus": 12, "dram_bytes": 24 * GIB, "slow_bytes": 128 * GIB, "llc_ways": 48}
    body = {
        "nodes": [{"name": f"n{i}", **node} for i in range(3)],
        "pods": [
            {
                "name": f"p{i}",
                "node": i,
                "vcpus": 2,
                "dram_bytes": GIB,
                "llc_ways": 2,
                "way_start": 0,
            }
            for i in range(3)
        ],
    }
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(body))
    result = CliRunner().invoke(app, ["plan", "rebalance", str(path)])
    assert result.exit_code == 0, result.output
    assert "machines in use 3 -> 1" in result.output and "freed:" in result.output


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["plan", "capacity", "-p", str(EXAMPLES / "memcached.json")])
    assert missing.exit_code == 2 and "--rate" in missing.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nodes": [], "pods": []}))
    result = runner.invoke(app, ["plan", "rebalance", str(bad)])
    assert result.exit_code == 2 and "error:" in result.output
    result = runner.invoke(app, ["plan", "rebalance", str(tmp_path / "nope.json")])
    assert result.exit_code == 2 and "error:" in result.output
