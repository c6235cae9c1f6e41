"""`tmc plan capacity --memory SIZE` and `--vcpus N`: each class is planned at the size its VMs
or pods run at, not at the profile's traced footprint and vCPUs. The options hold that many bytes, are priced at them, the
table and --json say the size, and a pattern adopted from the plan holds what the placement
engine gives a pod of that memory request (DRAM round((1 - ratio) x request), half to even);
bad sizes are one clear line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.patterns import PlanFile, adoptable
from model import fit, machine_of_host, parse_bundle, recommend
from model.price_profiles import price_profile
from model.recommendation import Recommendation
from model.resources import GIB, split_memory

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GRAPH500 = str(EXAMPLES / "graph500.json")
XSBENCH = str(EXAMPLES / "xsbench.json")
REQUEST = 4 * GIB


def plan(*args: str) -> dict[str, Any]:
    done = runner.invoke(app, ["plan", "capacity", *args, "--json"])
    assert done.exit_code == 0, done.output
    out: dict[str, Any] = json.loads(done.output)
    return out


def graph500_at(memory: int | None) -> Recommendation:
    """graph500's recommendation as the planner makes it for its class (idle cluster, the
    profile's host, the paper's prices)."""
    bundle = parse_bundle(Path(GRAPH500).read_bytes())
    return recommend(
        fit(bundle),
        machine=machine_of_host(bundle.host),
        prices=price_profile("gce-n1"),
        memory_bytes=memory,
    )


def test_graph500_at_4gi_is_planned_priced_and_adopted_at_4gi() -> None:
    out = plan("-p", GRAPH500, "--rate", "400", "--memory", "4Gi")
    assert out["class_memory"] == {
        "graph500": {
            "memory_bytes": REQUEST,
            "sized_from": "caller",
            "footprint_bytes": graph500_at(None).footprint_bytes,
            "vcpus": 4,
            "vcpus_from": "profile",
        }
    }
    options = out["options"]["graph500"]
    assert options and all(o["dram_bytes"] + o["slow_bytes"] == REQUEST for o in options)
    assert any(o["slow_bytes"] for o in options)  # some are split between the tiers
    # Priced at 4 GiB: the options are the recommendation's at that size, each costing the
    # hourly price of its 4 GiB split times its predicted time, and the tenants pay for them.
    rec = graph500_at(REQUEST)
    candidates = rec.within_threshold
    assert [(o["dram_bytes"], o["slow_bytes"], o["llc_ways"], o["vcpus"]) for o in options] == [
        (
            c.configuration.dram_bytes,
            c.configuration.slow_bytes,
            c.configuration.llc_ways,
            c.configuration.vcpus,
        )
        for c in candidates
    ]
    prices = price_profile("gce-n1")
    for c in candidates:
        assert c.cost == pytest.approx(prices.cost(c.configuration, c.predicted_seconds))
    for kind in out["kinds"]:
        if kind["status"] == "infeasible":
            continue
        paid = sum(x * c.cost for x, c in zip(kind["mix"]["graph500"], candidates, strict=True))
        assert kind["tenant_hour"] == pytest.approx(paid, rel=1e-9)
    # At the traced footprint (4.4 GiB) the same program is another plan, at another price.
    traced = plan("-p", GRAPH500, "--rate", "400")
    assert traced["class_memory"]["graph500"]["sized_from"] == "profile"
    assert {o["dram_bytes"] + o["slow_bytes"] for o in traced["options"]["graph500"]} == {
        graph500_at(None).footprint_bytes
    }
    assert traced["best"]["tenant_hour"] != pytest.approx(out["best"]["tenant_hour"])

    # The adopted pattern's slots are what the engine gives a 4Gi pod in each configuration:
    # its request split by the configuration's slow ratio.
    _, machines = adoptable(PlanFile.model_validate(out), None, None)
    given = {
        (
            "graph500",
            *split_memory(REQUEST, c.configuration.slow_ratio),
            c.configuration.llc_ways,
        )
        for c in candidates
    }
    slots = {(s.workload, s.dram_bytes, s.slow_bytes, s.llc_ways) for m in machines for s in m}
    assert slots and slots <= given
    assert all(s.dram_bytes + s.slow_bytes == REQUEST for m in machines for s in m)


def test_a_class_is_planned_with_the_vcpus_given() -> None:
    """`--vcpus N`: the class's options hold N vCPUs and are priced with them (the
    recommendation's with `vcpus=N`); one per --profile or one for all."""
    out = plan("-p", GRAPH500, "--rate", "400", "--memory", "4Gi", "--vcpus", "8")
    assert out["class_memory"]["graph500"]["vcpus"] == 8
    assert out["class_memory"]["graph500"]["vcpus_from"] == "caller"
    bundle = parse_bundle(Path(GRAPH500).read_bytes())
    rec = recommend(
        fit(bundle),
        machine=machine_of_host(bundle.host),
        prices=price_profile("gce-n1"),
        memory_bytes=REQUEST,
        vcpus=8,
    )
    options = out["options"]["graph500"]
    assert [(o["vcpus"], o["slow_bytes"], o["llc_ways"]) for o in options] == [
        (8, c.configuration.slow_bytes, c.configuration.llc_ways) for c in rec.within_threshold
    ]
    each = plan("-p", GRAPH500, "-p", XSBENCH, "--rate", "100", "--rate", "50",
                "--vcpus", "2", "--vcpus", "6")  # fmt: skip
    assert {n: c["vcpus"] for n, c in each["class_memory"].items()} == {
        "graph500": 2,
        "xsbench": 6,
    }
    table = runner.invoke(
        app,
        ["plan", "capacity", "-p", GRAPH500, "--rate", "400", "--memory", "4Gi", "--vcpus", "8"],
        env={"COLUMNS": "200"},
    )
    assert table.exit_code == 0, table.output
    assert "VMs sized at: graph500 4.00 GiB (--memory), 8 vCPUs (--vcpus)" in (
        " ".join(table.output.split())
    )


