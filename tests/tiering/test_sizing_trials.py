"""The hint-fault manager model, the uncertainty-aware size, the size trials and the advice where
no size meets τ; the period ladder's top rung."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.tiering_calibrate import calibrate
from bench.tiering_judges import size_met
from model.tiering import TieringProfile, TieringRequest, advise
from model.tiering.manager_model import (
    hint_fault_loss,
    hint_fault_view,
    predicted_loss,
    sampling_loss,
)
from model.tiering.period import period_plan
from model.tiering.sizing import (
    SizeMeasurement,
    SizingAdvice,
    _through_measured,
    size_fast_tier,
)
from sim.machine import cxl_local_host
from sim.tiering.tpp import tpp_profile
from tests.tiering.conftest import profile, stream


def tpp(name: str = "moving-hot") -> TieringProfile:
    return tpp_profile(stream(name), cxl_local_host())


def test_the_manager_kind_chooses_the_model() -> None:
    p = tpp()
    knobs = dict(p.page_manager.knobs)
    period = p.page_manager.migration_period_seconds
    assert predicted_loss(p, knobs, period, 0.7) == hint_fault_loss(p, knobs, period, 0.7)
    sampling = p.model_copy(
        update={"page_manager": p.page_manager.model_copy(update={"kind": "hemem"})}
    )
    assert predicted_loss(sampling, knobs, period, 0.7) == sampling_loss(p, knobs, period, 0.7)
    assert hint_fault_loss(p, knobs, period, 0.7) != sampling_loss(p, knobs, period, 0.7)


def test_hint_fault_model_follows_its_mechanisms() -> None:
    p = tpp()
    knobs = dict(p.page_manager.knobs)
    period = p.page_manager.migration_period_seconds
    losses = [hint_fault_loss(p, knobs, period, f) for f in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)]
    assert losses == sorted(losses) and losses[-1] > losses[0]
    roomy = hint_fault_view(p, knobs, period, 1.0)
    tight = hint_fault_view(p, knobs, period, 0.6)
    # A fast tier that holds every reused page only chases the moving hot set; a smaller one
    # churns and faults.
    assert roomy.promotions_per_second < tight.promotions_per_second / 10
    assert roomy.kept > tight.kept and roomy.faults_per_second < tight.faults_per_second
    assert tight.promotions_per_second > 0.0 and tight.faults_per_second > 0.0
    # Longer scans mark less often: fewer faults per second.
    slow_scans = hint_fault_view(p, knobs, period * 8, 0.6)
    assert slow_scans.faults_per_second < tight.faults_per_second
    # A promotion rate limit below the churn caps the promotions and costs misses.
    capped = hint_fault_view(p, {**knobs, "promote_rate_limit_mbps": 1.0}, period, 0.6)
    assert capped.promotions_per_second < tight.promotions_per_second
    assert capped.kept < tight.kept


def run_until_done(
    p: TieringProfile, loss_at: Callable[[float], float], max_trials: int = 4
) -> tuple[SizingAdvice, list[SizeMeasurement]]:
    trials: list[SizeMeasurement] = []
    advice = size_fast_tier(p, 0.05, max_trials=max_trials)
    while advice.next_trial_fast_bytes is not None:
        share = advice.next_trial_fast_bytes / p.footprint_bytes
        trials.append(
            SizeMeasurement(
                fast_bytes=advice.next_trial_fast_bytes,
                wall_seconds=p.wall_seconds_fast * (1.0 + loss_at(share)),
            )
        )
        advice = size_fast_tier(p, 0.05, measured=trials, max_trials=max_trials)
        assert len(trials) <= max_trials
    return advice, trials


@pytest.mark.parametrize("name", ["moving-hot", "warm-background"])
@pytest.mark.parametrize("hint_fault", [False, True])
def test_size_trials_converge_on_a_measured_size_within_tau(name: str, hint_fault: bool) -> None:
    p = tpp(name) if hint_fault else profile(name)
    first = size_fast_tier(p, 0.05)

    # A workload whose true loss grows linearly below 90 % fast, whatever the model says.
    def loss_at(share: float) -> float:
        return 0.01 + max(0.0, 0.9 - share) * 0.12

    advice, trials = run_until_done(p, loss_at)
    share, noise = advice.fast_share, advice.noise
    assert 1 <= len(trials) <= 4 and advice.verified
    assert loss_at(share) + noise <= 0.05 + 1e-9
    # The advice is the smallest size measured within τ less the noise, and the trials moved it
    # towards the boundary.
    good = [t.fast_bytes / p.footprint_bytes for t in trials]
    good = [x for x in good if loss_at(x) + noise <= 0.05 + 1e-9]
    assert share == pytest.approx(min(good), abs=0.011)
    boundary = 0.9 - (0.04 - noise) / 0.12
    # The hint-fault model's steps are short (its rise is never read flatter than the model's)
    # and its last trial too is the advice's second run: it ends a little further from the
    # boundary.
    assert share - boundary < (0.25 if hint_fault else 0.2) and share < first.fast_share + 1e-9
    # It ends on a size measured twice when the trials allow.
    at_share = [t for t in trials if abs(t.fast_bytes / p.footprint_bytes - share) < 0.006]
    assert len(at_share) == 2 or len(trials) == 4


@pytest.mark.parametrize("hint_fault", [False, True])
def test_two_runs_of_one_size_that_differ_widen_the_noise_to_their_spread(
    hint_fault: bool,
) -> None:
    p = tpp() if hint_fault else profile("moving-hot")
    calibrated = size_fast_tier(p, 0.05).noise
    spread = calibrated + 0.01
    at = int(p.footprint_bytes * 0.8)

    def run_at(loss: float) -> SizeMeasurement:
        return SizeMeasurement(fast_bytes=at, wall_seconds=p.wall_seconds_fast * (1.0 + loss))

    # One run at 80 % measured within τ less the calibrated noise: advised, and measured again.
    lucky = 0.05 - calibrated - 0.002
    once = size_fast_tier(p, 0.05, measured=[run_at(lucky)])
    assert once.noise == pytest.approx(calibrated)
    # The second run shows the workload's own spread: the advice keeps it free of τ, and the
    # size whose worse run is within τ but not within τ less that spread is no longer verified.
    twice = size_fast_tier(p, 0.05, measured=[run_at(lucky), run_at(lucky - spread)])
    assert twice.noise == pytest.approx(spread)
    worse = size_fast_tier(p, 0.05, measured=[run_at(lucky - spread), run_at(lucky)])
    assert worse.noise == pytest.approx(spread)
    for advice in (twice, worse):
        assert not (advice.verified and advice.fast_share <= 0.8 + 1e-9), advice.fast_share
    # Runs at two sizes a page apart differ by the size too: not the workload's noise.
    nearby = SizeMeasurement(
        fast_bytes=at - 4096, wall_seconds=p.wall_seconds_fast * (1.0 + lucky + spread)
    )
    assert size_fast_tier(p, 0.05, measured=[run_at(lucky), nearby]).noise == pytest.approx(
        calibrated
    )


def test_a_size_measured_over_tau_is_never_advised_and_bisected() -> None:
    p = profile("moving-hot")
    first = size_fast_tier(p, 0.05)
    assert first.next_trial_fast_bytes is not None
    at = first.next_trial_fast_bytes
    bad = SizeMeasurement(fast_bytes=at, wall_seconds=p.wall_seconds_fast * 1.2)
    again = size_fast_tier(p, 0.05, measured=[bad])
    assert again.fast_share > at / p.footprint_bytes
    if again.next_trial_fast_bytes is not None:
        assert again.next_trial_fast_bytes > at  # between the failed size and the advice
    no_more = size_fast_tier(p, 0.05, measured=[bad], max_trials=1)
    assert no_more.next_trial_fast_bytes is None
    assert size_fast_tier(p, 0.05, max_trials=0).next_trial_fast_bytes is None


def test_where_even_all_fast_is_over_tau_the_advice_says_so_and_probes_once() -> None:
    p = tpp()
    assert p.counters is not None
    over = p.model_copy(
        update={
            "counters": p.counters.model_copy(update={"wall_seconds": p.wall_seconds_fast * 1.12})
        }
    )
    advice = advise(over, TieringRequest(loss_target=0.05))
    assert not advice.sizing.target_reachable and advice.sizing.fast_share == 1.0
    assert any("no fast-tier size meets it" in line for line in advice.explanation)
    probe = advice.sizing.next_trial_fast_bytes
    assert probe is not None and probe < p.footprint_bytes

    def after(loss: float) -> SizingAdvice:
        run = SizeMeasurement(fast_bytes=probe, wall_seconds=p.wall_seconds_fast * (1 + loss))
        return size_fast_tier(over, 0.05, measured=[run])

    # The probe over τ too: all-fast stays, said unreachable, no more trials.
    failed = after(0.2)
    assert not failed.target_reachable and failed.fast_share == 1.0
    assert failed.next_trial_fast_bytes is None
    # The probe within τ: a smaller tier escapes the manager's overhead at a full one.
    escaped = after(0.01)
    assert escaped.target_reachable and escaped.fast_share < 1.0 and escaped.verified
    assert advise(p).sizing.target_reachable


def test_the_period_ladder_reaches_half_the_run(strided_profile: TieringProfile) -> None:
    plan = period_plan(strided_profile)
    assert plan.ladder[-1].period_seconds == pytest.approx(strided_profile.wall_seconds_fast / 2)


def test_the_judges_rule_where_no_size_meets_tau() -> None:
    p = tpp()
    assert p.counters is not None
    reachable = size_fast_tier(p, 0.05)
    over = p.model_copy(
        update={
            "counters": p.counters.model_copy(update={"wall_seconds": p.wall_seconds_fast * 1.12})
        }
    )
    unreachable = size_fast_tier(over, 0.05)
    assert reachable.target_reachable and not unreachable.target_reachable
    # Where some size meets τ, only the true loss counts, whatever the advice said.
    assert size_met(True, 0.04, unreachable, 0.05) and not size_met(True, 0.06, reachable, 0.05)
    # Where none does, only an advice that says so and keeps all of it fast is met.
    assert size_met(False, 0.12, unreachable, 0.05)
    assert not size_met(False, 0.12, reachable, 0.05)


def test_calibration_takes_the_quantile_over_the_noise_and_per_share() -> None:
    cases = [
        {"kind": "tpp", "noise": [0.01, -0.02, 0.0], "errors": [(0.1, 0.05), (0.2, 0.0)]},
        {"kind": "tpp", "noise": [0.03], "errors": [(0.05, 0.04)]},
        {"kind": "tmc-sim", "noise": [-0.01], "errors": [(0.1, -0.1)]},
    ]
    out = calibrate(cases, quantile=1.0)
    assert out["tpp"]["noise"] == pytest.approx(0.03)
    # Under-prediction beyond the noise, per share of distance: (0.04 - 0.03) / 0.05 = 0.2 and
    # (0.05 - 0.03) / 0.1 = 0.2; over-prediction counts as none.
    assert out["tpp"]["slope"] == pytest.approx(0.2)
    assert out["tmc-sim"] == {"noise": 0.0, "slope": 0.0, "cases": 1.0}


def _offset_only_share(
    p: TieringProfile, measured_share: float, measured_loss: float, limit: float
) -> float:
    """The smallest share, contiguous below a measured one, that the model shifted through that
    one measurement puts within `limit`: where a search that reads the model's slope alone stops."""
    knobs = dict(p.page_manager.knobs)
    period = p.page_manager.migration_period_seconds
    at_measured = predicted_loss(p, knobs, period, measured_share)
    share = round(measured_share, 2)
    while share > 0.01:
        below = round(share - 0.01, 2)
        if measured_loss + predicted_loss(p, knobs, period, below) - at_measured > limit:
            break
        share = below
    return share


