"""What the operator tells the advisor: the fast size, period and manager in use, the knob space
(with the migration-rate limit), the runs measured so far; and the guard of the configuration in
use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from cli.main import app
from model.tiering import HEMEM_SPACE, KnobSpace, TieringProfile, TieringRequest, Trial, advise
from model.tiering.manager_model import predicted_loss
from model.tiering.period import PeriodMeasurement
from model.tiering.sizing import SizeMeasurement
from tests.tiering.conftest import profile


def test_the_knob_space_has_the_migration_rate_limit_and_the_model_reads_it(
    strided_profile: TieringProfile,
) -> None:
    names = [d.name for d in HEMEM_SPACE.dimensions]
    assert "migration_rate_limit_mbps" in names
    knobs = dict(strided_profile.page_manager.knobs)
    free = predicted_loss(strided_profile, {**knobs, "migration_rate_limit_mbps": 65536}, 0.01, 0.5)
    tight = predicted_loss(strided_profile, {**knobs, "migration_rate_limit_mbps": 1}, 0.01, 0.5)
    assert tight > free  # a limit below what chasing needs leaves hot pages slow


def test_a_knob_setting_measured_slower_than_the_configuration_in_use_is_never_advised(
    strided_profile: TieringProfile,
) -> None:
    default = HEMEM_SPACE.default()
    other = {**default, "read_hot_threshold": 2.0}
    # At the new period, `other` beats the default knobs, but the configuration in use (default
    # knobs at the period in use) was faster than both: keep what runs now.
    trials = [Trial(knobs=default, wall_seconds=10.0), Trial(knobs=other, wall_seconds=9.5)]
    request = TieringRequest(trials=trials, in_use_wall_seconds=9.0)
    k = advise(strided_profile, request).knobs
    assert k is not None and k.is_default and k.best == default and k.speedup_over_default == 1.0
    faster = advise(strided_profile, TieringRequest(trials=trials, in_use_wall_seconds=9.8)).knobs
    assert faster is not None and faster.best == other
    assert faster.speedup_over_default == pytest.approx(9.8 / 9.5)


def test_the_period_trial_at_the_period_in_use_is_the_guard(
    strided_profile: TieringProfile,
) -> None:
    current = strided_profile.page_manager.migration_period_seconds
    default = HEMEM_SPACE.default()
    other = {**default, "sampling_period": 1000.0}
    request = TieringRequest(
        period_trials=[PeriodMeasurement(period_seconds=current, wall_seconds=8.0)],
        trials=[Trial(knobs=default, wall_seconds=10.0), Trial(knobs=other, wall_seconds=9.0)],
    )
    advice = advise(strided_profile, request)
    assert advice.knobs is not None and advice.knobs.in_use_wall_seconds == 8.0
    assert advice.knobs.is_default
    assert advice.period.best_period_seconds == current


def test_operator_inputs_change_where_the_advice_looks(strided_profile: TieringProfile) -> None:
    base = advise(strided_profile)
    half = strided_profile.footprint_bytes // 2
    at_half = advise(
        strided_profile, TieringRequest(current_fast_bytes=half, current_period_seconds=0.5)
    )
    assert at_half.period.ladder[at_half.period.current].period_seconds == 0.5
    assert at_half.period.trials[0].in_use
    assert at_half.period.ladder != base.period.ladder
    tpp = advise(strided_profile, TieringRequest(manager_kind="tpp"))
    assert tpp.page_manager == "tpp" and tpp.knobs is not None
    assert set(tpp.knobs.best) == {"hot_threshold_ms", "promote_rate_limit_mbps"}
    space = KnobSpace.model_validate(
        {
            "dimensions": [
                {"name": "sampling_period", "values": [1000, 5000], "default": 5000},
                {"name": "migration_rate_limit_mbps", "values": [256, 65536], "default": 65536},
            ]
        }
    )
    own = advise(strided_profile, TieringRequest(knob_space=space))
    assert own.knobs is not None and set(own.knobs.best) == {
        "sampling_period",
        "migration_rate_limit_mbps",
    }
    with pytest.raises(ValidationError, match="more than"):
        KnobSpace.model_validate(
            {
                "dimensions": [
                    {"name": f"k{i}", "values": list(range(1, 11)), "default": 1} for i in range(5)
                ]
            }
        )


def test_cli_takes_the_operator_inputs(tmp_path: Path) -> None:
    bare = tmp_path / "tiering.json"
    bare.write_text(profile("strided").model_dump_json())
    periods = tmp_path / "periods.json"
    periods.write_text(json.dumps([{"period_seconds": 0.02, "wall_seconds": 3.0}]))
    sizes = tmp_path / "sizes.json"
    sizes.write_text(json.dumps([{"fast_bytes": 1 << 32, "wall_seconds": 3.5}]))
    r = CliRunner().invoke(
        app,
        [
            "tiering",
            "recommend",
            "-p",
            str(bare),
            "--period",
            "0.02",
            "--fast-bytes",
            str(1 << 32),
            "--manager",
            "tpp",
            "--period-trials",
            str(periods),
            "--size-trials",
            str(sizes),
            "--max-size-trials",
            "1",
            "--time-budget",
            "1",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    advice = json.loads(r.stdout)
    # One size trial sent, one allowed: the advice names no more.
    assert advice["sizing"]["max_trials"] == 1 and advice["sizing"]["trials_done"] == 1
    assert advice["sizing"]["next_trial_fast_bytes"] is None
    assert advice["page_manager"] == "tpp"
    assert advice["period"]["best_period_seconds"] == 0.02
    assert advice["period"]["next_period_seconds"] is not None
    assert advice["budget"]["cpu_seconds_allowed"] == 1.0
    assert any("run(s) at other fast-tier sizes" in line for line in advice["explanation"])
    bad = CliRunner().invoke(app, ["tiering", "recommend", "-p", str(bare), "--manager", "nope"])
    assert bad.exit_code == 2 and "manager_kind" in bad.stderr


def test_a_run_at_the_advised_size_corrects_the_advice_there() -> None:
    p = profile("init-lookup")
    first = advise(p).sizing
    assert first.saved_share > 0
    at = first.fast_bytes

    def again(loss: float) -> float:
        trial = SizeMeasurement(fast_bytes=at, wall_seconds=p.wall_seconds_fast * (1 + loss))
        return advise(p, TieringRequest(size_trials=[trial])).sizing.fast_share

    # Measured over the target at the advised size: the advice moves up, above that size.
    assert again(0.08) > first.fast_share
    # Measured right at the prediction: nothing changes.
    assert again(first.predicted_loss) == pytest.approx(first.fast_share, abs=0.011)
    # Measured well under it: the curve comes down at that size, but below it no further than
    # the counters alone say, so the advice does not go below the first advice.
    assert again(0.0) == pytest.approx(first.fast_share, abs=0.011)
    explained = advise(
        p,
        TieringRequest(
            size_trials=[SizeMeasurement(fast_bytes=at, wall_seconds=p.wall_seconds_fast)]
        ),
    )
    assert any("run(s) at other fast-tier sizes" in line for line in explained.explanation)
