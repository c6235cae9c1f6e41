"""The `tmc` command as a user runs it: tables, JSON, and one-line errors with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from model import Recommendation

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))
runner = CliRunner()


def test_examples_exist() -> None:
    assert {p.stem for p in EXAMPLES} >= {"graph500", "memcached", "xsbench", "canneal"}


@pytest.mark.parametrize("bundle", EXAMPLES, ids=lambda p: p.stem)
def test_recommend_table(bundle: Path) -> None:
    result = runner.invoke(app, ["recommend", "--profile", str(bundle)])
    assert result.exit_code == 0, result.output
    assert "Recommended configuration" in result.output
    assert "Placement plan" in result.output
    assert "Pareto frontier" in result.output
    assert "none yet (up to 4); next run: slow ratio" in " ".join(result.output.split())


@pytest.mark.parametrize("bundle", EXAMPLES, ids=lambda p: p.stem)
def test_recommend_json_is_a_recommendation(bundle: Path) -> None:
    result = runner.invoke(
        app,
        [
            "recommend",
            "--profile",
            str(bundle),
            "--json",
            "--utilization",
            "cpu=0.7,dram=0.9,slow=0.1",
        ],
    )
    assert result.exit_code == 0, result.output
    rec = Recommendation.model_validate_json(result.stdout)
    assert rec.utilization.dram == 0.9
    assert rec.utilization.llc == 0.0  # left out means idle
    assert rec.chosen == rec.within_threshold[0]
    assert rec.grid_size == 77


def test_objectives_and_host_grid() -> None:
    bundle = str(ROOT / "examples" / "memcached.json")
    slo = runner.invoke(app, ["recommend", "-p", bundle, "--objective", "slo:2%", "--json"])
    assert slo.exit_code == 0, slo.output
    assert Recommendation.model_validate_json(slo.stdout).chosen.slowdown <= 0.02 + 1e-9
    dram = runner.invoke(
        app,
        ["recommend", "-p", bundle, "--objective", "least-dram:20%", "--grid", "host", "--json"],
    )
    assert dram.exit_code == 0, dram.output
    rec = Recommendation.model_validate_json(dram.stdout)
    assert rec.grid_size == 11 * 48
    assert rec.chosen.slowdown <= 0.20 + 1e-9


def test_model_show_table_and_json() -> None:
    bundle = str(ROOT / "examples" / "graph500.json")
    table = runner.invoke(app, ["model", "show", "--profile", bundle])
    assert table.exit_code == 0, table.output
    assert "P_slow" in table.output and "Cost vs the cheapest" in table.output
    as_json = runner.invoke(app, ["model", "show", "--profile", bundle, "--json"])
    assert as_json.exit_code == 0, as_json.output
    payload = json.loads(as_json.stdout)
    assert len(payload["points"]) == 77
    assert payload["model"]["diagnostics"]["path"] in {"stall_counters", "eq4"}


def one_line_error(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    assert "nope.json" in one_line_error(["recommend", "-p", str(tmp_path / "nope.json")])


def test_malformed_bundle_names_the_field(tmp_path: Path) -> None:
    data = json.loads((ROOT / "examples" / "graph500.json").read_text())
    data["runs"][1]["instructions"] = 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    assert "runs[1].instructions" in one_line_error(["recommend", "-p", str(bad)])


def test_not_json_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "not JSON" in one_line_error(["model", "show", "-p", str(bad)])


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [
        ("--objective", "fastest", "objective"),
        ("--objective", "slo", "objective"),
        ("--utilization", "cpu=0.5,gpu=0.3", "utilization"),
        ("--utilization", "cpu=high", "utilization"),
        ("--utilization", "cpu=1.5", "cpu"),
        ("--threshold", "-0.1", "threshold"),
    ],
)
def test_bad_options_are_one_line(option: str, value: str, field: str) -> None:
    bundle = str(ROOT / "examples" / "xsbench.json")
    assert field in one_line_error(["recommend", "-p", bundle, option, value])