def _flatter_than_the_model(p: TieringProfile, scale: float) -> Callable[[float], float]:
    """A workload whose loss rises from the counters' as the model says, times `scale`."""
    assert p.counters is not None
    knobs = dict(p.page_manager.knobs)
    period = p.page_manager.migration_period_seconds
    at_full = p.counters.wall_seconds / p.wall_seconds_fast - 1.0
    full = predicted_loss(p, knobs, period, 1.0)
    return lambda share: at_full + scale * (predicted_loss(p, knobs, period, share) - full)


def test_a_measured_rise_flatter_than_the_model_carries_the_search_further() -> None:
    # Sampling model: the measured rise is extrapolated (its calibrated slope is zero).
    p = profile("moving-hot")
    loss_at = _flatter_than_the_model(p, 0.3)
    first = size_fast_tier(p, 0.05)
    assert first.next_trial_fast_bytes is not None
    share = first.next_trial_fast_bytes / p.footprint_bytes
    run = SizeMeasurement(
        fast_bytes=first.next_trial_fast_bytes,
        wall_seconds=p.wall_seconds_fast * (1.0 + loss_at(share)),
    )
    limit = 0.05 - first.noise
    after = size_fast_tier(p, 0.05, measured=[run])
    assert after.verified and after.fast_share == pytest.approx(share, abs=0.006)
    assert after.next_trial_fast_bytes is not None
    nxt = after.next_trial_fast_bytes / p.footprint_bytes
    # Further than the model's own slope from the measured size allows, at most twice the step
    # from the counters' size below it.
    assert nxt < _offset_only_share(p, share, loss_at(share), limit) - 0.05
    assert nxt >= share - 2 * (1.0 - share) - 0.011
    # Run to the end: the advice is a size measured within τ less the noise in two runs, below
    # where the model's slope alone would have stopped the search.
    advice, trials = run_until_done(p, loss_at)
    assert advice.verified and loss_at(advice.fast_share) + advice.noise <= 0.05 + 1e-9
    assert advice.fast_share < _offset_only_share(p, share, loss_at(share), limit) - 0.05
    twice = [t for t in trials if abs(t.fast_bytes / p.footprint_bytes - advice.fast_share) < 0.006]
    assert len(twice) == 2 and len(trials) <= 4


