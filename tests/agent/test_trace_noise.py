"""The trace backend measures its runs' noise: it makes each reference run again and the bundle
says what the repeats show (`run_noise`), 0 on a replay of one trace, so what the profile measured
is promised at its measured time."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from tmc_agent import examples, shim
from tmc_agent.backends import trace
from tmc_agent.steps import NoSteps

from model import fit, machine_of_host, parse_bundle
from model.bundle import ProfileBundle
from model.objectives import parse_objective
from model.recommend import shortlist
from sim.host import run_many
from sim.placement import all_in

MIB = 1 << 20


def _attributed() -> trace.Attributed:
    """The attributed LLC stream of a small program: a 64 MiB table read at random, a 256 MiB
    buffer streamed through and written."""
    rng = np.random.default_rng(3)
    n = 200_000
    hot = rng.random(n) < 0.7
    lines = np.where(hot, rng.integers(0, 64 * MIB // 64, n), np.arange(n) % (256 * MIB // 64))
    return trace.Attributed(
        tags=["hot_table", "cold_buffer"],
        size_bytes=[64 * MIB, 256 * MIB],
        gap=np.full(n, 20, dtype=np.int32),
        sid=np.where(hot, 0, 1).astype(np.int16),
        lines=lines.astype(np.int64),
        is_store=~hot & (rng.random(n) < 0.5),
        instructions=n * 20,
        raw_accesses=n * 3,
    )


def _check_exact(bundle: ProfileBundle) -> None:
    noise = bundle.run_noise
    assert noise is not None and noise.schema_version == "tmc.run-noise/v1"
    # Each reference run once more, with the same instructions and, on a replay, the same cycles.
    assert sorted(r.run for r in noise.repeats) == ["fastmax", "fastmin", "slowmax"]
    for r in noise.repeats:
        ref = bundle.run(r.run)
        assert (r.instructions, r.cycles) == (ref.instructions, ref.cycles), r.run
    assert noise.relative_sd == 0.0
    # The wire form reads back through the service's parser, checks and all.
    again = parse_bundle(bundle.model_dump_json())
    assert again.run_noise == noise
    model = fit(again)
    assert model.run_noise == 0.0
    # So slowmax's promise is its measured slowdown, nothing wider.
    short = shortlist(
        model,
        machine=machine_of_host(again.host),
        objective=parse_objective("cheapest"),
        threshold=0.0,
    )
    p = short.priced.prediction
    i = int(np.flatnonzero(p.slow_ratios == 1.0)[0]) * len(p.llc_ways) + int(
        np.flatnonzero(p.llc_ways == again.run("slowmax").configuration.llc_ways)[0]
    )
    # Measured on fastmax's clock: slowmax's cycles per instruction over fastmax's.
    slow, fast = again.run("slowmax"), again.run("fastmax")
    measured = (slow.cycles / slow.instructions) / (fast.cycles / fast.instructions) - 1.0
    assert short.slowdown_upper is not None
    assert short.slowdown_upper[i] == pytest.approx(measured, rel=1e-6)


def test_a_trace_profile_states_the_noise_its_repeats_measured() -> None:
    bundle = trace.bundle_from_attributed(
        _attributed(), trace.TraceOptions(name="smallc"), NoSteps()
    )
    _check_exact(bundle)


def test_a_repeat_that_differs_is_reported_as_noise() -> None:
    # What a noisy repeat would make of the bundle: fastmax's repeat 2 % slower (the host model
    # itself never differs, so its repeat is perturbed here).
    opts = trace.TraceOptions(name="smallc")
    prep = trace.prepared_from_attributed(_attributed(), opts)
    bundle = trace.bundle_from_attributed(_attributed(), opts, NoSteps())
    configs = {
        "fastmax": (0.0, opts.ways_max, all_in(prep.workload, "fast")),
        "fastmin": (0.0, opts.ways_min, all_in(prep.workload, "fast")),
        "slowmax": (1.0, opts.ways_max, all_in(prep.workload, "slow")),
    }
    results = run_many(prep, [configs[r.name] for r in bundle.runs])
    results[0] = results[0].model_copy(update={"cycles": round(results[0].cycles * 1.02)})
    assert bundle.runs[0].name == "fastmax"
    noise = trace.repeated_noise(bundle.runs, results)
    # One pair off by 2 %, two exact: one run's noise is 2 % / sqrt(2 x 3).
    assert noise.relative_sd == pytest.approx(0.02 / np.sqrt(6.0), rel=1e-3)
    noisy = parse_bundle(bundle.model_copy(update={"run_noise": noise}).model_dump_json())
    assert fit(noisy).run_noise == noise.relative_sd


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None,
    reason="the trace backend needs valgrind and gcc",
)
def test_a_real_program_traced_states_its_noise(shim_build: shim.ShimBuild, tmp_path: Path) -> None:
    exe = examples.build_example("bfs", tmp_path / "bin")
    bundle = trace.profile(
        [str(exe), "12", "4", "1"], trace.TraceOptions(name="bfs"), tmp_path / "work", shim_build
    )
    _check_exact(bundle)
