"""`tmc tiering recommend` and `tmc tiering study --quick`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from tests.tiering.conftest import profile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_recommend_from_a_bare_profile_and_from_a_bundle(tmp_path: Path) -> None:
    bare = tmp_path / "tiering.json"
    bare.write_text(profile("strided").model_dump_json())
    r = CliRunner().invoke(app, ["tiering", "recommend", "-p", str(bare), "--json"])
    assert r.exit_code == 0, r.output
    advice = json.loads(r.stdout)
    assert advice["schema_version"] == "tmc.tiering-advice/v1"
    bundle = json.loads((EXAMPLES / "graph500.json").read_text())
    bundle["tiering"] = json.loads(bare.read_text())
    (tmp_path / "bundle.json").write_text(json.dumps(bundle))
    r = CliRunner().invoke(app, ["tiering", "recommend", "-p", str(tmp_path / "bundle.json")])
    assert r.exit_code == 0, r.output
    assert "Fast tier" in r.stdout and "importance" in r.stdout


def test_recommend_with_trials_file(tmp_path: Path) -> None:
    bare = tmp_path / "tiering.json"
    bare.write_text(profile("strided").model_dump_json())
    first = json.loads(
        CliRunner().invoke(app, ["tiering", "recommend", "-p", str(bare), "--json"]).stdout
    )
    trials = tmp_path / "trials.json"
    trials.write_text(json.dumps([{"knobs": first["knobs"]["next_trial"], "wall_seconds": 12.5}]))
    r = CliRunner().invoke(
        app, ["tiering", "recommend", "-p", str(bare), "--trials", str(trials), "--json"]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["knobs"]["trials_done"] == 1


def test_bad_inputs_fail_with_one_line(tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    plain.write_text((EXAMPLES / "graph500.json").read_text())
    r = CliRunner().invoke(app, ["tiering", "recommend", "-p", str(plain)])
    assert r.exit_code == 2 and "no tiering section" in r.stderr
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    r = CliRunner().invoke(app, ["tiering", "recommend", "-p", str(junk)])
    assert r.exit_code == 2 and "not JSON" in r.stderr
    r = CliRunner().invoke(app, ["tiering", "recommend", "-p", str(tmp_path / "missing.json")])
    assert r.exit_code == 2
    bare = tmp_path / "tiering.json"
    bare.write_text(profile("strided").model_dump_json())
    r = CliRunner().invoke(app, ["tiering", "recommend", "-p", str(bare), "--loss-target", "2"])
    assert r.exit_code == 2 and "loss_target" in r.stderr


def test_study_quick_writes_its_report(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["tiering", "study", "--quick", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "tiering-quick.json").read_text())
    assert data["schema"] == "tmc.bench.tiering/v1" and data["quick"] is True
    s = data["summary"]
    assert s["sizing_cases"] == 1 and s["tuning_cases"] == 1
    assert 0.0 <= s["saved_share_mean"] < 1.0
    assert s["period_trials_max"] <= 3
    t = data["tuning"][0]["knobs"]
    assert t["warm_trials"] <= 8 and t["cold_trials"] == 16
    # Exhaustive search is the floor every tuner is measured against.
    assert t["warm_over_best"] >= 1.0 and t["cold_over_best"] >= 1.0
    assert "Against the targets" in (tmp_path / "tiering-quick.md").read_text()
