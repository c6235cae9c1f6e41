"""Bounds that keep every computation on an accepted bundle finite: what could overflow later is
refused at the door with the field named (a 422 at the API), never accepted and crashed on."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from model import Predictor, fit, parse_bundle
from model.bundle import MAX_BYTES, MAX_COUNT
from model.grid import paper_grid
from tests.factories import make_bundle
from tests.model.support import rejected_fields, rejection


def huge_host(data: dict[str, Any], capacity: int) -> dict[str, Any]:
    data["host"]["fast_tier"]["capacity_bytes"] = capacity
    data["host"]["slow_tier"]["capacity_bytes"] = capacity
    return data


def test_sizes_that_add_up_past_2_62_are_refused_by_field() -> None:
    data = huge_host(make_bundle(), 2**63 - 1)
    quarter = 2**60
    for s in data["structures"]:
        s["size_bytes"] = quarter
    data["structures"].append({"tag": "more", "size_bytes": quarter})
    data["footprint_bytes"] = 4 * quarter  # 2^62: consistent, and far past any machine
    fields = rejected_fields(data)
    assert "footprint_bytes" in fields
    assert "host.fast_tier.capacity_bytes" in fields
    assert {f"structures[{i}].size_bytes" for i in range(4)} <= set(fields)


def test_the_largest_accepted_bundle_predicts_finite_numbers() -> None:
    data = huge_host(make_bundle(), MAX_BYTES)
    sizes = [MAX_BYTES // 2, MAX_BYTES // 4, MAX_BYTES - MAX_BYTES // 2 - MAX_BYTES // 4]
    for s, size in zip(data["structures"], sizes, strict=True):
        s["size_bytes"] = size
    data["footprint_bytes"] = MAX_BYTES
    scale = MAX_COUNT // max(run["cycles"] for run in data["runs"])
    for run in data["runs"]:
        run["instructions"] *= scale
        run["cycles"] *= scale
        run["stall_cycles_l3_miss"] *= scale
        run["llc_misses"] *= scale
    model = fit(parse_bundle(data))
    grid = paper_grid()
    p = Predictor(model).predict(
        np.asarray(grid.slow_ratios), np.asarray(grid.llc_ways, dtype=np.int64)
    )
    for arr in (p.seconds, p.cpi, p.mar_slow, p.dram_bytes, p.slow_bytes):
        assert np.isfinite(arr).all()
    assert int(p.dram_bytes.max()) == MAX_BYTES and int(p.slow_bytes.min()) == 0
    plan = Predictor(model).placement(0.5, 28)
    assert sum(s.slow_bytes for s in plan) + sum(s.fast_bytes for s in plan) == MAX_BYTES


def test_counters_past_the_bound_are_refused() -> None:
    data = make_bundle()
    data["runs"][0]["instructions"] = 10**19
    data["runs"][1]["cycles"] = 2**64
    data["runs"][2]["wall_seconds"] = 1e300
    fields = rejected_fields(data)
    assert {"runs[0].instructions", "runs[1].cycles", "runs[2].wall_seconds"} <= set(fields)


def test_a_number_with_thousands_of_digits_is_a_field_error_not_a_crash() -> None:
    text = json.dumps(make_bundle()).replace('"vcpus": 4', '"vcpus": ' + "9" * 5000)
    problems = rejection(text)
    assert problems[0].field == "(body)" and "number" in problems[0].message
    just_long = json.dumps(make_bundle()).replace('"vcpus": 4', '"vcpus": ' + "9" * 4000)
    assert "vcpus" in rejected_fields(just_long)


def test_measurements_are_bounded_and_checked_against_the_runs() -> None:
    data = make_bundle()
    data["structure_measurements"] = {
        "source": "simulator",
        "stall_sample_period_cycles": 1000,
        "runs": [
            {"run": "fastmax", "stall_samples": {"hot": 10**13}},
            {"run": "fastmin", "stall_samples": {"nope": 1}},
            {"run": "fastmin", "stall_samples": {"hot": 1}},
        ],
    }
    fields = rejected_fields(data)
    assert "structure_measurements.runs[0].stall_samples.hot" in fields
    data["runs"][0]["samples"]["hot"] = 1
    data["structure_measurements"]["runs"][0]["stall_samples"]["hot"] = 10**10
    fields = rejected_fields(data)
    # More stall samples than the run had cycles; a tag with no structure; a missing slowmax.
    assert "structure_measurements.runs[0].stall_samples" in fields
    assert "structure_measurements.runs[1].stall_samples.nope" in fields
    assert "structure_measurements.runs[].run" in fields
