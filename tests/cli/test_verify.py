"""`tmc verify record|list|delete` against a real service (uvicorn on PostgreSQL and Redis), and
the reason a decision names no verification run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.auth import Role
from api.settings import Settings
from cli.main import app
from tests.cli.test_get import seed
from tests.fixtures.service import TOKENS, auth
from tests.services import uvicorn_server

runner = CliRunner()
OPERATOR = TOKENS[Role.operator]


@pytest.fixture
def base(settings: Settings, client: TestClient) -> Iterator[str]:
    seed(client, settings)
    assert settings.redis_url is not None
    env = {"TMC_DATABASE_URL": settings.database_url, "TMC_REDIS_URL": settings.redis_url}
    with uvicorn_server(env) as served:
        yield served


def tmc(base: str, *args: str, token: str = OPERATOR, code: int = 0) -> tuple[str, str]:
    result = runner.invoke(
        app, list(args), env={"TMC_SERVER": base, "TMC_TOKEN": token, "COLUMNS": "200"}
    )
    assert result.exit_code == code, result.output
    return result.stdout, result.stderr


RECORD = ("verify", "record", "graph500", "--run-id", "bench-1", "--slow-ratio", "0.5")
UTC_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def test_record_list_and_delete_a_run(base: str) -> None:
    empty_out, empty_err = tmc(base, "verify", "list", "graph500", token=TOKENS[Role.viewer])
    assert empty_out == "" and "tmc verify record graph500" in empty_err

    out, _ = tmc(base, *RECORD, "--llc-ways", "12", "--seconds", "467.7114148730002")
    assert out.startswith("recorded run bench-1 of graph500: slow ratio 0.50, 12 LLC ways")
    assert "468 s" in out and UTC_TIME.search(out)
    again, _ = tmc(base, *RECORD, "--llc-ways", "12", "--seconds", "467.7114148730002")
    assert again.startswith("already recorded") and UTC_TIME.search(again)
    _, refused = tmc(base, *RECORD, "--llc-ways", "10", "--seconds", "400", code=2)
    assert refused.startswith("error: ") and "other values" in refused

    table, _ = tmc(base, "verify", "list", "graph500", token=TOKENS[Role.viewer])
    header, row = table.splitlines()
    assert header.split() == ["RUN", "ID", "SLOW", "RATIO", "LLC", "WAYS", "TIME", "RECORDED"]
    assert row.split()[:5] == ["bench-1", "0.50", "12", "468", "s"]
    listed = json.loads(tmc(base, "verify", "list", "graph500", "-o", "json")[0])
    assert [(r["run_id"], r["seconds"]) for r in listed] == [("bench-1", 467.7114148730002)]

    _, viewer_refused = tmc(
        base, "verify", "delete", "graph500", "bench-1", token=TOKENS[Role.viewer], code=2
    )
    assert "role may not" in viewer_refused
    deleted, _ = tmc(base, "verify", "delete", "graph500", "bench-1")
    assert deleted.strip() == "deleted run bench-1 of graph500"
    assert json.loads(tmc(base, "verify", "list", "graph500", "-o", "json")[0]) == []
    _, unknown = tmc(base, "verify", "list", "no-such-workload", code=2)
    assert "no-such-workload" in unknown


def test_bad_values_are_refused_before_any_request(base: str) -> None:
    _, err = tmc(base, *RECORD, "--llc-ways", "0", "--seconds", "1", code=2)
    assert "--llc-ways" in err and len(err.strip().splitlines()) == 1


def test_every_decision_names_its_next_run_or_says_none_is_needed(
    base: str, client: TestClient
) -> None:
    # least-dram too: a run there checks the decision's promise (its loss within the target).
    decided = client.post(
        "/recommend",
        headers=auth(Role.scheduler),
        json={"workload": "graph500", "objective": "least-dram:10%"},
    )
    decided.raise_for_status()
    assert decided.json()["recommendation"]["verification"] is not None
    shown, _ = tmc(base, "get", "decisions", decided.json()["id"])
    assert "none asked" not in shown
    assert "next run: slow ratio" in shown or "no further run needed" in shown
    cheapest = client.post(
        "/recommend", headers=auth(Role.scheduler), json={"workload": "graph500"}
    )
    assert cheapest.json()["recommendation"]["verification"] is not None
    named, _ = tmc(base, "get", "decisions", cheapest.json()["id"])
    assert "none asked" not in named and "next run: slow ratio" in named


def test_runs_that_put_an_slo_out_of_reach_are_a_result_not_an_error(
    base: str, client: TestClient
) -> None:
    body = {"workload": "graph500", "objective": "slo:5%"}
    rec = client.post("/recommend", headers=auth(Role.scheduler), json=body).json()
    ways = max(p["llc_ways"] for p in rec["recommendation"]["pareto_frontier"])
    seconds = 1.3 * rec["recommendation"]["fastmax_seconds"]
    tmc(base, "verify", "record", "graph500", "--run-id", "slow-1", "--slow-ratio", "0",
        "--llc-ways", str(ways), "--seconds", repr(seconds))  # fmt: skip
    out, err = tmc(base, "recommend", "--workload", "graph500", "--objective", "slo:5%")
    assert "objective not met" in out and "slow-1" in out and "+30.0%" in out
    assert "Closest configuration" in out and "fix the values" not in out + err