def test_the_last_trial_is_kept_for_the_advice_second_run_where_steps_are_long() -> None:
    p = profile("moving-hot")
    loss_at = _flatter_than_the_model(p, 0.3)
    first = size_fast_tier(p, 0.05)
    assert first.next_trial_fast_bytes is not None
    share = first.next_trial_fast_bytes / p.footprint_bytes
    run = SizeMeasurement(
        fast_bytes=first.next_trial_fast_bytes,
        wall_seconds=p.wall_seconds_fast * (1.0 + loss_at(share)),
    )
    # Two trials: the second runs the advice again instead of a longer step.
    last = size_fast_tier(p, 0.05, measured=[run], max_trials=2)
    assert last.next_trial_fast_bytes == first.next_trial_fast_bytes


def test_under_the_hint_fault_model_the_rise_is_never_taken_flatter_than_the_model() -> None:
    p = tpp()
    loss_at = _flatter_than_the_model(p, 0.3)
    first = size_fast_tier(p, 0.05)
    assert first.next_trial_fast_bytes is not None
    share = first.next_trial_fast_bytes / p.footprint_bytes
    run = SizeMeasurement(
        fast_bytes=first.next_trial_fast_bytes,
        wall_seconds=p.wall_seconds_fast * (1.0 + loss_at(share)),
    )
    after = size_fast_tier(p, 0.05, measured=[run])
    assert after.next_trial_fast_bytes is not None
    nxt = after.next_trial_fast_bytes / p.footprint_bytes
    offset_only = _offset_only_share(p, share, loss_at(share), 0.05 - first.noise)
    assert nxt == pytest.approx(offset_only, abs=0.011)


