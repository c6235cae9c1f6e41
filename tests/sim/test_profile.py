"""Reference bundles: what an agent would upload, checked by the model's own contract."""

from __future__ import annotations

import numpy as np
import pytest

from model import ProfileBundle, fit, parse_bundle
from sim.engine import prepare
from sim.profile import QUIET, NoiseSpec, pebs_samples, reference_bundle, reference_runs
from tests.sim.support import small_host, workload


def bundle(
    noise: NoiseSpec | None = None, seed: int = 0, sampling_interval: int = 10007
) -> ProfileBundle:
    return reference_bundle(
        workload(), small_host(), noise, seed, sampling_interval=sampling_interval
    )


def test_bundle_passes_the_contract_and_fits() -> None:
    b = bundle()
    parsed = parse_bundle(b.model_dump_json())
    assert parsed == b
    assert [r.name for r in b.runs] == ["fastmax", "fastmin", "slowmax"]
    assert [p.llc_ways for p in b.miss_curve] == list(range(1, 29))
    assert b.footprint_bytes == sum(s.size_bytes for s in b.structures)
    model = fit(parsed)
    assert model.diagnostics.path == "stall_counters"
    assert model.p_slow > model.p_dram > 0
    assert max(abs(r) for r in model.diagnostics.cpi_residuals.values()) < 0.1


def test_without_stall_counters_the_fit_takes_eq4() -> None:
    b = bundle(NoiseSpec(stall_counters=False))
    assert all(r.stall_cycles_l3_miss is None for r in b.runs)
    assert fit(parse_bundle(b.model_dump_json())).diagnostics.path == "eq4"


def test_quiet_counters_are_the_simulated_ones() -> None:
    b = bundle(QUIET, seed=1)
    runs = reference_runs(prepare(workload(), small_host(), 1), 1, 28)
    for measured in b.runs:
        truth = runs[measured.name]
        assert measured.instructions == truth.instructions
        assert measured.cycles == truth.cycles
        assert measured.llc_misses == truth.llc_misses
        assert measured.stall_cycles_l3_miss == truth.stall_cycles_l3_miss
        assert measured.wall_seconds == pytest.approx(truth.wall_seconds)
    fastmax, fastmin = runs["fastmax"], runs["fastmin"]
    curve = {p.llc_ways: p.misses_per_instruction for p in b.miss_curve}
    assert curve[28] * fastmax.instructions == pytest.approx(fastmax.llc_misses, rel=1e-6)
    assert curve[1] * fastmin.instructions == pytest.approx(fastmin.llc_misses, rel=1e-6)


def test_noise_is_seeded() -> None:
    assert bundle(seed=3).model_dump_json() == bundle(seed=3).model_dump_json()
    a, b = bundle(seed=3), bundle(seed=4)
    assert a.runs[0].cycles != b.runs[0].cycles
    assert abs(a.runs[0].cycles / b.runs[0].cycles - 1) < 0.1


def test_pebs_samples_are_misses_over_the_interval_per_tag() -> None:
    interval = 1009
    b = bundle(QUIET, seed=5, sampling_interval=interval)
    runs = reference_runs(prepare(workload(), small_host(), 5), 1, 28)
    for measured in b.runs:
        truth = runs[measured.name]
        total = sum(measured.samples.values())
        assert total == truth.llc_load_misses // interval
        for s in truth.structures:
            expect = s.llc_load_misses / interval
            got = measured.samples[s.tag]
            # Binomial-like spread of which tag lands on each sampling point.
            assert abs(got - expect) <= 4 * np.sqrt(expect) + 2, (measured.name, s.tag)


def test_pebs_sampling_picks_every_interval_th_event() -> None:
    tags = np.asarray([0, 1, 1, 2, 2, 2], dtype=np.int64)
    rng = np.random.default_rng(0)
    # Events 2, 5, 8, ... (0-based) of the repeated stream: tags 1, 2, 1, 2, ...
    counts = pebs_samples(tags, 12, 3, 3, "deterministic", rng)
    np.testing.assert_array_equal(counts, [0, 2, 2])
    assert pebs_samples(tags, 2, 3, 3, "deterministic", rng).sum() == 0
    randomised = [pebs_samples(tags, 600, 3, 3, "random", rng).sum() for _ in range(20)]
    assert set(randomised) == {200}


def test_shadowing_moves_samples_to_the_next_load() -> None:
    plain = bundle(QUIET, seed=6, sampling_interval=101)
    shadowed = bundle(QUIET.model_copy(update={"pebs_shadow": 1.0}), seed=6, sampling_interval=101)
    p, s = plain.run("fastmin").samples, shadowed.run("fastmin").samples
    assert sum(p.values()) == sum(s.values())
    assert p != s


def test_a_workload_too_big_for_the_host_is_refused() -> None:
    huge = workload(
        [{"tag": "big", "size_mib": 30 * 1024, "apki": 1, "pattern": {"kind": "uniform"}}],
        accesses=2_000,
        warmup=0,
    )
    with pytest.raises(Exception, match="footprint_bytes"):
        reference_bundle(huge, small_host())


def test_structure_measurements_are_the_simulated_stalls_and_traffic() -> None:
    b = bundle(QUIET, seed=1)
    m = b.structure_measurements
    assert m is not None and m.source == "simulator"
    runs = reference_runs(prepare(workload(), small_host(), 1), 1, 28)
    for name in ("fastmax", "fastmin", "slowmax"):
        truth = runs[name]
        got = m.run(name)
        for s in truth.structures:
            expect = s.stall_cycles_l3_miss / m.stall_sample_period_cycles
            assert abs(got.stall_samples[s.tag] - expect) <= 0.5
        # Every stall sample is a stall cycle in which an LLC-missing load held retirement.
        sampled = sum(got.stall_samples.values()) * m.stall_sample_period_cycles
        assert sampled == pytest.approx(truth.stall_cycles_l3_miss, rel=0.01)
        assert got.slow_tier is not None and got.fast_tier is not None
        assert got.slow_tier.read_bytes == truth.slow_tier.misses * 64
        assert got.fast_tier.write_bytes == truth.fast_tier.writebacks * 64
    assert b.host.slow_tier.write_bandwidth_bytes_per_second == (
        small_host().slow_tier.write_bandwidth_bytes_per_second
    )


def test_bundles_without_measurements_agree_on_everything_else() -> None:
    w, host = workload(), small_host()
    with_m = reference_bundle(w, host, NoiseSpec(), 5)
    without = reference_bundle(w, host, NoiseSpec(), 5, structure_measurements=False)
    assert without.structure_measurements is None
    assert with_m.model_copy(update={"structure_measurements": None}) == without
    # The paper's path on the richer bundle is the fit of the plain one, number for number.
    a, b = fit(with_m, penalties="paper"), fit(without)
    assert (a.cpi_cache, a.p_dram, a.p_slow) == (b.cpi_cache, b.p_dram, b.p_slow)
    assert b.diagnostics.penalty_path == "paper"
    assert fit(with_m).diagnostics.penalty_path == "per_structure"
