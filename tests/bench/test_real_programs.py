"""Real programs end to end (bench/real_programs.py, fast subset): C programs of the corpus are
built with gcc, profiled by the real `tmc-agent profile --backend trace` CLI (valgrind), fitted,
and judged against the host model replaying each program's own trace at all 77 configurations.

The thresholds are the accuracy targets where the subset meets them with room, and the measured
figures with a margin where it does not (docs/model.md, "Real programs"): a regression past them
is a real loss of accuracy, not noise (the trace backend's runs are deterministic).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.real_programs import (
    FAST,
    ProgramResult,
    build,
    markdown,
    profile,
    run_program,
    summarize,
)
from model.bundle import parse_bundle
from model.fit import fit

# The trace backend's reference runs carry no noise: the model must pass through them.
REFERENCE_TOLERANCE = 0.01


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[ProgramResult]:
    work = tmp_path_factory.mktemp("real")
    return [run_program(name, work) for name in FAST]


def test_the_model_passes_through_its_own_reference_runs(results: list[ProgramResult]) -> None:
    for r in results:
        assert set(r.reference_errors) == {"fastmax", "fastmin", "slowmax"}, r.program
        for run, err in r.reference_errors.items():
            assert abs(err) <= REFERENCE_TOLERANCE, (r.program, run, err)
        # No flag states the opposite of the bundle.
        assert "slow_tier_not_slower" not in r.flags, r.program


def test_the_advice_holds_in_truth(results: list[ProgramResult]) -> None:
    s = summarize(results)
    assert s["cheapest"]["over_best"]["worst"] <= 0.03
    # The 5 % target (docs/model.md, "Real programs"), with the agent's default runs beyond the
    # reference runs: measured 2.7 % on these three (twotier 1.6 %, listchase 2.7 %, phases
    # 3.7 %; the twenty-nine programs 3.1 %).
    assert s["mape"] <= 0.05
    assert s["slo:5%"]["kept"] == s["slo:5%"]["decisions"]
    assert s["slo:10%"]["kept"] == s["slo:10%"]["decisions"]
    assert s["coverage_90"] >= 0.9  # measured 100 % (the fourteen programs: 99.3 %)
    text = markdown(results, s)
    assert all(f"| {name} |" in text for name in FAST)


def test_the_twotier_example_is_coherent(results: list[ProgramResult]) -> None:
    # twotier: a 64 MiB cold array written and read once, a 4 MiB hot hash table. slowmax is far
    # slower than fastmax, mostly in stalls on stores the L3-miss counter does not count.
    twotier = next(r for r in results if r.program == "twotier")
    assert twotier.fit_path != "stall_counters"
    assert "stall_counters_incomplete" in twotier.flags
    assert np.isfinite(twotier.mape)


def test_a_bundle_from_the_cli_says_why_its_path(tmp_path: Path) -> None:
    exe = build("writesweep", tmp_path / "bin")
    bundle = parse_bundle(profile("writesweep", exe, tmp_path, ["8", "1"]).read_text())
    slowmax, fastmax = bundle.run("slowmax"), bundle.run("fastmax")
    assert slowmax.stall_cycles_memory is not None and slowmax.stall_cycles_l3_miss is not None
    assert slowmax.stall_cycles_memory >= slowmax.stall_cycles_l3_miss
    assert slowmax.cycles > fastmax.cycles
    model = fit(bundle)
    assert model.diagnostics.path_reason
    # The trace says which misses and which stalled cycles were stores': each structure's loads
    # and stores get their own penalties.
    m = bundle.structure_measurements
    assert m is not None
    for run in bundle.runs:
        stalls = m.run(run.name)
        assert run.store_samples is not None and stalls.store_stall_samples is not None
        for tag, stores in stalls.store_stall_samples.items():
            assert 0 <= stores <= stalls.stall_samples[tag]
    assert "loads and stores" in model.diagnostics.penalty_path_reason
    assert model.p_dram_store_by_structure is not None
    assert model.load_rate_at_max_by_structure is not None
    # The way sweep ran on the same host model: its CPI at fastmax's and fastmin's way counts is
    # those runs' own, and the fit keeps it for the LLC axis.
    sweep = {p.llc_ways: p.cycles_per_instruction for p in bundle.miss_curve}
    fastmin = bundle.run("fastmin")
    for run in (fastmax, fastmin):
        cpi = run.cycles / run.instructions
        assert sweep[run.configuration.llc_ways] == pytest.approx(cpi, rel=1e-6)
    assert model.curve_cpi is not None and len(model.curve_cpi) == len(bundle.miss_curve)
    assert (tmp_path / "llc_stream.npz").exists()
    # A verification run on the profile's own clock: the replay of slowmax's configuration is
    # slowmax's reference run.
    agent = Path(sys.executable).with_name("tmc-agent")
    done = subprocess.run(
        [str(agent), "replay", "--workdir", str(tmp_path), "--slow-ratio", "1", "--llc-ways", "28"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert float(done.stdout.strip()) == pytest.approx(slowmax.wall_seconds, rel=1e-6)
    assert "host model's clock" in done.stderr