def test_the_loss_through_measured_sizes_is_bounded_by_what_they_measured() -> None:
    losses = {1.0: 0.01, 0.8: 0.02, 0.6: 0.08}

    def model(share: float) -> float:
        return 0.3 * (1.0 - share) ** 2  # steep far down, flat near all-fast

    through = _through_measured(sorted(losses), losses, model, trust_measured_rise=True)
    assert [through(x) for x in (1.0, 0.8, 0.6)] == [0.01, 0.02, 0.08]
    for x in (0.95, 0.9, 0.85, 0.75, 0.7, 0.65):
        upper = min(s for s in losses if s > x)
        lower = max(s for s in losses if s < x)
        assert losses[upper] <= through(x) <= losses[lower]
    # Below the smallest measured size, the model's rise scaled as measured between 0.8 and
    # 0.6: (0.08 - 0.02) / (model(0.6) - model(0.8)) = 0.06 / 0.036.
    scale = 0.06 / (model(0.6) - model(0.8))
    assert through(0.5) == pytest.approx(0.08 + scale * (model(0.5) - model(0.6)))
    # A measured rise flatter than the model's, under the hint-fault model: the model's rise.
    flat = {1.0: 0.01, 0.6: 0.02}
    cautious = _through_measured(sorted(flat), flat, model, trust_measured_rise=False)
    assert cautious(0.5) == pytest.approx(0.02 + model(0.5) - model(0.6))
    assert _through_measured(sorted(flat), flat, model, trust_measured_rise=True)(0.5) < (
        cautious(0.5)
    )


def test_runs_faster_than_all_fast_end_the_search_at_the_smallest_size() -> None:
    # Runs measured below the all-fast time at every size put every share within τ: the search
    # ends at the bottom of the grid instead of going round it.
    p = profile("moving-hot")
    runs = [
        SizeMeasurement(fast_bytes=p.footprint_bytes // d, wall_seconds=p.wall_seconds_fast * 0.5)
        for d in (2, 4)
    ]
    advice = size_fast_tier(p, 0.05, measured=runs, max_trials=8)
    assert advice.verified and advice.fast_share == pytest.approx(0.25)
    assert advice.next_trial_fast_bytes is not None
    assert 0 < advice.next_trial_fast_bytes < p.footprint_bytes // 4
