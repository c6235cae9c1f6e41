"""`tmc get` against a real service (uvicorn on PostgreSQL and Redis): nodes, placements per pod
and per node, decisions and workloads as tables, JSON and YAML; and `GET /v1/placements`, the
read-only view behind it, with its roles."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from api.auth import Role
from api.demo import example_host_kind
from api.settings import Settings
from cli.main import app
from ledger import store as ledger
from ledger.types import Held
from model.resources import GIB
from store.db import make_engine, make_session_factory, unit_of_work
from store.orm import Reservation
from tests.fixtures.service import TOKENS, auth, example
from tests.services import free_port, uvicorn_server

runner = CliRunner()
OPERATOR = auth(Role.operator)


def seed(client: TestClient, settings: Settings) -> str:
    """A node, a fitted workload, a decision, and a pod placed by it; returns the decision id."""
    client.put(
        "/v1/cluster/host-kinds",
        headers=OPERATOR,
        json={
            "name": example_host_kind(),
            "machine": {
                "cpus": 12,
                "dram_bytes": 24 * GIB,
                "slow_bytes": 128 * GIB,
                "llc_ways": 48,
            },
        },
    ).raise_for_status()
    client.put(
        "/v1/cluster/nodes",
        headers=OPERATOR,
        json={
            "name": "tiered-0",
            "host_kind": example_host_kind(),
            "cpus": 12,
            "dram_bytes": 24 * GIB,
            "slow_bytes": 128 * GIB,
            "llc_ways": 48,
        },
    ).raise_for_status()
    client.post(
        "/v1/profiles",
        content=example("graph500"),
        headers={**auth(Role.agent), "Content-Type": "application/json"},
    ).raise_for_status()
    decided = client.post("/recommend", headers=auth(Role.scheduler), json={"workload": "graph500"})
    decided.raise_for_status()
    rec = decided.json()
    config = rec["recommendation"]["chosen"]["configuration"]
    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        session.add(
            Reservation(
                pod_uid="uid-bfs-0",
                namespace="graphs",
                pod_name="bfs-0",
                node_name="tiered-0",
                vcpus=config["vcpus"],
                dram_bytes=config["dram_bytes"],
                slow_bytes=config["slow_bytes"],
                slow_from_pool=False,
                llc_mask=((1 << config["llc_ways"]) - 1) << 4,
                recommendation_id=rec["id"],
            )
        )
    return str(rec["id"])


def test_placements_are_read_by_viewers_only(client: TestClient, settings: Settings) -> None:
    seed(client, settings)
    listed = client.get("/v1/placements", headers=auth(Role.viewer))
    assert listed.status_code == 200
    (one,) = listed.json()
    assert (one["namespace"], one["pod"], one["node"]) == ("graphs", "bfs-0", "tiered-0")
    assert one["workload"] == "graph500" and one["objective"] == "cheapest"
    assert client.get("/v1/placements?node=other", headers=auth(Role.viewer)).json() == []
    detail = client.get("/v1/placements/graphs/bfs-0", headers=auth(Role.viewer)).json()
    assert {s["tag"] for s in detail["plan"]} >= {"bfs_parent", "csr_adjacency"}
    assert detail["predicted_slowdown"] is not None and detail["currency"] == "USD"
    assert client.get("/v1/placements/graphs/none", headers=auth(Role.viewer)).status_code == 404
    assert client.get("/v1/placements", headers=auth(Role.agent)).status_code == 403
    assert client.get("/v1/placements").status_code == 401


@pytest.fixture
def served(settings: Settings, client: TestClient) -> Iterator[tuple[str, str]]:
    decision = seed(client, settings)
    assert settings.redis_url is not None
    env = {"TMC_DATABASE_URL": settings.database_url, "TMC_REDIS_URL": settings.redis_url}
    with uvicorn_server(env) as base:
        yield base, decision


def tmc(base: str, *args: str, token: str = TOKENS[Role.viewer]) -> str:
    result = runner.invoke(
        app, ["get", *args], env={"TMC_SERVER": base, "TMC_TOKEN": token, "COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def test_tmc_get_against_the_running_service(served: tuple[str, str]) -> None:
    base, decision = served
    nodes = tmc(base, "nodes").splitlines()
    assert nodes[0].split()[:4] == ["NAME", "READY", "PODS", "CPU"]
    assert nodes[1].split()[:3] == ["tiered-0", "yes", "1"]
    assert "GiB / 24.0 GiB" in nodes[1] and "/48" in nodes[1]

    table = tmc(base, "placements").splitlines()
    assert table[0].split()[:3] == ["POD", "NODE", "WORKLOAD"]
    assert table[1].split()[:4] == ["graphs/bfs-0", "tiered-0", "graph500", "cheapest"]
    assert tmc(base, "placements", "--node", "tiered-0") == "\n".join(table) + "\n"
    one = tmc(base, "placements", "graphs/bfs-0")
    assert "predicted slowdown" in one and "Per-structure plan" in one and "bfs_parent" in one
    as_yaml = yaml.safe_load(tmc(base, "placements", "-o", "yaml"))
    assert as_yaml[0]["recommendation_id"] == decision

    decisions = tmc(base, "decisions")
    assert decision in decisions and "graph500" in decisions
    full = tmc(base, "decisions", decision)
    assert "Recommended configuration" in full and "USD per hour" in full
    as_json = json.loads(tmc(base, "decisions", "-o", "json"))
    assert [d["id"] for d in as_json] == [decision]

    workloads = tmc(base, "workloads")
    assert "graph500" in workloads and "fitted" in workloads
    # Each workload's latest recommendation at a glance.
    (chosen,) = json.loads(tmc(base, "decisions", "-o", "json"))
    header, row = workloads.splitlines()
    assert "RECOMMENDATION" in header
    assert (
        f"slow {chosen['slow_ratio']:.2f}, {chosen['llc_ways']} ways ({chosen['objective']})" in row
    )
    assert json.loads(tmc(base, "nodes", "-o", "json"))[0]["name"] == "tiered-0"


def one_line_error(args: list[str], env: dict[str, str]) -> str:
    result = runner.invoke(app, ["get", *args], env=env)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_tmc_get_errors_name_the_fix(served: tuple[str, str]) -> None:
    base, _ = served
    viewer = {"TMC_SERVER": base, "TMC_TOKEN": TOKENS[Role.viewer]}
    line = one_line_error(["nodes"], {"TMC_SERVER": base, "TMC_TOKEN": "tmc_not_a_token"})
    assert "unknown or revoked token" in line and "TMC_TOKEN" in line
    line = one_line_error(["nodes"], {"TMC_SERVER": base, "TMC_TOKEN": TOKENS[Role.agent]})
    assert "viewer or operator token" in line
    line = one_line_error(["nodes"], {"TMC_SERVER": base, "TMC_TOKEN": ""})
    assert "no token" in line and "TMC_TOKEN" in line
    unreachable = {**viewer, "TMC_SERVER": f"http://127.0.0.1:{free_port()}"}
    line = one_line_error(["placements"], unreachable)
    assert "cannot reach the tmc API" in line and "TMC_SERVER" in line
    assert "NAMESPACE/POD" in one_line_error(["placements", "bfs-0"], viewer)
    assert "no placement" in one_line_error(["placements", "graphs/none"], viewer)
    assert "no recommendation" in one_line_error(["decisions", "no-such-id"], viewer)
    assert "--timeout" in one_line_error(["nodes", "--timeout", "0"], viewer)


def test_tmc_get_shows_a_dra_pods_ways_as_a_count(settings: Settings, client: TestClient) -> None:
    """A pod placed through the DRA door holds 6 ways as a count (no mask): `tmc get` shows the
    count and that its node chose the run, never "-" or a mask, and the node's reserved ways
    count it beside the placed pod's run."""
    seed(client, settings)
    claimed = Held("uid-claimed", "graphs", "claimed", "tiered-0", 1, GIB, 0, False, 0, None, 6)
    with unit_of_work(make_session_factory(make_engine(settings))) as session:
        ledger.record(session, [ledger.Placed(claimed, recommendation_id=None, slow_ratio=0.0)])
        mask = session.scalar(select(Reservation.llc_mask).where(Reservation.pod_name == "bfs-0"))
        placed_ways = int(mask or 0).bit_count()
    assert settings.redis_url is not None
    env = {"TMC_DATABASE_URL": settings.database_url, "TMC_REDIS_URL": settings.redis_url}
    with uvicorn_server(env) as base:
        rows = {line.split()[0]: line for line in tmc(base, "placements").splitlines()[1:]}
        assert "6 (run chosen by the node)" in rows["graphs/claimed"]
        one = tmc(base, "placements", "graphs/claimed")
        assert "6 (run chosen by the node)" in one
        (node,) = tmc(base, "nodes").splitlines()[1:]
        assert f"{placed_ways + 6}/48 (6 run by the node)" in node
