"""Diagnostic flags apply only to the profiles they can be true of, and stay silent on clean
simulated profiles of every agent backend (model/fit.py, `_diagnose`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from model import fit, parse_bundle
from model.bundle import ProfileBundle
from model.fit import profile_backend
from sim.catalog import workload
from sim.machine import cxl_local_host
from sim.profile import NoiseSpec, reference_bundle

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Flags about the measurement, each asking the operator to do something; the others
# (`flat_miss_curve`, `structure_without_samples`, ...) describe data the fit handled.
DIAGNOSTIC = {"cpi_residual", "low_pebs_coverage", "implausible_mlp", "slow_latency_mismatch"}
MIB = 1 << 20


def _codes(bundle: ProfileBundle) -> set[str]:
    return {f.code for f in fit(bundle).diagnostics.flags} | {
        f.code for f in fit(bundle, penalties="paper").diagnostics.flags
    }


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_no_diagnostic_flag_on_a_clean_simulated_optane_profile(path: Path) -> None:
    bundle = parse_bundle(json.loads(path.read_text()))
    assert profile_backend(bundle) == "simulator"
    assert not _codes(bundle) & DIAGNOSTIC


@pytest.mark.parametrize("name", ["hashjoin", "kvindex", "graph500"])
def test_no_diagnostic_flag_on_a_clean_simulated_cxl_profile(name: str) -> None:
    bundle = reference_bundle(workload(name), cxl_local_host(), NoiseSpec(), seed=100)
    assert not _codes(bundle) & DIAGNOSTIC


def _trace_bundle() -> ProfileBundle:
    """The trace backend's profile of a small program: a 64 MiB table read at random and a
    256 MiB buffer streamed through, built from its attributed access stream as the agent does
    after tracing it."""
    trace = pytest.importorskip("tmc_agent.backends.trace")
    steps = pytest.importorskip("tmc_agent.steps")
    rng = np.random.default_rng(1)
    n = 200_000
    hot = rng.random(n) < 0.7
    lines = np.where(hot, rng.integers(0, 64 * MIB // 64, n), np.arange(n) % (256 * MIB // 64))
    att = trace.Attributed(
        tags=["hot_table", "cold_buffer"],
        size_bytes=[64 * MIB, 256 * MIB],
        gap=np.full(n, 20, dtype=np.int32),
        sid=np.where(hot, 0, 1).astype(np.int16),
        lines=lines.astype(np.int64),
        is_store=np.zeros(n, dtype=bool),
        instructions=n * 20,
        raw_accesses=n * 3,
    )
    bundle: ProfileBundle = trace.bundle_from_attributed(
        att, trace.TraceOptions(name="smallc"), steps.NoSteps()
    )
    return bundle


def test_no_diagnostic_flag_on_a_clean_trace_profile() -> None:
    bundle = _trace_bundle()
    assert profile_backend(bundle) == "trace"
    assert not _codes(bundle) & DIAGNOSTIC


def test_flags_about_the_host_description_are_not_raised_on_tmcs_own_host_model() -> None:
    """A profile whose DRAM penalty implies an implausible parallelism is flagged on hardware,
    where the operator declared the latency, and not on the simulator, where tmc did."""
    data = json.loads((EXAMPLES / "xsbench.json").read_text())
    data["host"]["fast_tier"]["latency_ns"] = 5.0  # far too fast for the fitted penalty
    simulated = parse_bundle(data)
    data["host"]["cpu_model"] = "Intel Xeon Gold 6252"
    data.pop("structure_measurements", None)
    hardware = parse_bundle(data)
    assert profile_backend(hardware) == "hardware"
    assert "implausible_mlp" in _codes(hardware)
    assert "implausible_mlp" not in _codes(simulated)
    flag = next(f for f in fit(hardware).diagnostics.flags if f.code == "implausible_mlp")
    assert "Check the host's declared DRAM latency" in flag.message
