"""`tmc plan capacity` and `tmc plan rebalance`: plans from files and from the running service's
ledger (`--live`, over uvicorn on PostgreSQL and Redis), clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.auth import Role
from api.settings import Settings
from cli.main import app
from tests.api.test_planner import ledger_cluster
from tests.fixtures.service import TOKENS
from tests.services import uvicorn_server

runner = CliRunner()

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


def test_rebalance_of_the_live_cluster_asks_the_running_service(
    settings: Settings, client: TestClient
) -> None:
    ledger_cluster(settings)
    assert settings.redis_url is not None
    env = {"TMC_DATABASE_URL": settings.database_url, "TMC_REDIS_URL": settings.redis_url}
    with uvicorn_server(env) as base:
        shell = {"TMC_SERVER": base, "TMC_TOKEN": TOKENS[Role.operator], "COLUMNS": "200"}
        args = ["plan", "rebalance", "--live", "--pin-namespace", "kube-system"]
        table = runner.invoke(app, [*args, "--time-limit", "3"], env=shell)
        assert table.exit_code == 0, table.output
        assert "machines in use 3 -> 2" in table.output
        assert "left out web/lost on down: its node is not ready" in table.output
        as_json = runner.invoke(app, [*args, "--node", "n0", "--node", "n1", "--json"], env=shell)
        assert as_json.exit_code == 0, as_json.output
        out = json.loads(as_json.output)
        assert out["cluster"]["nodes"] == 2 and out["plan"]["nodes_after"] == 1
        viewer = {**shell, "TMC_TOKEN": TOKENS[Role.viewer]}
        refused = runner.invoke(app, ["plan", "rebalance", "--live"], env=viewer)
        assert refused.exit_code != 0 and "role may not do this" in refused.output
        both = runner.invoke(app, ["plan", "rebalance", "--live", "x.json"], env=shell)
        assert both.exit_code != 0 and "not both" in both.output