def test_one_size_per_profile_or_one_for_all() -> None:
    each = plan("-p", GRAPH500, "-p", XSBENCH, "--rate", "100", "--rate", "50",
                "--memory", "4Gi", "--memory", "1536Mi")  # fmt: skip
    assert {n: c["memory_bytes"] for n, c in each["class_memory"].items()} == {
        "graph500": REQUEST,
        "xsbench": 1536 << 20,
    }
    assert {o["dram_bytes"] + o["slow_bytes"] for o in each["options"]["xsbench"]} == {1536 << 20}
    shared = plan("-p", GRAPH500, "-p", XSBENCH, "--rate", "100", "--rate", "50",
                  "--memory", "8Gi")  # fmt: skip
    assert {c["memory_bytes"] for c in shared["class_memory"].values()} == {8 * GIB}
    table = runner.invoke(
        app,
        ["plan", "capacity", "-p", GRAPH500, "-p", XSBENCH, "--rate", "100", "--rate", "50",
         "--memory", "4Gi", "--memory", "1536Mi"],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert table.exit_code == 0, table.output
    assert "VMs sized at: graph500 4.00 GiB (--memory), xsbench 1.50 GiB (--memory)" in (
        " ".join(table.output.split())
    )
    traced = runner.invoke(
        app, ["plan", "capacity", "-p", XSBENCH, "--rate", "50"], env={"COLUMNS": "200"}
    )
    assert traced.exit_code == 0, traced.output
    assert "VMs sized at: xsbench 2.44 GiB (its traced footprint)" in (
        " ".join(traced.output.split())
    )


def test_bad_sizes_are_one_line_errors(tmp_path: Path) -> None:
    base = ["plan", "capacity", "-p", GRAPH500, "-p", XSBENCH, "--rate", "100", "--rate", "50"]
    for extra, says in (
        (["--memory", "4Gx"], "--memory: '4Gx' is not a size in bytes (e.g. 4Gi"),
        (["--memory", "0"], "--memory: '0' is outside 1 byte .. 1Pi"),
        (["--memory", "2Pi"], "--memory: '2Pi' is outside 1 byte .. 1Pi"),
        (["--memory", "9" * 400], "is not a size in bytes"),
        (["--memory", "0.5"], "is not a whole number of bytes"),
        (["--memory", "1Gi"] * 3, "--memory: given 3 times for 2 --profile"),
        (["--vcpus", "0"], "vcpus: must lie between 1 and 4096, not 0"),
        (["--vcpus", "1"] * 3, "--vcpus: given 3 times for 2 --profile"),
    ):
        done = runner.invoke(app, [*base, *extra])
        assert done.exit_code == 2, (extra, done.output)
        assert says in done.stderr, (extra, done.stderr)
        assert "Traceback" not in done.output
    request = tmp_path / "mix.json"
    request.write_text("{}")
    done = runner.invoke(app, ["plan", "capacity", str(request), "--memory", "4Gi"])
    assert done.exit_code == 2 and "--memory and --vcpus size the classes" in done.stderr
