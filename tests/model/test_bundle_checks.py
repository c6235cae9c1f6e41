"""Bundle checks: what no machine could have measured is rejected with the offending field named;
borderline but possible data is accepted and flagged by the fit."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from typing import Any

import pytest

from model import fit, parse_bundle
from model.bundle import MISS_CURVE_NOISE
from tests.factories import Shape, make_bundle
from tests.model.support import fitted, rejected_fields, rejection

Bundle = dict[str, Any]
Path = tuple[str | int, ...]


def with_value(path: Path, value: Any) -> Bundle:
    data = make_bundle()
    node: Any = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return data


def flag_codes(shape: Shape) -> set[str]:
    return {f.code for f in fitted(shape).diagnostics.flags}


def test_the_default_bundle_is_clean() -> None:
    # Every flag test below relies on flags being absent until the data earns them.
    model = fitted()
    assert model.diagnostics.flags == []
    assert model.diagnostics.path == "stall_counters"


# -- values pydantic rejects on its own --------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        # negative counts
        (("runs", 0, "instructions"), -1, "runs[0].instructions"),
        (("runs", 1, "cycles"), -5, "runs[1].cycles"),
        (("runs", 2, "llc_misses"), -1, "runs[2].llc_misses"),
        (("runs", 0, "stall_cycles_l3_miss"), -1, "runs[0].stall_cycles_l3_miss"),
        (("runs", 1, "samples", "warm"), -3, "runs[1].samples.warm"),
        (("structures", 0, "size_bytes"), -1, "structures[0].size_bytes"),
        (("sampling_interval",), -10007, "sampling_interval"),
        # zero instructions: every rate divides by it
        (("runs", 1, "instructions"), 0, "runs[1].instructions"),
        # NaN, in float and in integer fields
        (("runs", 0, "wall_seconds"), math.nan, "runs[0].wall_seconds"),
        (("runs", 0, "cycles"), math.nan, "runs[0].cycles"),
        (
            ("miss_curve", 2, "misses_per_instruction"),
            math.nan,
            "miss_curve[2].misses_per_instruction",
        ),
        (("host", "cpu_frequency_hz"), math.nan, "host.cpu_frequency_hz"),
        # infinities
        (("runs", 2, "wall_seconds"), math.inf, "runs[2].wall_seconds"),
        (("host", "slow_tier", "latency_ns"), math.inf, "host.slow_tier.latency_ns"),
        (
            ("miss_curve", 0, "misses_per_instruction"),
            -math.inf,
            "miss_curve[0].misses_per_instruction",
        ),
        (("runs", 0, "llc_misses"), math.inf, "runs[0].llc_misses"),
    ],
)
def test_out_of_range_values_name_their_field(path: Path, value: Any, field: str) -> None:
    assert field in rejected_fields(with_value(path, value))


def test_nan_and_infinity_literals_in_json_text_are_rejected() -> None:
    # Python's json module reads NaN/Infinity literals, so the text path must not let them through.
    data = make_bundle()
    data["runs"][0]["wall_seconds"] = math.nan
    data["miss_curve"][1]["misses_per_instruction"] = math.inf
    text = json.dumps(data)
    assert "NaN" in text
    assert "Infinity" in text
    fields = rejected_fields(text)
    assert "runs[0].wall_seconds" in fields
    assert "miss_curve[1].misses_per_instruction" in fields


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (("colour",), "colour"),
        (("runs", 0, "stall_cycles_l2_miss"), "runs[0].stall_cycles_l2_miss"),
        (("host", "fast_tier", "numa_node"), "host.fast_tier.numa_node"),
        (("miss_curve", 3, "hits"), "miss_curve[3].hits"),
    ],
)
def test_unknown_fields_are_rejected(path: Path, field: str) -> None:
    # extra="forbid": a misspelt counter must not be silently dropped and replaced by a default.
    assert field in rejected_fields(with_value(path, 1))


@pytest.mark.parametrize("text", ["{not json", "", "runs: 3", b'{"schema_version": '])
def test_non_json_text_is_rejected_as_the_body(text: str | bytes) -> None:
    assert rejected_fields(text) == ["(body)"]


@pytest.mark.parametrize("text", ["[1, 2, 3]", "null", "42", '"a string"'])
def test_json_that_is_not_an_object_is_rejected_as_the_body(text: str) -> None:
    assert rejected_fields(text) == ["(body)"]


def test_bytes_that_are_not_utf8_are_rejected_as_the_body() -> None:
    # The CLI hands parse_bundle a file's raw bytes; a binary or Latin-1 file must be a clean 422.
    body = json.dumps(make_bundle()).encode().replace(b'"synthetic"', b'"synth\xe9tic"')
    assert rejected_fields(body) == ["(body)"]


def test_deeply_nested_json_is_rejected_as_the_body() -> None:
    # An uploaded body is untrusted: pathological nesting must be a 422, not a 500.
    assert rejected_fields("[" * 100_000) == ["(body)"]


# -- physical checks that need several fields at once ------------------------------------------


def test_samples_for_an_unknown_tag() -> None:
    data = make_bundle()
    data["runs"][1]["samples"]["ghost"] = 5
    assert rejected_fields(data) == ["runs[1].samples.ghost"]


def test_sizes_that_do_not_add_up_to_the_footprint() -> None:
    data = make_bundle()
    data["footprint_bytes"] += 4096
    assert rejected_fields(data) == ["structures[].size_bytes"]


def test_duplicate_tags() -> None:
    data = make_bundle()
    data["structures"][2]["tag"] = "hot"
    for run in data["runs"]:
        run["samples"].pop("cold")
    fields = rejected_fields(data)
    # Both holders of the tag are named, so the agent's author sees which allocations collided.
    assert set(fields) == {"structures[0].tag", "structures[2].tag"}


def test_a_miss_curve_rising_beyond_noise_is_rejected() -> None:
    data = make_bundle()
    # 12 ways: 0.008; 20 ways jumps 18.75 % above it, past the 10 % allowance.
    data["miss_curve"][4]["misses_per_instruction"] = 0.0095
    assert rejected_fields(data) == ["miss_curve[4].misses_per_instruction"]


def test_a_miss_curve_rising_within_noise_is_accepted_and_smoothed() -> None:
    data = make_bundle()
    rise = 0.008 * (1.0 + MISS_CURVE_NOISE * 0.6)
    data["miss_curve"][4]["misses_per_instruction"] = rise
    model = fit(parse_bundle(data))
    assert all(a >= b for a, b in itertools.pairwise(model.curve_mar))


def test_the_sweeps_cpi_is_given_at_every_curve_point_or_at_none() -> None:
    data = make_bundle()
    for point in data["miss_curve"]:
        point["cycles_per_instruction"] = 0.6 + 80.0 * point["misses_per_instruction"]
    assert parse_bundle(data).miss_curve[0].cycles_per_instruction == pytest.approx(2.2)
    del data["miss_curve"][2]["cycles_per_instruction"]
    assert rejected_fields(data) == ["miss_curve[].cycles_per_instruction"]


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, 1e5])
def test_a_sweep_cpi_no_core_could_run_at_is_rejected(value: float) -> None:
    data = make_bundle()
    for point in data["miss_curve"]:
        point["cycles_per_instruction"] = 1.0
    data["miss_curve"][1]["cycles_per_instruction"] = value
    assert "miss_curve[1].cycles_per_instruction" in rejected_fields(data)


def test_a_rise_is_measured_against_the_lowest_point_so_far_not_the_previous_one() -> None:
    # Two rises of 6 % each stay within noise step by step but add up to 12 % over the minimum.
    data = make_bundle()
    data["miss_curve"][3]["misses_per_instruction"] = 0.0072
    data["miss_curve"][4]["misses_per_instruction"] = 0.0072 * 1.06
    data["miss_curve"][5]["misses_per_instruction"] = 0.0072 * 1.06 * 1.06
    assert rejected_fields(data) == ["miss_curve[5].misses_per_instruction"]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (
            lambda d: d["runs"][2]["configuration"].update(slow_ratio=0.5),
            "runs[2].configuration.slow_ratio",
        ),
        (
            lambda d: d["runs"][0]["configuration"].update(slow_ratio=0.1),
            "runs[0].configuration.slow_ratio",
        ),
        (
            lambda d: d["runs"][1]["configuration"].update(slow_ratio=1.0),
            "runs[1].configuration.slow_ratio",
        ),
        (
            lambda d: d["runs"][1]["configuration"].update(llc_ways=28),
            "runs[1].configuration.llc_ways",
        ),
        (
            lambda d: d["runs"][2]["configuration"].update(llc_ways=12),
            "runs[2].configuration.llc_ways",
        ),
    ],
)
def test_runs_must_be_the_three_references(edit: Callable[[Bundle], None], field: str) -> None:
    data = make_bundle()
    edit(data)
    assert field in rejected_fields(data)


def test_fastmin_with_more_ways_than_fastmax() -> None:
    data = make_bundle()
    data["runs"][1]["configuration"]["llc_ways"] = 40
    data["miss_curve"].append({"llc_ways": 40, "misses_per_instruction": 0.007})
    assert "runs[1].configuration.llc_ways" in rejected_fields(data)


def test_a_duplicated_run_name_means_a_missing_one() -> None:
    data = make_bundle()
    data["runs"][2]["name"] = "fastmin"
    problems = rejection(data)
    assert {p.field for p in problems} == {"runs[].name"}
    messages = " ".join(p.message for p in problems)
    assert "fastmin" in messages
    assert "slowmax" in messages


def test_an_unknown_run_name() -> None:
    data = make_bundle()
    data["runs"][2]["name"] = "slowmin"
    assert "runs[2].name" in rejected_fields(data)


def test_two_runs_are_not_enough() -> None:
    data = make_bundle()
    data["runs"].pop()
    assert rejected_fields(data) == ["runs"]


def test_stall_cycles_exceeding_cycles() -> None:
    data = make_bundle()
    data["runs"][1]["stall_cycles_l3_miss"] = data["runs"][1]["cycles"] + 1
    assert rejected_fields(data) == ["runs[1].stall_cycles_l3_miss"]


def test_more_misses_than_instructions() -> None:
    data = make_bundle()
    data["runs"][0]["llc_misses"] = data["runs"][0]["instructions"] + 1
    assert "runs[0].llc_misses" in rejected_fields(data)


@pytest.mark.parametrize(("drop", "run"), [(0, "fastmin"), (5, "fastmax")])
def test_the_miss_curve_must_include_the_reference_way_counts(drop: int, run: str) -> None:
    data = make_bundle()
    del data["miss_curve"][drop]
    problems = rejection(data)
    assert [p.field for p in problems] == ["miss_curve[].llc_ways"]
    assert run in problems[0].message


def test_miss_curve_ways_must_increase() -> None:
    data = make_bundle()
    data["miss_curve"][1], data["miss_curve"][2] = data["miss_curve"][2], data["miss_curve"][1]
    assert rejected_fields(data) == ["miss_curve[].llc_ways"]


def test_a_footprint_larger_than_host_dram() -> None:
    data = make_bundle()
    data["host"]["fast_tier"]["capacity_bytes"] = data["footprint_bytes"] - 1
    assert rejected_fields(data) == ["footprint_bytes"]


def test_a_footprint_larger_than_the_slow_tier() -> None:
    data = make_bundle()
    data["host"]["slow_tier"]["capacity_bytes"] = data["footprint_bytes"] - 1
    assert rejected_fields(data) == ["footprint_bytes"]


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("host", "min_llc_ways"), 49, "host.min_llc_ways"),
        (("host", "fast_tier", "kind"), "optane", "host.fast_tier.kind"),
        (("host", "slow_tier", "kind"), "dram", "host.slow_tier.kind"),
        (("vcpus",), 13, "vcpus"),
        (("miss_curve", 5, "llc_ways"), 50, "miss_curve[5].llc_ways"),
    ],
)
def test_a_host_that_could_not_have_run_the_profile(path: Path, value: Any, field: str) -> None:
    assert field in rejected_fields(with_value(path, value))


def test_fastmin_below_cats_minimum() -> None:
    data = make_bundle()
    data["host"]["min_llc_ways"] = 2
    assert rejected_fields(data) == ["runs[1].configuration.llc_ways"]


def test_instruction_counts_of_different_workloads() -> None:
    data = make_bundle()
    data["runs"][2]["instructions"] = data["runs"][0]["instructions"] * 2
    assert "runs[].instructions" in rejected_fields(data)


def test_every_problem_is_reported_at_once() -> None:
    # An agent author fixing one field per round trip would be a poor experience.
    data = make_bundle()
    data["footprint_bytes"] += 1
    data["runs"][0]["stall_cycles_l3_miss"] = data["runs"][0]["cycles"] + 1
    data["runs"][2]["samples"]["ghost"] = 1
    assert set(rejected_fields(data)) == {
        "structures[].size_bytes",
        "runs[0].stall_cycles_l3_miss",
        "runs[2].samples.ghost",
    }


# -- borderline data: accepted, handled, flagged -----------------------------------------------


def test_a_flat_miss_curve_is_flagged() -> None:
    curve = tuple((w, 0.01) for w in (1, 2, 4, 12, 20, 28))
    assert "flat_miss_curve" in flag_codes(Shape(curve=curve))


def test_a_structure_never_sampled_is_flagged() -> None:
    structures = {
        "hot": (256.0, 0.6, 0.7),
        "warm": (512.0, 0.4, 0.3),
        "unsampled": (64.0, 0.0, 0.0),
    }
    model = fitted(Shape(structures=structures))
    flags = [f for f in model.diagnostics.flags if f.code == "structure_without_samples"]
    assert len(flags) == 1
    assert "unsampled" in flags[0].message


def test_a_slow_tier_no_slower_than_dram_is_flagged() -> None:
    model = fitted(Shape(p_slow=0.0))
    assert "slow_tier_not_slower" in {f.code for f in model.diagnostics.flags}
    assert model.p_slow == pytest.approx(0.0, abs=1e-6)


def test_a_bundle_without_stall_counters_fits_by_eq4() -> None:
    model = fitted(Shape(stall_counters=False))
    assert model.diagnostics.path == "eq4"
    assert model.diagnostics.flags == []


def test_stall_counters_in_some_runs_only_fall_back_to_eq4_and_say_so() -> None:
    data = make_bundle()
    del data["runs"][2]["stall_cycles_l3_miss"]
    model = fit(parse_bundle(data))
    assert model.diagnostics.path == "eq4"
    assert "partial_stall_counters" in {f.code for f in model.diagnostics.flags}


def _with_memory_stalls() -> dict[str, Any]:
    data = make_bundle()
    for run in data["runs"]:
        run["stall_cycles_memory"] = run["stall_cycles_l3_miss"]
    return data


def test_a_memory_stall_counter_below_the_l3_one_is_rejected() -> None:
    data = _with_memory_stalls()
    data["runs"][2]["stall_cycles_memory"] = data["runs"][2]["stall_cycles_l3_miss"] // 2
    assert rejected_fields(data) == ["runs[2].stall_cycles_memory"]


def test_a_memory_stall_counter_growing_past_the_cycles_is_rejected() -> None:
    data = _with_memory_stalls()
    fastmax, slowmax = data["runs"][0], data["runs"][2]
    # fastmax never stalled, slowmax stalled every cycle: the stalls grow by all of slowmax's
    # cycles, the cycles by far less.
    fastmax["stall_cycles_l3_miss"] = fastmax["stall_cycles_memory"] = 0
    slowmax["stall_cycles_memory"] = slowmax["cycles"]
    assert "runs[2].stall_cycles_memory" in rejected_fields(data)


def test_stores_the_l3_counter_misses_move_the_fit_to_the_memory_stall_counter() -> None:
    data = _with_memory_stalls()
    fastmax, slowmax = data["runs"][0], data["runs"][2]
    # slowmax's extra time is in stalls on stores: the L3-miss counter stays at fastmax's rate.
    slowmax["stall_cycles_l3_miss"] = round(
        fastmax["stall_cycles_l3_miss"] * slowmax["instructions"] / fastmax["instructions"]
    )
    model = fit(parse_bundle(data))
    assert model.diagnostics.path == "memory_stalls"
    assert model.diagnostics.stalls_explained["slowmax"] < 0.5
    flags = {f.code: f.message for f in model.diagnostics.flags}
    assert "slowmax ran" in flags["stall_counters_incomplete"]
    assert "slow_tier_not_slower" not in flags
    assert max(abs(r) for r in model.diagnostics.cpi_residuals.values()) < 0.05


def test_store_stall_samples_are_a_part_of_the_stall_samples_of_a_known_tag() -> None:
    data = make_bundle()
    runs = [
        {"run": r["name"], "stall_samples": {t: 10 * n for t, n in r["samples"].items()}}
        for r in data["runs"]
    ]
    tag = next(iter(data["runs"][0]["samples"]))
    for run in runs:
        run["store_stall_samples"] = {tag: run["stall_samples"][tag]}  # every stall a store's
    data["structure_measurements"] = {
        "source": "simulator",
        "stall_sample_period_cycles": 1,
        "runs": runs,
    }
    m = parse_bundle(data).structure_measurements
    assert m is not None and m.runs[0].store_stall_samples == {tag: runs[0]["stall_samples"][tag]}
    field = "structure_measurements.runs[{}].store_stall_samples.{}"
    more = json.loads(json.dumps(data))
    more["structure_measurements"]["runs"][1]["store_stall_samples"][tag] += 1
    problems = rejection(more)
    assert [p.field for p in problems] == [field.format(1, tag)]
    assert "stores of" in problems[0].message
    stranger = json.loads(json.dumps(data))
    stranger["structure_measurements"]["runs"][2]["store_stall_samples"] = {"no-such-tag": 0}
    assert rejected_fields(stranger) == [field.format(2, "no-such-tag")]
    negative = json.loads(json.dumps(data))
    negative["structure_measurements"]["runs"][0]["store_stall_samples"][tag] = -1
    assert rejected_fields(negative) == [field.format(0, tag)]


def test_store_samples_are_a_part_of_the_samples_of_a_known_tag() -> None:
    data = make_bundle()
    tag = next(iter(data["runs"][0]["samples"]))
    for run in data["runs"]:
        run["store_samples"] = {tag: run["samples"][tag]}  # every sample a store: possible
    assert parse_bundle(data).runs[0].store_samples == {tag: data["runs"][0]["samples"][tag]}
    more = json.loads(json.dumps(data))
    more["runs"][1]["store_samples"][tag] += 1
    problems = rejection(more)
    assert [p.field for p in problems] == [f"runs[1].store_samples.{tag}"]
    assert "stores of" in problems[0].message
    stranger = json.loads(json.dumps(data))
    stranger["runs"][2]["store_samples"] = {"no-such-tag": 0}
    assert rejected_fields(stranger) == ["runs[2].store_samples.no-such-tag"]
    negative = json.loads(json.dumps(data))
    negative["runs"][0]["store_samples"][tag] = -1
    assert rejected_fields(negative) == [f"runs[0].store_samples.{tag}"]
