"""`tmc plan capacity` and `tmc plan rebalance`: plans from files and from the running service's
ledger (`--live`, over uvicorn on PostgreSQL and Redis), clear errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.auth import Role
from api.settings import Settings
from cli.main import app
from model import DEFAULT_PRICE_PROFILE
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


def test_capacity_for_my_own_machine_kinds_from_a_file(tmp_path: Path) -> None:
    kinds = tmp_path / "kinds.json"
    kinds.write_text(
        json.dumps(
            [
                {
                    "name": "lab-64G-512L",
                    "cpus": 32,
                    "dram_bytes": 64 * GIB,
                    "local_slow_bytes": 512 * GIB,
                    "llc_ways": 48,
                },
                {
                    "name": "lab-32G-1TP",
                    "cpus": 16,
                    "dram_bytes": 32 * GIB,
                    "pool_bytes": 1024 * GIB,
                    "rack_nodes": 8,
                    "llc_ways": 48,
                },
            ]
        )
    )
    args = ["plan", "capacity", "-p", str(EXAMPLES / "memcached.json"), "--rate", "3000"]
    out = json.loads(runner.invoke(app, [*args, "--kinds", str(kinds), "--json"]).output)
    assert sorted(k["kind"] for k in out["kinds"]) == ["lab-32G-1TP", "lab-64G-512L"]
    # One fill default for the CLI, the API and the dashboard; one name for the prices.
    assert out["fill"] == 1.0 and out["price_profile"] == "paper-3dxp@1"
    table = runner.invoke(
        app, [*args, "--kinds", str(kinds), "--prices", "paper-3dxp@1"], env={"COLUMNS": "200"}
    )
    assert table.exit_code == 0, table.output
    assert "lab-64G-512L" in table.output and "paper-3dxp@1" in table.output
    for term in ("24G-128P", "greedy", "tenants pay", "Fig. 9's family", "/h"):
        assert term in table.output, term
    assert not re.search(r"0\.000\d* USD", table.output)
    bad = tmp_path / "bad-kinds.json"
    bad.write_text(json.dumps([{"name": "x", "cpus": 0, "dram_bytes": 1, "llc_ways": 4}]))
    refused = runner.invoke(app, [*args, "--kinds", str(bad)])
    assert refused.exit_code == 2 and refused.stderr.startswith(f"error: {bad}: ")
    assert "cpus" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    unknown = runner.invoke(app, [*args, "--prices", "cheap"])
    assert unknown.exit_code == 2 and "paper-3dxp@1" in unknown.stderr
    assert "name@version" in unknown.stderr


def test_request_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "capacity.json"
    bad.write_text(json.dumps({"classes": []}))
    result = runner.invoke(app, ["plan", "capacity", str(bad)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {bad}: ")
    cluster = tmp_path / "cluster.json"
    cluster.write_text("{not json")
    result = runner.invoke(app, ["plan", "rebalance", str(cluster)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {cluster}: ")


def test_capacity_for_the_services_registered_host_kinds(
    settings: Settings, client: TestClient
) -> None:
    # The examples' host has 48 ways: a registered kind of 48 takes their ways as they are.
    machine = {"cpus": 24, "dram_bytes": 96 * GIB, "slow_bytes": 384 * GIB, "llc_ways": 48}
    client.put(
        "/v1/cluster/host-kinds",
        headers={"Authorization": f"Bearer {TOKENS[Role.operator]}"},
        json={"name": "rack-b-96G-384L", "machine": machine},
    ).raise_for_status()
    assert settings.redis_url is not None
    env = {"TMC_DATABASE_URL": settings.database_url, "TMC_REDIS_URL": settings.redis_url}
    with uvicorn_server(env) as base:
        shell = {"TMC_SERVER": base, "TMC_TOKEN": TOKENS[Role.viewer]}
        args = ["plan", "capacity", "-p", str(EXAMPLES / "memcached.json"), "--rate", "300"]
        done = runner.invoke(app, [*args, "--host-kinds", "--json"], env=shell)
        assert done.exit_code == 0, done.output
        (kind,) = json.loads(done.output)["kinds"]
        assert kind["kind"] == "rack-b-96G-384L" and kind["machines"] >= 1
        # A price profile only the service stores, by its one name: the service plans.
        made = client.post(
            "/v1/price-profiles",
            json={
                **DEFAULT_PRICE_PROFILE.model_dump(exclude={"version"}),
                "name": "rack-b-prices",
                "vcpu_hour": DEFAULT_PRICE_PROFILE.vcpu_hour * 3,
            },
            headers={"Authorization": f"Bearer {TOKENS[Role.operator]}"},
        )
        assert made.status_code == 201, made.text
        key = made.json()["key"]
        operator = {**shell, "TMC_TOKEN": TOKENS[Role.operator], "COLUMNS": "200"}
        priced = runner.invoke(app, [*args, "--host-kinds", "--prices", key], env=operator)
        assert priced.exit_code == 0, priced.output
        assert key in priced.output and "rack-b-96G-384L" in priced.output
        as_json = runner.invoke(app, [*args, "--prices", key, "--json"], env=operator)
        assert as_json.exit_code == 0, as_json.output
        assert json.loads(as_json.output)["price_profile"] == key
        missing = runner.invoke(app, [*args, "--prices", "nope@9"], env=operator)
        assert missing.exit_code == 2 and "nope@9" in missing.stderr
        # A registered kind of 20 ways states no LLC size: the 48-way profile is refused there,
        # with the reason, and planned on the other kind.
        client.put(
            "/v1/cluster/host-kinds",
            headers={"Authorization": f"Bearer {TOKENS[Role.operator]}"},
            json={"name": "rack-c-20w", "machine": {**machine, "llc_ways": 20}},
        ).raise_for_status()
        both = runner.invoke(app, [*args, "--host-kinds", "--json"], env=shell)
        assert both.exit_code == 0, both.output
        kinds = {k["kind"]: k for k in json.loads(both.output)["kinds"]}
        assert kinds["rack-b-96G-384L"]["machines"] >= 1
        assert kinds["rack-c-20w"]["status"] == "infeasible"
        assert "refused: this kind's LLC size is unknown" in kinds["rack-c-20w"]["note"]


def test_shadow_prices_of_a_mix_from_a_file(tmp_path: Path) -> None:
    hog = {"vcpus": 2, "dram_bytes": 2 * GIB, "slow_bytes": 0, "llc_ways": 28}
    request = {
        "classes": [
            {
                "name": "hog",
                "arrivals_per_hour": 10,
                "options": [{**hog, "seconds": 3600, "cost": 1}],
            }
        ],
        "kind": {"name": "24G-128L", "cpus": 12, "dram_bytes": 24 * GIB, "llc_ways": 48},
        "llc_area_share": 0.03,
    }
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(request))
    result = runner.invoke(app, ["plan", "shadow-prices", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    # 28 of 48 ways per VM: ways bind, and a way is worth 1/48 of a machine's hour
    assert out["binding"] == ["llc"]
    shadow = out["currencies"]["shadow"]
    assert abs(shadow["llc_way_hour"] * 48 - out["machine_hour"]) < 1e-12
    table = runner.invoke(app, ["plan", "shadow-prices", str(path)])
    assert table.exit_code == 0 and "LLC way hour" in table.output and "binds: llc" in table.output
    path.write_text("{}")
    bad = runner.invoke(app, ["plan", "shadow-prices", str(path)])
    assert bad.exit_code != 0 and str(path) in bad.output


def test_the_table_says_why_a_kind_cannot_host(tmp_path: Path) -> None:
    """A kind of 1 GiB of DRAM and no slow memory cannot host graph500 (traced at 4480 MiB):
    the table shows no machine count for it, and a line below says which resource stops it."""
    kinds = tmp_path / "kinds.json"
    kinds.write_text(
        json.dumps(
            [
                {
                    "name": "small-dram",
                    "cpus": 64,
                    "dram_bytes": GIB,
                    "local_slow_bytes": 0,
                    "llc_ways": 48,
                },
                {
                    "name": "tiered",
                    "cpus": 32,
                    "dram_bytes": 64 * GIB,
                    "local_slow_bytes": 512 * GIB,
                    "llc_ways": 48,
                },
            ]
        )
    )
    args = ["plan", "capacity", "-p", str(EXAMPLES / "graph500.json"), "--rate", "100"]
    out = json.loads(runner.invoke(app, [*args, "--kinds", str(kinds), "--json"]).output)
    small = next(k for k in out["kinds"] if k["kind"] == "small-dram")
    assert small["status"] == "infeasible" and small["machines"] == -1
    assert "graph500's" in small["note"] and "MiB of DRAM (a machine offers 1024)" in small["note"]
    table = runner.invoke(app, [*args, "--kinds", str(kinds)], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    row = next(line for line in table.output.splitlines() if "small-dram" in line)
    assert "-1" not in row and "cannot host" in row
    shown = " ".join(table.output.split())
    assert "small-dram cannot host: no option of graph500 fits this machine kind" in shown
    assert "MiB of DRAM (a machine offers 1024)" in shown
